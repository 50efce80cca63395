"""``jupyterhub-gpu check-node [NAME...]``: is each GPU node set up right, and if not, what
to do. Run it on the hub's machine, as the hub's user (root), with the hub's
configuration; it checks every configured node (``nodes`` and ``nodes_file``, drained ones
included) unless names are given.

    jupyterhub-gpu check-node [-f jupyterhub_config.py] [--json] [--only engine,firewall,...]
                              [--image IMAGE] [--uid-gid UID:GID] [--hub-api HOST:PORT] [NAME...]
    jupyterhub-gpu check-node --local [--image IMAGE] [--json]     # on a GPU node itself
    jupyterhub-gpu check-node --local -f jupyterhub_config.py [--node NAME]  # + its MPS daemon

A checklist per node, ✓ or ✗ per line and the fix under each ✗; exit status 1 when any
check fails, 2 on a bad configuration. The decisions are
:mod:`jupyterhub_gpu.core.nodecheck`; the gathering :mod:`jupyterhub_gpu.edges.nodecheck`.
docs/nodes.md ("Checking a node") lists every check and its fix.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from jupyterhub_gpu.cli.layout import DEFAULT_ETC
from jupyterhub_gpu.core import nodecheck as rules
from jupyterhub_gpu.core.homes import template_root
from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.sharing import SharingPolicy, parse_policy
from jupyterhub_gpu.core.sharing.mps import (
    DEFAULT_PIPE_DIRECTORY,
    DEFAULT_SHM_DIRECTORY,
    MpsPaths,
    mps_checks,
    mps_expectations,
    mps_paths,
    nvidia_pipe_check,
)
from jupyterhub_gpu.edges.adminfiles import load_catalog, load_nodes_file
from jupyterhub_gpu.edges.docker_nodes import node_client, tls_config
from jupyterhub_gpu.edges.mps import gather as gather_mps
from jupyterhub_gpu.edges.mps import nvidia_pipes_present
from jupyterhub_gpu.edges.nodecheck import (
    CheckSettings,
    check_node,
    local_inventory,
    remove_leftovers,
)
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.catalog_file import default_catalog_path
from jupyterhub_gpu.wire.nodes_file import NodeSpec, default_node, parse_nodes

GROUPS = ("user-network", "firewall", "gpu", "agent", "home", "catalog", "mps", "certificates")
SPAWNERS = ("GPUDockerSpawner", "DockerSpawner", "Spawner")
#: where a cluster-wide key is read: c.GPUCluster, else (deprecated) the spawner's
SITE = ("GPUCluster", "GPUDockerSpawner")


def load_config(path: str) -> Config:
    """The hub's configuration file, as JupyterHub loads it."""
    p = Path(path).resolve()
    if not p.is_file():
        raise ConfigError(f"no configuration file {path!r} (give -f jupyterhub_config.py)")
    return PyFileConfigLoader(p.name, str(p.parent)).load_config()


def setting(config: Config, classes: tuple[str, ...], key: str, default: Any) -> Any:
    """``c.<Class>.<key>`` for the first of ``classes`` that sets it, else ``default``."""
    for cls in classes:
        if cls in config and key in config[cls]:
            return config[cls][key]
    return default


def _host_port(url: str, default_port: int) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url if "//" in url else f"http://{url}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host, port or default_port


def _usable(host: str) -> bool:
    """An address a node can reach the hub at (not loopback, not every address)."""
    return host not in ("", "0.0.0.0", "::", "localhost") and not host.startswith("127.")


def hub_api_address(config: Config) -> tuple[str, int] | None:
    """Where user servers reach the hub's API, from JupyterHub's settings."""
    hub = config["JupyterHub"] if "JupyterHub" in config else Config()
    if hub.get("hub_connect_url"):
        found = _host_port(str(hub["hub_connect_url"]), 80)
        if found:
            return found
    bind = _host_port(str(hub.get("hub_bind_url") or ""), 8081) if hub.get("hub_bind_url") else None
    port = int(hub.get("hub_port") or (bind[1] if bind else 8081))
    if hub.get("hub_connect_ip"):
        return str(hub["hub_connect_ip"]), port
    if bind and _usable(bind[0]):
        return bind
    ip = str(hub.get("hub_ip") or "")
    return (ip, port) if _usable(ip) else None


def hub_private_ports(config: Config, hub_host: str | None) -> tuple[tuple[str, int, str], ...]:
    """The hub machine's ports no user container may reach: the proxy's API."""
    if not hub_host:
        return ()
    api = setting(config, ("ConfigurableHTTPProxy",), "api_url", "http://127.0.0.1:8001")
    found = _host_port(str(api), 8001)
    return ((hub_host, found[1], "the proxy's API on the hub's machine"),) if found else ()


def node_specs(config: Config) -> list[NodeSpec]:
    # the spawner's default node only when the site sets no nodes at all (nodes = [] with a
    # nodes file is a site's usual layout: no phantom local node then)
    nodes = list(setting(config, SITE, "nodes", [default_node()]))
    path = str(setting(config, SITE, "nodes_file", "") or "")
    return parse_nodes(nodes + load_nodes_file(path))


def settings_from(config: Config, args: argparse.Namespace) -> CheckSettings:
    g = SITE  # the spawner's own keys (home_template, gpu_device_driver) are not there
    catalog_path = str(setting(config, g, "catalog_file", "") or default_catalog_path())
    template = str(setting(config, g, "home_template", "") or "")
    hub_api = hub_api_address(config)
    if args.hub_api:
        hub_api = _host_port(args.hub_api, 8081)
        if hub_api is None:
            raise ConfigError(f"--hub-api: HOST:PORT, got {args.hub_api!r}")
    try:
        uid, gid = (int(x) for x in args.uid_gid.split(":"))
    except ValueError:
        raise ConfigError(f"--uid-gid: UID:GID, got {args.uid_gid!r}") from None
    if uid == 0 or gid == 0:
        raise ConfigError("--uid-gid: the probes run as a user's uid:gid, never root (0)")
    images = setting(config, SPAWNERS, "image", "")
    return CheckSettings(
        user_network=str(setting(config, g, "user_network", "jupyterhub-gpu-users")),
        user_bridge=str(setting(config, g, "user_bridge", "jhgpu-users")),
        gpu_device_driver=str(setting(config, g, "gpu_device_driver", "nvidia")),
        site_secret=str(
            setting(config, g, "agent_token", "")
            or os.environ.get("JUPYTERHUB_GPU_AGENT_TOKEN", "")
        ),
        agent_ca_cert=str(setting(config, ("AgentClient",), "ca_cert", "") or ""),
        home_root=str(template_root(template)) if template else "",
        catalog=tuple(load_catalog(catalog_path)),
        hub_api=hub_api,
        hub_private=hub_private_ports(config, hub_api[0] if hub_api else None),
        images=(str(images),) if images else (),
        probe_image=args.image or "",
        probe_mode=str(setting(config, g, "probe_mode", "auto")),
        inventory_file=str(setting(config, g, "inventory_file", "") or ""),
        uid_gid=(uid, gid),
        timeout=float(setting(config, g, "docker_timeout", 10.0)),
        only=frozenset(args.only),
    )


def _cert(what: str, path: Path, renew: str) -> rules.CertFacts:
    from jupyterhub_gpu.cli.certs import not_after

    try:
        return rules.CertFacts(what, str(path), not_after(path).timestamp(), renew=renew)
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        return rules.CertFacts(what, str(path), None, reason[:200], renew)


def hub_certificates(spec: NodeSpec) -> list[rules.CertFacts]:
    """The certificates of a node's connections from the hub: the site CA, the hub's
    client certificate, and the node's server certificate as the hub made it
    (``certs node``: ETC/tls/nodes/NAME/cert.pem beside the CA), each with its renewal."""
    if not spec.tls:
        return []
    ca = Path(spec.tls["ca_cert"])
    etc = ca.parent.parent
    found = [
        _cert(
            "the site's CA",
            ca,
            f"make a new CA and every certificate (jupyterhub-gpu certs ca --force --etc {etc}, "
            "then certs hub and certs node NAME for each node)",
        ),
        _cert(
            "the hub's client certificate",
            Path(spec.tls["client_cert"]),
            f"jupyterhub-gpu certs renew hub --etc {etc}",
        ),
    ]
    node_cert = ca.parent / "nodes" / spec.name / "cert.pem"
    if node_cert.is_file():
        found.append(
            _cert(
                "the node's certificate",
                node_cert,
                f"jupyterhub-gpu certs renew node {spec.name} --etc {etc}, then copy "
                f"{node_cert} to the node's {etc}/tls/ and restart docker and "
                "jupyterhub-gpu-agent there",
            )
        )
    return found


def local_certificates(etc: Path, name: str) -> list[rules.CertFacts]:
    """On a node: the certificate its Docker API and agent serve (``ETC/tls/cert.pem``)."""
    cert = etc / "tls" / "cert.pem"
    if not cert.is_file():
        return []
    return [
        _cert(
            "this node's certificate",
            cert,
            f"on the hub: jupyterhub-gpu certs renew node {name}, then copy its cert.pem to "
            f"{etc}/tls/ here and systemctl restart docker jupyterhub-gpu-agent",
        )
    ]


def _groups(text: str) -> list[str]:
    wanted = [g.strip() for g in text.split(",") if g.strip()]
    unknown = sorted(set(wanted) - set(GROUPS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown check(s) {unknown}; known: {', '.join(GROUPS)}")
    return wanted


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu check-node",
        description="Check GPU nodes from the hub's machine: engine, user bridge, firewall, "
        "GPU isolation, agent, shared home, catalog images (docs/nodes.md).",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="nodes to check (default: all)")
    p.add_argument(
        "-f",
        "--config",
        help="the hub's configuration file (default jupyterhub_config.py); with --local, "
        "only its c.GPUSharing is read: the MPS daemon is checked for GPUs in mode mps",
    )
    p.add_argument(
        "--node",
        help="with --local: this node's name in the hub's nodes (for GPUSharing.nodes); "
        "default: the name NVML's probe gives this machine",
    )
    p.add_argument("--json", action="store_true", help="a JSON list of checks instead of text")
    p.add_argument(
        "--only",
        type=_groups,
        default=[],
        help=f"only these checks (comma separated): {', '.join(GROUPS)}; "
        "the engine is always checked",
    )
    p.add_argument("--image", help="run the probe containers with this image (needs python3)")
    p.add_argument(
        "--etc",
        type=Path,
        default=DEFAULT_ETC,
        help=f"with --local: the node's site folder, for its certificate (default {DEFAULT_ETC})",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="on a GPU node itself: NVML (driver, CUDA, GPUs, UUIDs, compute capability), "
        "the local engine, the user bridge, with --image GPU isolation, and with -f the "
        "MPS daemon of GPUs the sharing policy puts in mode mps",
    )
    p.add_argument(
        "--uid-gid",
        default="64123:64123",
        help="the probes' uid:gid, as a user's server runs (default 64123:64123, never 0)",
    )
    p.add_argument(
        "--hub-api",
        help="HOST:PORT where servers reach the hub's API (default: "
        "from JupyterHub.hub_connect_url / hub_connect_ip / hub_bind_url)",
    )
    return p


@contextmanager
def _stop_like_ctrl_c() -> Iterator[None]:
    """While it runs, SIGTERM and SIGHUP (``kill``, ``timeout``, a closed terminal,
    systemd) stop the command as Ctrl-C does: its probe containers are removed before it
    exits. The handlers before it are put back after (``main`` also runs in tests)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; Ctrl-C alone then
        return
    before = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _interrupted(e: KeyboardInterrupt) -> int:
    """The exit status of a command stopped by a signal: 128 + its number (Ctrl-C: 130)."""
    name = str(e.args[0]) if e.args else "SIGINT"
    print(f"check-node: interrupted ({name}); probe containers removed", file=sys.stderr)
    return 128 + int(getattr(signal, name, signal.SIGINT))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with _stop_like_ctrl_c():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.local:
        return local(args)
    try:
        config = load_config(args.config or "jupyterhub_config.py")
        specs = node_specs(config)
        settings = settings_from(config, args)
    except ConfigError as e:
        print(f"check-node: {e}", file=sys.stderr)
        return 2
    if args.names:
        known = {s.name for s in specs}
        unknown = [n for n in args.names if n not in known]
        if unknown:
            print(
                f"check-node: unknown node(s) {', '.join(unknown)}; configured: "
                f"{', '.join(sorted(known))}",
                file=sys.stderr,
            )
            return 2
        specs = [s for s in specs if s.name in args.names]
    run = secrets.token_hex(6)
    reports = []
    certificates = not args.only or "certificates" in args.only
    try:
        for spec in specs:
            reports.append(check_node(spec, settings, run))
            if certificates:
                facts = hub_certificates(spec)
                reports[-1].checks.append(rules.certificate_check(spec.name, facts, time.time()))
    except KeyboardInterrupt as e:
        # check_node removed its own containers on the way out; make sure of it
        for spec in specs:
            _clean(spec, run)
        return _interrupted(e)
    if args.json:
        print(json.dumps([c.as_json() for r in reports for c in r.checks], indent=2))
    else:
        print(rules.render_text(reports, color=sys.stdout.isatty()), end="")
    return 0 if all(r.ok for r in reports) else 1


def local(args: argparse.Namespace) -> int:
    """``--local``: this machine as a node, its GPUs from NVML (and, with ``-f``, its MPS
    daemon against the site's sharing policy)."""
    inventory, error = local_inventory()
    name = args.node or (inventory.name if inventory else socket.gethostname())
    try:
        sharing = sharing_from(load_config(args.config)) if args.config else None
    except ConfigError as e:
        print(f"check-node: {e}", file=sys.stderr)
        return 2
    spec = NodeSpec(
        name=name,
        docker_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
        address="127.0.0.1",
    )
    try:
        uid, gid = (int(x) for x in args.uid_gid.split(":"))
    except ValueError:
        print(f"check-node: --uid-gid: UID:GID, got {args.uid_gid!r}", file=sys.stderr)
        return 2
    only = frozenset(args.only or ("user-network", "gpu", "mps"))
    settings = CheckSettings(probe_image=args.image or "", uid_gid=(uid, gid), only=only)
    run = secrets.token_hex(6)
    report = rules.NodeReport(name, rules.nvml_checks(name, inventory, error))
    if not args.only or "certificates" in args.only:
        facts = local_certificates(args.etc, name)
        report.checks.append(rules.certificate_check(name, facts, time.time()))
    if "mps" in only:  # NVIDIA's default pipes reach every GPU container, MPS policy or not
        present = nvidia_pipes_present()
        report.checks.append(nvidia_pipe_check(name, "mps.nvidia-default", present, "on the node"))
        report.checks += local_mps_checks(name, inventory, sharing, explicit="mps" in args.only)
    if only <= {"mps", "certificates"}:
        return _print_local(report, args.json)
    try:
        report.checks += check_node(spec, settings, run, gpus=inventory).checks
    except KeyboardInterrupt as e:
        _clean(spec, run)
        return _interrupted(e)
    return _print_local(report, args.json)


def _print_local(report: rules.NodeReport, as_json: bool) -> int:
    if as_json:
        print(json.dumps([c.as_json() for c in report.checks], indent=2))
    else:
        print(rules.render_text([report], color=sys.stdout.isatty()), end="")
    return 0 if report.ok else 1


def sharing_from(config: Config) -> tuple[SharingPolicy, MpsPaths]:
    """The site's ``c.GPUSharing``: its policy and the nodes' MPS directories."""
    g = ("GPUSharing",)
    policy = parse_policy(setting(config, g, "models", {}), setting(config, g, "nodes", {}))
    paths = mps_paths(
        setting(config, g, "mps_pipe_directory", DEFAULT_PIPE_DIRECTORY),
        setting(config, g, "mps_shm_directory", DEFAULT_SHM_DIRECTORY),
    )
    return policy, paths


def local_mps_checks(
    name: str,
    inventory: NodeInventory | None,
    sharing: tuple[SharingPolicy, MpsPaths] | None,
    explicit: bool,
) -> list[rules.Check]:
    """The node's MPS daemon against the policy (``core/sharing/mps.py``): nothing when no
    GPU here is in mode ``mps``; one failing line when ``--only mps`` has no policy."""
    if sharing is None or inventory is None:
        if not explicit:
            return []
        why = "no -f CONFIG (the site's c.GPUSharing)" if sharing is None else "NVML unread"
        return [rules.not_run(name, "mps", why)]
    policy, paths = sharing
    devices = mps_expectations(name, inventory, policy)
    if not devices:
        return []
    return mps_checks(name, devices, gather_mps(paths, devices))


def _clean(spec: NodeSpec, run: str) -> None:
    try:
        client = node_client(spec, 5, tls_config(spec))
        try:
            remove_leftovers(client, run)
        finally:
            client.close()
    except (docker.errors.DockerException, OSError):
        pass


if __name__ == "__main__":
    sys.exit(main())
