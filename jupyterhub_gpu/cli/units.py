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
``--docker-tls`` refuses (one sentence, nothing written) when the node's TLS files are
missing, not the site CA's, for another node or address, or not a pair. The machine's
site values (the guide's variables block: ETC, STATE, VENV, and a node's NODE, NODE_IP,
AGENT_PORT, BRIDGE, ALLOW) go to ``ETC/site.env``, which the units read
(``EnvironmentFile=``) and a shell sources after a reboot.

``firewall [ARGS]`` runs the node firewall script shipped in the package
(``cli/files/node-firewall.sh``; ``--help`` for its arguments), with a ``--dns`` for each
resolver Docker gives the containers (``wire/resolvers.py``), so a resolver on a private
address keeps answering them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from pathlib import Path

from jupyterhub_gpu.cli.layout import (
    Site,
    add_site_args,
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


#: where Docker finds the resolvers it forwards the containers' queries to
RESOLV_CONF = Path("/etc/resolv.conf")
SYSTEMD_RESOLV_CONF = Path("/run/systemd/resolve/resolv.conf")


def _read(path: Path) -> str:
    try:
        with path.open(errors="replace") as f:
            return f.read(65536)
    except OSError:
        return ""


def firewall_argv(
    argv: list[str],
    resolv_conf: Path = RESOLV_CONF,
    systemd_resolv_conf: Path = SYSTEMD_RESOLV_CONF,
    daemon_json: Path = Path("/") / DAEMON_JSON,
) -> list[str]:
    """The script's arguments: ``argv`` and a ``--dns`` for each resolver Docker gives the
    containers (none with ``--no-host-dns``, ``--remove`` or ``--help``)."""
    if any(a in argv for a in ("--no-host-dns", "--remove", "-h", "--help")):
        return [a for a in argv if a != "--no-host-dns"]
    from jupyterhub_gpu.wire.resolvers import container_resolvers

    found = container_resolvers(_read(resolv_conf), _read(systemd_resolv_conf), _read(daemon_json))
    return [*argv, *(x for d in found for x in ("--dns", d))]


def firewall(argv: list[str]) -> int:
    """Run the packaged node firewall with ``argv`` (it needs bash and iptables), the
    resolvers the node's containers use allowed (:func:`firewall_argv`)."""
    script = firewall_script()
    os.execvp("bash", ["bash", str(script), *firewall_argv(argv)])
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


def firewall_unit(site: Site, venv: Path, bridge: str, allow: list[str]) -> str:
    return render(
        _template(FIREWALL_UNIT),
        {
            "ETC": str(site.etc),
            "VENV": str(venv),
            "BRIDGE": bridge,
            "ALLOW_ARGS": _quoted([x for a in allow for x in ("--allow", a)]),
        },
    )


def node_tls_problem(site: Site, node: str, address: str) -> str:
    """Why the node's TLS files (what daemon.json and the agent name) would not serve this
    node, or '': each must exist, the certificate be the site CA's, for this node's name
    and address, and match the key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    fix = (
        f"copy the node's folder from the hub ({site.etc}/tls/nodes/{node}/ made by "
        f"jupyterhub-gpu certs node {node} --address {address}) to {site.tls}/; nothing "
        "was written"
    )
    for path in (site.ca_cert, site.node_cert, site.node_key):
        if not path.is_file():
            return f"{path} does not exist: {fix}."
    try:
        ca = x509.load_pem_x509_certificate(site.ca_cert.read_bytes())
        cert = x509.load_pem_x509_certificate(site.node_cert.read_bytes())
        key = serialization.load_pem_private_key(site.node_key.read_bytes(), password=None)
    except (OSError, ValueError) as e:
        return f"{site.tls}: a certificate or key there cannot be read ({e}): {fix}."
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception):  # InvalidSignature is not a ValueError
        return f"{site.node_cert} is not signed by the site's CA {site.ca_cert}: {fix}."
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n.value) for n in san]
    except x509.ExtensionNotFound:
        names = []
    if node not in names or address not in names:
        return (
            f"{site.node_cert} is for {', '.join(names) or 'no name'}, not node {node} at "
            f"{address}: {fix}."
        )
    mine = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    theirs = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if mine != theirs:
        return f"{site.node_key} is not the key of {site.node_cert}: {fix}."
    return ""


def site_env(site: Site, venv: Path, args: argparse.Namespace, current: Path) -> str:
    """The machine's site values (the guide's variables block) as a file the units read
    (``EnvironmentFile=``) and a root shell sources after a reboot; the values of
    ``current`` (an earlier install: the hub's and a node's on one machine) kept."""
    values: dict[str, str] = {}
    if current.is_file():
        for line in current.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and re.fullmatch(r"[A-Z_]+", name):
                values[name] = "".join(shlex.split(value)) if value.strip() else ""
    values.update(ETC=str(site.etc), STATE=str(site.state), VENV=str(venv))
    if args.node:
        values.update(
            NODE=args.node,
            NODE_IP=args.address,
            AGENT_PORT=str(args.agent_port),
            BRIDGE=args.bridge,
            ALLOW=" ".join(args.allow),
        )
    lines = "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())
    return (
        "# jupyterhub-gpu: this machine's site values, written by `jupyterhub-gpu units\n"
        "# install`; its units read them (EnvironmentFile=). After a reboot, a root shell\n"
        f"# gets them back with: set -a; . {site.site_env}; set +a\n" + lines
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
        files[UNIT_DIR / FIREWALL_UNIT] = firewall_unit(site, venv, args.bridge, args.allow)
        enable += [AGENT_UNIT, FIREWALL_UNIT]
        if args.docker_tls:
            problem = node_tls_problem(site, args.node, args.address)
            if problem:
                raise ConfigError(problem)
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
    # the variables block, kept where the units read it: it outlives the shell (a reboot)
    env = root / site.site_env.relative_to(site.site_env.anchor)
    write_atomic(env, site_env(site, venv, args, env), 0o644)
    written.append(env)
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
    add_site_args(i)
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
