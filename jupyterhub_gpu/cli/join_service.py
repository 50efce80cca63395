"""The hub's side of ``jupyterhub-gpu node join``: join tokens, the join service.

``node token`` (on the hub, as root) stores a new token's SHA-256 in
``STATE/join-tokens.json`` (0600) and prints the node's commands. The join service
(``jupyterhub-gpu node serve``; the hub runs it as a service: ``configure_join`` in the
site's configuration) listens with HTTPS on the hub's site address, port 9451, with a
certificate from the site's CA (``tls/join-cert.pem``, made once), and answers:

- ``GET /v1/ca.pem``: the site's CA certificate (the node checks its SHA-256 fingerprint
  against the one in its command before it trusts anything else);
- ``GET /v1/install``: a shell script that makes the node's environment and installs the
  hub's own wheel, its SHA-256 checked; ``GET /v1/wheel`` (name, version, SHA-256) and
  ``GET /v1/wheel/NAME``: the wheel the hub runs;
- ``POST /v1/join``: a token, the node's name and address and its certificate request ->
  the node's certificate (for that name and address only, signed by the site's CA; the
  key never leaves the node) and its agent token; the node is added to the nodes file,
  drained, which the running hub re-reads (a live add); with ``"check": true`` the token
  is only checked, and the site's settings returned;
- ``POST /v1/ready`` and ``POST /v1/leave`` (with the node's agent token): the node is
  undrained after its checks passed; removed from the nodes file when it leaves.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import ipaddress
import json
import secrets
import shlex
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from jupyterhub_gpu.cli.certs import issue, read_ca, sign
from jupyterhub_gpu.cli.layout import SECRET_MODE, Site, private_dir, write_all, write_atomic
from jupyterhub_gpu.cli.site import node_entry, nodes_yaml
from jupyterhub_gpu.core import join as rules
from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.edges.adminfiles import load_nodes_file
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.nodes_file import parse_node

JOIN_PORT = 9451
HUB_API_PORT = 8081
DEFAULT_VENV = "/opt/jupyterhub-gpu/venv"
MAX_BODY = 64 * 1024
_WHEEL_NAME = "jupyterhub_gpu-"


def tokens_file(site: Site) -> Path:
    return site.state / "join-tokens.json"


def wheel_dir(site: Site) -> Path:
    """Where the hub keeps the wheel it runs, served to the nodes."""
    return site.state / "wheel"


def join_cert(site: Site) -> tuple[Path, Path]:
    return site.join_cert, site.join_key


# -- the CA and the join service's certificate -------------------------------------------


def ca_fingerprint(ca_pem: bytes) -> str:
    """SHA-256 of the CA certificate (DER), hex."""
    cert = x509.load_pem_x509_certificate(ca_pem)
    return cert.fingerprint(hashes.SHA256()).hex()


def public_key_pin(cert_pem: bytes) -> str:
    """curl's ``--pinnedpubkey`` value of a certificate's key: ``sha256//BASE64``."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256//" + base64.b64encode(hashlib.sha256(spki).digest()).decode()


def ensure_join_cert(site: Site, address: str) -> bytes:
    """The join service's server certificate for ``address`` (made once from the site's
    CA, again if the address changed); its PEM. ``node token`` (which pins its key) and
    the join service (which serves it) may both come first: a lock makes one of them issue
    it and the other read that one."""
    cert_path, key_path = join_cert(site)
    private_dir(site.tls)
    with open(site.tls / ".join-cert.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cert_path.exists() and key_path.exists():
            pem = cert_path.read_bytes()
            names = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(
                x509.SubjectAlternativeName
            ).value
            if any(str(v) == address for v in names.get_values_for_type(x509.IPAddress)) or (
                address in names.get_values_for_type(x509.DNSName)
            ):
                return pem
        cert, key = issue(*read_ca(site), "jupyterhub-gpu join service", server_names=[address])
        write_all({cert_path: (cert, 0o644), key_path: (key, SECRET_MODE)})
        return cert


# -- tokens -----------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(site: Site) -> Iterator[None]:
    private_dir(site.state)
    with open(site.state / ".join-tokens.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read_tokens(site: Site) -> list[rules.TokenRecord]:
    path = tokens_file(site)
    if not path.exists():
        return []
    raw = json.loads(path.read_text() or "[]")
    return [rules.record_from_json(r) for r in raw if isinstance(r, dict)]


def _write_tokens(site: Site, records: list[rules.TokenRecord]) -> None:
    data = json.dumps([rules.record_to_json(r) for r in records], indent=1) + "\n"
    write_atomic(tokens_file(site), data, SECRET_MODE)


def new_token(site: Site, node: str, ttl_s: int, now: float | None = None) -> str:
    """A fresh join token (only its SHA-256 is kept)."""
    now = time.time() if now is None else now
    token = "jhgpu-" + secrets.token_urlsafe(24)
    record = rules.TokenRecord(rules.token_digest(token), node, now + ttl_s)
    with _locked(site):
        kept = rules.pruned(_read_tokens(site), now)
        _write_tokens(site, [*kept, record])
    return token


def check_token(site: Site, token: str, node: str, *, use: bool, now: float | None = None) -> str:
    """'' when ``token`` may join ``node`` now (and, with ``use``, it is used up:
    single use); the sentence for the node otherwise."""
    now = time.time() if now is None else now
    with _locked(site):
        records = _read_tokens(site)
        index, problem = rules.token_problem(records, token, node, now)
        if problem or not use:
            return problem
        assert index is not None
        r = records[index]
        records[index] = rules.TokenRecord(r.digest, r.node, r.expires, now, node)
        _write_tokens(site, records)
    return ""


# -- the node's certificate, and the nodes file -----------------------------------------


def sign_csr(site: Site, csr_pem: bytes, node: str, address: str) -> bytes:
    """The node's server certificate for its Docker API and agent: the request's key, the
    subject and names the HUB chose (``node`` and ``address`` only), signed by the CA."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError:
        raise ConfigError("the certificate request is not a PEM CSR") from None
    if not csr.is_signature_valid:
        raise ConfigError("the certificate request's signature is not valid")
    key = csr.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError("the certificate request must be for an EC key")
    return sign(*read_ca(site), node, key, server_names=[node, address])


def set_node(site: Site, name: str, address: str | None, *, drain: bool | None = None) -> None:
    """The node in the nodes file (rewritten whole, atomically: the hub re-reads it):
    added or replaced with ``address``, ``drain`` set; removed when ``address`` is None."""
    entries = load_nodes_file(str(site.nodes_file))
    old = next((e for e in entries if e.get("name") == name), None)
    rest = [e for e in entries if e.get("name") != name]
    if address is None:
        if old is not None:
            write_atomic(site.nodes_file, nodes_yaml(rest), 0o644)
        return
    entry = node_entry(site, name, address) if old is None or old.get("address") != address else old
    if drain is not None:
        entry = {**entry, "drain": drain}
    if old is not None:
        entries = [entry if e.get("name") == name else e for e in entries]
    else:
        entries = [*rest, entry]
    write_atomic(site.nodes_file, nodes_yaml(entries), 0o644)


def node_listed(site: Site, name: str) -> dict[str, Any] | None:
    return next((e for e in load_nodes_file(str(site.nodes_file)) if e.get("name") == name), None)


# -- the wheel --------------------------------------------------------------------------


@dataclass(frozen=True)
class Wheel:
    path: Path
    sha256: str
    version: str


def served_wheel(site: Site) -> Wheel | None:
    """The wheel the hub runs, if the hub's install left it (``hub install --wheel``)."""
    folder = wheel_dir(site)
    found = sorted(folder.glob(f"{_WHEEL_NAME}*.whl")) if folder.is_dir() else []
    if not found:
        return None
    path = found[-1]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Wheel(path, digest, path.name.split("-")[1])


def keep_wheel(site: Site, wheel: Path) -> Wheel:
    """Copy the wheel the hub was installed from to where the join service serves it
    (the previous one is removed; docs/upgrade.md keeps its own copy for rollback)."""
    from importlib.metadata import version

    if not wheel.name.startswith(_WHEEL_NAME) or wheel.suffix != ".whl":
        raise ConfigError(f"{wheel} is not a jupyterhub-gpu wheel")
    running = version("jupyterhub-gpu")
    if wheel.name.split("-")[1] != running:
        raise ConfigError(
            f"{wheel} is version {wheel.name.split('-')[1]}, but this hub runs {running}: "
            "give the wheel this hub was installed from"
        )
    folder = wheel_dir(site)
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        if old.name != wheel.name:
            old.unlink()
    write_atomic(folder / wheel.name, wheel.read_bytes(), 0o644)
    found = served_wheel(site)
    assert found is not None
    return found


def install_script(hub: str, port: int, wheel: Wheel, pin: str) -> str:
    """What ``curl ... /v1/install | sh`` runs on a node: its environment (``$VENV``,
    default /opt/jupyterhub-gpu/venv) and the hub's wheel, its SHA-256 checked first."""
    url = f"https://{_host(hub)}:{port}/v1/wheel/{wheel.path.name}"
    return f"""#!/bin/sh
# jupyterhub-gpu {wheel.version}: the node's install, from the hub {hub}
set -eu
VENV=${{VENV:-{DEFAULT_VENV}}}
fail() {{ echo "$1" >&2; exit 1; }}
command -v python3 >/dev/null || fail "python3 is missing: apt-get install -y python3-venv"
python3 -c 'import venv, ensurepip' 2>/dev/null \
    || fail "python3's venv is missing: apt-get install -y python3-venv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
whl="$tmp/{wheel.path.name}"
curl -fsS --insecure --pinnedpubkey {shlex.quote(pin)} -o "$whl" \
    {shlex.quote(url)}
echo "{wheel.sha256}  $whl" | sha256sum -c --quiet - \
    || fail "the wheel's SHA-256 is not the hub's: nothing was installed"
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$whl"
echo "installed jupyterhub-gpu {wheel.version} in $VENV"
"""


def _host(address: str) -> str:
    try:
        return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        return address


def install_command(hub: str, port: int, pin: str) -> str:
    return (
        f"curl -fsS --insecure --pinnedpubkey {shlex.quote(pin)} "
        f"https://{_host(hub)}:{port}/v1/install | sh"
    )


# -- the service ------------------------------------------------------------------------


@dataclass
class JoinSettings:
    site: Site
    address: str  # the hub's site address: the join service, the hub's API for the nodes
    port: int = JOIN_PORT
    home_root: str = ""
    bridge: str = "jhgpu-users"
    network: str = "jupyterhub-gpu-users"
    hub_api_port: int = HUB_API_PORT


def _site_secret(site: Site) -> str:
    return site.site_secret.read_text()


def handle_join(settings: JoinSettings, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A join request; (HTTP status, answer). Nothing changes on a refusal."""
    site = settings.site
    token, name, address = (str(body.get(k, ""))[:256] for k in ("token", "name", "address"))
    try:
        parse_node({"name": name, "docker_url": "unix:///x", "address": address}, "the node")
    except ConfigError as e:
        return 400, {"error": f"{e}"}
    problem = check_token(site, token, name, use=False)
    if problem:
        return 403, {"error": problem}
    answer: dict[str, Any] = {
        "hub": settings.address,
        "allow": [f"{settings.address}:{settings.hub_api_port}"],
        "home_root": settings.home_root,
        "bridge": settings.bridge,
        "network": settings.network,
    }
    listed = node_listed(site, name)
    if listed is not None and listed.get("address") != address:
        return 409, {
            "error": f"the hub already has a node named {name} at {listed.get('address')}; "
            f"choose another --name, or remove it on the hub first (jupyterhub-gpu node "
            f"remove {name})"
        }
    if body.get("check"):
        return 200, answer
    csr = str(body.get("csr", ""))[:8192].encode()
    try:
        cert = sign_csr(site, csr, name, address)
    except ConfigError as e:
        return 400, {"error": str(e)}
    problem = check_token(site, token, name, use=True)  # single use, from here on
    if problem:
        return 403, {"error": problem}
    set_node(site, name, address, drain=True)  # listed, no servers until its checks pass
    answer.update(
        cert=cert.decode(),
        ca=site.ca_cert.read_text(),
        agent_token=node_token(_site_secret(site), name),
    )
    return 200, answer


def handle_node(
    settings: JoinSettings, body: dict[str, Any], action: str, auth: str
) -> tuple[int, dict[str, Any]]:
    """``ready`` (undrain) or ``leave`` (remove) from the node itself, its agent token as
    its credential."""
    site = settings.site
    name = str(body.get("name", ""))[:64]
    if not name or node_listed(site, name) is None:
        return 404, {"error": f"the hub has no node named {name!r}"}
    expected = node_token(_site_secret(site), name)
    given = auth.removeprefix("token ").strip()
    if not hmac.compare_digest(expected.encode(), given.encode()):
        return 403, {"error": "this node's agent token is not the hub's: join it again"}
    if action == "ready":
        set_node(site, name, str(node_listed(site, name)["address"]), drain=False)  # type: ignore[index]
    elif body.get("drain_only"):
        set_node(site, name, str(node_listed(site, name)["address"]), drain=True)  # type: ignore[index]
    else:
        set_node(site, name, None)
    return 200, {"node": name, action: True}


def make_app(settings: JoinSettings) -> Any:
    import tornado.web

    class Base(tornado.web.RequestHandler):
        def write_json(self, status: int, body: dict[str, Any]) -> None:
            self.set_status(status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(body))

        def body_json(self) -> dict[str, Any] | None:
            try:
                loaded = json.loads(self.request.body or b"{}")
            except ValueError:
                loaded = None
            if not isinstance(loaded, dict):
                self.write_json(400, {"error": "the request's body must be a JSON object"})
                return None
            return loaded

    class CA(Base):
        def get(self) -> None:
            self.set_header("Content-Type", "application/x-pem-file")
            self.finish(settings.site.ca_cert.read_bytes())

    class WheelInfo(Base):
        def get(self) -> None:
            w = served_wheel(settings.site)
            if w is None:
                self.write_json(
                    404, {"error": "the hub keeps no wheel: install the node from the wheel file"}
                )
                return
            self.write_json(200, {"name": w.path.name, "version": w.version, "sha256": w.sha256})

    class WheelFile(Base):
        def get(self, name: str) -> None:
            w = served_wheel(settings.site)
            if w is None or w.path.name != name:
                self.write_json(404, {"error": "no such wheel"})
                return
            self.set_header("Content-Type", "application/octet-stream")
            self.set_header("X-SHA256", w.sha256)
            self.finish(w.path.read_bytes())

    class Install(Base):
        def get(self) -> None:
            w = served_wheel(settings.site)
            if w is None:
                self.set_status(404)
                self.finish("echo 'the hub keeps no wheel: install the wheel file' >&2; exit 1\n")
                return
            pin = public_key_pin(join_cert(settings.site)[0].read_bytes())
            self.set_header("Content-Type", "text/x-shellscript")
            self.finish(install_script(settings.address, settings.port, w, pin))

    class Join(Base):
        def post(self) -> None:
            body = self.body_json()
            if body is not None:
                self.write_json(*handle_join(settings, body))

    class Node(Base):
        def post(self, action: str) -> None:
            body = self.body_json()
            if body is not None:
                auth = self.request.headers.get("Authorization", "")
                self.write_json(*handle_node(settings, body, action, auth))

    return tornado.web.Application(
        [
            (r"/v1/ca.pem", CA),
            (r"/v1/wheel", WheelInfo),
            (r"/v1/wheel/([A-Za-z0-9_.+-]{1,200}\.whl)", WheelFile),
            (r"/v1/install", Install),
            (r"/v1/join", Join),
            (r"/v1/(ready|leave)", Node),
        ]
    )


def serve(settings: JoinSettings) -> None:
    """Run the join service until stopped."""
    import asyncio

    import tornado.httpserver

    ensure_join_cert(settings.site, settings.address)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert, key = join_cert(settings.site)
    context.load_cert_chain(str(cert), str(key))

    async def run() -> None:
        server = tornado.httpserver.HTTPServer(
            make_app(settings), ssl_options=context, max_body_size=MAX_BODY,
            max_buffer_size=MAX_BODY,
        )  # fmt: skip
        server.listen(settings.port, address=settings.address)
        print(f"join service on https://{_host(settings.address)}:{settings.port}", file=sys.stderr)
        await asyncio.Event().wait()

    asyncio.run(run())
