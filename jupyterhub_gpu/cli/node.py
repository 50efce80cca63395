"""``jupyterhub-gpu node token|join|leave|remove|serve``: a GPU node joins with one command.

On the hub: ``node token [--node NAME] [--ttl 1h]`` prints the node's two commands (get
the software from the hub; join); ``node remove NAME`` takes a node off the hub's list;
``node serve`` is the join service the hub runs (:mod:`.join_service`).

On a node: ``node join HUB --token T --ca-fingerprint F [--name NAME]`` pins the site's
CA by its fingerprint, checks what the node needs (Docker, the driver or a declared
inventory, the Container Toolkit, the shared home, cgroup v2) and changes nothing while
something is missing; then it makes its key and certificate request (the key never
leaves the node), gets its certificate and agent token from the hub, writes Docker's TLS
settings, the units and the firewall's unit (``units install``, the same code as the
guide's long path) and Docker's trust of the site's registry (the site's CA as
``/etc/docker/certs.d/HUB:5443/ca.crt``: docs/images.md), restarts Docker, makes the
users' network, starts the firewall and the agent, checks them, and tells the hub the
node is ready. Run again, it says the node has already joined and repairs what is
missing, without a token. ``node leave`` drains the node, waits for no user server to
run there (or ``--force``), removes it from the hub's list and stops its agent and
firewall.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from jupyterhub_gpu.cli.layout import (
    DEFAULT_ETC,
    DEFAULT_STATE,
    SECRET_MODE,
    Site,
    private_dir,
    write_all,
)
from jupyterhub_gpu.core import join as rules
from jupyterhub_gpu.core.usernet import network_options
from jupyterhub_gpu.errors import ConfigError

JOIN_PORT = 9451
AGENT_PORT = 9450
OWNER_LABEL = "jupyterhub-gpu.owner"


#: a join or leave that cannot go on: one sentence, nothing changed
JoinRefused = ConfigError


# -- talking to the hub's join service ------------------------------------------------


def _url(hub: str, port: int, path: str) -> str:
    host = f"[{hub}]" if ":" in hub else hub
    return f"https://{host}:{port}{path}"


def fetch_ca(hub: str, port: int) -> bytes:
    """The site's CA from the join service, over TLS not yet verified: the caller checks
    its fingerprint before trusting it."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(
            _url(hub, port, "/v1/ca.pem"), context=context, timeout=15
        ) as r:
            return bytes(r.read(65536))
    except (OSError, urllib.error.URLError) as e:
        raise JoinRefused(
            f"cannot reach the hub's join service at {_url(hub, port, '')} ({_reason(e)}); check "
            f"the address, that the hub runs, and that the lab's firewall lets this node reach "
            f"port {port}"
        ) from None


def _reason(e: BaseException) -> str:
    return str(getattr(e, "reason", None) or getattr(e, "strerror", None) or e)


def call(
    hub: str, port: int, ca: Path, path: str, body: dict[str, Any], token: str = ""
) -> dict[str, Any]:
    """POST to the join service, the site's CA verified; the answer, or JoinRefused with
    the hub's sentence."""
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(
        _url(hub, port, path), data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"token {token}"} if token else {})},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as r:
            answer = json.loads(r.read(1 << 20))
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read(65536)).get("error", "")
        except ValueError:
            message = ""
        raise JoinRefused(f"the hub refused: {message or e.reason}") from None
    except (OSError, urllib.error.URLError) as e:
        raise JoinRefused(f"cannot reach the hub's join service ({_reason(e)})") from None
    if not isinstance(answer, dict):
        raise JoinRefused("the hub's join service answered something else than JSON")
    return answer


# -- the node's prerequisites ---------------------------------------------------------


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found")


def docker_info() -> dict[str, Any] | None:
    done = run(["docker", "info", "--format", "{{json .}}"])
    if done.returncode != 0:
        return None
    try:
        info = json.loads(done.stdout)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def missing(args: argparse.Namespace, home_root: str) -> list[str]:
    """What this node lacks, each with its fix ([] when nothing)."""
    out: list[str] = []
    if shutil.which("docker") is None:
        out.append("Docker is not installed: install Docker CE (docs.docker.com/engine/install) "
                   "or Debian's docker.io")  # fmt: skip
    elif docker_info() is None:
        out.append("Docker does not answer `docker info`: start it (systemctl start docker)")
    if args.inventory:
        if not Path(args.inventory).is_file():
            out.append(f"the declared inventory {args.inventory} does not exist: give the file "
                       "listing its GPUs, or leave out --inventory for the driver")  # fmt: skip
    elif run(["nvidia-smi", "-L"]).returncode != 0:
        out.append("the NVIDIA driver does not answer `nvidia-smi -L`: install the driver "
                   "(docs/nodes.md), reboot, and run this again")  # fmt: skip
    if not (shutil.which("nvidia-ctk") or shutil.which("nvidia-container-runtime-hook")):
        out.append("the NVIDIA Container Toolkit is missing: install nvidia-container-toolkit "
                   "(docs/nodes.md); nvidia-ctk runtime configure --runtime=docker")  # fmt: skip
    if home_root and not Path(home_root).is_dir():
        out.append(f"the shared home {home_root} is not mounted here: mount the lab's shared "
                   "filesystem at the same path as on the hub (docs/storage.md)")  # fmt: skip
    return out


def cgroup_warning() -> str:
    """A warning when Docker runs on cgroup v1 (it works; Docker deprecates it)."""
    info = docker_info() or {}
    if str(info.get("CgroupVersion", "2")) == "1":
        return ("warning: Docker runs on cgroup v1, which it deprecates; boot with "
                "systemd.unified_cgroup_hierarchy=1 when you can (docs/nodes.md)")  # fmt: skip
    return ""


def running_containers() -> list[str]:
    done = run(["docker", "ps", "-q"])
    return done.stdout.split() if done.returncode == 0 else []


# -- the node's key, its files ------------------------------------------------------


def key_and_csr(name: str) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, csr.public_bytes(serialization.Encoding.PEM)


def joined_as(site: Site, ca_pem: bytes) -> str | None:
    """The name this node joined as (its certificate from this CA, its agent token
    there), or None."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(site.node_cert.read_bytes())
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, Exception):
        return None
    if not (site.node_key.exists() and site.agent_token.exists()):
        return None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


def source_address(hub: str, port: int) -> str:
    """This node's address on the way to the hub (the hub reaches the node there)."""
    family = socket.AF_INET6 if ":" in hub else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((hub, port))
        return str(s.getsockname()[0])


def systemctl(*args: str) -> None:
    done = run(["systemctl", *args], timeout=180)
    if done.returncode != 0:
        raise JoinRefused(f"`systemctl {' '.join(args)}` failed: {done.stderr.strip()[-400:]}")


def ensure_live_restore(daemon_json: Path) -> None:
    """``live-restore`` on in daemon.json: user containers keep running across Docker's
    restarts (upgrades, this join)."""
    current = json.loads(daemon_json.read_text())
    if current.get("live-restore") is not True:
        current["live-restore"] = True
        from jupyterhub_gpu.cli.layout import write_atomic

        write_atomic(daemon_json, json.dumps(current, indent=2) + "\n", 0o644)


def ensure_network(network: str, bridge: str, wait: float = 15.0) -> None:
    """The users' network on this node's Docker, made if missing. A Docker the join has
    just restarted may answer "no such network" while it still reads its networks back,
    then refuse the create as a conflict (a name that "already exists", or "networks have
    same bridge name"): the inspect is tried again for ``wait`` seconds before the join
    stops with the engine's words. Its options are check-node's user-network check, which
    the join runs at its end."""
    argv = ["docker", "network", "create", "--driver", "bridge"]
    for key, value in network_options(bridge).items():
        argv += ["--opt", f"{key}={value}"]
    deadline = time.monotonic() + wait
    while True:
        if run(["docker", "network", "inspect", network]).returncode == 0:
            return
        done = run([*argv, network])
        if done.returncode == 0:
            return
        conflict = "already exists" in done.stderr or "same bridge name" in done.stderr
        if not conflict or time.monotonic() >= deadline:
            raise JoinRefused(
                f"cannot make the users' network {network}: {done.stderr.strip()}"
            )
        time.sleep(0.5)


def wait_for(what: str, ready: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.3)
    return False


def agent_gpus(site: Site, address: str, port: int) -> list[str] | None:
    context = ssl.create_default_context(cafile=str(site.ca_cert))
    token = site.agent_token.read_text().strip()
    request = urllib.request.Request(
        _url(address, port, "/v1/gpus"), headers={"Authorization": f"token {token}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as r:
            body = json.loads(r.read(1 << 20))
    except (OSError, ValueError):
        return None
    return [str(g.get("model", "GPU")) for g in body.get("gpus", [])]


def docker_tls_answers(site: Site, address: str) -> bool:
    context = ssl.create_default_context(cafile=str(site.ca_cert))
    context.load_cert_chain(str(site.node_cert), str(site.node_key))  # any CA-signed client
    try:
        with (
            socket.create_connection((address, 2376), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=address),
        ):
            return True
    except OSError:
        return False


def firewall_applied(bridge: str) -> bool:
    done = run(["iptables", "-S", "DOCKER-USER"])
    return done.returncode == 0 and bridge in done.stdout


# -- node join ----------------------------------------------------------------------


def join(args: argparse.Namespace) -> str:
    site = Site(etc=args.etc)
    fingerprint = rules.normalize_fingerprint(args.ca_fingerprint)
    if fingerprint is None:
        raise JoinRefused("--ca-fingerprint wants the sha256:... value that `jupyterhub-gpu "
                          "node token` printed on the hub")  # fmt: skip
    ca_pem = fetch_ca(args.hub, args.port)
    from jupyterhub_gpu.cli.join_service import ca_fingerprint

    try:
        found = ca_fingerprint(ca_pem)
    except ValueError:
        raise JoinRefused(f"{args.hub}:{args.port} did not send a CA certificate") from None
    if found != fingerprint:
        raise JoinRefused(
            f"the hub at {args.hub} has the CA {rules.show_fingerprint(found)}, not the one in "
            "your command: nothing was changed. Check the hub's address, and copy the "
            "command that `jupyterhub-gpu node token` printed there again"
        )
    name = args.name or socket.gethostname().split(".")[0]
    address = args.address or source_address(args.hub, args.port)
    already = joined_as(site, ca_pem)
    if already and already != name:
        raise JoinRefused(f"this machine already joined as {already}; run `jupyterhub-gpu node "
                          "leave` first to join under another name")  # fmt: skip
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="jhgpu-ca-", suffix=".pem") as staged:
        staged.write(ca_pem)
        staged.flush()
        return _join(args, site, name, address, ca_pem, Path(staged.name), already)


def _join(args: argparse.Namespace, site: Site, name: str, address: str, ca_pem: bytes,
          staged_ca: Path, already: str | None) -> str:  # fmt: skip
    if already:
        print(f"{name} has already joined; checking and repairing what is missing")
        own_token = site.agent_token.read_text().strip()
        call(args.hub, args.port, staged_ca, "/v1/leave",
                      {"name": name, "drain_only": True}, own_token)  # fmt: skip
        settings = {"allow": [f"{args.hub}:8081"], "home_root": "", "bridge": args.bridge,
                    "network": args.network}  # fmt: skip
        settings.update(_saved(site))
    else:
        if not args.token:
            raise JoinRefused("--token: give the join token that `jupyterhub-gpu node token` "
                              "printed on the hub")  # fmt: skip
        try:
            settings = call(args.hub, args.port, staged_ca, "/v1/join",
                            {"token": args.token, "name": name, "address": address,
                             "check": True})  # fmt: skip
        except ConfigError as e:
            raise JoinRefused(f"{e}; nothing was changed on this node") from None
    lacking = missing(args, str(settings.get("home_root", "")))
    busy = running_containers() if not lacking else []
    if busy and not live_restore_on() and not args.restart_docker:
        lacking.append(
            f"{len(busy)} containers run on this node and Docker's live-restore is off: "
            "restarting Docker would stop them. Stop them first, or run again with "
            "--restart-docker to restart Docker anyway"
        )
    if lacking:
        raise JoinRefused(f"{name} cannot join yet; nothing was changed:\n"
                          + "\n".join(f"  - {m}" for m in lacking))  # fmt: skip
    if cgroup_warning():
        print(cgroup_warning(), file=sys.stderr)
    if busy:
        print(
            f"warning: Docker restarts now, under {len(busy)} running containers", file=sys.stderr
        )
    if not already:
        key_pem, csr_pem = key_and_csr(name)
        answer = call(args.hub, args.port, staged_ca, "/v1/join",
                      {"token": args.token, "name": name, "address": address,
                       "csr": csr_pem.decode()})  # fmt: skip
        private_dir(site.tls)
        write_all({
            site.ca_cert: (ca_pem, 0o644),
            site.node_cert: (str(answer["cert"]).encode(), 0o644),
            site.node_key: (key_pem, SECRET_MODE),
            site.agent_token: ((str(answer["agent_token"]) + "\n").encode(), SECRET_MODE),
            site.etc / "node.json": (json.dumps({
                "hub": args.hub, "port": args.port, "name": name, "address": address,
                "allow": answer["allow"], "home_root": answer["home_root"],
                "bridge": answer["bridge"], "network": answer["network"],
                "inventory": args.inventory,
            }, indent=1).encode(), 0o644),
        })  # fmt: skip
        settings = answer
        step(f"got {name}'s certificate from the hub (its key stays here)")
    return set_up(args, site, name, address, settings, repair=bool(already))


def _saved(site: Site) -> dict[str, Any]:
    path = site.etc / "node.json"
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def live_restore_on() -> bool:
    info = docker_info() or {}
    return bool(info.get("LiveRestoreEnabled"))


def set_up(args: argparse.Namespace, site: Site, name: str, address: str,
           settings: dict[str, Any], repair: bool) -> str:  # fmt: skip
    """Docker's TLS, the units, the network, the firewall and the agent; the checks; the
    hub told the node is ready. The closing line."""
    from jupyterhub_gpu.cli.units import AGENT_UNIT, DAEMON_JSON, DOCKER_DROP_IN, FIREWALL_UNIT
    from jupyterhub_gpu.cli.units import install as install_units

    root = Path(args.root)
    before = {p: (root / p).read_bytes() if (root / p).exists() else b""
              for p in (DAEMON_JSON, DOCKER_DROP_IN)}  # fmt: skip
    allow = [str(a) for a in settings.get("allow", [])]
    bridge, network = str(settings.get("bridge")), str(settings.get("network"))
    units_args = argparse.Namespace(
        etc=site.etc, state=DEFAULT_STATE, root=root, venv=Path(args.venv), hub=False,
        node=name, address=address, allow=allow, bridge=bridge, agent_port=AGENT_PORT,
        agent_plain_http=False, inventory=args.inventory or "",
        docker_tls=not (root / DAEMON_JSON).exists() or not _ours(root / DAEMON_JSON, address),
    )  # fmt: skip
    install_units(units_args)
    ensure_live_restore(root / DAEMON_JSON)
    registry = trust_registry(site, root, str(settings.get("hub") or args.hub))
    step(f"wrote Docker's TLS settings, its trust of the site's registry {registry}, the units")
    changed = any(((root / p).read_bytes() if (root / p).exists() else b"") != before[p]
                  for p in before)  # fmt: skip
    systemctl("daemon-reload")
    if changed or not docker_tls_answers(site, address):
        systemctl("restart", "docker.service")
        if not wait_for("docker", lambda: docker_info() is not None, 60):
            raise JoinRefused("Docker did not come back after its restart: see "
                              "`journalctl -u docker`")  # fmt: skip
        step(f"restarted Docker: TLS on {address}:2376, live-restore on")
    ensure_network(network, bridge)
    verb = "restart" if repair else "start"
    systemctl("enable", FIREWALL_UNIT, AGENT_UNIT)
    systemctl(verb, FIREWALL_UNIT, AGENT_UNIT)
    step("started the firewall and the agent")
    failed: list[str] = []
    models: list[str] = []

    def agent_up() -> bool:
        found = agent_gpus(site, address, AGENT_PORT)
        if found is not None:
            models[:] = found
        return found is not None

    if not wait_for("agent", agent_up, 60):
        failed.append("the agent does not answer (journalctl -u jupyterhub-gpu-agent)")
    if not docker_tls_answers(site, address):
        failed.append(f"Docker does not answer with TLS on {address}:2376")
    if run(["docker", "network", "inspect", network]).returncode != 0:
        failed.append(f"the users' network {network} is missing")
    if not firewall_applied(bridge):
        failed.append("the node firewall is not applied (journalctl -u jupyterhub-gpu-firewall)")
    step("checked the agent, Docker's TLS, the users' network, the firewall")
    if not failed:
        call(str(settings.get("hub", args.hub)), args.port, site.ca_cert, "/v1/ready",
             {"name": name}, site.agent_token.read_text().strip())  # fmt: skip
    return rules.joined_line(name, models, failed)


_STARTED = time.monotonic()


def step(what: str) -> None:
    print(f"[{time.monotonic() - _STARTED:5.1f} s] {what}", flush=True)


def trust_registry(site: Site, root: Path, hub: str) -> str:
    """The node's Docker trusts the site's registry on ``hub`` (docs/images.md): the site's
    CA as ``/etc/docker/certs.d/HUB:5443/ca.crt``, which Docker reads at each pull (no
    restart). Harmless where the site runs no registry. Its ``HOST:PORT``."""
    from jupyterhub_gpu.cli.layout import write_atomic

    write_atomic(root / rules.registry_trust(hub), site.ca_cert.read_bytes(), 0o644)
    return rules.registry_address(hub)


def _ours(daemon_json: Path, address: str) -> bool:
    try:
        current = json.loads(daemon_json.read_text())
    except (OSError, ValueError):
        return False
    return f"tcp://{address}:2376" in current.get("hosts", [])


# -- node leave ---------------------------------------------------------------------


def leave(args: argparse.Namespace) -> str:
    from jupyterhub_gpu.cli.units import AGENT_UNIT, FIREWALL_UNIT

    site = Site(etc=args.etc)
    saved = _saved(site)
    if not saved or not site.agent_token.exists():
        raise JoinRefused(
            f"this machine has not joined a hub ({site.etc / 'node.json'} is missing)"
        )
    hub, port, name = str(saved["hub"]), int(saved["port"]), str(saved["name"])
    token = site.agent_token.read_text().strip()
    call(hub, port, site.ca_cert, "/v1/leave", {"name": name, "drain_only": True}, token)
    owners = run(["docker", "ps", "--filter", f"label={OWNER_LABEL}",
                  "--format", f'{{{{.Label "{OWNER_LABEL}"}}}}'])  # fmt: skip
    users = sorted(set(owners.stdout.split()))
    if users and not args.force:
        raise JoinRefused(
            f"{name} is drained (no new servers), but {len(users)} user servers still run "
            f"there ({', '.join(users)}); run `jupyterhub-gpu node leave` again once they "
            "stopped, or with --force to leave anyway"
        )
    call(hub, port, site.ca_cert, "/v1/leave", {"name": name}, token)
    from jupyterhub_gpu.cli.units import firewall_script

    run(["systemctl", "disable", "--now", AGENT_UNIT, FIREWALL_UNIT], timeout=120)
    run(["bash", str(firewall_script()), "--bridge", str(saved.get("bridge", "jhgpu-users")),
         "--remove"])  # fmt: skip
    trust = Path(args.root) / rules.registry_trust(hub)
    for path in (site.agent_token, site.node_key, site.node_cert, site.etc / "node.json", trust):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # its folder, when nothing else is in it
        trust.parent.rmdir()
    return f"{name} left {hub}: removed from its nodes; the agent and firewall are stopped"


# -- hub side -----------------------------------------------------------------------


def token_command(args: argparse.Namespace) -> list[str]:
    from jupyterhub_gpu.cli.join_service import (
        ca_fingerprint,
        ensure_join_cert,
        install_command,
        new_token,
        public_key_pin,
        served_wheel,
    )

    site = Site(etc=args.etc, state=args.state)
    if args.node:
        from jupyterhub_gpu.wire.nodes_file import parse_node

        parse_node({"name": args.node, "docker_url": "unix:///x", "address": "127.0.0.1"}, "--node")
    try:
        ttl = rules.parse_ttl(args.ttl)
    except ValueError as e:
        raise JoinRefused(str(e)) from None
    hub = args.hub or _hub_address(site)
    pin = public_key_pin(ensure_join_cert(site, hub))
    fingerprint = ca_fingerprint(site.ca_cert.read_bytes())
    if not 1 <= args.count <= 100 or (args.node and args.count != 1):
        raise JoinRefused("--count: 1 to 100 join commands (one with --node)")
    lines = []
    if served_wheel(site) is not None:
        lines.append(install_command(hub, args.port, pin))
    for _ in range(args.count):
        token = new_token(site, args.node or "", ttl)
        command = rules.join_command(args.venv_bin, hub, token, fingerprint, args.node or "")
        if args.port != JOIN_PORT:
            command += f" --port {args.port}"
        lines.append(command)
    return lines


def _hub_address(site: Site) -> str:
    """The hub's address for the nodes: ``hub_connect_ip`` of the site's configuration."""
    from jupyterhub_gpu.cli.site import configured_hub_ip

    return configured_hub_ip(site)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jupyterhub-gpu node", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="action", required=True)
    t = sub.add_parser("token", help="on the hub: a node's join command (single use, short-lived)")
    t.add_argument("--node", default="", metavar="NAME", help="the only node name it may join as")
    t.add_argument(
        "--count", type=int, default=1, help="join commands for N nodes (a token each; default 1)"
    )
    t.add_argument(
        "--ttl", default="1h", help="how long it is valid (e.g. 30m, 1h, 2d; default 1h)"
    )
    t.add_argument("--hub", default="", help="the hub's address for the nodes (default: the "
                   "configuration's hub_connect_ip)")  # fmt: skip
    t.add_argument("--venv-bin", default="/opt/jupyterhub-gpu/venv/bin",
                   help="the node's venv/bin (default: the install line's)")  # fmt: skip
    s = sub.add_parser("serve", help="the hub's join service (the hub runs it)")
    s.add_argument("--address", required=True, help="the hub's site address to listen on")
    s.add_argument("--home-root", default="", help="the shared home's folder, checked on nodes")
    s.add_argument("--bridge", default="jhgpu-users")
    s.add_argument("--network", default="jupyterhub-gpu-users")
    r = sub.add_parser("remove", help="on the hub: take a node off the nodes file")
    r.add_argument("name")
    j = sub.add_parser("join", help="on a node: join the hub")
    j.add_argument("hub", help="the hub's address")
    j.add_argument("--token", default="", help="the join token from `node token`")
    j.add_argument("--ca-fingerprint", required=True, help="the site CA's sha256:... fingerprint")
    j.add_argument("--name", default="", help="this node's name (default: its host name)")
    j.add_argument("--address", default="", help="the address the hub reaches this node at "
                   "(default: this machine's address towards the hub)")  # fmt: skip
    j.add_argument("--inventory", default="", help="a declared GPU inventory (no NVML)")
    j.add_argument("--restart-docker", action="store_true",
                   help="restart Docker under running containers without live-restore")  # fmt: skip
    j.add_argument("--root", default="/", help="write Docker's settings and units under this root")
    j.add_argument("--venv", default=sys.prefix, help="the environment the units run")
    j.add_argument("--bridge", default="jhgpu-users", help=argparse.SUPPRESS)
    j.add_argument("--network", default="jupyterhub-gpu-users", help=argparse.SUPPRESS)
    lv = sub.add_parser("leave", help="on a node: drain it and leave the hub")
    lv.add_argument("--force", action="store_true", help="leave although user servers run")
    lv.add_argument("--root", default="/", help="where node join wrote Docker's settings")
    for q in (t, s, r, j, lv):
        q.add_argument("--etc", type=Path, default=DEFAULT_ETC, help=f"default {DEFAULT_ETC}")
        q.add_argument("--port", type=int, default=JOIN_PORT, help="the join service's port")
    for q in (t, s, r):
        q.add_argument("--state", type=Path, default=DEFAULT_STATE, help=f"default {DEFAULT_STATE}")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    args.etc = args.etc.absolute()
    try:
        if args.action == "token":
            for line in token_command(args):
                print(line)
        elif args.action == "serve":
            from jupyterhub_gpu.cli.join_service import JoinSettings, serve

            serve(JoinSettings(Site(etc=args.etc, state=args.state), args.address, args.port,
                               args.home_root, args.bridge, args.network))  # fmt: skip
        elif args.action == "remove":
            from jupyterhub_gpu.cli.join_service import node_listed, set_node

            site = Site(etc=args.etc, state=args.state)
            if node_listed(site, args.name) is None:
                raise JoinRefused(f"{site.nodes_file} has no node named {args.name}")
            set_node(site, args.name, None)
            print(f"removed {args.name} from {site.nodes_file}")
        elif args.action == "join":
            print(join(args))
        else:
            print(leave(args))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0
