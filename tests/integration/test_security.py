"""Attacks by logged-in users on a real hub: other users' servers and models, container
settings through the REST spawn API and the form, secrets in error pages.

Users log in with a password (JupyterHub's SharedPasswordAuthenticator, so a wrong
password is refused) and use their own API tokens, created by the admin service.
"""

from __future__ import annotations

import html
import http.client
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import CATALOG, gpu_inventory
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
OPTIONS = {"image": "demo-cuda11", "gpu_count": 1, "mem_gib": 1, "cpu": 0.5}
PASSWORD = "shared-" + secrets.token_urlsafe(12)


@pytest.fixture
def hub(make_hub: Callable[..., Hub], engine: Engine, tmp_path: Path) -> Hub:
    """A hub with a password login, two GPUs, and a catalog entry whose image is missing."""
    catalog = yaml.safe_load(CATALOG.read_text())
    catalog["images"].append(
        {
            "slug": "missing-image",
            "display_name": "An image that is not on any node",
            "framework": "python",
            "framework_version": "3.11",
            "cuda_version": None,
            "image": "jupyterhub-gpu/not-there:0",
            "description": "Its spawn fails inside the spawner, after validation.",
        }
    )
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    extra = f"""
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = {PASSWORD!r}
c.GPUCluster.catalog_file = {str(path)!r}
c.GPUDockerSpawner.pull_policy = "never"
{TOKEN_ROLE_CONFIG}"""
    return make_hub([engine], [gpu_inventory(engine.name, "5ec05ec0", [RTX, RTX])], extra)


@pytest.fixture
def users(hub: Hub) -> dict[str, str]:
    """alice and bob with a token each (their own: a user token, not an admin's)."""
    tokens = {}
    for name in ("alice", "bob"):
        assert hub.create_user(name).status_code == 201
        tokens[name] = hub.user_token(name)
    return tokens


@pytest.fixture
def browser() -> Iterator[Callable[[], httpx.Client]]:
    clients: list[httpx.Client] = []

    def new() -> httpx.Client:
        clients.append(httpx.Client(follow_redirects=True, timeout=60))
        return clients[-1]

    yield new
    for c in clients:
        c.close()


def form_login(client: httpx.Client, hub: Hub, name: str, password: str) -> httpx.Response:
    page = client.get(f"{hub.url}/hub/login")
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
    assert xsrf, page.text[:500]
    data = {"username": name, "password": password, "_xsrf": xsrf.group(1)}
    return client.post(f"{hub.url}/hub/login", data=data)


def as_user(hub: Hub, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
    """A request with a user's own token (no admin token anywhere)."""
    return httpx.request(
        method,
        hub.url + path,
        headers={"Authorization": f"token {token}"},
        timeout=90,
        follow_redirects=False,
        **kw,
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


def is_server_status(r: httpx.Response) -> bool:
    """Whether ``r`` is a single-user server's /api/status answer."""
    try:
        body = r.json()
    except ValueError:
        return False
    return r.status_code == 200 and isinstance(body, dict) and "kernels" in body


# --------------------------------------------------------------------------- servers


def alice_container(engine: Engine, hub: Hub) -> Any:
    with engine.client() as client:
        (found,) = client.containers.list(
            ignore_removed=True,
            filters={"label": [f"jupyterhub-gpu.hub={hub.hub_id}", "jupyterhub-gpu.owner=alice"]}
        )
        return found


def logged_through(server: Any, hub: Hub, token: str) -> int:
    """Ask alice's server for a missing file under a fresh marker (a 404 it logs with the
    path, at WARNING) and wait until its log shows it: the offset just past that line.
    Everything the server handled before is in its log before that offset."""
    marker = f"marker-{secrets.token_hex(6)}"
    r = as_user(hub, token, "GET", f"/user/alice/api/contents/{marker}")
    assert r.status_code == 404, (r.status_code, r.text[:300])
    deadline = time.monotonic() + 30
    while (at := server.logs().find(marker.encode())) < 0:
        assert time.monotonic() < deadline, f"alice's server never logged {marker}"
        time.sleep(0.2)
    logs = server.logs()
    end = logs.find(b"\n", at)
    return len(logs) if end < 0 else end + 1


def test_users_cannot_open_each_others_servers(
    hub: Hub, users: dict[str, str], engine: Engine, browser: Callable[[], httpx.Client]
) -> None:
    r = hub.spawn("alice", OPTIONS)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")
    status = "/user/alice/api/status"

    # controls: alice reaches her server with her token and with her browser session
    assert is_server_status(as_user(hub, users["alice"], "GET", status))
    alice = browser()
    assert form_login(alice, hub, "alice", PASSWORD).status_code == 200
    r = alice.get(f"{hub.url}{status}")
    assert is_server_status(r), (r.status_code, r.url, r.text[:300])

    # bob's token: refused by alice's server
    for path in (status, "/user/alice/api/contents", "/user/alice/lab"):
        r = as_user(hub, users["bob"], "GET", path)
        assert r.status_code == 403, (path, r.status_code, r.text[:300])
    r = as_user(hub, users["bob"], "GET", status, params={"token": users["bob"]})
    assert r.status_code == 403 and not is_server_status(r)
    # bob's browser session: the hub refuses him alice's server at its OAuth step
    bob = browser()
    assert form_login(bob, hub, "bob", PASSWORD).status_code == 200
    for path in (status, "/user/alice/", "/user/alice/lab/tree"):
        r = bob.get(f"{hub.url}{path}")
        assert r.status_code == 403 and not is_server_status(r), (path, r.status_code, r.url)
    # path tricks that a proxy or the hub might resolve to alice's server: what matters is
    # that none of them reaches it. Her server logs every refused request (a 403 of its
    # own at WARNING, with the path); after the tricks, alice asks for a missing file under
    # a marker (a 404 it logs too): once the marker is in its log, any trick that reached
    # it would be logged before it.
    server = alice_container(engine, hub)
    before = logged_through(server, hub, users["alice"])  # what came before is logged
    cookie = "; ".join(f"{c.name}={c.value}" for c in bob.cookies.jar)
    for path in (
        "/user/bob/../alice/api/status",
        "/user/bob/%2e%2e/alice/api/status",
        "/user/bob/%2E%2E/alice/api/status",
        "/user/bob/..%2falice/api/status",
        "/user/bob/%2e%2e%2falice/api/status",
    ):
        # sent as written (httpx would resolve '..' itself and just ask for /user/alice/)
        conn = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=30)
        conn.request("GET", path, headers={"Cookie": cookie})
        answer = conn.getresponse()
        body = answer.read().decode(errors="replace")
        conn.close()
        assert '"started"' not in body and '"kernels"' not in body, (path, answer.status, body)
    after = logged_through(server, hub, users["alice"])
    log = server.logs()[before:after].decode(errors="replace")
    reached = [line for line in log.splitlines() if "/alice/" in line and "marker-" not in line]
    assert not reached, f"reached alice's server: {reached}"
    # nor may bob stop, start or delete alice's server or user
    for method, path in (
        ("DELETE", "/hub/api/users/alice/server"),
        ("POST", "/hub/api/users/alice/server"),
        ("POST", "/hub/api/users/alice/servers/evil"),
        ("DELETE", "/hub/api/users/alice"),
    ):
        r = as_user(hub, users["bob"], method, path)
        assert r.status_code in (403, 404), (method, path, r.status_code, r.text)
    server = hub.server("alice")
    assert server is not None and server["ready"] is True
    assert is_server_status(as_user(hub, users["alice"], "GET", status))


# --------------------------------------------------------------------------- spawn API

SMUGGLED: list[tuple[dict[str, Any], str]] = [
    ({"environment": {"LD_PRELOAD": "/tmp/x.so"}}, "environment"),
    ({"env": {"JUPYTERHUB_API_TOKEN": "stolen"}}, "environment"),
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, "environment"),
    ({"volumes": {"/": {"bind": "/host", "mode": "rw"}}}, "volume"),
    ({"mounts": [{"source": "/var/run/docker.sock", "target": "/d.sock"}]}, "mount"),
    ({"binds": ["/etc:/host-etc"]}, "mount"),
    ({"devices": ["/dev/nvidia0"]}, "device"),
    ({"user": "0:0"}, "user"),
    ({"uid": 0}, "user"),
    ({"gid": 0}, "user"),
    ({"container_user": "root"}, "unknown option"),
    ({"privileged": True}, "privilege"),
    ({"cap_add": ["SYS_ADMIN"]}, "privilege"),
    ({"cmd": ["sh", "-c", "id"]}, "command"),
    ({"entrypoint": "/bin/sh"}, "command"),
    ({"args": ["--allow-root"]}, "command"),
    ({"image": "alpine:latest"}, "catalog"),
    ({"image": "jupyterhub-gpu/singleuser-test:6.1.1"}, "catalog"),  # the ref behind a slug
    ({"image": "docker.io/library/ubuntu@sha256:" + "0" * 64}, "catalog"),
    ({"image_ref": "alpine:latest"}, "image reference"),
    ({"network_mode": "host"}, "container settings"),
    ({"extra_host_config": {"privileged": True}}, "container settings"),
    ({"image": {"$ne": ""}}, "single value"),
]


def one_sentence(message: str) -> bool:
    """One sentence for a person: capitalised, ends with a full stop, no second sentence,
    no line breaks or traceback."""
    return (
        bool(message)
        and message[0].isupper()
        and message.endswith(".")
        and "\n" not in message
        and "Traceback" not in message
        and not re.search(r"[.!?] +[A-Z]", message)
        and len(message) < 300
    )


def test_users_cannot_set_container_settings_through_the_api(
    hub: Hub, users: dict[str, str], engine: Engine
) -> None:
    results: dict[str, str] = {}
    for options, fragment in SMUGGLED:
        r = as_user(
            hub, users["bob"], "POST", "/hub/api/users/bob/server", json={**OPTIONS, **options}
        )
        label = repr(options)
        message = r.json().get("message", "") if r.status_code < 500 else r.text
        results[label] = f"{r.status_code}: {message}"
        assert r.status_code == 400, results[label]
        assert fragment.lower() in message.lower(), results[label]
        assert one_sentence(message), results[label]
        assert hub.server("bob") is None, label
        assert containers_of(engine, hub, "bob") == [], label
    # a body that is no object at all: JupyterHub's own refusal
    r = as_user(hub, users["bob"], "POST", "/hub/api/users/bob/server", json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["message"], r.text
    assert hub.server("bob") is None and containers_of(engine, hub, "bob") == []
    print("\n".join(f"{k} -> {v}" for k, v in results.items()))
    # nothing is held: both GPUs are free for bob's honest request
    r = as_user(hub, users["bob"], "POST", "/hub/api/users/bob/server", json={**OPTIONS})
    assert r.status_code in (201, 202), r.text
    body = {**OPTIONS, "gpu_count": 1}
    assert hub.spawn("alice", body).status_code in (201, 202)
    hub.wait_ready("bob")
    hub.wait_ready("alice")
    (container,) = containers_of(engine, hub, "bob")
    assert container.attrs["Config"]["User"] == "1000:100"


def test_spawn_form_refuses_smuggled_fields(
    hub: Hub, users: dict[str, str], engine: Engine, browser: Callable[[], httpx.Client]
) -> None:
    bob = browser()
    assert form_login(bob, hub, "bob", PASSWORD).status_code == 200
    form = bob.get(f"{hub.url}/hub/spawn/bob")
    assert form.status_code == 200, form.text[:300]
    action = re.search(r'action="([^"]*_xsrf=[^"]*)"', form.text)  # the form's own URL
    assert action, form.text[:500]
    fields = {"image": "demo-cuda11", "gpu_count": "1", "volumes": "/:/host"}
    r = bob.post(hub.url + html.unescape(action.group(1)), data=fields)
    assert r.status_code == 400, (r.status_code, r.text[-800:])
    assert "mounting volumes or choosing devices" in r.text.lower(), r.text[-800:]
    assert "Traceback" not in r.text
    assert hub.server("bob") is None
    assert containers_of(engine, hub, "bob") == []


# --------------------------------------------------------------------------- user models


def test_a_users_token_cannot_read_or_change_other_users(hub: Hub, users: dict[str, str]) -> None:
    bob = users["bob"]
    # control: bob's token works for bob
    r = as_user(hub, bob, "GET", "/hub/api/users/bob")
    assert r.status_code == 200 and r.json()["name"] == "bob"
    r = as_user(hub, bob, "GET", "/hub/api/user")
    assert r.status_code == 200 and r.json()["name"] == "bob"

    for path in ("/hub/api/users/alice", "/hub/api/users/alice/tokens"):
        r = as_user(hub, bob, "GET", path)
        assert r.status_code in (403, 404), (path, r.status_code, r.text)
        assert users["alice"] not in r.text and '"servers"' not in r.text
    r = as_user(hub, bob, "GET", "/hub/api/users")
    assert r.status_code == 403 and "list:users" in r.text, r.text
    tokens_before = hub.api("GET", "/users/alice/tokens").json()["api_tokens"]
    r = as_user(hub, bob, "POST", "/hub/api/users/alice/tokens", json={"note": "steal"})
    assert r.status_code in (403, 404), r.text
    assert hub.api("GET", "/users/alice/tokens").json()["api_tokens"] == tokens_before
    # no privilege escalation through bob's own model, groups, or a new user
    for method, path, body in (
        ("PATCH", "/hub/api/users/bob", {"admin": True}),
        ("PATCH", "/hub/api/users/bob", {"name": "alice"}),
        ("POST", "/hub/api/groups/admins", {}),
        ("POST", "/hub/api/users/mallory", {}),
    ):
        r = as_user(hub, bob, method, path, json=body)
        assert r.status_code in (403, 404), (method, path, body, r.status_code, r.text)
    # a token of his own with more than he holds
    r = as_user(hub, bob, "POST", "/hub/api/users/bob/tokens", json={"scopes": ["admin:users"]})
    assert r.status_code == 400 and "not held by User bob" in r.json()["message"], r.text
    for token in hub.api("GET", "/users/bob/tokens").json()["api_tokens"]:
        assert "admin:users" not in token["scopes"], token
    assert hub.user("bob")["admin"] is False
    assert hub.api("GET", "/users/mallory").status_code == 404


# --------------------------------------------------------------------------- secrets


def test_secrets_never_appear_in_error_pages(
    hub: Hub, users: dict[str, str], engine: Engine, browser: Callable[[], httpx.Client]
) -> None:
    wrong = "wrong-" + secrets.token_urlsafe(12)
    bogus = secrets.token_hex(16)
    pages: dict[str, httpx.Response] = {}

    anon = browser()
    pages["wrong password"] = form_login(anon, hub, "alice", wrong)
    assert pages["wrong password"].status_code == 403
    pages["bogus token"] = as_user(hub, bogus, "GET", "/hub/api/user")
    assert pages["bogus token"].status_code == 403
    pages["bogus token in URL"] = httpx.get(f"{hub.url}/hub/api/user?token={bogus}", timeout=30)
    pages["bob's token on alice"] = as_user(hub, users["bob"], "GET", "/hub/api/users/alice")
    pages["bob's token, bad option"] = as_user(
        hub, users["bob"], "POST", "/hub/api/users/bob/server", json={"env": {"A": "b"}}
    )
    # a spawn that fails deep inside the spawner (the image is on no node)
    r = as_user(
        hub,
        users["bob"],
        "POST",
        "/hub/api/users/bob/server",
        json={"image": "missing-image", "gpu_count": 0},
    )
    assert r.status_code == 503 and "not on node" in r.json()["message"], r.text
    pages["failed spawn (API)"] = r
    bob = browser()
    assert form_login(bob, hub, "bob", PASSWORD).status_code == 200
    form = bob.get(f"{hub.url}/hub/spawn/bob")
    action = re.search(r'action="([^"]*_xsrf=[^"]*)"', form.text)
    assert action, form.text[:500]
    r = bob.post(
        hub.url + html.unescape(action.group(1)),
        data={"image": "missing-image", "gpu_count": "0"},
    )
    assert "not on node" in r.text, (r.status_code, r.text[-800:])  # the page says why
    pages["failed spawn (form)"] = r
    pages["failed spawn (pending page)"] = bob.get(f"{hub.url}/hub/spawn-pending/bob")
    pages["failed spawn (progress)"] = bob.get(f"{hub.url}/hub/api/users/bob/server/progress")
    pages["missing page"] = bob.get(f"{hub.url}/hub/nothing-here")
    pages["other user's page"] = bob.get(f"{hub.url}/hub/spawn/alice")
    assert pages["other user's page"].status_code in (403, 404)

    cookie_secret = (hub.workdir / "cookie_secret").read_text().strip()
    known = {
        "the shared password": PASSWORD,
        "the wrong password": wrong,
        "the bogus token": bogus,
        "alice's token": users["alice"],
        "bob's token": users["bob"],
        "the admin token": hub.token,
        "the cookie secret": cookie_secret,
    }
    for kind, page in pages.items():
        print(f"{kind}: HTTP {page.status_code}")
        for what, secret in known.items():
            assert secret not in page.text, f"{what} appears in the {kind} page"
            assert all(secret not in v for v in page.headers.values()), (what, kind)
    log = hub.log_path.read_text(errors="replace")
    for what, secret in known.items():
        assert secret not in log, f"{what} appears in the hub log"
