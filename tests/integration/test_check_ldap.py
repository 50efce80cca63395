"""``jupyterhub-gpu check-ldap USER`` against the real test slapd (tests/ldap_fixture.py),
on sites laid out by ``site init`` with the server given as a URL: one line that says
what was found, or what is wrong (no entry, not allowed, the search account refused, the
server unreachable)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ldap_fixture import DEMO_PASSWORDS, LDAPServer, free_port

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CLI = "import sys; from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))"


def jg(*argv: str | Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *map(str, argv)], input=stdin,
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip


def make_site(tmp: Path, ldap: LDAPServer, name: str, *extra: str, port: int = 0) -> Path:
    etc = tmp / name
    r = jg("site", "init", "--etc", etc, "--state", tmp / f"{name}-state",
           "--hub-ip", "10.0.0.1", "--node", "gpu-a=10.0.0.12",
           "--ldap-server", f"ldap://{ldap.host}:{port or ldap.port}", "--ldap-tls", "insecure",
           "--ldap-base", ldap.suffix, *extra)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return etc


@pytest.fixture(scope="module")
def sites(ldap_server: LDAPServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("check-ldap")
    search = ("--ldap-search-base", f"ou=people,{ldap_server.suffix}",
              "--ldap-search-dn", ldap_server.admin_dn)  # fmt: skip
    found = {
        "template": make_site(tmp, ldap_server, "template"),
        "search": make_site(tmp, ldap_server, "search", *search),
        "bad-password": make_site(tmp, ldap_server, "bad-password", *search),
        "closed": make_site(tmp, ldap_server, "closed", port=free_port()),
    }
    password = ldap_server.admin_password_file.read_text().strip()
    for name, value in (("search", password), ("bad-password", "not-" + password)):
        env = found[name] / "secrets" / "hub.env"
        env.write_text(env.read_text() + f"LDAP_SEARCH_PASSWORD={value}\n")
    return found


@pytest.mark.parametrize(
    ("site", "user", "rc", "said"),
    [
        ("template", "alice", 0, "alice: uid=alice,ou=people,dc=example,dc=org on ldap://"),
        ("search", "alice", 0, "alice: uid=alice,ou=people,dc=example,dc=org on ldap://"),
        ("search", "erin", 1, "not in an allowed group (cn=gpu-users,ou=groups,"),
        ("template", "dave", 1, "the entry has no uidNumber, so the login is refused"),
        (
            "anonymous",
            "alice",
            1,
            "alice: no entry uid=alice,ou=people,dc=example,dc=org that "
            "an anonymous search sees on ldap://127.0.0.1:",
        ),
        ("template", "zoe", 1, "refused uid=zoe,ou=people,dc=example,dc=org with that password"),
        ("search", "zoe", 1, "zoe: no entry under ou=people,dc=example,dc=org matches (uid=zoe)"),
        ("bad-password", "alice", 1, "refused the search account cn="),
        ("closed", "alice", 1, "cannot reach the LDAP server at ldap://127.0.0.1:"),
    ],
)
def test_check_ldap_says_in_one_line_what_it_found(
    sites: dict[str, Path], site: str, user: str, rc: int, said: str
) -> None:
    if site == "template":  # no search account: bind as the user, as the login does
        password = DEMO_PASSWORDS.get(user, "x")
        r = jg("check-ldap", user, "--etc", sites[site], "--password-stdin", stdin=password)
    else:
        r = jg("check-ldap", user, "--etc", sites["template" if site == "anonymous" else site])
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == rc, out
    assert said in out, out
    assert len(out.splitlines()) == 1 and "Traceback" not in out, out
    if rc == 0:
        assert out.endswith("groups: a100-users, gpu-users; this user may log in."), out
    assert "not-" not in out  # the search password is never shown
