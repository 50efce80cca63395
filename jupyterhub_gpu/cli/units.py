"""``jupyterhub-gpu units install`` and ``jupyterhub-gpu firewall``: what a machine runs.

``units install --hub`` writes ``jupyterhub-gpu-hub.service`` (the hub, run from this
virtual environment, ``check-config`` before each start, secrets from ``hub.env``).
``units install --node NAME --address ADDR --allow HUB_IP:8081`` writes, on a GPU node,
``jupyterhub-gpu-agent.service`` (the agent as a dynamic user, its token and TLS key
passed as systemd credentials) and ``jupyterhub-gpu-firewall.service`` (the node
firewall after every start of docker.service); ``--docker-tls`` adds the docker.service
drop-in and ``/etc/docker/daemon.json`` for the Docker API over TLS (``certs node``).
The units' templates ship in the package (``cli/files/units``); ``--root`` writes under
another root (tests, images), ``--venv`` names the environment the units run from
(default: this one). Nothing is enabled: the command prints the ``systemctl`` lines.

``firewall [ARGS]`` runs the node firewall script shipped in the package
(``cli/files/node-firewall.sh``; ``--help`` for its arguments).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from jupyterhub_gpu.cli.layout import (
    DEFAULT_ETC,
    DEFAULT_STATE,
    Site,
    package_file,
    render,
    write_atomic,
)
from jupyterhub_gpu.errors import ConfigError

UNIT_DIR = Path("etc/systemd/system")
DOCKER_DROP_IN = Path("etc/systemd/system/docker.service.d/jupyterhub-gpu-tls.conf")
DAEMON_JSON = Path("etc/docker/daemon.json")
AGENT_PORT = 9450
HUB_UNIT = "jupyterhub-gpu-hub.service"
AGENT_UNIT = "jupyterhub-gpu-agent.service"
FIREWALL_UNIT = "jupyterhub-gpu-firewall.service"


def firewall_script() -> Path:
    return package_file("node-firewall.sh")


def firewall(argv: list[str]) -> int:
    """Run the packaged node firewall with ``argv`` (it needs bash and iptables)."""
    script = firewall_script()
    os.execvp("bash", ["bash", str(script), *argv])
    return 127  # not reached


def _quoted(args: list[str]) -> str:
    return "".join(f" {shlex.quote(a)}" for a in args)


def _template(unit: str) -> str:
    return package_file("units", f"{unit}.in").read_text()


def hub_unit(site: Site, venv: Path) -> str:
    return render(
        _template(HUB_UNIT), {"ETC": str(site.etc), "STATE": str(site.state), "VENV": str(venv)}
    )


def agent_unit(
    site: Site,
    venv: Path,
    node: str,
    address: str,
    port: int = AGENT_PORT,
    tls: bool = True,
    inventory: str = "",
) -> str:
    args: list[str] = []
    credential = ""
    if tls:
        credential = (
            f"LoadCredential=agent-cert:{site.node_cert}\nLoadCredential=agent-key:{site.node_key}"
        )
        args += ["--certfile", "%d/agent-cert", "--keyfile", "%d/agent-key"]
    if inventory:
        args += ["--probe", "declared", "--inventory", inventory]
    return render(
        _template(AGENT_UNIT),
        {
            "ETC": str(site.etc),
            "VENV": str(venv),
            "NODE": node,
            "ADDRESS": address,
            "PORT": str(port),
            "TLS_CREDENTIAL": credential,
            "AGENT_ARGS": _quoted(args),
        },
    )


def firewall_unit(venv: Path, bridge: str, allow: list[str]) -> str:
    return render(
        _template(FIREWALL_UNIT),
        {
            "VENV": str(venv),
            "BRIDGE": bridge,
            "ALLOW_ARGS": _quoted([x for a in allow for x in ("--allow", a)]),
        },
    )


def docker_tls_files(site: Site, address: str, root: Path = Path("/")) -> dict[Path, str]:
    from jupyterhub_gpu.cli.certs import daemon_json, docker_drop_in, dockerd_path

    drop_in = docker_drop_in(dockerd_path(root))
    return {DOCKER_DROP_IN: drop_in, DAEMON_JSON: daemon_json(address, site.tls) + "\n"}


def merged_daemon_json(target: Path, text: str) -> str:
    """Our settings merged into the node's existing daemon.json (e.g. the NVIDIA runtime
    that ``nvidia-ctk runtime configure`` wrote); ConfigError when a key of ours is there
    with another value, or the file is not a JSON object."""
    wanted = json.loads(text)
    try:
        current = json.loads(target.read_text() or "{}")
    except (OSError, ValueError) as e:
        raise ConfigError(f"{target} is not readable JSON ({e}); fix it, then run again") from None
    if not isinstance(current, dict):
        raise ConfigError(f"{target} is not a JSON object; fix it, then run again")
    clashes = {k: current[k] for k in wanted if k in current and current[k] != wanted[k]}
    if clashes:
        raise ConfigError(
            f"{target} already sets {', '.join(sorted(clashes))} otherwise: merge these "
            f"settings into it by hand, then run again without --docker-tls: {json.dumps(wanted)}"
        )
    return json.dumps({**current, **wanted}, indent=2) + "\n"


def install(args: argparse.Namespace) -> tuple[list[Path], list[str]]:
    """Write the units; returns the files written and the units to enable."""
    site = Site(etc=args.etc, state=args.state)
    root, venv = args.root, args.venv
    files: dict[Path, str] = {}
    enable: list[str] = []
    if args.hub:
        files[UNIT_DIR / HUB_UNIT] = hub_unit(site, venv)
        enable.append(HUB_UNIT)
    if args.node:
        if not args.address:
            raise ConfigError("--node needs --address: the IP the agent listens on")
        if not args.allow:
            raise ConfigError(
                "--node needs --allow HUB_IP:PORT (the hub's API, e.g. 10.0.0.1:8081): "
                "without it user servers cannot reach the hub through the node firewall"
            )
        files[UNIT_DIR / AGENT_UNIT] = agent_unit(
            site,
            venv,
            args.node,
            args.address,
            args.agent_port,
            not args.agent_plain_http,
            args.inventory,
        )
        files[UNIT_DIR / FIREWALL_UNIT] = firewall_unit(venv, args.bridge, args.allow)
        enable += [AGENT_UNIT, FIREWALL_UNIT]
        if args.docker_tls:
            for path, text in docker_tls_files(site, args.address, root).items():
                target = root / path
                if path == DAEMON_JSON and target.exists():
                    text = merged_daemon_json(target, text)
                files[path] = text
    if not files:
        raise ConfigError("nothing to install: give --hub, or --node NAME (or both)")
    written = []
    for path, text in files.items():
        write_atomic(root / path, text, 0o644)
        written.append(root / path)
    return written, enable


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu units", description="Install the systemd units of a hub or a node."
    )
    sub = p.add_subparsers(dest="action", required=True)
    i = sub.add_parser("install", help="write the systemd units (nothing is enabled)")
    i.add_argument("--hub", action="store_true", help="the hub's unit")
    i.add_argument("--node", metavar="NAME", help="a GPU node's agent and firewall units")
    i.add_argument("--address", help="the node's address (the agent listens there)")
    i.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="ADDR[:PORT]",
        help="what user servers may reach through the node firewall (the hub's API first)",
    )
    i.add_argument("--bridge", default="jhgpu-users", help="GPUCluster.user_bridge")
    i.add_argument("--agent-port", type=int, default=AGENT_PORT)
    i.add_argument(
        "--agent-plain-http", action="store_true", help="the agent without TLS (not advised)"
    )
    i.add_argument("--inventory", default="", help="a declared inventory (no NVML)")
    i.add_argument(
        "--docker-tls", action="store_true", help="docker.service drop-in and daemon.json"
    )
    i.add_argument("--etc", type=Path, default=DEFAULT_ETC, help=f"default {DEFAULT_ETC}")
    i.add_argument("--state", type=Path, default=DEFAULT_STATE, help=f"default {DEFAULT_STATE}")
    i.add_argument("--root", type=Path, default=Path("/"), help="write under this root")
    i.add_argument(
        "--venv", type=Path, default=Path(sys.prefix), help="the environment the units run"
    )
    args = p.parse_args(argv)
    args.etc, args.state = args.etc.absolute(), args.state.absolute()
    try:
        written, enable = install(args)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    restart = " && systemctl restart docker" if args.docker_tls else ""
    print(f"then: systemctl daemon-reload{restart} && systemctl enable --now {' '.join(enable)}")
    return 0
