"""GPULDAPAuthenticator over TLS against a real slapd with a certificate from a test CA.

StartTLS (the default ``before_bind``) and LDAPS (``on_connect``) log in when the CA is
given; a certificate from another CA, or for another host name, is refused before the
password is sent. slapd's own log is the witness: every BIND it saw ran with ``ssf`` > 0
(encrypted), and a refused handshake leaves no BIND at all.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado import web

from jupyterhub_gpu.hub.auth.ldap import UNAVAILABLE_MESSAGE, GPULDAPAuthenticator
from tests.ldap_fixture import DEMO_PASSWORDS, LDAPServer, start_ldap_server
from tests.support.pki import issue, openssl

pytestmark = pytest.mark.integration

BIND = re.compile(r"conn=(\d+) op=\d+ BIND dn=\"uid=alice,ou=people,[^\"]*\" mech=\S+ .*ssf=(\d+)")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not shutil.which("openssl"):
        pytest.fail("openssl is needed: apt-get install -y openssl", pytrace=False)
    folder = tmp_path_factory.mktemp("pki")
    # `openssl req -x509` asks for a subject unless given one
    ca_key, ca_pem = folder / "ca.key", folder / "ca.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", ca_key,
            "-out", ca_pem, "-subj", "/CN=jupyterhub-gpu test CA")  # fmt: skip
    other_key, other_pem = folder / "other.key", folder / "other.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
            other_key, "-out", other_pem, "-subj", "/CN=someone else's CA")  # fmt: skip
    cert, key = issue(folder, (ca_key, ca_pem), "ldap-test", "IP:127.0.0.1")
    return {"ca": ca_pem, "other_ca": other_pem, "cert": cert, "key": key, "folder": folder}


@pytest.fixture(scope="module")
def tls_server(
    pki: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LDAPServer]:
    state = tmp_path_factory.mktemp("slapd-tls")
    try:
        server = start_ldap_server(state, tls=(pki["cert"], pki["key"]))
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def binds(server: LDAPServer, since: int) -> list[tuple[int, int]]:
    """(connection, ssf) of every BIND of alice slapd logged after byte ``since``."""
    text = server.log_path.read_text(errors="replace")[since:]
    return [(int(c), int(ssf)) for c, ssf in BIND.findall(text)]


def log_size(server: LDAPServer) -> int:
    return len(server.log_path.read_text(errors="replace"))


def make_auth(server: LDAPServer, **overrides: Any) -> GPULDAPAuthenticator:
    config = server.authenticator_config(allow_all=True, ldap_timeout=5.0)
    config.pop("tls_strategy")  # the product's default: before_bind (StartTLS)
    config.update(overrides)
    return GPULDAPAuthenticator(**config)


async def login(auth: GPULDAPAuthenticator) -> dict[str, Any] | None:
    data = {"username": "alice", "password": DEMO_PASSWORDS["alice"]}
    result: dict[str, Any] | None = await auth.get_authenticated_user(None, data)
    return result


async def test_starttls_is_the_default_and_the_password_goes_encrypted(
    tls_server: LDAPServer, pki: dict[str, Path]
) -> None:
    since = log_size(tls_server)
    auth = make_auth(tls_server, tls_kwargs={"ca_certs_file": str(pki["ca"])})
    assert auth.tls_strategy.name == "before_bind"
    user = await login(auth)
    assert user is not None and user["auth_state"]["uid"] == 10001
    seen = binds(tls_server, since)
    assert seen and all(ssf > 0 for _, ssf in seen), tls_server.log_tail()
    text = tls_server.log_path.read_text(errors="replace")[since:]
    assert f"conn={seen[0][0]} op=0 STARTTLS" in text


async def test_ldaps_on_connect(tls_server: LDAPServer, pki: dict[str, Path]) -> None:
    assert tls_server.ldaps_port is not None
    since = log_size(tls_server)
    auth = make_auth(
        tls_server,
        server_port=tls_server.ldaps_port,
        tls_strategy="on_connect",
        tls_kwargs={"ca_certs_file": str(pki["ca"])},
    )
    user = await login(auth)
    assert user is not None and user["name"] == "alice"
    seen = binds(tls_server, since)
    assert seen and all(ssf > 0 for _, ssf in seen), tls_server.log_tail()


@pytest.mark.parametrize("strategy", ["before_bind", "on_connect"])
async def test_a_certificate_from_another_ca_is_refused_before_the_password(
    tls_server: LDAPServer,
    pki: dict[str, Path],
    strategy: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A man in the middle with a certificate the lab's CA did not sign gets no password:
    validation is on by default (ldap3's own default is CERT_NONE)."""
    assert tls_server.ldaps_port is not None
    port = tls_server.ldaps_port if strategy == "on_connect" else tls_server.port
    since = log_size(tls_server)
    auth = make_auth(
        tls_server,
        server_port=port,
        tls_strategy=strategy,
        tls_kwargs={"ca_certs_file": str(pki["other_ca"])},
    )
    caplog.set_level(logging.WARNING)
    with pytest.raises(web.HTTPError) as info:
        await login(auth)
    assert info.value.status_code == 503 and info.value.log_message == UNAVAILABLE_MESSAGE
    assert binds(tls_server, since) == []  # slapd never saw the bind
    assert "TLS handshake with LDAP server" in caplog.text
    assert "no password was sent: certificate verify failed" in caplog.text
    assert DEMO_PASSWORDS["alice"] not in caplog.text


async def test_a_certificate_for_another_name_is_refused(
    tls_server: LDAPServer, pki: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The CA is right but the certificate names 127.0.0.1, and we asked for localhost."""
    since = log_size(tls_server)
    auth = make_auth(
        tls_server, server_address="localhost", tls_kwargs={"ca_certs_file": str(pki["ca"])}
    )
    caplog.set_level(logging.WARNING)
    with pytest.raises(web.HTTPError) as info:
        await login(auth)
    assert info.value.status_code == 503
    assert binds(tls_server, since) == []
    assert "TLS handshake with LDAP server localhost" in caplog.text
