"""GPULDAPAuthenticator against a real slapd, and inside a real JupyterHub process.

Needs the ``ldap_server`` fixture from tests/ldap_fixture.py (imported by tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ldapauthenticator import LDAPAuthenticator
from tornado import web

from jupyterhub_gpu.core.identity import identity_from_auth_state, map_home
from jupyterhub_gpu.errors import UnsafePath
from jupyterhub_gpu.hub.auth.ldap import UNAVAILABLE_MESSAGE, GPULDAPAuthenticator
from tests.ldap_fixture import DEMO_PASSWORDS, LDAPServer, free_port, hash_password
from tests.support.hub import Hub
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
INJECTIONS = [
    "*",
    ")(uid=*",
    "admin)(|(uid=*",
    "alice)(|(uid=*",
    "*)(objectClass=*",
    "alice*",
    "\\00",
    "\x00",
    "alice\x00",
    "alice\n",
    "uid=alice,ou=people,dc=example,dc=org",
    "alice,ou=people",
]


@pytest.fixture(scope="module")
def directory(ldap_server: LDAPServer) -> LDAPServer:
    """The demo directory plus hostile test-only accounts (password 'hostile-pw')."""
    pw = hash_password("hostile-pw")
    entries = [
        ("mallory", 10010, 5000, "/etc"),  # home outside /home
        ("toor", 0, 0, "/root"),  # root's ids
        ("sysacct", 500, 5000, "/home/sysacct"),  # a system uid
    ]
    ldap_server.add(
        "\n".join(
            f"""dn: {ldap_server.user_dn(uid)}
objectClass: inetOrgPerson
objectClass: posixAccount
uid: {uid}
cn: {uid}
sn: {uid}
uidNumber: {uid_number}
gidNumber: {gid_number}
homeDirectory: {home}
userPassword: {pw}
"""
            for uid, uid_number, gid_number, home in entries
        )
    )
    return ldap_server


def make_auth(server: LDAPServer, **overrides: Any) -> GPULDAPAuthenticator:
    config = server.authenticator_config(allow_all=True, ldap_timeout=2.0)
    config.update(overrides)
    return GPULDAPAuthenticator(**config)


async def login(auth: Any, username: str, password: str) -> dict[str, Any] | None:
    result = await auth.get_authenticated_user(None, {"username": username, "password": password})
    return result


# --------------------------------------------------------------------------- in process


async def test_login_puts_identity_and_groups_in_auth_state(directory: LDAPServer) -> None:
    auth = make_auth(directory)
    model = await login(auth, "alice", DEMO_PASSWORDS["alice"])
    assert model is not None and model["name"] == "alice"
    state = model["auth_state"]
    assert (state["uid"], state["gid"], state["home_directory"]) == (10001, 5000, "/home/alice")
    assert state["groups"] == ["a100-users", "gpu-users"]
    assert state["group_gids"] == {"a100-users": 5001, "gpu-users": 5000}
    assert state["user_dn"] == directory.user_dn("alice")
    assert state["uid_source"] == "ldap"
    ident = identity_from_auth_state("alice", state, supplementary_groups=["*"])
    assert (ident.uid, ident.gid, ident.supplementary_gids) == (10001, 5000, (5001,))
    assert map_home(ident.home_directory, "alice", "/mnt/cephfs/home") == Path(
        "/mnt/cephfs/home/alice"
    )
    assert auth.enable_auth_state is True


async def test_uppercase_login_is_the_same_user(directory: LDAPServer) -> None:
    model = await login(make_auth(directory), "Alice", DEMO_PASSWORDS["alice"])
    assert model is not None and model["name"] == "alice"


@pytest.mark.parametrize(
    ("username", "password"),
    [
        ("alice", "wrong"),
        ("alice", ""),
        ("alice", "   "),
        ("alice", DEMO_PASSWORDS["bob"]),
        ("nobody", "whatever"),
    ],
)
async def test_wrong_empty_and_unknown_are_refused(
    directory: LDAPServer, username: str, password: str
) -> None:
    assert await login(make_auth(directory), username, password) is None


@pytest.mark.parametrize("username", INJECTIONS)
async def test_injection_usernames_never_reach_ldap(directory: LDAPServer, username: str) -> None:
    before = directory.accepted_before_probe()
    assert await login(make_auth(directory), username, DEMO_PASSWORDS["alice"]) is None
    # slapd has logged a probe made after the login: a connection of the login's would be
    # counted before it; only the first probe is
    assert directory.accepted_before_probe() == before + 1


@pytest.mark.parametrize("username", [u for u in INJECTIONS if not re.search(r"[\x00-\x1f]", u)])
async def test_escaping_holds_even_with_a_permissive_regex(
    directory: LDAPServer, username: str
) -> None:
    """Defence in depth: with the username check opened up, escaping still stops them."""
    auth = make_auth(directory, valid_username_regex=r"^.+$")
    assert auth.username_refusal(username) is None
    assert await login(auth, username, DEMO_PASSWORDS["alice"]) is None


async def test_user_without_uid_number_is_refused_or_gets_fallback(
    directory: LDAPServer, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(web.HTTPError) as info:
        await login(make_auth(directory), "dave", DEMO_PASSWORDS["dave"])
    assert info.value.status_code == 403
    assert "uidNumber" in str(info.value.log_message)
    assert "has no usable POSIX identity" in caplog.text and "uidNumber=None" in caplog.text

    auth = make_auth(directory, fallback_uid=20000, fallback_gid=20000)
    model = await login(auth, "dave", DEMO_PASSWORDS["dave"])
    assert model is not None
    state = model["auth_state"]
    assert (state["uid"], state["gid"], state["uid_source"]) == (20000, 20000, "fallback")


@pytest.mark.parametrize(("username", "uid"), [("toor", 0), ("sysacct", 500)])
async def test_root_and_system_uids_are_refused(
    directory: LDAPServer, username: str, uid: int
) -> None:
    with pytest.raises(web.HTTPError) as info:
        await login(make_auth(directory), username, "hostile-pw")
    assert info.value.status_code == 403
    assert f"user id {uid} is reserved" in str(info.value.log_message)


async def test_hostile_home_from_ldap_is_refused_by_the_mapping(directory: LDAPServer) -> None:
    model = await login(make_auth(directory), "mallory", "hostile-pw")
    assert model is not None and model["auth_state"]["home_directory"] == "/etc"
    with pytest.raises(UnsafePath, match="outside /home"):
        map_home(model["auth_state"]["home_directory"], "mallory", "/mnt/cephfs/home")


async def test_groups_decide_who_logs_in_and_who_is_admin(directory: LDAPServer) -> None:
    auth = make_auth(
        directory,
        allow_all=False,
        allowed_groups=[directory.group_dn("gpu-users")],
        admin_groups={"hub-admins"},
        manage_groups=True,
    )
    # the right password, but in no allowed group: told so, by the group's name (issue 36)
    with pytest.raises(web.HTTPError) as refused:
        await login(auth, "erin", DEMO_PASSWORDS["erin"])
    assert refused.value.status_code == 403
    assert refused.value.log_message == (
        "Your account is not allowed on this hub (not in the group gpu-users); ask your admin."
    )
    assert await login(auth, "erin", "not-her-password") is None  # the generic line
    bob = await login(auth, "bob", DEMO_PASSWORDS["bob"])
    assert bob is not None and bob["admin"] is False and bob["groups"] == ["gpu-users"]
    carol = await login(auth, "carol", DEMO_PASSWORDS["carol"])
    assert carol is not None and carol["admin"] is True
    assert carol["groups"] == ["gpu-users", "hub-admins"]

    # admin_groups by DN, and admin group members may log in without an allowed group
    auth = make_auth(
        directory,
        allow_all=False,
        allowed_groups=[directory.group_dn("a100-users")],
        admin_groups={directory.group_dn("hub-admins").upper()},
    )
    carol = await login(auth, "carol", DEMO_PASSWORDS["carol"])
    assert carol is not None and carol["admin"] is True
    with pytest.raises(web.HTTPError, match="not in the group a100-users"):
        await login(auth, "bob", DEMO_PASSWORDS["bob"])
    alice = await login(auth, "alice", DEMO_PASSWORDS["alice"])
    assert alice is not None and alice["admin"] is False


async def test_lookup_dn_with_a_search_account_never_logs_secrets(
    directory: LDAPServer, caplog: pytest.LogCaptureFixture
) -> None:
    admin_pw = directory.admin_password_file.read_text()
    auth = make_auth(
        directory,
        lookup_dn=True,
        bind_dn_template=[],
        user_search_base=f"ou=people,{directory.suffix}",
        user_attribute="uid",
        lookup_dn_search_user=directory.admin_dn,
        lookup_dn_search_password=admin_pw,
        lookup_dn_user_dn_attribute="uid",
    )
    caplog.set_level(logging.DEBUG)
    model = await login(auth, "bob", DEMO_PASSWORDS["bob"])
    assert model is not None and model["auth_state"]["uid"] == 10002
    assert await login(auth, "bob", "not-" + DEMO_PASSWORDS["bob"]) is None
    for secret in (admin_pw, DEMO_PASSWORDS["bob"]):
        assert secret not in caplog.text


async def test_unreachable_server_fails_fast_with_a_message() -> None:
    auth = GPULDAPAuthenticator(
        server_address="127.0.0.1",
        server_port=free_port(),  # nothing listens there
        tls_strategy="insecure",
        bind_dn_template=["uid={username},ou=people,dc=example,dc=org"],
        allow_all=True,
    )
    start = time.monotonic()
    with pytest.raises(web.HTTPError) as info:
        await login(auth, "alice", "alice-gpu")
    assert info.value.status_code == 503 and info.value.log_message == UNAVAILABLE_MESSAGE
    assert time.monotonic() - start < 1.0


class LoopLag:
    """Measures the longest gap between ticks of the running event loop."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            self.gaps.append(now - last)
            last = now

    def __enter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    @property
    def worst(self) -> float:
        return max(self.gaps, default=0.0)


async def test_frozen_ldap_times_out_without_blocking_the_loop(directory: LDAPServer) -> None:
    auth = make_auth(directory, ldap_timeout=1.0)
    with directory.frozen(), LoopLag() as lag:
        start = time.monotonic()
        with pytest.raises(web.HTTPError) as info:
            await login(auth, "bob", DEMO_PASSWORDS["bob"])
        elapsed = time.monotonic() - start
        await asyncio.sleep(0.05)
    assert info.value.status_code == 503
    assert 0.9 <= elapsed < 2.0, elapsed
    assert lag.worst < 0.3, f"event loop stalled {lag.worst:.2f}s"
    # and the server is usable again once it answers
    assert await login(auth, "bob", DEMO_PASSWORDS["bob"]) is not None


async def test_control_stock_ldapauthenticator_blocks_the_loop(directory: LDAPServer) -> None:
    """Shows the freeze test can fail: stock ldapauthenticator stalls the loop."""
    config = directory.authenticator_config(allow_all=True)
    del config["group_search_base"]  # not a trait of the stock class
    stock = LDAPAuthenticator(**config)
    directory.pause()
    timer = threading.Timer(1.5, directory.resume)
    timer.start()
    try:
        with LoopLag() as lag:
            await asyncio.sleep(0.05)
            model = await login(stock, "bob", DEMO_PASSWORDS["bob"])
            await asyncio.sleep(0.05)
    finally:
        timer.join()
        directory.resume()
    assert model is not None
    assert lag.worst > 1.2, f"expected a stall, worst gap {lag.worst:.2f}s"


# --------------------------------------------------------------------------- real hub


@pytest.fixture
def ldap_hub(directory: LDAPServer, tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path / "hub")
    hub.extra_config = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
c.JupyterHub.authenticator_class = "jupyterhub_gpu.hub.auth.ldap.GPULDAPAuthenticator"
c.Authenticator.allow_all = False
c.CryptKeeper.keys = [bytes.fromhex({secrets.token_hex(32)!r})]
c.GPULDAPAuthenticator.server_address = {directory.host!r}
c.GPULDAPAuthenticator.server_port = {directory.port}
c.GPULDAPAuthenticator.tls_strategy = "insecure"
c.GPULDAPAuthenticator.bind_dn_template = ["uid={{username}},ou=people,{directory.suffix}"]
c.GPULDAPAuthenticator.group_search_base = "ou=groups,{directory.suffix}"
c.GPULDAPAuthenticator.allowed_groups = [{directory.group_dn("gpu-users")!r}]
c.GPULDAPAuthenticator.admin_groups = {{"hub-admins"}}
c.GPULDAPAuthenticator.manage_groups = True
c.GPULDAPAuthenticator.ldap_timeout = 3
c.GPULDAPAuthenticator.executor_threads = 2
c.JupyterHub.load_roles = c.JupyterHub.load_roles + [
    {{"name": "token-maker", "scopes": ["tokens"], "services": ["tester"]}}
]
"""
    try:
        hub.start()
        yield hub
    except BaseException:
        print(f"\n===== hub log tail ({hub.workdir}) =====\n{hub.log_tail(80)}")
        print(f"\n===== slapd log tail =====\n{directory.log_tail(20)}")
        raise
    finally:
        hub.stop()


async def form_login(client: httpx.AsyncClient, username: str, password: str) -> httpx.Response:
    page = await client.get("/hub/login")
    match = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
    assert match, page.text[:500]
    data = {"username": username, "password": password, "_xsrf": match.group(1)}
    return await client.post("/hub/login", data=data)


async def fresh_login(hub: Hub, username: str, password: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=hub.url, timeout=30) as client:
        return await form_login(client, username, password)


async def test_hub_stays_responsive_while_ldap_is_frozen(
    ldap_hub: Hub, directory: LDAPServer
) -> None:
    hub = ldap_hub
    try:
        await _check_hub(hub, directory)
    except BaseException:
        print(f"\n===== hub log tail ({hub.workdir}) =====\n{hub.log_tail(80)}")
        print(f"\n===== slapd log tail =====\n{directory.log_tail(20)}")
        raise


async def _check_hub(hub: Hub, directory: LDAPServer) -> None:
    async with httpx.AsyncClient(base_url=hub.url, timeout=30) as alice:
        r = await form_login(alice, "alice", DEMO_PASSWORDS["alice"])
        assert r.status_code == 302, r.text[:500]
    model = hub.user("alice")
    assert sorted(model["groups"]) == ["a100-users", "gpu-users"] and model["admin"] is False
    assert model["auth_state"]["uid"] == 10001
    assert model["auth_state"]["home_directory"] == "/home/alice"

    r = await fresh_login(hub, "carol", DEMO_PASSWORDS["carol"])
    assert r.status_code == 302
    assert hub.user("carol")["admin"] is True
    r = await fresh_login(hub, "dave", DEMO_PASSWORDS["dave"])
    assert r.status_code == 403 and "uidNumber" in r.text
    # the right password, not in gpu-users: the login page says so (issue 36); a wrong
    # password, or a user who does not exist, reads the generic line and nothing more
    r = await fresh_login(hub, "erin", DEMO_PASSWORDS["erin"])
    assert r.status_code == 403
    assert (
        "Your account is not allowed on this hub (not in the group gpu-users); ask your admin."
        in r.text
    ), r.text[-2000:]
    assert "Invalid username or password" not in r.text
    for name, password in (("erin", "wrong"), ("nobody-here", "wrong"), ("alice", "wrong")):
        r = await fresh_login(hub, name, password)
        assert r.status_code == 403 and "Invalid username or password" in r.text, name
        assert "not allowed on this hub" not in r.text and "gpu-users" not in r.text, name
    before = directory.accepted_before_probe()
    r = await fresh_login(hub, "admin)(|(uid=*", DEMO_PASSWORDS["alice"])
    assert r.status_code == 403 and directory.accepted_before_probe() == before + 1

    r = hub.api("POST", "/users/alice/tokens", json={"expires_in": 600, "note": "freeze test"})
    assert r.status_code == 201, r.text
    alice_token = r.json()["token"]

    async with (
        httpx.AsyncClient(base_url=hub.url, timeout=30) as bob,
        httpx.AsyncClient(
            base_url=hub.url, timeout=30, headers={"Authorization": f"token {alice_token}"}
        ) as api,
    ):
        await bob.get("/hub/login")  # the xsrf cookie, before the freeze
        latencies: list[float] = []
        with directory.frozen():
            start = time.monotonic()
            frozen_login = asyncio.create_task(form_login(bob, "bob", DEMO_PASSWORDS["bob"]))
            # the event: bob's login reached slapd, whose accept queue now holds it
            await wait_until_async(
                lambda: directory.waiting_connections() or frozen_login.done(),
                10,
                "bob's login to connect to the frozen slapd",
            )
            assert not frozen_login.done(), "the login ended while slapd was frozen"
            for _ in range(6):
                t = time.monotonic()
                r = await api.get("/hub/api/user")
                latencies.append(time.monotonic() - t)
                assert r.status_code == 200 and r.json()["name"] == "alice"
                await asyncio.sleep(0.2)
            r = await frozen_login
            elapsed = time.monotonic() - start
        print(f"\nAPI latencies during the freeze: {[round(x, 3) for x in latencies]} s")
        print(f"frozen login answered after {elapsed:.2f} s with HTTP {r.status_code}")
        assert max(latencies) < 1.0
        assert r.status_code == 503 and "sign-in service is not answering" in r.text
        assert 2.8 <= elapsed < 6.0
        # slapd answers again: bob gets in
        r = await form_login(bob, "bob", DEMO_PASSWORDS["bob"])
        assert r.status_code == 302, r.text[:500]

    log = hub.log_path.read_text(errors="replace")
    assert "did not answer within 3.0 s" in log
    for password in DEMO_PASSWORDS.values():
        assert password not in log
