"""``jupyterhub-gpu certs ca|hub|node NAME``: the site's private CA and its certificates.

Made with the ``cryptography`` library (ECDSA P-256, SHA-256), under ``--etc``/tls:

- ``ca``: ``ca.pem`` and ``ca-key.pem`` (0600), valid 10 years. Made once: every later
  certificate is signed by it, so a node added next year joins without touching the
  others.
- ``hub``: ``hub-cert.pem``/``hub-key.pem``, the hub's *client* certificate for the nodes'
  Docker APIs (``tls: client_cert/client_key`` in nodes.yaml).
- ``public --address HUB_IP [--dns NAME]``: ``public-cert.pem``/``public-key.pem``, the
  hub's *public* HTTPS certificate (the login page, the proxy: ``JupyterHub.ssl_cert``)
  for its address and the names users open it at. A site with its own certificate
  (``site init --tls-cert/--tls-key``) skips it; :func:`own_certificate_problem` checks
  that one.
- ``node NAME --address ADDR``: ``nodes/NAME/{ca.pem,cert.pem,key.pem}``, the node's
  *server* certificate (subjectAltName: the node's name, its address, and any ``--dns``)
  for its Docker API (port 2376) and its agent's HTTPS (9450). Copy that folder to the
  node's ``/etc/jupyterhub-gpu/tls``. It prints the node's ``daemon.json`` and the
  docker.service drop-in that goes with it.

Each refuses to replace an existing certificate without ``--force``; keys are created 0600,
certificates 0644, and ``tls/``, ``tls/nodes`` and each node's folder are 0700, whatever
the caller's umask.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import sys
from dataclasses import replace
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from jupyterhub_gpu.cli.layout import DEFAULT_ETC, SECRET_MODE, Site, private_dir, write_all
from jupyterhub_gpu.core.public_cert import PublicCertFacts
from jupyterhub_gpu.errors import ConfigError

CA_DAYS = 3650
CERT_DAYS = 825
DOCKER_TLS_PORT = 2376


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "jupyterhub-gpu"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def make_ca(common_name: str = "jupyterhub-gpu site CA") -> tuple[bytes, bytes]:
    """A self-signed CA: (certificate PEM, key PEM)."""
    key = _key()
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


def sans(names: list[str]) -> list[x509.GeneralName]:
    """subjectAltName entries: an IP address as an IP, anything else as a DNS name."""
    out: list[x509.GeneralName] = []
    for n in dict.fromkeys(names):  # once each, in order
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def sign(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    public_key: ec.EllipticCurvePublicKey,
    *,
    server_names: list[str] | None = None,
    client: bool = False,
) -> bytes:
    """A leaf certificate for ``public_key`` signed by the site's CA, the one way every
    certificate of the site is issued: a server's (``server_names`` become its
    subjectAltName) or a client's, valid :data:`CERT_DAYS`. Returns its PEM."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ConfigError("the CA key is not an EC key made by `jupyterhub-gpu certs ca`")
    now = _now()
    usage = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if server_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans(server_names)), False)
    return _cert_pem(builder.sign(ca_key, hashes.SHA256()))


def issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    *,
    server_names: list[str] | None = None,
    client: bool = False,
    key: ec.EllipticCurvePrivateKey | None = None,
) -> tuple[bytes, bytes]:
    """:func:`sign` for ``key`` (default: a new one). Returns (certificate PEM, key PEM)."""
    key = key or _key()
    cert = sign(
        ca_cert_pem,
        ca_key_pem,
        common_name,
        key.public_key(),
        server_names=server_names,
        client=client,
    )
    return cert, _key_pem(key)


def _refuse_existing(paths: list[Path], force: bool, what: str) -> None:
    there = [p for p in paths if p.exists()]
    if there and not force:
        raise ConfigError(
            f"{there[0]} already exists; nothing was changed. {what} Use --force to replace it."
        )


def read_ca(site: Site) -> tuple[bytes, bytes]:
    try:
        return site.ca_cert.read_bytes(), site.ca_key.read_bytes()
    except FileNotFoundError as e:
        raise ConfigError(
            f"{e.filename} does not exist: make the site's CA first (jupyterhub-gpu certs ca "
            f"--etc {site.etc})"
        ) from None
    except OSError as e:
        raise ConfigError(f"{e.filename}: cannot read the CA ({e.strerror}); run as root") from None


def make_site_ca(site: Site, force: bool = False) -> list[Path]:
    _refuse_existing(
        [site.ca_cert, site.ca_key],
        force,
        "A new CA voids every certificate signed by the old one (all nodes and the hub).",
    )
    cert, key = make_ca()
    private_dir(site.tls)
    write_all({site.ca_cert: (cert, 0o644), site.ca_key: (key, SECRET_MODE)})
    return [site.ca_cert, site.ca_key]


def make_hub_cert(site: Site, force: bool = False) -> list[Path]:
    ca = read_ca(site)
    _refuse_existing([site.hub_cert, site.hub_key], force, "")
    cert, key = issue(*ca, "jupyterhub-gpu hub", client=True)
    private_dir(site.tls)
    write_all({site.hub_cert: (cert, 0o644), site.hub_key: (key, SECRET_MODE)})
    return [site.hub_cert, site.hub_key]


def make_public_cert(
    site: Site, address: str, dns: list[str] | None = None, force: bool = False
) -> list[Path]:
    """The hub's public HTTPS certificate for ``address`` and every ``dns`` name (the
    names users open the hub at), signed by the site's CA."""
    names = [n for n in [address, *(dns or [])] if n]
    bad = [n for n in names if not _host_name(n)]
    if not names or bad:
        raise ConfigError(
            f"{(bad or [''])[0]!r} is not an IP address or a host name: give the hub's "
            "address (--address) and the names users open it at (--dns)"
        )
    ca = read_ca(site)
    _refuse_existing([site.public_cert, site.public_key], force, "")
    cert, key = issue(*ca, "jupyterhub-gpu hub (public)", server_names=names)
    private_dir(site.tls)
    write_all({site.public_cert: (cert, 0o644), site.public_key: (key, SECRET_MODE)})
    return [site.public_cert, site.public_key]


def _host_name(name: str) -> bool:
    """An IP address or a DNS name (labels of letters, digits and -, a leading ``*.``)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    import re

    label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    return len(name) <= 253 and re.fullmatch(rf"(?:\*\.)?{label}(?:\.{label})*", name) is not None


def names_match(held: str, wanted: str) -> bool:
    """Whether a certificate's name ``held`` (an IP, a DNS name, ``*.domain``) covers the
    address ``wanted``, as a browser matches it (one label for a wildcard)."""
    try:
        return ipaddress.ip_address(held) == ipaddress.ip_address(wanted)
    except ValueError:
        pass
    held, wanted = held.lower().rstrip("."), wanted.lower().rstrip(".")
    if held.startswith("*."):
        first, dot, rest = wanted.partition(".")
        return bool(first and dot) and rest == held[2:]
    return held == wanted


def _read_pem(path: Path) -> bytes:
    """A certificate's or key's file, its first MiB (a PEM chain is a few KiB)."""
    with path.open("rb") as f:
        return f.read(1 << 20)


def key_matches(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    """Whether ``key`` is the private key of ``cert``."""
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return key.public_key().public_bytes(der, spki) == cert.public_key().public_bytes(der, spki)


def public_cert_facts(cert_path: Path, key_path: Path, renew: str) -> PublicCertFacts:
    """What the hub's public certificate and key files hold, for check-config
    (core/public_cert.py judges them); ``renew``: the command that renews it, if any."""
    facts = PublicCertFacts(str(cert_path), str(key_path), renew=renew)
    cert = None
    try:
        cert = x509.load_pem_x509_certificates(_read_pem(cert_path))[0]
        facts = replace(
            facts,
            not_before=cert.not_valid_before_utc.timestamp(),
            not_after=cert.not_valid_after_utc.timestamp(),
        )
    except OSError as e:
        facts = replace(facts, cert_error=str(e.strerror))
    except ValueError:
        facts = replace(facts, cert_error="no PEM certificate")
    try:
        key = serialization.load_pem_private_key(_read_pem(key_path), password=None)
    except OSError as e:
        return replace(facts, key_error=str(e.strerror))
    except TypeError:
        return replace(facts, key_error="it is protected by a password")
    except ValueError:
        return replace(facts, key_error="no PEM private key")
    return replace(facts, key_matches=True if cert is None else key_matches(cert, key))


def own_certificate_problem(
    cert_path: Path, key_path: Path, names: list[str], now: dt.datetime | None = None
) -> str:
    """Why the admin's own certificate and key (``--tls-cert``/``--tls-key``) would not
    serve the hub's logins at ``names``, in one sentence, or '': both readable PEM, the key
    the certificate's (unencrypted: the proxy asks for no password), valid now, and every
    name of ``names`` in its subjectAltName. The certificate file may hold its chain
    after it."""
    from jupyterhub_gpu.core.words import duration

    nothing = "; nothing was written."
    pems: dict[Path, bytes] = {}
    for path in (cert_path, key_path):
        try:
            pems[path] = _read_pem(path)
        except OSError as e:
            return f"{path} cannot be read ({e.strerror}): give a file that root can read{nothing}"
    try:
        cert = x509.load_pem_x509_certificates(pems[cert_path])[0]
    except ValueError:
        return (
            f"{cert_path} is not a certificate in PEM form (-----BEGIN CERTIFICATE-----): "
            f"give the hub's certificate, its chain after it if it has one{nothing}"
        )
    try:
        key = serialization.load_pem_private_key(pems[key_path], password=None)
    except TypeError:
        return (
            f"{key_path} is protected by a password, which the hub's proxy cannot ask for: "
            f"give the key without one (openssl pkey -in KEY -out KEY.plain){nothing}"
        )
    except ValueError:
        return f"{key_path} is not a private key in PEM form: give the certificate's key{nothing}"
    if not key_matches(cert, key):
        return f"{key_path} is not the key of {cert_path}: give the key that goes with it{nothing}"
    now = now or _now()
    if cert.not_valid_after_utc <= now:
        ago = duration((now - cert.not_valid_after_utc).total_seconds())
        return f"{cert_path} expired {ago} ago: give a current certificate{nothing}"
    if cert.not_valid_before_utc > now:
        until = duration((cert.not_valid_before_utc - now).total_seconds())
        return f"{cert_path} becomes valid only in {until}: give a certificate valid now{nothing}"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        held = [str(n.value) for n in san if isinstance(n, (x509.DNSName, x509.IPAddress))]
    except x509.ExtensionNotFound:
        held = []
    missing = [n for n in names if not any(names_match(h, n) for h in held)]
    if missing:
        return (
            f"{cert_path} is for {', '.join(held) or 'no name (no subjectAltName)'}, not "
            f"{', '.join(missing)}: give a certificate for the address users open the hub at, "
            f"and that address with --public-name{nothing}"
        )
    return ""


def make_node_cert(
    site: Site, node: str, address: str, dns: list[str] | None = None, force: bool = False
) -> list[Path]:
    from jupyterhub_gpu.wire.nodes_file import parse_node

    # the same rules as the nodes file's: a name and address the hub accepts
    parse_node(
        {"name": node, "docker_url": "unix:///var/run/docker.sock", "address": address},
        f"node {node}",
    )
    ca_cert, ca_key = read_ca(site)
    folder = site.node_dir(node)  # becomes the node's etc/tls: ca.pem, cert.pem, key.pem
    cert_path, key_path = folder / site.node_cert.name, folder / site.node_key.name
    _refuse_existing([cert_path, key_path], force, "")
    cert, key = issue(ca_cert, ca_key, node, server_names=[node, address, *(dns or [])])
    for private in (site.tls, folder.parent, folder):  # 0700 before a key goes in
        private_dir(private)
    write_all(
        {
            folder / "ca.pem": (ca_cert, 0o644),
            cert_path: (cert, 0o644),
            key_path: (key, SECRET_MODE),
        }
    )
    return [folder / "ca.pem", cert_path, key_path]


def not_after(path: Path) -> dt.datetime:
    """When the certificate at ``path`` expires (UTC); OSError or ValueError if unreadable."""
    return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc


def renew_cert(
    site: Site, cert_path: Path, key_path: Path, rotate_key: bool, make: str = "hub|node"
) -> dt.datetime:
    """The certificate at ``cert_path`` issued again by the site's CA for another
    :data:`CERT_DAYS`: the same name, subjectAltName and use, the same key (a new one with
    ``rotate_key``). Both files are replaced together; returns the new expiry."""
    ca_cert, ca_key = read_ca(site)
    try:
        old = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = (
            None
            if rotate_key
            else serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        )
    except FileNotFoundError as e:
        raise ConfigError(
            f"{e.filename} does not exist: there is nothing to renew; make it with "
            f"jupyterhub-gpu certs {make}"
        ) from None
    except ValueError as e:
        raise ConfigError(f"{cert_path} or its key cannot be read ({e}); make it again") from None
    if key is not None and not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"{key_path} is not an EC key made by jupyterhub-gpu certs")
    names = old.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    try:
        san = old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        server_names: list[str] | None = [str(n.value) for n in san]
    except x509.ExtensionNotFound:
        server_names = None
    usage = old.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    cert, key_pem = issue(
        ca_cert,
        ca_key,
        str(names[0].value) if names else cert_path.parent.name,
        server_names=server_names,
        client=ExtendedKeyUsageOID.CLIENT_AUTH in list(usage),
        key=key,
    )
    write_all({cert_path: (cert, 0o644), key_path: (key_pem, SECRET_MODE)})
    return not_after(cert_path)


RESTART_HUB = (
    "  then restart the hub when convenient (systemctl restart jupyterhub-gpu-hub; "
    "users' servers keep running)"
)


def _hub_side(site: Site, every: bool = False) -> list[tuple[str, Path, Path, str]]:
    """The hub machine's server certificates from the site's CA (the hub's public HTTPS,
    the site registry's, the join service's): (label, cert, key, then); those that exist
    unless ``every``."""
    found = [
        ("the hub's public HTTPS certificate", site.public_cert, site.public_key, RESTART_HUB),
        ("the site registry's certificate", site.registry_cert, site.registry_key,
         "  then: systemctl restart jupyterhub-gpu-registry"),
        ("the join service's certificate", site.join_cert, site.join_key, RESTART_HUB),
    ]  # fmt: skip
    return [t for t in found if every or t[1].exists()]


def renew(site: Site, what: str, name: str | None, rotate_key: bool) -> list[str]:
    """``certs renew hub|public|registry|node NAME|all``: what was renewed and what to do
    next, a line each."""
    targets: list[tuple[str, Path, Path, str]] = []
    if what in ("hub", "all"):
        targets.append(("the hub's client certificate", site.hub_cert, site.hub_key, RESTART_HUB))
    if what == "public":
        targets.append(_hub_side(site, every=True)[0])
    if what == "registry":
        targets.append(_hub_side(site, every=True)[1])
    if what == "all":
        targets += _hub_side(site)
    if what == "node":
        if not name:
            raise ConfigError("certs renew node needs the node's NAME")
        folder = site.node_dir(name)
        targets.append((f"{name}'s certificate", folder / "cert.pem", folder / "key.pem", ""))
    if what == "all" and (site.tls / "nodes").is_dir():
        for folder in sorted(p for p in (site.tls / "nodes").iterdir() if p.is_dir()):
            targets.append(
                (f"{folder.name}'s certificate", folder / "cert.pem", folder / "key.pem", "")
            )
    make = {"public": "public --address HUB_IP", "registry": "registry install"}.get(what)
    said = []
    for label, cert, key, then in targets:
        until = renew_cert(site, cert, key, rotate_key, make or "hub|node")
        kept = "a new key" if rotate_key else "the same key"
        said.append(f"renewed {label} until {until:%Y-%m-%d} ({kept}): {cert}")
        if cert.parent.parent == site.tls / "nodes":
            node = cert.parent.name
            said.append(
                f"  then copy {cert.parent}/cert.pem"
                + (" and key.pem" if rotate_key else "")
                + f" to {node}:{site.tls}/ and run there: systemctl restart docker "
                "jupyterhub-gpu-agent"
            )
        elif then and then != RESTART_HUB:
            said.append(then)
    if any(then == RESTART_HUB for *_, then in targets):
        said.append(RESTART_HUB)
    return said


def daemon_json(address: str, tls_dir: Path) -> str:
    """The node's /etc/docker/daemon.json: its engine on the unix socket and on TCP+TLS
    (client certificates required)."""
    import json

    return json.dumps(
        {
            "hosts": ["unix:///var/run/docker.sock", f"tcp://{address}:{DOCKER_TLS_PORT}"],
            "tls": True,
            "tlsverify": True,
            "tlscacert": str(tls_dir / "ca.pem"),
            "tlscert": str(tls_dir / "cert.pem"),
            "tlskey": str(tls_dir / "key.pem"),
        },
        indent=2,
    )


DOCKER_DROP_IN_PATH = "/etc/systemd/system/docker.service.d/jupyterhub-gpu-tls.conf"
# Debian's docker.io installs /usr/sbin/dockerd, Docker's own packages /usr/bin/dockerd
DOCKERD_PATHS = ("/usr/sbin/dockerd", "/usr/bin/dockerd")


def dockerd_path(root: Path = Path("/")) -> str:
    """Where this machine's dockerd is (under ``root``); Debian's path when none is."""
    for path in DOCKERD_PATHS:
        if (root / path.lstrip("/")).exists():
            return path
    return DOCKERD_PATHS[0]


def docker_drop_in(dockerd: str) -> str:
    """The docker.service drop-in: dockerd's listening addresses come from daemon.json
    ("hosts"); the stock unit's ``-H fd://`` would conflict with them, so ExecStart is
    cleared and set again without it."""
    return (
        "# jupyterhub-gpu: dockerd's listening addresses come from /etc/docker/daemon.json\n"
        '# ("hosts"); the stock unit\'s `-H fd://` would conflict with them, so ExecStart is\n'
        "# cleared and set again without it.\n"
        "[Service]\n"
        "ExecStart=\n"
        f"ExecStart={dockerd} --containerd=/run/containerd/containerd.sock\n"
    )


DOCKER_DROP_IN = docker_drop_in(DOCKERD_PATHS[0])


def node_instructions(site: Site, node: str, address: str) -> str:
    on_node = site.tls  # the same --etc on the node
    folder = site.node_dir(node)
    return (
        f"Copy {folder}/ to {node}:{on_node}/ (keep key.pem 0600), then on {node}:\n\n"
        f"/etc/docker/daemon.json (merge with what is there):\n{daemon_json(address, on_node)}\n\n"
        f"{DOCKER_DROP_IN_PATH} (dockerd's path as `command -v dockerd` says on the node):\n"
        f"{DOCKER_DROP_IN}\n"
        "systemctl daemon-reload && systemctl restart docker\n"
        "(`jupyterhub-gpu units install --node ... --docker-tls` writes both on the node.)"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu certs",
        description="The site's CA, the hub's client and public certificates, a node's server "
        "certificate; their renewal.",
    )
    p.add_argument("--etc", type=Path, default=DEFAULT_ETC, help=f"default {DEFAULT_ETC}")
    sub = p.add_subparsers(dest="action", required=True)
    ca = sub.add_parser("ca", help="make the site's CA (once)")
    hub = sub.add_parser("hub", help="the hub's client certificate for the nodes' Docker APIs")
    public = sub.add_parser("public", help="the hub's public HTTPS certificate (its logins)")
    public.add_argument("--address", required=True, help="the hub's address (HUB_IP)")
    public.add_argument("--dns", action="append", default=[], help="a name users open it at "
                        "(repeat)")  # fmt: skip
    node = sub.add_parser("node", help="a node's server certificate (Docker TLS, agent HTTPS)")
    node.add_argument("name")
    node.add_argument("--address", required=True, help="the IP or host name the hub reaches")
    node.add_argument("--dns", action="append", default=[], help="another name (repeat)")
    for q in (ca, hub, public, node):
        q.add_argument("--force", action="store_true", help="replace an existing one")
    again = sub.add_parser(
        "renew",
        help=f"issue a certificate again for {CERT_DAYS} days (same names; same key unless "
        "--rotate-key)",
    )
    again.add_argument("what", choices=["hub", "public", "registry", "node", "all"],
                       help="all: the hub's certificates and every node's")  # fmt: skip
    again.add_argument("name", nargs="?", help="the node's name (with node)")
    again.add_argument("--rotate-key", action="store_true", help="a new key as well")
    for q in (ca, hub, public, node, again):
        q.add_argument("--etc", type=Path, default=argparse.SUPPRESS, help="as above")
    args = p.parse_args(argv)
    site = Site(etc=args.etc.absolute())
    try:
        if args.action == "renew":
            for line in renew(site, args.what, args.name, args.rotate_key):
                print(line)
            return 0
        if args.action == "ca":
            made = make_site_ca(site, args.force)
        elif args.action == "hub":
            made = make_hub_cert(site, args.force)
        elif args.action == "public":
            made = make_public_cert(site, args.address, args.dns, args.force)
        else:
            made = make_node_cert(site, args.name, args.address, args.dns, args.force)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{e.filename}: {e.strerror}; nothing was changed", file=sys.stderr)
        return 1
    for path in made:
        print(f"wrote {path}")
    if args.action == "node":
        print()
        print(node_instructions(site, args.name, args.address))
    return 0
