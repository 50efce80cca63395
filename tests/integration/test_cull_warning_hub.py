"""Tell before a cull, explain after (issues 35 and 36), on a real hub in a real Chromium.

The real culler service (``configure_culler``: a short timeout, ``warn_before`` half of
it) and a real CPU-only server of zoe. The student's side, in Chromium (the browser's
zone Europe/Paris, its locale en-GB; the hub's zone UTC):

1. the home page warns "Your server will be stopped at HH:MM (local time) because it has
   been idle for N s" with "I'm still here". Her JupyterLab, open in a
   tab in the background (``HIDDEN_TAB_JS``: JupyterLab then stops its own polling,
   which is activity), says the same as a JupyterLab notification with "I'm still here"
   (the ``jupyterhub-gpu-lab`` extension, images/lab, in the test image
   images/lab-test); she presses it there, and the home page's button, pressed after,
   shows the hub's refusal;
2. the culler's first deadline passes (a whole round after it) and the server is still
   there; a second warning comes, without the button, on the home page and in her
   JupyterLab (a second press is refused);
3. the server is culled, not before the second warning's time; the home page and a
   bookmarked ``/user/zoe/lab`` say why and when.

Waits are for events (the warnings file, the culler's log lines, the hub's answers),
never fixed sleeps. Screenshots: artifacts/screenshots/cull-*.png.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from jupyterhub_gpu.core.culling.warning import CullWarning
from jupyterhub_gpu.edges.files import load_cull_warnings
from tests.conftest import CATALOG, gpu_inventory
from tests.integration.test_culler import (
    INTERVAL,
    OPTIONS,
    RTX,
    STOP_SLACK,
    culled_line,
    culler_extra,
    culler_log,
    logged_at,
    spawn_all,
)
from tests.support.browser import chromium_page, hub_login, screenshot
from tests.support.cluster import Engine
from tests.support.hub import Hub
from tests.support.lab_image import LAB_IMAGE
from tests.support.lab_image import ensure as ensure_lab_image
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.browser]

TIMEOUT = 50.0
WARN = 25.0
TITAN = ("NVIDIA TITAN X (Pascal)", 12288, "6.1")
ZONE = "Europe/Paris"
PARIS = ZoneInfo(ZONE)
WARNED = re.compile(
    r"Your server will be stopped at (\d\d:\d\d) \(local time\) because it has been idle "
    r"for \d+ s\. Save your work, or press I'm still here to keep it\."
)


# the same inside her JupyterLab, short for its notification (140 characters)
LAB_WARNED = re.compile(
    r"Idle for \d+ s: this server stops at \d\d:\d\d \(local time\)\. Save your work, or "
    r"(press I'm still here|use it \(run a cell, open a file\)) to keep it\."
)


def local_clock(at: datetime) -> str:
    return at.astimezone(PARIS).strftime("%H:%M")


def test_warned_kept_once_then_culled_and_told_why(
    make_hub: Callable[..., Hub], engines: list[Engine], tmp_path: Path
) -> None:
    node = engines[0]
    culler_dir = tmp_path / "culler"
    warnings_file = culler_dir / "warnings.json"
    extra = culler_extra(
        culler_dir,
        {},
        timeout=TIMEOUT,
        settings=f"c.GPUIdleCuller.warn_before = {WARN}\n"
        f"c.GPUIdleCuller.warnings_file = {str(warnings_file)!r}",
    )
    extra += (
        f"c.GPUCluster.cull_notes_file = {str(culler_dir / 'notes.json')!r}\n"
        f"c.GPUCluster.cull_warnings_file = {str(warnings_file)!r}\n"
        "c.JupyterHub.redirect_to_server = False  # the home page: no visit to the server\n"
        'c.GPUDockerSpawner.resource_defaults = {"max_gpus": 2, "max_gpus_per_user": 3}\n'
    )
    # her CPU image with the JupyterLab extension: the catalog's demo-cpu, on the lab image
    ensure_lab_image([node])
    catalog = yaml.safe_load(CATALOG.read_text())
    for entry in catalog["images"]:
        if entry["slug"] == "demo-cpu":
            entry["image"] = LAB_IMAGE
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    extra += (
        f"c.GPUCluster.catalog_file = {str(tmp_path / 'catalog.yaml')!r}\n"
        "c.GPUCluster.lab_notices_interval = 5  # her JupyterLab reads them this often\n"
    )
    hub = make_hub([node], [gpu_inventory(node.name, "ffffffff", [RTX, TITAN])], extra)
    hub.create_user("zoe")
    with chromium_page(timezone_id=ZONE, locale="en-GB") as page:  # 24-hour times
        try:
            _walk(page, hub, warnings_file, tmp_path / "homes" / "zoe")
        except BaseException:
            with contextlib.suppress(Exception):
                screenshot(page, "cull-failure")
            raise


def _warning(path: Path, postponable: bool) -> CullWarning | None:
    w = load_cull_warnings(path).get("zoe/")
    return w if w is not None and w.postponable == postponable else None


def _notice_text(page, hub: Hub, kind: str) -> str:
    """The home page's notice of ``kind`` (the notices are read when the page loads)."""
    page.goto(f"{hub.url}/hub/home")
    found = page.locator(f'.jhgpu-notice[data-kind="{kind}"] .jhgpu-notice-text')
    with contextlib.suppress(Exception):
        found.first.wait_for(timeout=3000)
    return " ".join(found.first.inner_text().split()) if found.count() else ""


# A tab in the background: the browser says the page is hidden, and JupyterLab stops its own
# polling of the server (its polls wait while ``document.hidden``), which would otherwise be
# activity every ~10 s. Headless Chromium never hides a page (measured: neither another
# page brought to the front nor a minimized window changes ``visibilityState``), so the
# test tells the page what a desktop browser tells a background tab. Nothing else changes.
HIDDEN_TAB_JS = """
Object.defineProperty(Document.prototype, "hidden", {configurable: true, get: () => true});
Object.defineProperty(Document.prototype, "visibilityState",
                      {configurable: true, get: () => "hidden"});
"""


def _hidden_lab(page, hub: Hub):
    """Her JupyterLab in a tab of its own, in the background (a workspace of its own, so
    the default one keeps the notebooks the test wrote): the page."""
    lab = page.context.new_page()
    lab.on("console", lambda m: LAB_CONSOLE.append(f"{m.type}: {m.text}"))
    lab.add_init_script(HIDDEN_TAB_JS)
    lab.goto(f"{hub.url}/user/zoe/lab/workspaces/hidden-tab?reset")
    lab.locator(".jp-LauncherCard").first.wait_for(timeout=90_000)
    assert lab.evaluate("document.hidden") is True
    page.bring_to_front()
    return lab


LAB_CONSOLE: list[str] = []  # what her JupyterLab's page logged (shown on a failure)
_LAB_STATE = """async () => {
  const config = JSON.parse(document.getElementById("jupyter-config-data").textContent);
  const r = await fetch(config.hubPrefix + "gpu/lab-notices", {credentials: "same-origin"});
  return {containers: Object.keys(window._JUPYTERLAB || {}),
          federated: (config.federated_extensions || []).map(e => e.name),
          lab_notices: r.status + " " + (await r.text()).slice(0, 600),
          toasts: Array.from(document.querySelectorAll("[class*=Toast]")).map(
            e => e.className + ": " + e.textContent.slice(0, 200))};
}"""


def _lab_warning(lab, at: datetime):
    """The JupyterLab notification of the warning that says her server stops at ``at``
    (GPUCluster.lab_notices_interval is 5 s here), and its words. The culler says the
    warning again each round, the idle time grown: the same notification follows it."""
    toast = lab.locator(
        ".jp-Notification-Toast-warning", has_text=f"stops at {local_clock(at)} (local time)"
    )
    wait_until(
        lambda: toast.count() > 0,
        30,
        f"her JupyterLab to warn of a stop at {local_clock(at)}",
        details=lambda: f"{lab.evaluate(_LAB_STATE)}\nconsole: {LAB_CONSOLE[-30:]}",
    )
    toast = toast.last  # a notification it replaced may still be leaving
    return toast, " ".join(toast.locator(".jp-toast-message").inner_text().split())


def _walk(page, hub: Hub, warnings_file: Path, home: Path) -> None:
    hub_login(page, hub.url, "zoe", "any")
    # zoe's CPU-only server is the one culled; bob holds the TITAN X (no agent reads its
    # node: never culled), so that the form has a busy model and one with 1 free
    bob = {**OPTIONS, "image": "demo-cuda12", "gpu_model": TITAN[0]}
    zoe = {**OPTIONS, "image": "demo-cpu", "gpu_count": 0}
    spawn_all(hub, {"bob": bob})  # first: zoe's timeline starts when hers is ready
    ready = spawn_all(hub, {"zoe": zoe})["zoe"]
    # the notebooks she had open, in JupyterLab's workspace file in her home, as JupyterLab
    # writes it (opening them in a browser here would be activity, and move the timeline)
    workspaces = home / ".jupyter" / "lab" / "workspaces"
    workspaces.mkdir(parents=True, exist_ok=True)
    opened = ("analysis.ipynb", "week2/train.ipynb")
    data = {f"notebook:{p}": {"data": {"path": p, "factory": "Notebook"}} for p in opened}
    (workspaces / "default-37a8.jupyterlab-workspace").write_text(json.dumps({"data": data}))
    owner = home.stat()
    for made in (home / ".jupyter", home / ".jupyter" / "lab", workspaces, *workspaces.iterdir()):
        os.chown(made, owner.st_uid, owner.st_gid)  # hers, as if JupyterLab had written them
    lab = _hidden_lab(page, hub)

    # 1. warned WARN s before the timeout ends, on her home page, in her own zone
    first = wait_until(
        lambda: _warning(warnings_file, postponable=True),
        ready + TIMEOUT + INTERVAL + 30 - time.monotonic(),  # a bound: the event is awaited
        "the culler's first warning",
        details=hub.log_tail,
    )
    text = wait_until(lambda: _notice_text(page, hub, "cull-warning"), 20, "the warning shown")
    match = WARNED.fullmatch(text)
    assert match, text
    assert match[1] == local_clock(first.at), (text, first)
    screenshot(page, "cull-1-warned")
    toast, said = _lab_warning(lab, first.at)  # her JupyterLab says it too, with the button
    assert LAB_WARNED.fullmatch(said) and said.endswith("press I'm still here to keep it."), said
    buttons = toast.locator(".jp-toast-button")
    assert buttons.all_inner_texts() == ["I'm still here"], buttons.all_inner_texts()
    screenshot(lab, "cull-1-warned-in-jupyterlab")
    buttons.click()  # she presses it in JupyterLab: the hub keeps her server
    answer = lab.locator(".jp-Notification-Toast-success .jp-toast-message")
    answer.wait_for(timeout=20_000)
    assert " ".join(answer.inner_text().split()) == "Your server is kept: thank you."
    pressed = datetime.now(timezone.utc)
    assert culled_line(hub, "zoe") is None and pressed < first.at, "too slow for the timeline"
    state = (hub.server("zoe") or {})["state"]
    assert "cull_postponed_at" in state, state
    screenshot(lab, "cull-2-kept-in-jupyterlab")
    # the home page, still open from before: its button now says the hub's refusal (kept
    # once already; or, once the culler's next round dropped the warning, nothing to do)
    page.click(".jhgpu-notice .jhgpu-keep")
    page.wait_for_function(
        "!document.querySelector('.jhgpu-notice-text').textContent.includes('will be stopped')"
    )
    refused = " ".join(page.locator(".jhgpu-notice-text").first.inner_text().split())
    assert refused in (
        "You kept this server once already: use it (run a cell, open a file) to keep it running.",
        "Your server is not about to be stopped: nothing to do.",
    ), refused
    screenshot(page, "cull-2-kept")
    assert _notice_text(page, hub, "cull-warning") == ""  # kept: no warning on reload

    # 2. the first deadline passes: a whole culler round after it keeps her server
    def round_after(at: datetime) -> bool:
        return any(
            re.match(r"Cull round \d+ done", m) and when >= at for when, _, m in culler_log(hub)
        )

    wait_until(
        lambda: round_after(first.at),
        (first.at - datetime.now(timezone.utc)).total_seconds() + INTERVAL + 30,
        "a culler round after the first deadline",
        details=hub.log_tail,
    )
    assert culled_line(hub, "zoe") is None, "culled at the first deadline despite the press"
    assert (hub.server("zoe") or {}).get("ready"), "her server went at the first deadline"
    # the second warning: no button; pressing again is refused with a sentence
    second = wait_until(
        lambda: _warning(warnings_file, postponable=False),
        TIMEOUT + INTERVAL + 15,
        "the culler's second warning",
        details=hub.log_tail,
    )
    assert (second.at - pressed).total_seconds() >= TIMEOUT - 1, (second, pressed)
    text = wait_until(lambda: _notice_text(page, hub, "cull-warning"), 20, "the 2nd warning")
    assert text.endswith("Save your work, or use it (run a cell, open a file) to keep it."), text
    assert f"stopped at {local_clock(second.at)} (local time)" in text, text
    assert page.locator(".jhgpu-keep").count() == 0
    toast, said = _lab_warning(lab, second.at)
    assert LAB_WARNED.fullmatch(said) and said.endswith("open a file) to keep it."), said
    assert toast.locator(".jp-toast-button").count() == 0  # no button, as at home
    screenshot(lab, "cull-3-warned-again-in-jupyterlab")
    screenshot(page, "cull-3-warned-again")
    again = hub.api("POST", "/gpu/users/zoe/keep")
    assert again.status_code == 409, again.text
    assert again.json()["message"] == (
        "You kept this server once already: use it (run a cell, open a file) to keep it running."
    )

    # 3. culled, not before the second warning's time
    line = wait_until(
        lambda: culled_line(hub, "zoe"),
        (second.at - datetime.now(timezone.utc)).total_seconds() + INTERVAL + 30,
        "the culler to cull zoe",
        details=hub.log_tail,
    )
    assert logged_at(hub, line) >= second.at, (line, second)
    wait_until(lambda: hub.server("zoe") is None, STOP_SLACK, "zoe's server to go")
    text = wait_until(lambda: _notice_text(page, hub, "culled"), 20, "why it was culled")
    assert re.fullmatch(
        r"Your server was stopped at \d\d:\d\d \(local time\) because it had been idle for "
        rf"\d+ s \(the limit is {TIMEOUT:.0f} s\)\. Your files are kept: start it again when "
        r"you need it\.",
        text,
    ), text
    screenshot(page, "cull-4-home-after")
    # a bookmarked URL of the culled server: the same sentence, not a bare "not running"
    page.goto(f"{hub.url}/user/zoe/lab")
    heading = page.locator("#jhgpu-not-running")
    page.wait_for_function(
        "document.getElementById('jhgpu-not-running').textContent.includes('was stopped')"
    )
    said = " ".join(heading.inner_text().split())
    assert said == text, (said, text)
    screenshot(page, "cull-5-bookmark-after")

    # the spawn form: why, what it freed, the notebooks open then; and what fits now
    page.goto(f"{hub.url}/hub/spawn/zoe")
    page.wait_for_selector("#jhgpu-form")
    notice = " ".join(page.locator("#jhgpu-notice").inner_text().split())
    assert notice.startswith(f"{text.split(' Your files are kept')[0]} Your files are kept"), (
        notice,
        text,
    )  # the same sentence as the home page's, in local time
    assert page.locator('.jhgpu-notice[data-kind="culled"]').count() == 0  # said once
    assert "It gave 0.5 CPUs and 1 GiB of memory back for others." in notice, notice
    assert (
        "Notebooks open then: analysis.ipynb and week2/train.ipynb; JupyterLab opens them "
        "again, but their variables are gone: run them again."
    ) in notice, notice
    page.select_option("#jhgpu-image", "demo-cuda12")
    facts = " ".join(page.locator("#jhgpu-image-facts").inner_text().split())
    assert facts.startswith("Python 3.11 · CUDA 12.4 · runs on "), facts
    assert facts.endswith("needs driver >= 525.60.13, compute capability 5.0 to 9.0"), facts
    help_text = " ".join(page.locator("#jhgpu-gpu-count-help").inner_text().split())
    assert help_text == "Up to 2 per server; at most 3 at once in all yours.", help_text
    assert page.locator("#jhgpu-offer").is_hidden()
    page.select_option("#jhgpu-gpu-model", RTX[0])
    page.select_option("#jhgpu-gpu-count", "2")  # 2 asked, 1 free: no silent wait
    offer = " ".join(page.locator("#jhgpu-offer-text").inner_text().split())
    assert offer == (
        "Only 1 RTX 3090 is free now: with 2, your server waits in line until 2 are free."
    )
    assert page.locator("#jhgpu-offer-take").inner_text() == "Start with 1 GPU now"
    screenshot(page, "form-1-offer-after")
    # the busy model can be chosen, to wait for it; the form says it waits
    titan = page.locator(f'#jhgpu-gpu-model option[value="{TITAN[0]}"]')
    assert not titan.is_disabled()
    assert " ".join(titan.inner_text().split()).endswith(
        "0 of 1 free · 12 GiB · wait in line for one"
    )
    page.select_option("#jhgpu-gpu-model", TITAN[0])
    page.select_option("#jhgpu-gpu-count", "1")
    offer = " ".join(page.locator("#jhgpu-offer-text").inner_text().split())
    assert offer == (
        "No TITAN X (Pascal) is free now: Start puts your server in line for one, and the "
        "waiting page shows your place and an estimate."
    )
    assert page.locator("#jhgpu-offer-take").is_hidden()
    screenshot(page, "form-2-busy-model-after")
    hub.stop_server("bob")
