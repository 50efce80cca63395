"""OAuth/OIDC login against a local OpenID Connect provider, in a real hub that spawns.

The hub runs ``GenericOAuthenticator`` with the configuration of docs/auth.md (URLs taken
from the provider's discovery document), ``JUPYTERHUB_CRYPT_KEY`` for auth_state, the
identity hooks of :mod:`jupyterhub_gpu.hub.auth.oauth`, and ``GPUDockerSpawner`` with
``require_identity = True``. A person's login is driven with httpx: the hub's login page,
its redirect to the provider, the provider's sign-in form, the code back to the hub.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from tests.conftest import gpu_inventory
from tests.support.cluster import Engine
from tests.support.hub import Hub
from tests.support.oidc import OIDCClient, OIDCProvider, OIDCUser

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
OPTIONS = {"image": "demo-cuda11", "gpu_count": 1, "mem_gib": 1, "cpu": 0.5}
CLIENT_ID = "jupyterhub"
DENIED = "not currently authorized"  # OAuthenticator's custom_403_message
NO_UID = "no POSIX user id (uidNumber)"


def _posix(uid: int, gid: int, home: str) -> dict[str, Any]:
    return {"uidNumber": uid, "gidNumber": gid, "homeDirectory": home}


def _users() -> list[OIDCUser]:
    """The demo directory's people, as an identity provider would send them."""
    return [
        OIDCUser(
            "alice",
            "alice-idp-pw",
            "alice@lab.example.org",
            ["gpu-users", "a100-users"],
            _posix(10001, 5000, "/home/alice"),
        ),
        OIDCUser(
            "carol",
            "carol-idp-pw",
            "carol@lab.example.org",
            ["gpu-users", "hub-admins"],
            _posix(10003, 5000, "/home/carol"),
        ),
        OIDCUser("dave", "dave-idp-pw", "dave@lab.example.org", ["gpu-users"], {"gidNumber": 5000}),
        OIDCUser(
            "erin", "erin-idp-pw", "erin@lab.example.org", [], _posix(10005, 5005, "/home/erin")
        ),
    ]


@pytest.fixture
def provider() -> Iterator[OIDCProvider]:
    client = OIDCClient(CLIENT_ID, secrets.token_urlsafe(24))
    with OIDCProvider(_users(), [client]) as p:
        yield p


def oauth_config(provider: OIDCProvider, extra: str = "") -> str:
    """docs/auth.md's generic OIDC configuration, with the local provider's endpoints."""
    d = httpx.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=10).json()
    secret = provider.clients[CLIENT_ID].client_secret
    return f"""
from jupyterhub_gpu.hub.auth.oauth import make_identity_hook, make_reconcile_hook

c.JupyterHub.authenticator_class = "generic-oauth"
c.Authenticator.allow_all = False                 # the test hub's default is True
g = c.GenericOAuthenticator
g.client_id = {CLIENT_ID!r}
g.client_secret = {secret!r}
g.oauth_callback_url = c.JupyterHub.bind_url + "/hub/oauth_callback"
g.authorize_url = {d["authorization_endpoint"]!r}
g.token_url = {d["token_endpoint"]!r}
g.userdata_url = {d["userinfo_endpoint"]!r}
g.scope = ["openid", "profile", "email", "groups"]
g.username_claim = "preferred_username"
g.enable_auth_state = True
g.manage_groups = True
g.auth_state_groups_key = "oauth_user.groups"
g.allowed_groups = {{"gpu-users"}}
g.admin_groups = {{"hub-admins"}}
identity = dict(uid_claim="uidNumber", gid_claim="gidNumber", home_claim="homeDirectory")
c.Authenticator.post_auth_hook = make_identity_hook(**identity)
c.Authenticator.reconcile_auth_state_hook = make_reconcile_hook(**identity)
c.GPUDockerSpawner.require_identity = True
{extra}"""


@pytest.fixture
def oauth_hub(
    make_hub: Callable[..., Hub],
    engine: Engine,
    provider: OIDCProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[str], Hub]:
    """Factory: a hub logging in through ``provider`` (extra config appended)."""

    def start(extra: str = "") -> Hub:
        monkeypatch.setenv("JUPYTERHUB_CRYPT_KEY", secrets.token_hex(32))
        inventory = [gpu_inventory(engine.name, "0a0a0a0a", [RTX, RTX])]
        hub = make_hub([engine], inventory, oauth_config(provider, extra))
        with provider.editing():
            provider.clients[CLIENT_ID].redirect_uris = [f"{hub.url}/hub/oauth_callback"]
        return hub

    return start


def browser() -> httpx.Client:
    return httpx.Client(follow_redirects=True, timeout=30)


def login(hub: Hub, provider: OIDCProvider, user: str, password: str) -> httpx.Response:
    """A person's login: hub login page -> provider form -> back to the hub's /hub/home."""
    client = browser()
    return login_with(client, hub, provider, user, password)


def login_with(
    client: httpx.Client, hub: Hub, provider: OIDCProvider, user: str, password: str
) -> httpx.Response:
    page = client.get(f"{hub.url}/hub/login", params={"next": "/hub/home"})
    assert page.status_code == 200, page.text[:500]
    button = re.search(r"href=['\"]([^'\"]*oauth_login[^'\"]*)['\"]", page.text)
    assert button, page.text[:1000]
    form = client.get(hub.url + html.unescape(button.group(1)))
    assert form.status_code == 200, form.text[:500]
    assert str(form.url).startswith(f"{provider.issuer}/authorize?"), form.url
    request_id = re.search(r'name="request_id" value="([^"]+)"', form.text)
    assert request_id, form.text[:500]
    return client.post(
        f"{provider.issuer}/authorize",
        data={"request_id": request_id.group(1), "username": user, "password": password},
    )


def containers_of(engine: Engine, hub: Hub, owner: str) -> list:
    with engine.client() as client:
        return client.containers.list(
            ignore_removed=True,
            all=True,
            filters={
                "label": [f"jupyterhub-gpu.hub={hub.hub_id}", f"jupyterhub-gpu.owner={owner}"]
            },
        )


def no_user(hub: Hub, name: str) -> bool:
    return hub.api("GET", f"/users/{name}").status_code == 404


# --------------------------------------------------------------------------- the provider


def test_local_provider_enforces_the_protocol(provider: OIDCProvider) -> None:
    """The test provider is strict enough to prove something: a hub that gets in used it right."""
    good = "http://127.0.0.1:9/hub/oauth_callback"
    provider.clients[CLIENT_ID].redirect_uris = [good]
    secret = provider.clients[CLIENT_ID].client_secret
    verifier = secrets.token_urlsafe(32)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    params = {
        "client_id": CLIENT_ID,
        "redirect_uri": good,
        "response_type": "code",
        "scope": "openid profile groups",
        "state": "s1",
        "code_challenge": challenge.decode().rstrip("="),
        "code_challenge_method": "S256",
    }
    with httpx.Client(base_url=provider.issuer, timeout=10) as c:
        # an unregistered redirect_uri is never redirected to
        r = c.get("/authorize", params={**params, "redirect_uri": "http://evil.example/cb"})
        assert r.status_code == 400 and "location" not in r.headers

        def code_for(user: str, password: str) -> str:
            form = c.get("/authorize", params=params)
            rid = re.search(r'name="request_id" value="([^"]+)"', form.text)
            assert rid, form.text
            r = c.post(
                "/authorize",
                data={"request_id": rid.group(1), "username": user, "password": password},
            )
            assert r.status_code == 302, r.text
            query = parse_qs(urlparse(r.headers["location"]).query)
            assert query["state"] == ["s1"]
            return query["code"][0]

        form = c.get("/authorize", params=params)
        rid = re.search(r'name="request_id" value="([^"]+)"', form.text)
        assert rid
        r = c.post("/authorize", data={"request_id": rid.group(1), "username": "alice"})
        assert r.status_code == 401 and "location" not in r.headers

        code = code_for("alice", "alice-idp-pw")
        token = {"grant_type": "authorization_code", "code": code, "redirect_uri": good}
        r = c.post("/token", data={**token, "code_verifier": verifier}, auth=(CLIENT_ID, "x"))
        assert r.status_code == 401 and r.json()["error"] == "invalid_client"
        r = c.post("/token", data={**token, "code_verifier": "wrong"}, auth=(CLIENT_ID, secret))
        assert r.status_code == 400 and "code_verifier" in r.json()["error_description"]

        code = code_for("alice", "alice-idp-pw")
        token["code"] = code
        r = c.post("/token", data={**token, "code_verifier": verifier}, auth=(CLIENT_ID, secret))
        assert r.status_code == 200, r.text
        issued = r.json()
        claims = provider.verify_id_token(issued["id_token"], CLIENT_ID)
        assert claims["preferred_username"] == "alice" and claims["groups"] == [
            "gpu-users",
            "a100-users",
        ]
        bearer = {"Authorization": f"Bearer {issued['access_token']}"}
        info = c.get("/userinfo", headers=bearer).json()
        assert info["uidNumber"] == 10001 and info["sub"] == claims["sub"]
        # a replayed code is refused and revokes what it gave
        r = c.post("/token", data={**token, "code_verifier": verifier}, auth=(CLIENT_ID, secret))
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
        assert c.get("/userinfo", headers=bearer).status_code == 401


# --------------------------------------------------------------------------- the hub


def test_oidc_login_maps_claims_groups_and_identity_then_spawns_as_that_uid(
    oauth_hub: Callable[..., Hub], provider: OIDCProvider, engine: Engine, tmp_path: Path
) -> None:
    hub = oauth_hub()
    r = login(hub, provider, "alice", "alice-idp-pw")
    assert r.status_code == 200 and urlparse(str(r.url)).path == "/hub/home", (r.url, r.text[:500])
    assert "alice" in r.text
    assert provider.count("token", "issued") == 1 and provider.count("userinfo", "ok") == 1
    assert [d["pkce"] for e, o, d in provider.events if (e, o) == ("token", "issued")] == [True]

    model = hub.user("alice")
    assert model["admin"] is False
    assert sorted(model["groups"]) == ["a100-users", "gpu-users"]
    state = model["auth_state"]
    assert (state["uid"], state["gid"]) == (10001, 5000)
    assert state["home_directory"] == "/home/alice"
    assert state["groups"] == ["a100-users", "gpu-users"]
    assert state["uid_source"] == "oauth"
    assert state["oauth_user"]["email"] == "alice@lab.example.org"
    id_claims = provider.verify_id_token(state["id_token"], CLIENT_ID)
    assert id_claims["sub"] == state["oauth_user"]["sub"]
    # auth_state is encrypted at rest: the database holds no token in clear
    db = (hub.workdir / "jupyterhub.sqlite").read_bytes()
    assert state["access_token"].encode() not in db and b"alice@lab.example.org" not in db

    # admin rights come from the groups claim, and go with it at the next login
    r = login(hub, provider, "carol", "carol-idp-pw")
    assert r.status_code == 200, r.text[:500]
    assert hub.user("carol")["admin"] is True
    with provider.editing():
        provider.users["carol"].groups.remove("hub-admins")
    assert login(hub, provider, "carol", "carol-idp-pw").status_code == 200
    assert hub.user("carol")["admin"] is False

    # the server runs as the uid:gid from the claims, in the home from homeDirectory
    r = hub.spawn("alice", OPTIONS)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")
    (container,) = containers_of(engine, hub, "alice")
    assert container.attrs["Config"]["User"] == "10001:5000"
    out = container.exec_run(["sh", "-c", 'id -u; id -g; echo "$HOME"; touch "$HOME/f"'])
    assert out.exit_code == 0, out.output
    assert out.output.decode().split() == ["10001", "5000", "/home/alice"]
    home = tmp_path / "homes" / "alice"
    st = os.stat(home)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (10001, 5000, 0o700)
    assert os.stat(home / "f").st_uid == 10001


def test_oidc_refusals(
    oauth_hub: Callable[..., Hub], provider: OIDCProvider, engine: Engine
) -> None:
    hub = oauth_hub()
    # not in an allowed group
    r = login(hub, provider, "erin", "erin-idp-pw")
    assert r.status_code == 403 and DENIED in r.text, r.text[:500]
    assert no_user(hub, "erin")
    # in the group, but no uidNumber claim: refused with the LDAP sentence
    r = login(hub, provider, "dave", "dave-idp-pw")
    assert r.status_code == 403 and NO_UID in r.text, r.text[:500]
    assert no_user(hub, "dave")
    # a root or system uid in the claims
    for uid in (0, 999):
        with provider.editing():
            provider.users["dave"].claims["uidNumber"] = uid
        r = login(hub, provider, "dave", "dave-idp-pw")
        assert r.status_code == 403 and "reserved for the system" in r.text, r.text[:500]
        assert no_user(hub, "dave")
    # a wrong password stays at the provider: no code, no hub session
    with browser() as client:
        r = login_with(client, hub, provider, "alice", "wrong")
        assert r.status_code == 401 and str(r.url).startswith(provider.issuer)
        assert not any(c.name.startswith("jupyterhub-session") for c in client.cookies.jar)
    assert no_user(hub, "alice")

    # a code and state issued to someone else's browser (login CSRF / code injection)
    issued = provider.count("token", "issued")
    with browser() as victim, httpx.Client(timeout=30) as attacker:
        page = attacker.get(f"{hub.url}/hub/oauth_login")
        assert page.status_code == 302
        authorize = page.headers["location"]
        form = attacker.get(authorize)
        rid = re.search(r'name="request_id" value="([^"]+)"', form.text)
        assert rid, form.text[:300]
        r = attacker.post(
            f"{provider.issuer}/authorize",
            data={"request_id": rid.group(1), "username": "alice", "password": "alice-idp-pw"},
        )
        callback = r.headers["location"]
        assert callback.startswith(f"{hub.url}/hub/oauth_callback?")
        r = victim.get(callback)  # the victim has no state cookie for this login
        assert r.status_code == 400 and "OAuth state" in r.text, r.text[:300]
        assert not any(c.name.startswith("jupyterhub-session") for c in victim.cookies.jar)
    assert no_user(hub, "alice")
    assert provider.count("token", "issued") == issued  # the hub never redeemed that code
    assert containers_of(engine, hub, "erin") == containers_of(engine, hub, "dave") == []


def test_identity_and_groups_follow_the_provider_when_auth_is_refreshed(
    oauth_hub: Callable[..., Hub], provider: OIDCProvider, engine: Engine
) -> None:
    """OAuthenticator rebuilds auth_state from the provider before every spawn
    (``refresh_pre_spawn``) and every ``auth_refresh_age`` seconds, without running
    ``post_auth_hook``: the identity keys must survive that and follow the claims."""
    hub = oauth_hub("c.Authenticator.auth_refresh_age = 1\n")
    with browser() as alice:
        _check_refreshes(hub, provider, engine, alice)


def _check_refreshes(hub: Hub, provider: OIDCProvider, engine: Engine, alice: httpx.Client) -> None:
    r = login_with(alice, hub, provider, "alice", "alice-idp-pw")
    assert r.status_code == 200, r.text[:500]
    assert hub.user("alice")["auth_state"]["uid"] == 10001
    with provider.editing():
        provider.users["alice"].groups.remove("a100-users")
    refresh(hub, provider, alice)
    model = hub.user("alice")
    assert model["groups"] == ["gpu-users"]
    state = model["auth_state"]
    assert (state["uid"], state["gid"], state["home_directory"]) == (10001, 5000, "/home/alice")
    assert state["groups"] == ["gpu-users"]

    r = hub.spawn("alice", OPTIONS)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")
    (container,) = containers_of(engine, hub, "alice")
    assert container.attrs["Config"]["User"] == "10001:5000"
    hub.stop_server("alice")

    # the provider drops alice's uidNumber: after her next refresh she gets no server
    with provider.editing():
        del provider.users["alice"].claims["uidNumber"]
    refresh(hub, provider, alice)
    assert hub.user("alice")["auth_state"]["uid"] is None
    r = hub.spawn("alice", OPTIONS)
    assert r.status_code == 403 and NO_UID in r.json()["message"], r.text
    assert hub.server("alice") is None and containers_of(engine, hub, "alice") == []


def refresh(hub: Hub, provider: OIDCProvider, client: httpx.Client) -> None:
    """Wait out auth_refresh_age (1 s), then make a request as the user: the hub refreshes."""
    calls = provider.count("userinfo", "ok")
    time.sleep(1.5)
    r = client.get(f"{hub.url}/hub/home")
    assert r.status_code == 200 and urlparse(str(r.url)).path == "/hub/home", r.text[:300]
    assert provider.count("userinfo", "ok") == calls + 1, "the hub did not refresh the auth"
