"""HTTPS for the hub's logins (issue 34): ``certs public`` (the site CA's certificate for
the hub's address and names), ``site init --tls-cert/--tls-key`` (the admin's own, each
problem one sentence and nothing written), ``--no-tls``, ``check-config`` on logins over
plain HTTP, ``certs renew`` of the hub's public and registry certificates, and ``hub
install`` making the public one."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from jupyterhub_gpu import cli
from jupyterhub_gpu.cli import certs, check
from jupyterhub_gpu.cli.layout import Site
from tests.support.pki import valid_until

pytestmark = pytest.mark.unit
HUB_IP = "10.0.0.1"


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return Site(etc=tmp_path / "etc" / "jupyterhub-gpu", state=tmp_path / "state")


def init(s: Site, *extra: str) -> int:
    return cli.main(["site", "init", "--etc", str(s.etc), "--state", str(s.state), "--hub-ip",
                     HUB_IP, "--node", "gpu-a=127.0.0.1", "--ldap-server", "ldap.cs.uni.edu",
                     *extra])  # fmt: skip


def certificates(s: Site, *public: str) -> None:
    for argv in (["ca"], ["hub"], *([["public", *public]] if public else []),
                 ["node", "gpu-a", "--address", "127.0.0.1"]):  # fmt: skip
        assert cli.main(["certs", "--etc", str(s.etc), *argv]) == 0


# -------------------------------------------------------------- the admin's own pair
def own_pair(folder: Path, names: list[str], *, days: float = 90,
             other_key: bool = False) -> tuple[Path, Path]:  # fmt: skip
    """A certificate of a lab CA (not the site's) for ``names``, valid ``days`` from now
    (negative: expired that long ago), and its key (or another key)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = certs.make_ca("lab CA")
    key = ec.generate_private_key(ec.SECP256R1())
    cert_pem, key_pem = certs.issue(ca_cert, ca_key, "hub", server_names=names, key=key)
    if days != 90:
        cert_pem = valid_until(cert_pem, ca_key, days)
    if other_key:
        key_pem = certs._key_pem(ec.generate_private_key(ec.SECP256R1()))
    (folder / "hub.pem").write_bytes(cert_pem + ca_cert)  # the chain after it
    (folder / "hub.key").write_bytes(key_pem)
    (folder / "hub.key").chmod(0o600)
    return folder / "hub.pem", folder / "hub.key"


@pytest.mark.parametrize(
    ("names", "kwargs", "extra", "said"),
    [
        ([HUB_IP], {"other_key": True}, [], "hub.key is not the key of {cert}: give the key "
         "that goes with it; nothing was written."),
        ([HUB_IP], {"days": -3.5}, [], "{cert} expired 3 days 12 h ago: give a current "
         "certificate; nothing was written."),
        (["hub.other.lab"], {}, [], "{cert} is for hub.other.lab, not 10.0.0.1: give a "
         "certificate for the address users open the hub at, and that address with "
         "--public-name; nothing was written."),
        (["*.cs.uni.edu"], {}, ["--public-name", "hub.math.uni.edu"], "{cert} is for "
         "*.cs.uni.edu, not hub.math.uni.edu:"),
    ],
)  # fmt: skip
def test_a_wrong_own_certificate_is_one_sentence_and_nothing_is_written(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    names: list[str], kwargs: dict[str, object], extra: list[str], said: str,
) -> None:  # fmt: skip
    cert, key = own_pair(tmp_path / "own", names, **kwargs)  # type: ignore[arg-type]
    assert init(site, "--tls-cert", str(cert), "--tls-key", str(key), *extra) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert said.format(cert=cert) in err, err
    assert not site.etc.exists() and not site.state.exists()  # nothing written


def test_an_unreadable_or_password_protected_key_or_half_a_pair_is_refused(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, key = own_pair(tmp_path / "own", [HUB_IP])
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(loaded.private_bytes(  # type: ignore[union-attr]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    ))  # fmt: skip
    cases = [
        (["--tls-cert", str(cert), "--tls-key", str(locked)], "is protected by a password"),
        (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "nope.key")], "cannot be read"),
        (["--tls-cert", str(key), "--tls-key", str(key)], "is not a certificate in PEM form"),
        (["--tls-cert", str(cert)], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(cert), "--tls-key", str(key), "--no-tls"], "leave out --tls-cert"),
        (["--bind-url", "http://:8000"], "the hub serves logins over HTTPS"),
        (["--bind-url", 'https://:8000"\nimport os'], "is not a URL such as https://:8000"),
    ]
    for extra, said in cases:
        assert init(site, *extra) == 1, extra
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err
        assert not site.etc.exists()


def test_a_good_own_pair_is_named_in_the_configuration_and_check_config_passes(
    site: Site, tmp_path: Path
) -> None:
    cert, key = own_pair(tmp_path / "own", ["*.cs.uni.edu", HUB_IP])
    assert init(site, "--tls-cert", str(cert), "--tls-key", str(key), "--public-name",
                "hub.cs.uni.edu", "--public-name", HUB_IP) == 0  # fmt: skip
    text = site.config.read_text()
    assert f"c.JupyterHub.ssl_cert = {str(cert)!r}" in text
    assert f"c.JupyterHub.ssl_key = {str(key)!r}" in text
    assert "c.JupyterHub.bind_url = 'https://:8000'" in text
    certificates(site)  # no certs public: the site's own certificate serves
    assert check.check(site, site.config) == []
    assert not site.public_cert.exists()


# ---------------------------------------------------------- the site CA's certificate
def _serve_once(context: ssl.SSLContext) -> tuple[int, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        with listener, listener.accept()[0] as raw:
            try:
                with context.wrap_socket(raw, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    return port, thread


def browser_sees(s: Site, server_hostname: str) -> str:
    """A TLS handshake as a browser that trusts only the site's CA makes it, to a server
    with the hub's public certificate: '' when it verified, else the error."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(s.public_cert), str(s.public_key))
    port, thread = _serve_once(server)
    client = ssl.create_default_context(cafile=str(s.ca_cert))
    try:
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            client.wrap_socket(raw, server_hostname=server_hostname) as tls,
        ):
            tls.sendall(b"x")
        return ""
    except ssl.SSLCertVerificationError as e:
        return str(e.verify_message)
    finally:
        thread.join(5)


def test_certs_public_serves_the_hub_address_and_names_and_nothing_else(site: Site) -> None:
    assert init(site) == 0
    text = site.config.read_text()
    assert 'c.JupyterHub.ssl_cert = str(ETC / "tls" / "public-cert.pem")' in text
    certificates(site)
    found = check.check(site, site.config)
    assert found == [
        f"{site.public_cert} (JupyterHub.ssl_cert) does not exist: make it: jupyterhub-gpu "
        f"certs public --address HUB_IP [--dns NAME] --etc {site.etc}."
    ], found
    argv = ["certs", "--etc", str(site.etc), "public", "--address", HUB_IP, "--dns",
            "hub.cs.uni.edu"]  # fmt: skip
    assert cli.main(argv) == 0
    assert check.check(site, site.config) == []
    assert site.public_key.stat().st_mode & 0o777 == 0o600
    assert browser_sees(site, HUB_IP) == ""
    assert browser_sees(site, "hub.cs.uni.edu") == ""
    assert "mismatch" in browser_sees(site, "other.cs.uni.edu")
    assert cli.main(argv) == 1  # kept: --force replaces it
    assert cli.main(["certs", "--etc", str(site.etc), "public", "--address", "bad name!"]) == 1


def test_plain_http_logins_are_flagged_unless_on_loopback_or_behind_an_https_proxy(
    site: Site,
) -> None:
    assert init(site, "--no-tls") == 0  # behind a TLS proxy on this machine
    assert "c.JupyterHub.bind_url = 'http://127.0.0.1:8000'" in site.config.read_text()
    assert "ssl_cert =" not in site.config.read_text()
    certificates(site)
    assert check.check(site, site.config) == []
    assert init(site, "--no-tls", "--force", "--bind-url", "http://:8000") == 0
    (found,) = check.check(site, site.config)
    line = next(n for n, t in enumerate(site.config.read_text().splitlines(), 1)
                if "bind_url =" in t)  # fmt: skip
    assert found == (
        f"{site.config}, line {line}: the hub serves its logins over plain HTTP on every "
        "address of this machine (http://:8000), so passwords cross the network readable: "
        f"serve HTTPS (jupyterhub-gpu certs public --address HUB_IP --etc {site.etc}, then "
        "set c.JupyterHub.ssl_cert and ssl_key to its tls/public-cert.pem and public-key.pem), "
        "or, behind your own TLS proxy, bind to 127.0.0.1 or set c.JupyterHub.public_url = "
        '"https://..." (the proxy\'s address).'
    )
    with site.config.open("a") as f:  # the TLS proxy is another machine: it says so
        f.write('\nc.JupyterHub.public_url = "https://hub.cs.uni.edu/"\n')
    assert check.check(site, site.config) == []


def test_certs_renew_renews_the_public_and_registry_certificates(site: Site) -> None:
    assert init(site) == 0
    certificates(site, "--address", HUB_IP)
    assert cli.main(["certs", "--etc", str(site.etc), "renew", "registry"]) == 1  # none yet
    from jupyterhub_gpu.cli.registry import _registry_cert

    _registry_cert(site, HUB_IP)
    before = {p: x509.load_pem_x509_certificate(p.read_bytes())
              for p in (site.public_cert, site.registry_cert)}  # fmt: skip
    assert cli.main(["certs", "--etc", str(site.etc), "renew", "all"]) == 0
    for path, old in before.items():
        new = x509.load_pem_x509_certificate(path.read_bytes())
        assert new.serial_number != old.serial_number, path
        assert new.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        ) == old.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )  # the same key
        san = new.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(n.value) for n in san] == [HUB_IP]
    assert browser_sees(site, HUB_IP) == ""
    bare = Site(etc=site.etc.parent / "bare")
    assert cli.main(["certs", "--etc", str(bare.etc), "ca"]) == 0
    assert cli.main(["certs", "--etc", str(bare.etc), "renew", "public"]) == 1


def test_hub_install_makes_the_public_certificate_unless_the_site_brings_its_own(
    tmp_path: Path,
) -> None:
    made = Site(etc=tmp_path / "a" / "etc", state=tmp_path / "a" / "state")
    argv = ["hub", "install", "--no-start", "--etc", str(made.etc), "--state", str(made.state),
            "--root", str(tmp_path / "a"), "--hub-ip", HUB_IP, "--ldap-server",
            "ldap.cs.uni.edu"]  # fmt: skip
    assert cli.main([*argv, "--public-name", "hub.cs.uni.edu"]) == 0
    assert browser_sees(made, HUB_IP) == "" and browser_sees(made, "hub.cs.uni.edu") == ""
    plain = Site(etc=tmp_path / "b" / "etc", state=tmp_path / "b" / "state")
    argv = [a.replace(str(tmp_path / "a"), str(tmp_path / "b")) for a in argv]
    assert cli.main([*argv, "--no-tls"]) == 0
    assert plain.ca_cert.exists() and not plain.public_cert.exists()


@pytest.mark.parametrize(
    ("held", "wanted", "match"),
    [
        ("10.0.0.1", "10.0.0.1", True),
        ("10.0.0.1", "10.0.0.2", False),
        ("hub.lab.edu", "HUB.lab.edu.", True),
        ("*.lab.edu", "hub.lab.edu", True),
        ("*.lab.edu", "a.hub.lab.edu", False),
        ("*.lab.edu", "lab.edu", False),
        ("hub.lab.edu", "10.0.0.1", False),
    ],
)
def test_names_match_as_a_browser_does(held: str, wanted: str, match: bool) -> None:
    assert certs.names_match(held, wanted) is match
