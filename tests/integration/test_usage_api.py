"""The usage API (issue 11) and each user's usage page (issue 36): a real hub runs the
gpu-accounting service (``configure_usage``) over a real SQLite database; admins read
everyone's usage, a user only their own, with their own token or, in Chromium, on the page
the hub's bar links to ("My usage"); bad input gets a sentence. No engine is needed: the
records are written by the store, as the hub's recorder writes them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from tests.support.browser import chromium_page, hub_login, screenshot
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub, free_port

pytestmark = pytest.mark.integration

HOSTILE = "x' OR '1'='1'; DROP TABLE jhgpu_allocations; --"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('usage') / 'acc.sqlite'}"
    store = AccountingStore(url)
    store.upgrade()
    t = datetime(2026, 11, 10, 9, tzinfo=timezone.utc)
    for i, (user, group, gpus, hours) in enumerate(
        [("alice", "ml", 2, 1.5), ("bob", "vision", 1, 2.0), ("alice", "ml", 1, 0.25)]
    ):
        uuids = tuple(f"GPU-{i}-{k}" for k in range(gpus))
        store.open(AllocationRecord(f"a{i}", user, "", group, "n1", uuids, "A100", "pt", "12.1",
                                    started_at=t))  # fmt: skip
        store.close(f"a{i}", t + timedelta(hours=hours), EndReason.STOPPED)
    store.engine.dispose()
    return url


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, db: str) -> Iterator[Hub]:
    port = free_port()
    extra = (
        TOKEN_ROLE_CONFIG
        + f"""
from jupyterhub_gpu.hub.extensions import configure_usage
configure_usage(c, url="http://127.0.0.1:{port}", accounting_url={db!r})
c.Authenticator.admin_users = {{"carol"}}
"""
    )
    h = Hub(tmp_path_factory.mktemp("usage-hub"), extra)
    h.start()
    try:
        for name in ("alice", "bob"):  # carol, an admin, exists from the start
            assert h.create_user(name).status_code == 201
        yield h
    finally:
        h.stop()


def usage(hub: Hub, token: str | None, **params: str) -> httpx.Response:
    headers = {"Authorization": f"token {token}"} if token else {}
    url = f"{hub.url}/services/gpu-accounting/api/usage"
    return httpx.get(url, params=params, headers=headers, timeout=30, follow_redirects=False)


def test_admins_see_everyone_users_only_themselves(hub: Hub) -> None:
    period = {"from": "2026-11-01", "to": "2026-12-01"}
    admin = hub.user_token("carol")
    r = usage(hub, admin, by="user", **period)
    assert r.status_code == 200, r.text
    got = {row["user"]: row["gpu_hours_allocated"] for row in r.json()["rows"]}
    assert got == {"alice": 3.25, "bob": 2.0}
    r = usage(hub, admin, by="group", group="vision", **period)
    assert [row["group"] for row in r.json()["rows"]] == ["vision"]

    alice = hub.user_token("alice")
    r = usage(hub, alice, by="group", **period)
    assert r.status_code == 200 and r.json()["rows"] == [
        {"group": "ml", "allocations": 2, "gpu_hours_allocated": 3.25, "gpu_hours_used": 0.0,
         "efficiency": 0.0, "reclaimed_idle_gpu_hours": 0.0}
    ]  # fmt: skip
    for other in ({"user": "bob"}, {"group": "vision"}, {"user": "carol"}):
        r = usage(hub, alice, **other, **period)
        assert r.status_code == 403 and "only your own usage" in r.json()["message"], r.text
        assert "rows" not in r.text
    r = usage(hub, alice, format="csv", by="user", **period)
    assert r.status_code == 200 and r.text.splitlines()[1].startswith("alice,2,3.25")


def test_no_token_or_a_token_without_the_access_scope_reads_nothing(hub: Hub) -> None:
    r = usage(hub, None)
    assert r.status_code in (302, 403) and "gpu_hours" not in r.text
    r = hub.api("POST", "/users/bob/tokens", json={"scopes": ["read:users:name!user=bob"]})
    assert r.status_code == 201, r.text
    r = usage(hub, r.json()["token"])
    assert r.status_code == 403 and "gpu_hours" not in r.text
    r = usage(hub, "not-a-token")
    assert r.status_code in (302, 403) and "gpu_hours" not in r.text


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"from": "2026-12-01", "to": "2026-11-01"}, "inverted"),
        ({"from": "someday"}, "is not a date"),
        ({"from": "0001-01-01"}, "out of range"),
        ({"by": "user,salary"}, "Can't group by salary"),
        ({"per": "decade"}, "Unknown period size"),
        ({"group": "nobody"}, "No allocation of group 'nobody' was ever recorded"),
        ({"user": HOSTILE}, "No allocation of user"),
        ({"sort": "1; DROP"}, "Unknown parameter 'sort'"),
        ({"format": "xml"}, "Unknown format"),
    ],
)
def test_bad_input_gets_a_sentence(hub: Hub, params: dict[str, str], says: str) -> None:
    r = usage(hub, hub.user_token("carol"), **params)
    assert r.status_code == 400 and says in r.json()["message"], r.text
    r = usage(hub, hub.user_token("carol"), **{"from": "2026-11-01", "to": "2026-12-01"})
    assert r.status_code == 200  # the table is intact, with its three allocations
    assert sum(row["allocations"] for row in r.json()["rows"]) == 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_service_stops_on_a_signal_even_inherited_ignored(db: str, sig: signal.Signals) -> None:
    """A hub started in the background hands SIGINT to its services ignored; the hub's
    shutdown then waited 30 s for a service that did not stop (measured on the demo)."""
    port = free_port()
    env = {**os.environ, "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub_gpu.services.usage.app", "--db", db],
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "never listened"
                time.sleep(0.1)
        proc.send_signal(sig)
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_student_reads_her_usage_by_her_own_days_from_the_hubs_bar(hub: Hub) -> None:
    """Chromium in UTC+14: alice's 1.5 h on 2 GPUs from 09:00 UTC on 10 Nov runs past her
    midnight, so it counts on her 10 and 11 Nov; a user sees only her own usage, an admin
    picks anyone's; every page is inside the hub's navigation bar."""
    zone = "Pacific/Kiritimati"
    with chromium_page(timezone_id=zone) as page:
        hub_login(page, hub.url, "alice", "any")
        page.click("#jhgpu-usage-link")  # "My usage" in the hub's bar
        page.wait_for_url(lambda url: "tz=Pacific" in url)
        assert page.inner_text("h1") == "Your GPU usage"
        assert page.inner_text("#jhgpu-usage-summary") == "You held no GPU in the last 14 days."
        assert f"in your time zone ({zone})" in page.inner_text("#jhgpu-usage-period")
        page.fill("#jhgpu-usage-days-input", "40")
        page.click("#jhgpu-usage-form button")
        page.wait_for_selector("#jhgpu-usage-days")
        assert page.inner_text("#jhgpu-usage-summary") == (
            "You held GPUs for 3 h 15 min of GPU time; they were never busy."
        )
        cells = page.locator("#jhgpu-usage-days tbody tr")
        got = [" | ".join(cells.nth(i).inner_text().split("\t")) for i in range(cells.count())]
        assert got == [
            "Wed 11 Nov 2026 | 1 h | none | 1",
            "Tue 10 Nov 2026 | 2 h 15 min | none | 2",
        ]
        assert "0.0" not in page.inner_text("main")
        assert page.locator("nav a.nav-link", has_text="Home").count() == 1  # the hub's bar
        screenshot(page, "first-hour-usage-after")
        page.goto(f"{hub.url}/services/gpu-accounting/?user=bob&tz={zone}")
        assert page.inner_text("#jhgpu-usage-message") == (
            "You may see only your own usage; ask an admin for anyone else's."
        )
    with chromium_page(timezone_id=zone) as page:
        hub_login(page, hub.url, "carol", "any")
        page.goto(f"{hub.url}/services/gpu-accounting/?tz={zone}&days=40")
        page.select_option("#jhgpu-usage-user", "bob")
        page.click("#jhgpu-usage-form button")
        page.wait_for_url(lambda url: "user=bob" in url)
        assert page.inner_text("h1") == "GPU usage of bob"
        assert page.inner_text("#jhgpu-usage-summary").startswith("bob held GPUs for 2 h of GPU")
        assert page.locator("nav a.nav-link", has_text="Admin").count() == 1
