"""The dashboard service's pages and actions, in process: the real tornado application on a
Unix socket (no network), a fake hub behind ``httpx.MockTransport`` (injected as
``http_client``), and the hub's own ``HubOAuth`` whose one network call, asking the hub who
a token belongs to (``user_for_token``), answers from a table. Cookies, XSRF tokens and
their checks are JupyterHub's and tornado's own."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from jupyterhub.services.auth import HubOAuth
from markupsafe import escape
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_unix_socket
from tornado.web import create_signed_value
from traitlets import Dict

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.services.dashboard.app import GPUDashboard
from jupyterhub_gpu.services.dashboard.handlers import (
    ADMINS_ONLY,
    NO_ACCESS,
    NOT_SHOWN,
    NOT_YOURS,
    STALE_FORM,
    make_app,
)

pytestmark = pytest.mark.unit

HUB_API = "http://hub.test/hub/api"
PREFIX = "/services/gpu-dashboard/"
SERVICE_TOKEN = "service-token-never-shown"
SECRET = b"s" * 32
ACCESS = "access:services!service=gpu-dashboard"
USERS = {
    "tok-alice": {"kind": "user", "name": "alice", "admin": False, "scopes": [ACCESS]},
    "tok-root": {"kind": "user", "name": "root", "admin": True, "scopes": [ACCESS]},
    "tok-nobody": {"kind": "user", "name": "nobody", "admin": False, "scopes": []},
}
XSS = '<img src=x onerror="alert(1)">'


class TableHubAuth(HubOAuth):
    """JupyterHub's HubOAuth, asking a table instead of the hub who a token belongs to."""

    tokens = Dict()

    def user_for_token(
        self, token: str, use_cache: bool = True, session_id: str = "", *, sync: bool = True
    ) -> Any:
        model = self.tokens.get(token)
        if sync:
            return model

        async def answer() -> Any:
            return model

        return answer()


def cluster_payload() -> dict[str, Any]:
    gpu = {
        "index": 0,
        "model": "NVIDIA GeForce RTX 3090",
        "label": "RTX 3090",
        "memory_mib": 24576,
        "memory_used_mib": 0,
        "utilization_pct": 0.0,
        "temperature_c": None,
        "healthy": True,
        "orphan": False,
    }
    server = {
        "ready": True,
        "pending": None,
        "image": "demo",
        "cull_at": None,
        "started": "2026-01-01T10:00:00+00:00",
        "last_activity": "2026-01-01T11:00:00+00:00",
    }
    return {
        "version": 1,
        "generated_at": "2026-01-01T12:00:00+00:00",
        "fresh": True,
        "hub_prefix": "/hub/",
        "named_servers": False,
        "named_server_limit": 0,
        "nodes": [
            {
                "name": "node-a",
                "state": "up",
                "reachable": True,
                "schedulable": True,
                "drained_by": None,
                "drain_note": "",
                "driver": "550",
                "cuda": "12.4",
                "labels": {},
                "gpus": [
                    {**gpu, "uuid": "GPU-0", "status": "held", "holder": "alice/train"},
                    {**gpu, "uuid": "GPU-1", "status": "held", "holder": f"bob/{XSS}"},
                    {**gpu, "uuid": "GPU-2", "status": "free", "holder": None},
                ],
            },
        ],
        "servers": [
            {
                **server,
                "key": "alice/train",
                "user": "alice",
                "server": "train",
                "node": "node-a",
                "gpus": ["GPU-0"],
                "image_name": "Demo",
            },
            {
                **server,
                "key": f"bob/{XSS}",
                "user": "bob",
                "server": XSS,
                "node": "node-a",
                "gpus": ["GPU-1"],
                "image_name": XSS,
            },
        ],
        "models": [
            {
                "model": "NVIDIA GeForce RTX 3090",
                "label": "RTX 3090",
                "total": 3,
                "free": 1,
                "memory_mib": 24576,
            }
        ],
        "totals": {"nodes": 1, "nodes_up": 1, "gpus": 3, "free": 1, "held": 2},
        "queue": [],
        "reservations": [],
    }


def job(job_id: str, user: str) -> dict[str, Any]:
    return {
        "id": job_id, "user": user, "name": f"train-{user}", "state": "running",
        "sentence": "Running.", "command": ["python", "train.py"], "image": "demo",
        "gpus": 1, "gpu_model": "", "share": "", "node": "node-a",
        "submitted_at": time.time() - 120, "started_at": time.time() - 60, "ended_at": None,
        "exit_code": None, "time_limit_s": 3600.0, "array": "", "array_id": "",
        "array_index": None, "requeue": False, "restarts": 0, "workdir": "/home/" + user,
        "output": f"/home/{user}/jobs/{job_id}/output.log",
    }  # fmt: skip


JOBS = [job("7", "alice"), job("8", "bob")]


@dataclass
class FakeHub:
    """The hub API as the dashboard uses it; every request is kept."""

    payload: dict[str, Any] = field(default_factory=cluster_payload)
    down: bool = False
    requests: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if self.down:
            return httpx.Response(500, json={"message": "Internal Server Error"})
        if request.method == "GET" and path == "/hub/api/gpu/cluster":
            return httpx.Response(200, json=self.payload)
        if request.method == "DELETE" and path.startswith("/hub/api/users/"):
            return httpx.Response(204)
        if path.startswith("/hub/api/gpu/jobs"):
            return self.jobs(request, path)
        match = re.fullmatch(r"/hub/api/gpu/nodes/([^/]+)/drain", path)
        if match and request.method in ("POST", "DELETE"):
            drained = request.method == "POST"
            return httpx.Response(
                200,
                json={
                    "node": match[1],
                    "drained": drained,
                    "message": f"Node {match[1]} drained={drained}.",
                },
            )
        return httpx.Response(404, json={"message": "Not found"})

    def jobs(self, request: httpx.Request, path: str) -> httpx.Response:
        """The job API as the hub answers it: by the caller's token (alice's own jobs;
        root, an admin, everyone's with ?all=1; the service's token holds no job right)."""
        who = {"token tok-alice": "alice", "token tok-root": "root"}.get(
            request.headers.get("Authorization", "")
        )
        if who is None:
            return httpx.Response(403, json={"message": "Action is not authorized"})
        everyone = who == "root" and request.url.params.get("all") == "1"
        mine = [j for j in JOBS if everyone or j["user"] == who]
        if request.method == "GET" and path == "/hub/api/gpu/jobs":
            return httpx.Response(200, json={"jobs": mine})
        match = re.fullmatch(r"/hub/api/gpu/jobs/([0-9_]+)(/logs)?", path)
        job = next((j for j in mine if match and j["id"] == match[1]), None)
        if job is None:
            return httpx.Response(404, json={"message": "You have no job."})
        if match and match[2]:
            text = f"step 1\n<b>{job['user']}</b> loss 0.5\n"
            return httpx.Response(200, json={"offset": 0, "text": text, "done": False})
        if request.method == "DELETE":
            return httpx.Response(200, json={"jobs": [{**job, "state": "cancelled"}]})
        return httpx.Response(405)

    def actions(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.method != "GET"]


@dataclass
class World:
    dashboard: GPUDashboard
    hub: FakeHub
    auth: TableHubAuth
    socket: str
    tmp: Path

    def browser(self, token: str | None = None) -> httpx.AsyncClient:
        """A browser: a cookie jar, logged in (the OAuth cookie) when ``token`` is given."""
        client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=self.socket), base_url="http://dash.test"
        )
        if token:
            value = create_signed_value(SECRET, self.auth.cookie_name, token).decode()
            client.cookies.set(self.auth.cookie_name, value, domain="dash.test")
        return client


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    hub = FakeHub()
    auth = TableHubAuth(
        api_url=HUB_API,
        api_token=SERVICE_TOKEN,
        oauth_client_id="service-gpu-dashboard",
        access_scopes={ACCESS},
        base_url="/",
        tokens=USERS,
        hub_host="http://hub.test",
        hub_prefix="/hub/",
    )
    dashboard = GPUDashboard(
        api_url=HUB_API,
        api_token=SERVICE_TOKEN,
        service_prefix=PREFIX,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(hub)),
        hub_auth=auth,
        notes_file=str(tmp_path / "notes.json"),
        accounting_url=f"sqlite:///{tmp_path / 'accounting.sqlite'}",
    )
    await dashboard.poll_once()
    server = HTTPServer(make_app(dashboard, cookie_secret=SECRET))
    path = str(tmp_path / "dashboard.sock")
    server.add_socket(bind_unix_socket(path))
    yield World(dashboard, hub, auth, path, tmp_path)
    server.stop()


def said(response: httpx.Response, status: int, sentence: str) -> bool:
    """The answer has this status and says this sentence (escaped, as on a page)."""
    return response.status_code == status and str(escape(sentence)) in response.text


async def open_page(browser: httpx.AsyncClient) -> tuple[httpx.Response, str]:
    """The page, and the XSRF token its forms carry (the page set the cookie it matches)."""
    page = await browser.get(PREFIX)
    assert page.status_code == 200, page.text
    token = re.search(r'data-xsrf="([^"]+)"', page.text)
    assert token, page.text[:2000]
    return page, token[1]


# ---------------------------------------------------------------------- pages
async def test_without_login_the_page_sends_you_to_the_hub_and_the_rest_refuses(
    world: World,
) -> None:
    async with world.browser() as browser:
        page = await browser.get(PREFIX)
        assert page.status_code == 302
        assert page.headers["location"].startswith("http://hub.test/hub/api/oauth2/authorize?")
        for path in ("live", "api/cluster"):
            r = await browser.get(PREFIX + path)
            assert r.status_code == 403 and "reload the page to log in" in r.text
    async with world.browser("tok-nobody") as browser:  # a token without access to the service
        assert (await browser.get(PREFIX + "live")).status_code == 403
        assert said(await browser.get(PREFIX), 403, NO_ACCESS)


async def test_the_page_for_a_user_and_for_an_admin(world: World) -> None:
    async with world.browser("tok-alice") as browser:
        page, _ = await open_page(browser)
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert page.headers["cache-control"] == "no-store"
        assert (
            "alice/train (you)" in page.text and "Start a server on this kind of GPU" in page.text
        )
        assert "actions/drain" not in page.text  # no admin action
        # her own server has its Stop; nobody else's does
        assert set(re.findall(r"actions/stop\?user=([^&\"]+)", page.text)) == {"alice"}
        assert XSS not in page.text and "&lt;img src=x" in page.text
        assert SERVICE_TOKEN not in page.text
        static = await browser.get(PREFIX + "static/dashboard.js")
        assert static.status_code == 200 and "X-XSRFToken" in static.text
    async with world.browser("tok-root") as browser:
        page, _ = await open_page(browser)
        assert "actions/stop?user=alice&amp;server=train" in page.text
        assert 'action="/services/gpu-dashboard/actions/drain"' in page.text


async def test_names_are_hidden_from_users_when_the_site_says_so(world: World) -> None:
    world.dashboard.show_names = False
    async with world.browser("tok-alice") as browser:
        page, xsrf = await open_page(browser)
        live = await browser.get(
            PREFIX + "live", headers={"Sec-Fetch-Mode": "cors", "X-XSRFToken": xsrf}
        )
        api = await browser.get(
            PREFIX + "api/cluster", headers={"Sec-Fetch-Mode": "cors", "X-XSRFToken": xsrf}
        )
    assert api.status_code == 200 and live.status_code == 200
    for text in (page.text, live.text, api.text):
        assert "bob" not in text and "alice/train" in text
    assert json.loads(api.text)["servers"][1]["hidden"] is True
    async with world.browser("tok-root") as browser:
        page, _ = await open_page(browser)
        assert "bob" in page.text


async def test_live_updates_need_the_pages_xsrf_token(world: World) -> None:
    async with world.browser("tok-alice") as browser:
        _, xsrf = await open_page(browser)
        refused = await browser.get(PREFIX + "live", headers={"Sec-Fetch-Mode": "cors"})
        assert refused.status_code == 403
        world.hub.payload["nodes"][0]["gpus"][2]["status"] = "held"  # the next poll shows it
        await world.dashboard.poll_once()
        live = await browser.get(
            PREFIX + "live", headers={"Sec-Fetch-Mode": "cors", "X-XSRFToken": xsrf}
        )
    assert live.status_code == 200 and live.text.lstrip().startswith("<header")
    assert 'class="jhgpu-gpu jhgpu-free"' not in live.text and "<html" not in live.text


# ---------------------------------------------------------------------- actions
async def test_actions_refuse_forged_requests_users_and_unknown_names(world: World) -> None:
    async with world.browser("tok-root") as browser:
        await open_page(browser)
        forged = await browser.post(
            PREFIX + "actions/stop", data={"user": "alice", "server": "train"}
        )
        assert said(forged, 403, STALE_FORM)
        wrong = await browser.post(
            PREFIX + "actions/drain", data={"node": "node-a", "_xsrf": "2|forged|token"}
        )
        assert said(wrong, 403, STALE_FORM)
    async with world.browser("tok-alice") as browser:
        _, xsrf = await open_page(browser)
        as_user = await browser.post(
            PREFIX + "actions/stop", data={"user": "bob", "server": XSS, "_xsrf": xsrf}
        )
        assert said(as_user, 403, NOT_YOURS)
        confirm = await browser.get(PREFIX + "actions/stop", params={"user": "bob", "server": XSS})
        assert confirm.status_code == 403
        drain = await browser.post(PREFIX + "actions/drain", data={"node": "node-a", "_xsrf": xsrf})
        assert said(drain, 403, ADMINS_ONLY)
    async with world.browser("tok-root") as browser:
        _, xsrf = await open_page(browser)
        unknown = await browser.post(
            PREFIX + "actions/stop", data={"user": "alice", "server": "other", "_xsrf": xsrf}
        )
        assert said(unknown, 404, NOT_SHOWN)
        node = await browser.post(
            PREFIX + "actions/drain", data={"node": "<b>node-z</b>", "note": "x", "_xsrf": xsrf}
        )
        assert said(node, 404, "There is no node '<b>node-z</b>' in the cluster")
        long = await browser.post(
            PREFIX + "actions/drain", data={"node": "node-a", "note": "x" * 501, "_xsrf": xsrf}
        )
        assert long.status_code == 400 and "keep it to 500" in long.text
    assert world.hub.actions() == []  # nothing reached the hub


async def test_an_admin_stops_a_server_with_a_note_its_owner_reads(world: World) -> None:
    async with world.browser("tok-root") as browser:
        _, xsrf = await open_page(browser)
        confirm = await browser.get(PREFIX + "actions/stop", params={"user": "bob", "server": XSS})
        assert confirm.status_code == 200 and XSS not in confirm.text
        assert 'name="note"' in confirm.text and f'value="{xsrf}"' in confirm.text
        done = await browser.post(
            PREFIX + "actions/stop",
            data={
                "user": "alice",
                "server": "train",
                "note": "The course needs the GPUs",
                "_xsrf": xsrf,
            },
        )
    assert done.status_code == 200 and "Server alice/train is stopped." in done.text
    (stop,) = world.hub.actions()
    assert (stop.method, stop.url.path) == ("DELETE", "/hub/api/users/alice/servers/train")
    assert stop.headers["Authorization"] == f"token {SERVICE_TOKEN}"
    async with world.browser("tok-alice") as browser:
        page, _ = await open_page(browser)
    assert "by an admin (root): The course needs the GPUs" in page.text


async def test_an_admin_drains_and_undrains_a_node(world: World) -> None:
    async with world.browser("tok-root") as browser:
        _, xsrf = await open_page(browser)
        drained = await browser.post(
            PREFIX + "actions/drain", data={"node": "node-a", "note": "new PSU", "_xsrf": xsrf}
        )
        undrained = await browser.post(
            PREFIX + "actions/drain", data={"node": "node-a", "action": "undrain", "_xsrf": xsrf}
        )
    assert drained.status_code == 200 and "Node node-a drained=True." in drained.text
    assert undrained.status_code == 200 and "drained=False" in undrained.text
    drain, undrain = world.hub.actions()
    assert (drain.method, drain.url.path) == ("POST", "/hub/api/gpu/nodes/node-a/drain")
    assert json.loads(drain.content) == {"note": "new PSU", "by": "root"}
    assert (undrain.method, undrain.url.params["by"]) == ("DELETE", "root")


# ---------------------------------------------------------------------- outages, usage, config
async def test_a_hub_outage_keeps_the_last_view_and_says_so(world: World) -> None:
    world.hub.down = True
    await world.dashboard.poll_once()
    async with world.browser("tok-alice") as browser:
        page, _ = await open_page(browser)
    assert "The hub refused the cluster view (HTTP 500)" in page.text
    assert "The figures below are from" in page.text and "alice/train" in page.text


async def test_a_malformed_cluster_view_is_refused_naming_the_field(world: World) -> None:
    world.hub.payload["nodes"][0]["gpus"][2]["status"] = "lost"
    await world.dashboard.poll_once()
    async with world.browser("tok-alice") as browser:
        page, _ = await open_page(browser)
    assert "The hub&#39;s cluster view is malformed (cluster payload: nodes[0].gpus[2]" in page.text
    assert "The figures below are from" in page.text and "alice/train" in page.text


async def test_usage_is_read_only_and_shown_once_the_hub_made_the_tables(world: World) -> None:
    db = world.tmp / "accounting.sqlite"
    await world.dashboard.load_usage()
    assert not db.exists()  # never created by a reader
    async with world.browser("tok-alice") as browser:
        page, _ = await open_page(browser)
    assert "No usage recorded yet" in page.text
    store = AccountingStore(f"sqlite:///{db}")
    store.upgrade()  # what the hub does
    now = datetime.now(timezone.utc)
    record = AllocationRecord(
        "a1",
        "alice",
        "train",
        "vision",
        "node-a",
        ("GPU-0",),
        "NVIDIA GeForce RTX 3090",
        "demo",
        "12.1",
        started_at=now - timedelta(hours=2),
    )
    store.open(record)
    store.close("a1", now - timedelta(hours=1), EndReason.STOPPED)
    store.open(
        AllocationRecord(
            "a2",
            "bob",
            "",
            "physics",
            "node-a",
            ("GPU-1", "GPU-2"),
            "NVIDIA GeForce RTX 3090",
            "demo",
            "12.1",
        )
    )
    await world.dashboard.load_usage()
    async with world.browser("tok-alice") as browser:
        page, _ = await open_page(browser)
    assert "No usage recorded yet" not in page.text
    assert 'id="jhgpu-chart-groups"' in page.text and "physics" in page.text
    assert 'id="jhgpu-my-usage">1.0 GPU-hours allocated, 0.0 used (0%).' in page.text


def test_the_service_refuses_to_start_without_its_hub_token() -> None:
    with pytest.raises(ConfigError, match="no hub token"):
        GPUDashboard(api_token="").check_config()
    with pytest.raises(ConfigError, match="end with '/'"):
        GPUDashboard(api_token="t", service_prefix="/services/x").check_config()


async def test_jobs_are_read_and_cancelled_with_the_viewers_own_login(world: World) -> None:
    world.dashboard.show_jobs = True
    async with world.browser("tok-alice") as browser:
        page, xsrf = await open_page(browser)
        assert 'data-job="7"' in page.text and 'data-job="8"' not in page.text
        assert "&lt;b&gt;alice&lt;/b&gt; loss 0.5" in page.text and "<b>alice" not in page.text
        assert "Your jobs" in page.text
        forged = await browser.post(PREFIX + "actions/cancel-job", data={"job": "8", "_xsrf": xsrf})
        bad = await browser.post(PREFIX + "actions/cancel-job", data={"job": "../x", "_xsrf": xsrf})
        done = await browser.post(PREFIX + "actions/cancel-job", data={"job": "7", "_xsrf": xsrf})
    assert forged.status_code == 404 and "You have no job 8" in forged.text
    assert bad.status_code == 400
    assert done.status_code == 200 and "Job 7 is cancelled." in done.text
    calls = [r for r in world.hub.requests if r.url.path.startswith("/hub/api/gpu/jobs")]
    assert calls and all(r.headers["Authorization"] == "token tok-alice" for r in calls)
    assert [r.url.path for r in calls if r.method == "DELETE"] == [
        "/hub/api/gpu/jobs/8", "/hub/api/gpu/jobs/7"
    ]  # fmt: skip
    async with world.browser("tok-root") as browser:
        page, _ = await open_page(browser)
    assert "Jobs (everyone&#39;s)" in page.text
    assert 'data-job="7"' in page.text and 'data-job="8"' in page.text
    world.dashboard.show_jobs = False
    async with world.browser("tok-alice") as browser:
        page, _ = await open_page(browser)
    assert "jhgpu-jobs" not in page.text
