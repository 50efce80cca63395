"""The GPU dashboard end to end (issue 13): a real hub with the dashboard set up by
``configure(c)``, real engines, node agents in declared mode, and Debian's Chromium.

- a user logs in, finds the dashboard in the navigation bar, and sees her server's holder,
  image, since-time and idleness; a GPU the agent reports busy, then unhealthy, shows so
  within one refresh, without a reload; the free A100 has a "Start a server on this kind
  of GPU" link that opens the spawn form with the A100 preselected;
- she sees no admin action, and the hub's API and the dashboard's actions refuse her (403);
- a spawn that finds no GPU free shows in the queue (the hub's GPU queue, spawnqueue.py);
- an admin drains a node with a note (a spawn there is then refused, or waits), undrains
  it, and stops the user's server with a note, which the user reads on her dashboard;
- hostile input: an image label with HTML is shown as text (no script runs), a forged
  node name is refused, a POST without the page's XSRF token is refused;
- her JupyterLab's status bar reads her GPU ("RTX 3090 · 95 % · ..."), from the same
  agent reading (the ``jupyterhub-gpu-lab`` extension, images/lab, in the test image
  images/lab-test: the catalog's demo-cuda12 runs it here);
- screenshots at 1280x800 and at a phone's width go to artifacts/screenshots/.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import CATALOG, gpu_inventory
from tests.support.agent import AgentProcess
from tests.support.browser import chromium_page, hub_login, screenshot
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub, free_port
from tests.support.lab_image import LAB_IMAGE
from tests.support.lab_image import ensure as ensure_lab_image
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
A100 = ("NVIDIA A100-SXM4-40GB", 40960, "8.0")
PREFIX = "/services/gpu-dashboard/"
HOSTILE_LABEL = (
    'CUDA 12 <img src=x onerror="window.__jhgpuXSS=1"><script>window.__jhgpuXSS=2</script>'
)
OPTIONS = {"image": "demo-cuda12", "gpu_count": 1, "gpu_model": RTX[0], "cpu": 0.5, "mem_gib": 1}
SLOW_STARTS = "c.Spawner.http_timeout = 180\nc.Spawner.start_timeout = 180\n"
POLL = 1.0  # the dashboard's poll of the hub, and the page's of the dashboard
# from a change at an agent to the page: the agent client's cache (2.5 s), the hub API's
# snapshot (POLL), the service's poll (POLL), the page's poll (POLL), and slack
ONE_REFRESH_S = 2.5 + 3 * POLL + 5


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], dict[str, AgentProcess]]]:
    """Factory: one declared-mode agent per inventory node, all with one site secret."""
    started: list[AgentProcess] = []

    def start(inventory: list[dict[str, Any]]) -> dict[str, AgentProcess]:
        path = tmp_path / "agents-inventory.yaml"
        path.write_text(yaml.safe_dump({"nodes": inventory}))
        token, out = uuid.uuid4().hex, {}
        for node in inventory:
            agent = AgentProcess(node["name"], path, tmp_path / f"agent-{node['name']}.log")
            agent.token = token
            started.append(agent.start())
            out[node["name"]] = agent
        return out

    yield start
    for agent in started:
        agent.stop()


def dashboard_extra(work: Path) -> str:
    """Hub config: a catalog with a hostile label, an admin, named servers, and the
    dashboard through ``configure(c)`` with fast polls."""
    work.mkdir(parents=True, exist_ok=True)
    catalog = yaml.safe_load(CATALOG.read_text())
    for entry in catalog["images"]:
        if entry["slug"] == "demo-cuda12":
            entry["display_name"] = HOSTILE_LABEL
            entry["image"] = LAB_IMAGE  # with the JupyterLab extension: the GPU readout
    (work / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    settings = work / "dashboard_config.py"
    settings.write_text(
        f"c.GPUDashboard.poll_interval = {POLL}\n"
        "c.GPUDashboard.log_level = 'DEBUG'\n"
        f"c.GPUDashboard.notes_file = {str(work / 'notes.json')!r}\n"
    )
    return (
        SLOW_STARTS
        + TOKEN_ROLE_CONFIG
        + f"""
c.GPUCluster.catalog_file = {str(work / "catalog.yaml")!r}
c.Authenticator.admin_users = {{"root"}}
c.JupyterHub.allow_named_servers = True
c.GPUCluster.lab_notices_interval = 5  # her JupyterLab reads its GPU this often
from jupyterhub_gpu.hub.extensions import configure_dashboard as configure
configure(c, url="http://127.0.0.1:{free_port()}", config_file={str(settings)!r},
          snapshot_max_age={POLL})
"""
    )


def open_dashboard(page: Any, hub: Hub, user: str) -> None:
    """Log in at the hub, follow the navigation bar's link, land on the dashboard."""
    hub_login(page, hub.url, user, "any password")
    page.goto(f"{hub.url}/hub/home")
    toggler = page.locator(".navbar-toggler")
    if toggler.is_visible():  # a phone-width page folds the navigation bar: open it
        toggler.click()
    page.click("#jhgpu-dashboard-link")
    page.wait_for_selector("#jhgpu-live #jhgpu-updated")
    assert page.url.split("?")[0].endswith(PREFIX), page.url


def row(page: Any, uuid_: str) -> str:
    return " ".join(page.locator(f'tr[data-uuid="{uuid_}"]').inner_text().split())


def refreshes(page: Any) -> int:
    return int(
        page.evaluate(
            "() => Number(document.getElementById('jhgpu-dashboard').dataset.refreshes || 0)"
        )
    )


def xsrf_of(page: Any) -> str:
    return str(page.get_attribute("#jhgpu-dashboard", "data-xsrf"))


# ---------------------------------------------------------------------- the test
def test_dashboard_for_a_user_and_an_admin(
    make_hub: Callable[..., Hub], engines: list[Engine], agents: Any, tmp_path: Path
) -> None:
    node_a, node_b = engines[0], engines[2]  # test_multinode stops node-b; leave it
    inventory = [
        gpu_inventory(node_a.name, "aaaaaaaa", [RTX, RTX]),
        gpu_inventory(node_b.name, "bbbbbbbb", [A100]),
    ]
    started = agents(inventory)
    ensure_lab_image([node_a, node_b])
    hub = make_hub([node_a, node_b], inventory, dashboard_extra(tmp_path / "dash"), started)
    for name in ("alice", "root", "bob"):
        hub.create_user(name)
    r = hub.spawn("alice", OPTIONS)
    assert r.status_code in (201, 202), r.text
    server = hub.wait_ready("alice", timeout=240)
    (gpu,) = server["state"]["gpu_uuids"]
    try:
        with chromium_page(width=1280, height=800, timezone_id="Europe/Paris") as page:
            try:
                _as_user(page, hub, started[node_a.name], gpu, node_b)
            except BaseException:
                with contextlib.suppress(Exception):
                    screenshot(page, "dashboard-failure-user")
                raise
        with chromium_page(width=390, height=844) as phone:
            open_dashboard(phone, hub, "alice")
            assert phone.locator(f'tr[data-uuid="{gpu}"]').is_visible()
            screenshot(phone, "dashboard-2-user-phone")
        _api_refuses_users(hub, node_b)
        with chromium_page(width=1280, height=800) as page:
            try:
                _as_admin(page, hub, gpu, node_b)
            except BaseException:
                with contextlib.suppress(Exception):
                    screenshot(page, "dashboard-failure-admin")
                raise
        _user_reads_the_note(hub)  # one browser at a time (Playwright's sync API)
    finally:
        for name, server_name in (
            ("alice", ""),
            ("alice", "gpu"),
            ("alice", "broken"),
            ("bob", ""),
        ):
            if hub.server(name, server_name) is not None:
                hub.stop_server(name, server_name)


def _lab_readout(page: Any, hub: Hub) -> None:
    """Her JupyterLab, in a tab of its own: its status bar reads her GPU as the agent
    does now (95 % busy, nothing in its memory), its tooltip the longer words."""
    lab = page.context.new_page()
    try:
        lab.goto(f"{hub.url}/user/alice/lab/workspaces/readout?reset")
        item = lab.locator("#jupyterhub-gpu-readout")
        want = f"{RTX[0].replace('NVIDIA GeForce ', '')} · 95 % · 0.0 of 24 GiB"

        def said() -> str:
            return item.inner_text().strip() if item.count() and item.is_visible() else ""

        wait_until(
            lambda: said() == want,
            90,  # JupyterLab's first load on 2 loaded cores, then a read every 5 s
            f"her JupyterLab's status bar to read {want!r}",
            details=lambda: f"read {said()!r}; {hub.log_tail()}",
        )
        title = item.get_attribute("title") or ""
        assert title.startswith("Your server's GPUs on node "), title
        assert "95 % busy, 0.0 of 24 GiB of memory in use." in title, title
        with contextlib.suppress(Exception):  # JupyterLab's splash gone, for the picture
            lab.locator("#jupyterlab-splash").wait_for(state="detached", timeout=30_000)
        screenshot(lab, "lab-gpu-readout")
    finally:
        lab.close()
        page.bring_to_front()


def _as_user(page: Any, hub: Hub, agent: AgentProcess, gpu: str, node_b: Engine) -> None:
    open_dashboard(page, hub, "alice")
    # her server: holder, image (the hostile label, as text), since (in her own zone:
    # the browser's is Europe/Paris), activity, and what the culler will do
    mine = row(page, gpu)
    assert "alice (you)" in mine and "in use" in mine, mine
    assert re.search(r"since .*\(\d{1,2}:\d{2}( [AP]M)? (GMT\+1|CET)\)", mine), mine
    assert "UTC" not in mine and "last activity" in mine, mine
    assert "culler: unknown" not in mine and "culler: " in mine, mine
    assert page.locator("nav a.nav-link", has_text="Home").count() == 1  # the hub's bar
    assert HOSTILE_LABEL.split(" <")[0] in mine and 'onerror="window.__jhgpuXSS=1"' in mine, mine
    assert page.evaluate("() => window.__jhgpuXSS") is None  # shown, never run
    assert page.locator(f'tr[data-uuid="{gpu}"] img').count() == 0
    # idle: the agent says 0 %, so after a few readings the GPU is idle "for at least"
    wait_until(
        lambda: "GPU under 10% for at least" in row(page, gpu),
        ONE_REFRESH_S + 5,
        "the GPU's idleness on the page",
        details=hub.log_tail,
    )
    # no admin action anywhere; Stop only on her own server
    assert page.locator("form.jhgpu-drain").count() == 0
    stops = page.locator("a.jhgpu-stop-link, a.jhgpu-stop-own")
    hrefs = [stops.nth(i).get_attribute("href") or "" for i in range(stops.count())]
    assert hrefs and all("user=alice&" in h for h in hrefs), hrefs
    # the free A100 stands out, with a link that preselects it in the spawn form
    a100_row = page.locator(f'article[data-node="{node_b.name}"] tr.jhgpu-free')
    assert a100_row.count() == 1
    screenshot(page, "dashboard-1-user-1280")

    # a busy, then unhealthy GPU shows within one refresh, without a reload
    page.evaluate("() => { window.__jhgpuSamePage = true; }")
    before = refreshes(page)
    agent.set_state(gpu, utilization_pct=95)
    wait_until(
        lambda: "95%" in row(page, gpu), ONE_REFRESH_S, "95 % on the page", details=hub.log_tail
    )
    assert "GPU under 10%" not in row(page, gpu)
    _lab_readout(page, hub)
    agent.set_state(gpu, healthy=False)
    wait_until(
        lambda: "unhealthy" in row(page, gpu),
        ONE_REFRESH_S,
        "unhealthy on the page",
        details=hub.log_tail,
    )
    assert refreshes(page) > before and page.evaluate("() => window.__jhgpuSamePage") is True
    agent.set_state(gpu, utilization_pct=0, healthy=True)

    # the start link: alice's default server runs, so a new named one, A100 preselected
    a100_row.locator("a.jhgpu-start").click()
    page.wait_for_selector("#jhgpu-form")
    assert re.search(r"/hub/spawn/alice/gpu$", page.url.split("#")[0]), page.url
    assert page.eval_on_selector("#jhgpu-gpu-model", "e => e.value") == A100[0]
    assert page.eval_on_selector("#jhgpu-gpu-count", "e => e.value") == "1"
    screenshot(page, "dashboard-3-start-link-form")

    # the dashboard's admin actions refuse a user, with or without the page's token
    page.goto(f"{hub.url}{PREFIX}")
    page.wait_for_selector("#jhgpu-live #jhgpu-updated")
    xsrf = xsrf_of(page)
    stop = page.request.post(
        f"{hub.url}{PREFIX}actions/stop", form={"user": "bob", "server": "", "_xsrf": xsrf}
    )
    assert stop.status in (403, 404) and hub.server("alice") is not None
    drain = page.request.post(
        f"{hub.url}{PREFIX}actions/drain", form={"node": node_b.name, "_xsrf": xsrf}
    )
    assert drain.status == 403 and "Only admins can do this" in drain.text()
    assert hub.server("alice") is not None
    _own_servers(page, hub)


def _own_servers(page: Any, hub: Hub) -> None:
    """Issue 36: Open and Stop for one's own servers on the dashboard; a named server
    whose first start failed leaves no row on the hub's home page, one that ran does."""
    r = hub.spawn("alice", {**OPTIONS, "gpu_model": A100[0]}, server="gpu")
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice", "gpu", timeout=240)
    page.goto(f"{hub.url}{PREFIX}")
    own = page.locator('li.jhgpu-own-server[data-server="gpu"]')
    wait_until(lambda: own.count() == 1 and own.locator("a.jhgpu-open").count() == 1,
               ONE_REFRESH_S, "alice/gpu with its Open link", details=hub.log_tail)  # fmt: skip
    text = " ".join(own.inner_text().split())
    assert "alice/gpu (you)" in text and "Open" in text and "Stop" in text, text
    screenshot(page, "first-hour-dashboard-own-servers-after")
    own.locator("a.jhgpu-open").click()
    page.wait_for_url(lambda url: "/user/alice/gpu/" in url)
    page.goto(f"{hub.url}{PREFIX}")
    page.locator('li.jhgpu-own-server[data-server="gpu"] a.jhgpu-stop-own').click()
    page.wait_for_selector("#jhgpu-stop-submit")
    assert page.inner_text("h1") == "Stop alice/gpu (you)"
    assert page.locator("#jhgpu-note").count() == 0  # a note is an admin's, to someone else
    page.click("#jhgpu-stop-submit")
    page.wait_for_selector("#jhgpu-message")
    wait_until(lambda: hub.server("alice", "gpu") is None, 60, "alice/gpu to stop",
               details=hub.log_tail)  # fmt: skip
    assert hub.server("alice") is not None  # her other server runs on
    # a named server whose first start fails: refused, and gone from the home page
    failed = hub.spawn("alice", {**OPTIONS, "image": "no-such-image"}, server="broken")
    assert failed.status_code >= 400 or failed.status_code == 202, failed.text

    def home_rows() -> list[str]:
        page.goto(f"{hub.url}/hub/home")
        rows = page.locator("tr.home-server-row[data-server-name]")  # not "Add New Server"
        return [rows.nth(i).get_attribute("data-server-name") or "" for i in range(rows.count())]

    wait_until(lambda: home_rows() == ["gpu"], 30, "no row for the failed server",
               details=hub.log_tail)  # fmt: skip
    screenshot(page, "first-hour-home-after-failed-named-spawn")


def _api_refuses_users(hub: Hub, node_b: Engine) -> None:
    """The hub's GPU API: only the dashboard's service holds its scopes; users, admins
    and other services get 403."""
    for token in (hub.user_token("alice"), hub.user_token("root"), hub.token):
        headers = {"Authorization": f"token {token}"}
        r = httpx.get(f"{hub.url}/hub/api/gpu/cluster", headers=headers, timeout=30)
        assert r.status_code == 403, r.text
        r = httpx.post(
            f"{hub.url}/hub/api/gpu/nodes/{node_b.name}/drain",
            headers=headers,
            json={"note": "x"},
            timeout=30,
        )
        assert r.status_code == 403, r.text
    assert httpx.get(f"{hub.url}/hub/api/gpu/cluster", timeout=30).status_code == 403


def _as_admin(page: Any, hub: Hub, gpu: str, node_b: Engine) -> None:
    open_dashboard(page, hub, "root")
    assert "alice" in row(page, gpu)
    screenshot(page, "dashboard-4-admin-1280")
    xsrf = xsrf_of(page)
    base = f"{hub.url}{PREFIX}actions/"
    # forged requests: no token, someone else's token, a node that does not exist
    r = page.request.post(base + "drain", form={"node": node_b.name, "note": "x"})
    assert r.status == 403 and "XSRF" in r.text()
    r = page.request.post(base + "drain", form={"node": node_b.name, "_xsrf": "2|00|forged|0"})
    assert r.status == 403
    r = page.request.post(base + "drain", form={"node": "node-z<script>", "_xsrf": xsrf})
    assert r.status == 404 and "There is no node" in r.text()
    assert "node-z<script>" not in r.text() and "node-z&lt;script&gt;" in r.text()  # escaped
    r = page.request.post(base + "stop", form={"user": "alice", "server": "nope", "_xsrf": xsrf})
    assert r.status == 404
    assert hub.server("alice") is not None

    # a spawn that finds no GPU free waits in the hub's queue, and the queue shows it
    queued = hub.spawn("bob", {**OPTIONS, "gpu_count": 2})  # node-a's 2 RTX; alice has one
    assert queued.status_code == 202, queued.text
    queue = page.locator("section.jhgpu-queue")
    wait_until(
        lambda: "bob" in queue.inner_text(), ONE_REFRESH_S, "bob in the queue", details=hub.log_tail
    )
    assert f"2 GPU(s), {RTX[0]}" in " ".join(queue.inner_text().split())
    screenshot(page, "dashboard-5-admin-queue")
    hub.stop_server("bob")  # leaves the queue
    wait_until(
        lambda: "Nobody is waiting" in queue.inner_text(),
        ONE_REFRESH_S,
        "an empty queue",
        details=hub.log_tail,
    )

    # drain node-b with a note: the page says so, and the hub places nothing there
    card = page.locator(f'article[data-node="{node_b.name}"]')
    card.locator("details.jhgpu-action > summary").click()
    card.locator('input[name="note"]').fill("new power supply <b>today</b>")
    card.locator("button[type=submit]").click()
    page.wait_for_selector("#jhgpu-message")
    assert f"Node {node_b.name} is drained" in page.inner_text("#jhgpu-message")
    page.click("#jhgpu-back")
    page.wait_for_selector("#jhgpu-live #jhgpu-updated")
    state = " ".join(card.locator(".jhgpu-state").inner_text().split())
    assert state == "drained by the admin: new power supply <b>today</b>", state
    screenshot(page, "dashboard-6-admin-drained")
    # the only A100 is on the drained node: bob's spawn is refused (or, with a queue, waits)
    refused = hub.spawn("bob", {**OPTIONS, "gpu_model": A100[0]})
    if refused.status_code < 400:
        waiting = hub.server("bob")
        assert waiting is None or not (waiting.get("ready") or waiting["state"].get("node"))
        hub.stop_server("bob")
    card.locator("details.jhgpu-action > summary").click()
    card.locator("button[type=submit]").click()
    page.wait_for_selector("#jhgpu-message")
    assert f"Node {node_b.name} takes new servers again" in page.inner_text("#jhgpu-message")

    # stop alice's server with a note; she reads it on her dashboard
    page.click("#jhgpu-back")
    page.wait_for_selector("#jhgpu-live #jhgpu-updated")
    page.locator(f'tr[data-uuid="{gpu}"] a.jhgpu-stop-link').click()
    page.wait_for_selector("#jhgpu-note")
    page.fill("#jhgpu-note", "The course needs the RTX cards from 14:00")
    page.click("#jhgpu-stop-submit")
    page.wait_for_selector("#jhgpu-message")
    assert "alice" in page.inner_text("#jhgpu-message")
    wait_until(
        lambda: hub.server("alice") is None, 60, "alice's server to stop", details=hub.log_tail
    )


def _user_reads_the_note(hub: Hub) -> None:
    with chromium_page(width=1280, height=800) as user_page:
        open_dashboard(user_page, hub, "alice")
        notes = user_page.locator(".jhgpu-note").all_inner_texts()
        assert any("by an admin (root): The course needs the RTX cards" in n for n in notes), notes
        screenshot(user_page, "dashboard-7-user-reads-the-note")
