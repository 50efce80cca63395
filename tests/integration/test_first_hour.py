"""A student's first hour, walked in one real Chromium on one real hub (issue 36's test).

One hub (LDAP login, one node with one RTX 3090, the real culler service with a short idle
limit and its warning), Debian's Chromium in Europe/Paris with en-GB formats (the hub's
zone is UTC). alice, as a student would:

1. logs in with her LDAP password and reads the spawn form: the image's framework, Python
   and CUDA first, the admin's details last, what is free now, and the idle policy as the
   culler runs it;
2. starts a CPU server from the form and lands in JupyterLab;
3. opens a terminal in JupyterLab: ``whoami`` says her name and ``pip install --user``
   from the site's wheel folder works (the README's "My images" step, as written);
4. saves her environment on My images: types a name as people do, presses Save, reads
   each step in words (never the engine's build lines) and "Saved as ...", sees it listed
   (its package, based on the catalog's name for the image, saved at her local time);
   the spawn form then offers it under "My images";
5. while bob holds every GPU: the form says where she would stand and when a GPU should
   free up, in her time; Start puts her second server in line; the waiting page says her
   place, the estimate in her time and that she can close the tab; she leaves the line;
6. the culler's warning comes on her home page, with "I'm still here"; after the cull the
   home page says why, in her time.

Every wait is for an observable event (a page's words, the culler's files and log, the
hub's answers). The save uses a real registry (the session's, on the site address) and
builds on her server's node, as ``test_my_images.py`` does; it runs while her idle time
does, inside the wait for the culler's warning. Screenshots: artifacts/screenshots/walk-*.png; with
``JHGPU_WALK_SCREENSHOTS=1`` also docs/screenshots/first-hour/walk-*.png (the committed set).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import httpx
import pytest

from jupyterhub_gpu.core.culling.warning import CullWarning
from jupyterhub_gpu.edges.files import load_cull_warnings, load_deadlines
from tests.conftest import gpu_inventory
from tests.integration.test_browser import ldap_extra
from tests.integration.test_cull_warning_hub import _notice_text
from tests.integration.test_culler import INTERVAL, STOP_SLACK, culled_line, culler_extra
from tests.integration.test_my_images import display_name
from tests.ldap_fixture import DEMO_PASSWORDS, LDAPServer
from tests.support.browser import (
    SCREENSHOTS,
    chromium_page,
    hub_login,
    screenshot,
    watch_spawn,
)
from tests.support.cluster import REPO, Engine
from tests.support.distribution import Distribution
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub
from tests.support.waiting import wait_until
from tests.support.wheels import make_wheel

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.integration, pytest.mark.browser]

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
ZONE = "Europe/Paris"
PARIS = ZoneInfo(ZONE)
TIMEOUT = 75.0  # alice's idle limit: long enough for steps 3 and 4 on 2 loaded cores
WARN = 40.0  # the warning comes this long before the cull
MAX_AGE = 900.0  # bob's server's deadline: the queue's estimate (never reached here)
WHEEL = "first-hour"
TYPED_NAME, SAVED_AS = "My first env", "my-first-env"  # as she types it, as it is saved
# the save's log as she reads it (core/saving/stream.py's words): no engine line
SAVE_LOG = [
    f"Saving your server as {SAVED_AS!r}",
    "Reading what you installed",
    "Fetching 1 package from the site's index",
    "Building the image",
    "Installing 1 package into the image",
    f"Installing {WHEEL} 1.0 (1 of 1)",
    "Adding the installed packages to your image",
    "Uploading: 100%",
    f"Saved as {SAVED_AS!r}: start it under My images in the form.",
]
RAW_DOCKER = re.compile(
    r"Step \d+/\d+|--->|Successfully (built|tagged)|sha256:|RUN \[|\d+\.\d+\.\d+\.\d+:\d+"
)
SHOTS = REPO / "docs" / "screenshots" / "first-hour"
# what alice types in her terminal; the marker is computed, so the echoed line never matches
TYPED = (
    "whoami; command -v pip; "
    f"pip install --user --no-index --find-links /srv/wheels {WHEEL} && "
    "python -c 'import first_hour; print(\"imported=\" + first_hour.__file__)'; "
    "echo done-$((6 * 7))"
)
DONE = "done-42"
WARNED = re.compile(
    r"Your server will be stopped at (\d\d:\d\d) \(local time\) because it has been idle "
    r"for \d+ s\. Save your work, or press I'm still here to keep it\."
)


def shot(page: Page, name: str) -> None:
    """``walk-<name>``: in artifacts/ always; in docs/ only when asked (CI leaves them)."""
    screenshot(page, f"walk-{name}")
    if os.environ.get("JHGPU_WALK_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"walk-{name}.png"), full_page=False)


def keep_shot(name: str) -> None:
    """Copy artifacts' ``walk-<name>`` (a helper's own screenshot) to docs/, when asked."""
    if os.environ.get("JHGPU_WALK_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SCREENSHOTS / f"walk-{name}.png", SHOTS / f"walk-{name}.png")


def words(page: Page, selector: str) -> str:
    return " ".join(page.locator(selector).first.inner_text().split())


def local_clock(at: datetime) -> str:
    return at.astimezone(PARIS).strftime("%H:%M")


def ldap_login_http(hub: Hub, user: str) -> None:
    """``user`` logs in through the hub's login form (so the hub has her LDAP identity)."""
    with httpx.Client(base_url=hub.url, timeout=30) as client:
        client.get("/hub/login")
        xsrf = client.cookies.get("_xsrf", "")
        form = {"username": user, "password": DEMO_PASSWORDS[user], "_xsrf": xsrf}
        r = client.post("/hub/login", data=form)
        assert r.status_code in (200, 302), (r.status_code, r.text[:300])
        assert "jupyterhub-session-id" in client.cookies or r.status_code == 302, r.text[:300]


def test_a_students_first_hour(
    make_hub: Callable[..., Hub],
    engines: list[Engine],
    ldap_server: LDAPServer,
    real_registry: Distribution,
    tmp_path: Path,
) -> None:
    node = engines[0]
    wheels = tmp_path / "wheels"
    make_wheel(wheels, WHEEL, "1.0")
    culler_dir = tmp_path / "culler"
    warnings_file, deadlines = culler_dir / "warnings.json", culler_dir / "deadlines.json"
    extra = ldap_extra(ldap_server) + culler_extra(
        culler_dir,
        {},
        timeout=TIMEOUT,
        settings=f"c.GPUIdleCuller.warn_before = {WARN}\n"
        f"c.GPUIdleCuller.max_age = {MAX_AGE}\n"
        f"c.GPUIdleCuller.warnings_file = {str(warnings_file)!r}\n"
        f"c.GPUIdleCuller.deadlines_file = {str(deadlines)!r}\n"
        f"c.GPUIdleCuller.policy_file = {str(culler_dir / 'policy.json')!r}",
    )
    mounts = {"gpu-users": [{"source": str(wheels), "target": "/srv/wheels"}]}
    extra += f"""
c.GPUDockerSpawner.max_queue_wait = 300  # the queue is on (culler_extra turns it off)
c.GPUCluster.cull_notes_file = {str(culler_dir / "notes.json")!r}
c.GPUCluster.cull_warnings_file = {str(warnings_file)!r}
c.GPUCluster.cull_deadlines_file = {str(deadlines)!r}
c.GPUCluster.cull_policy_file = {str(culler_dir / "policy.json")!r}
c.GPUDockerSpawner.group_mounts = {mounts!r}
c.GPUDockerSpawner.resource_defaults = {{"max_gpus": 1, "max_cpu": 1, "max_mem_gib": 2,
    "default_cpu": 0.5, "default_mem_gib": 1}}
c.JupyterHub.redirect_to_server = False  # after a cull: the home page, not a new start
c.JupyterHub.last_activity_interval = 5  # her JupyterLab's traffic is activity, soon
from jupyterhub_gpu.hub.extensions import configure_my_images
configure_my_images(c)
c.SavedImages.registry = {real_registry.address!r}
c.SavedImages.registry_url = "http://" + {real_registry.address!r}
c.SavedImages.namespace = "first-hour"
c.SavedImages.no_index = True  # the site's index: the wheel folder
c.SavedImages.find_links = [{str(wheels)!r}]
{TOKEN_ROLE_CONFIG}
"""
    hub = make_hub([node], [gpu_inventory(node.name, "f1f1f1f1", [RTX])], extra)
    started = time.monotonic()
    with chromium_page(timezone_id=ZONE, locale="en-GB", width=1100, height=760) as page:
        try:
            _walk(page, hub, warnings_file, deadlines)
        except BaseException:
            with contextlib.suppress(Exception):
                screenshot(page, "walk-failure")
            raise
    print(f"the first hour took {time.monotonic() - started:.1f} s")


def _walk(page: Page, hub: Hub, warnings_file: Path, deadlines: Path) -> None:
    # ---- 1. log in (LDAP) and read the form
    hub_login(page, hub.url, "alice", DEMO_PASSWORDS["alice"])
    policy = warnings_file.parent / "policy.json"  # the culler's first round writes it
    wait_until(policy.exists, INTERVAL + 60, "the culler's terms", details=hub.log_tail)
    page.goto(f"{hub.url}/hub/spawn/alice")
    page.wait_for_selector("#jhgpu-form")
    page.select_option("#jhgpu-image", "demo-cuda12")
    facts = words(page, "#jhgpu-image-facts")
    assert facts.startswith("Python 3.11 · CUDA 12.4 · runs on node-a"), facts
    assert facts.endswith("needs driver >= 525.60.13, compute capability 5.0 to 9.0"), facts
    model = words(page, f'#jhgpu-gpu-model option[value="{RTX[0]}"]')
    assert model.startswith("RTX 3090: 1 of 1 free · 24 GiB"), model
    assert words(page, "#jhgpu-gpu-count-help") == "Up to 1 per server."
    assert page.locator("#jhgpu-offer").is_hidden()  # 1 GPU asked, 1 free: nothing to say
    # the idle policy, as the culler runs it, in her words
    assert words(page, "#jhgpu-idle-terms") == (
        f"Idle servers stop after at least {TIMEOUT:.0f} s. You are warned {WARN:.0f} s "
        f"before. Your files are kept. Any server stops after {MAX_AGE / 60:.0f} min."
    )
    shot(page, "01-form")

    # ---- 2. start a CPU server from the form; JupyterLab
    page.select_option("#jhgpu-image", "demo-cpu")
    assert page.locator("#jhgpu-gpu-count").input_value() == "0"
    page.click("#spawn_form button[type=submit]")
    events = watch_spawn(page, r"/user/alice/lab", "walk-02-progress", 150)
    assert "Starting the container" in events, events
    keep_shot("02-progress")
    pool = ThreadPoolExecutor(1)
    bob = pool.submit(_bob_takes_the_gpu, hub)  # meanwhile: bob's server takes the only GPU
    pool.shutdown(wait=False)

    # ---- 3. a terminal in JupyterLab: her name, pip install --user from the wheels
    terminal = _terminal(page, hub)
    assert re.search(r"^alice$", terminal, re.M), terminal
    assert "I have no name!" not in terminal, terminal
    assert re.search(r"^alice@\S+:", terminal, re.M), f"no alice@host prompt:\n{terminal}"
    assert "/opt/venv/bin/pip" in terminal, terminal
    assert f"Successfully installed {WHEEL}-1.0" in terminal, terminal
    assert "imported=/home/alice/.local/lib/" in terminal, terminal
    shot(page, "03-terminal")
    page.goto(f"{hub.url}/hub/home")  # she leaves JupyterLab: her server's idle time runs
    left_lab = datetime.now(timezone.utc)

    # ---- 4. My images: save her environment, see it listed
    saving = time.monotonic()
    saved, saved_at = _save_my_environment(page, hub)
    print(f"the save took {time.monotonic() - saving:.1f} s in the browser")

    # ---- 5. bob holds every GPU: the form offers her image; the outlook, the line, leaving it
    bob.result(timeout=180)
    deadline = wait_until(
        lambda: load_deadlines(deadlines).get("bob/"),
        INTERVAL + 30,
        "the culler's deadline of bob's server",
        details=hub.log_tail,
    )
    assert deadline is not None and deadline.why == "max_age", deadline
    expected = local_clock(deadline.at)
    page.goto(f"{hub.url}/hub/spawn/alice/gpu")
    page.wait_for_selector("#jhgpu-form")
    mine = page.locator(f'#jhgpu-my-images option[value="{saved}"]')
    assert " ".join(mine.inner_text().split()) == (
        f"My image: {SAVED_AS} (from {display_name('demo-cpu')})"
    )
    page.select_option("#jhgpu-image", saved)
    described = words(page, "#jhgpu-image-description")
    said = re.fullmatch(
        rf"Saved (\d\d:\d\d) \(local time\), adds (\d+ bytes|[\d.]+ KiB): {WHEEL}==1\.0\.",
        described,
    )
    assert said and said[1] == local_clock(saved_at), (described, saved_at)  # her time
    assert words(page, "#jhgpu-image-facts").startswith("Python 3.11 · CPU only")
    shot(page, "06-form-my-image")
    page.select_option("#jhgpu-image", "demo-cuda12")
    model = words(page, f'#jhgpu-gpu-model option[value="{RTX[0]}"]')
    assert model.endswith("0 of 1 free · 24 GiB · wait in line for one"), model
    page.select_option("#jhgpu-gpu-model", RTX[0])
    page.select_option("#jhgpu-gpu-count", "1")
    offer = words(page, "#jhgpu-offer-text")
    assert offer == (
        "No RTX 3090 is free now: Start puts your server in line for one, and the waiting "
        f"page shows your place and an estimate. Nobody waits for an {RTX[0]} ahead of you; "
        f"yours should free up around {expected} (local time)."
    ), offer
    shot(page, "07-form-outlook")
    page.click("#spawn_form button[type=submit]")
    page.wait_for_url(re.compile(r"/hub/spawn-pending/alice/gpu"))
    page.wait_for_function(
        "document.getElementById('progress-message').textContent.includes('1st in line')"
    )
    assert words(page, "#jhgpu-title") == "Your server is waiting in line for a GPU."
    assert words(page, "#jhgpu-subtitle") == (
        "You can close this tab: your server starts when a GPU frees."
    )
    assert words(page, "#stop-server-btn") == "Leave the queue"
    news = words(page, "#progress-message")
    assert news.startswith(f"1st in line for an {RTX[0]}"), news
    assert f"is expected to free up by about {expected} CET (" in news, (news, expected)
    assert page.locator("#progress-message time").get_attribute("title") == "your local time"
    assert (hub.server("alice", "gpu") or {}).get("pending") == "spawn"
    shot(page, "08-waiting")
    page.click("#stop-server-btn")
    page.wait_for_function(
        "document.getElementById('stop-server-status').textContent.includes('left the queue')"
    )
    assert words(page, "#stop-server-status") == "You left the queue."
    shot(page, "09-left-the-line")  # before the page reloads itself
    wait_until(lambda: hub.server("alice", "gpu") is None, 30, "her queued start to go")
    print(f"steps 4 and 5 took {_since(left_lab):.1f} s of her {TIMEOUT:.0f} s idle limit")
    assert (hub.server("bob") or {}).get("ready"), "bob's server went"

    # ---- 6. the cull's warning, with I'm still here; after the cull, why
    warned = wait_until(
        lambda: _warning(warnings_file),
        (left_lab - datetime.now(timezone.utc)).total_seconds() + TIMEOUT + INTERVAL + 30,
        "the culler's warning to alice",
        details=hub.log_tail,
    )
    assert warned is not None
    print(f"the warning came {_since(left_lab):.1f} s after she left JupyterLab")
    assert culled_line(hub, "alice") is None, "culled before the warning was read"
    text = wait_until(lambda: _notice_text(page, hub, "cull-warning"), 20, "the warning shown")
    match = WARNED.fullmatch(text)
    assert match, text
    assert match[1] == local_clock(warned.at), (text, warned)
    assert words(page, ".jhgpu-notice .jhgpu-keep") == "I'm still here"
    shot(page, "10-cull-warning")
    line = wait_until(
        lambda: culled_line(hub, "alice"),
        (warned.at - datetime.now(timezone.utc)).total_seconds() + INTERVAL + 30,
        "the culler to cull alice's server",
        details=hub.log_tail,
    )
    assert line is not None and line.startswith("Culling alice: "), line
    wait_until(lambda: hub.server("alice") is None, STOP_SLACK, "alice's server to go")
    text = wait_until(lambda: _notice_text(page, hub, "culled"), 20, "why it was culled")
    assert re.fullmatch(
        r"Your server was stopped at \d\d:\d\d \(local time\) because it had been idle for "
        rf"\d+ s \(the limit is {TIMEOUT:.0f} s\)\. Your files are kept: start it again when "
        r"you need it\.",
        text,
    ), text
    shot(page, "11-home-after-cull")
    hub.stop_server("bob")


def _save_my_environment(page: Page, hub: Hub) -> tuple[str, datetime]:
    """On My images (the navigation bar's link), her running server, a name as she types
    it, Save: each step in words and the result; the image listed. Its option's value and
    when it was saved."""
    page.click("#jhgpu-my-images-link")
    page.wait_for_selector("#jhgpu-save-form:not(.d-none)")
    assert words(page, "#jhgpu-save-server") == "(default server)"
    limits = words(page, "#jhgpu-limits")
    assert limits == "Up to 5 images; each may add up to 20 GiB; 50 GiB in all.", limits
    assert page.locator("#jhgpu-none").is_visible()
    assert words(page, "#jhgpu-none") == "No saved images yet."
    page.fill("#jhgpu-save-name", TYPED_NAME)
    page.click("#jhgpu-save-button")
    page.wait_for_selector("#jhgpu-save-status:not(.d-none)")
    assert words(page, "#jhgpu-save-message").startswith(f"Saving {SAVED_AS} (")
    shot(page, "04-saving")
    page.wait_for_function(
        "() => !document.querySelector('#jhgpu-save-bar')"
        ".classList.contains('progress-bar-animated')",
        timeout=240_000,
    )
    log = page.inner_text("#jhgpu-save-log").splitlines()
    assert words(page, "#jhgpu-save-message") == SAVE_LOG[-1], log
    assert log == SAVE_LOG, log  # her words, step by step
    assert not [line for line in log if RAW_DOCKER.search(line)], log
    image = f"saved:alice/{SAVED_AS}"
    row = page.locator(f"#jhgpu-images tr[data-image='{image}']")
    row.wait_for()
    cells = [" ".join(t.split()) for t in row.locator("td").all_inner_texts()]
    name, owner, base, packages, adds, when = cells[:6]
    assert (name, owner, packages) == (SAVED_AS, "alice", f"{WHEEL}==1.0"), cells
    assert base == display_name("demo-cpu"), cells  # the catalog's name, not its slug
    assert re.fullmatch(r"\d+ bytes|\d+\.\d KiB", adds), cells  # a small wheel's few files
    r = httpx.get(f"{hub.url}/hub/api/gpu/users/alice/images",
                  headers={"Authorization": f"token {hub.token}"}, timeout=30)  # fmt: skip
    created = datetime.fromisoformat(r.json()["images"][0]["created"])
    assert when.endswith(local_clock(created)), (when, created)  # her time, not the hub's
    assert row.locator("select").input_value() == ""  # private
    assert words(page, "#jhgpu-images tr button.jhgpu-restart") == "Restart with this image"
    shot(page, "05-saved")
    return image, created


def _since(start: datetime) -> float:
    return (datetime.now(timezone.utc) - start).total_seconds()


def _bob_takes_the_gpu(hub: Hub) -> None:
    ldap_login_http(hub, "bob")
    r = hub.spawn("bob", {"image": "demo-cuda12", "gpu_count": 1, "cpu": 0.5, "mem_gib": 1})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("bob", timeout=150)


def _terminal(page: Page, hub: Hub) -> str:
    """Open a terminal from JupyterLab's launcher, type :data:`TYPED`, return its screen.

    JupyterLab draws its terminal on a canvas (WebGL); with her own setting
    ``screenReaderMode`` (put through her server's settings API first) xterm.js also keeps
    the screen's rows as text, which is read here as a screen reader would."""
    token = hub.user_token("alice")
    r = httpx.put(
        f"{hub.url}/user/alice/lab/api/settings/@jupyterlab/terminal-extension:plugin",
        headers={"Authorization": f"token {token}"},
        json={"raw": '{"screenReaderMode": true}'},
        timeout=30,
    )
    assert r.status_code in (200, 204), (r.status_code, r.text[:300])
    page.goto(f"{hub.url}/user/alice/lab?reset")
    card = page.locator('.jp-LauncherCard[data-category="Other"]', has_text="Terminal").first
    card.wait_for(timeout=90_000)
    card.click()
    rows = ".jp-Terminal .xterm-accessibility-tree"
    page.wait_for_function(
        f"(() => {{ const r = document.querySelector({rows!r});"
        " return r && /alice@/.test(r.textContent); })()",
        timeout=60_000,
    )
    page.locator(".jp-Terminal .xterm-helper-textarea").first.focus()
    page.keyboard.type(TYPED)
    page.keyboard.press("Enter")
    page.wait_for_function(  # the typed line says done-$((6 * 7)): only the output matches
        f"document.querySelector({rows!r}).textContent.includes({DONE!r})", timeout=90_000
    )
    lines = page.locator(f"{rows} > div")
    return "\n".join(lines.nth(i).inner_text().rstrip() for i in range(lines.count()))


def _warning(path: Path) -> CullWarning | None:
    w = load_cull_warnings(path).get("alice/")
    return w if w is not None and w.postponable else None
