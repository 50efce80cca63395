"""A real Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright, for browser tests.

Never a downloaded browser: Playwright is told the executable (``playwright install`` is
neither needed nor possible here). Screenshots go to ``artifacts/screenshots/`` (gitignored).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.cluster import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
SCREENSHOTS = REPO / "artifacts" / "screenshots"

if TYPE_CHECKING:  # playwright is imported lazily: collecting tests never needs it
    from playwright.sync_api import Page


@contextmanager
def chromium_page(
    timeout_s: float = 30,
    width: int = 1280,
    height: int = 900,
    hold_ready: bool = True,
    timezone_id: str | None = None,
    locale: str | None = None,
) -> Iterator[Page]:
    """A fresh headless Chromium page (its own profile and cookies); closed afterwards.
    ``timezone_id``: the browser's time zone (an IANA name; default the machine's).

    ``hold_ready``: the spawn-pending page waits for :func:`watch_spawn` before it goes on
    to the server (see ``_HOLD_READY_JS``); off for timing, where the page goes on at once,
    as the hub's page does, and :func:`watch_spawn` then reads no events. ``timezone_id``:
    the browser's zone (e.g. ``Europe/Paris``; default: the machine's); ``locale``: its
    language and formats (e.g. ``en-GB``: 24-hour times)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: apt-get install -y chromium (scripts/cluster.sh does it)",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "Playwright for Python is missing: .venv/bin/pip install 'playwright>=1.65,<2' "
            "(never `playwright install`: it drives Debian's chromium)",
            pytrace=False,
        )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = browser.new_context(
                viewport={"width": width, "height": height},
                timezone_id=timezone_id,
                locale=locale,
            )
            if hold_ready:
                context.add_init_script(_HOLD_READY_JS)
            page = context.new_page()
            page.set_default_timeout(timeout_s * 1000)
            page.set_default_navigation_timeout(timeout_s * 1000)
            yield page
        finally:
            browser.close()


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as ``artifacts/screenshots/<name>.png``; print its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


# Installed in every page before its own scripts run. On the hub's spawn-pending page the
# "ready" event makes the page reload itself (and so leave for the server) at once; this
# delays the page's own handler for that one event until the test has looked at the page
# (window.__jhgpuRelease). Every event, and the page's handling of it, stays the hub's.
_HOLD_READY_JS = """
(() => {
  if (!location.pathname.includes("/hub/spawn-pending/")) { return; }
  window.__jhgpuReadySeen = false;
  window.__jhgpuRelease = false;
  const desc = Object.getOwnPropertyDescriptor(EventSource.prototype, "onmessage");
  Object.defineProperty(EventSource.prototype, "onmessage", {
    configurable: true,
    get() { return desc.get.call(this); },
    set(handler) {
      desc.set.call(this, async function (e) {
        let ready = false;
        try { ready = Boolean(JSON.parse(e.data).ready); } catch (err) { /* not JSON */ }
        if (ready) {
          window.__jhgpuReadySeen = true;
          while (!window.__jhgpuRelease) {
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
        }
        return handler.call(this, e);
      });
    },
  });
})();
"""


def hub_login(page: Page, hub_url: str, username: str, password: str) -> None:
    """Log in through the hub's login form; wait until the browser has left the login page."""
    page.goto(f"{hub_url}/hub/login")
    page.fill("#username_input", username)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(lambda url: "/hub/login" not in url)


def watch_spawn(page: Page, lab_url_re: str, shot: str, timeout_s: float) -> list[str]:
    """After "Start": watch the hub's spawn-pending page until the browser is in the server.

    The page's event log is opened; when the hub's "ready" event arrives (the page would
    reload itself at once) the page, with every progress event so far, is screenshotted
    as ``shot`` and its event log read, then the page handles "ready" itself and goes on
    to the server. Returns the event log's lines. Fails with the log if the spawn fails or
    the browser has not reached ``lab_url_re`` within ``timeout_s``.
    """
    page.wait_for_url(re.compile(r"/hub/spawn-pending/"))
    page.locator("#progress-details > summary").click()
    events: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if re.search(lab_url_re, page.url):
            return events
        state = "navigating"
        with contextlib.suppress(Exception):  # the page may be navigating
            state = page.evaluate(
                "() => document.querySelector('#progress-bar.bg-danger') ? 'failed'"
                " : (window.__jhgpuReadySeen && !window.__jhgpuRelease ? 'ready' : 'waiting')"
            )
        if state == "failed":
            log = page.locator("#progress-log").inner_text()
            pytest.fail(f"the spawn failed; the progress page says:\n{log}", pytrace=False)
        if state == "ready" and not events:
            lines = page.locator("#progress-log .progress-log-event").all_text_contents()
            events.extend(e.strip() for e in lines)
            screenshot(page, shot)
            page.evaluate("() => { window.__jhgpuRelease = true; }")
        page.wait_for_timeout(200)
    pytest.fail(
        f"not in JupyterLab after {timeout_s:.0f} s (at {page.url}); progress seen: {events}",
        pytrace=False,
    )


def run_in_new_notebook(page: Page, lab_url: str, code: str, timeout_s: float = 90) -> str:
    """Open JupyterLab at ``lab_url`` with a reset workspace, create a Python notebook from
    the launcher, run ``code`` in its first cell and return the cell's output text."""
    page.goto(f"{lab_url}?reset")
    card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first
    card.wait_for(timeout=timeout_s * 1000)
    card.click()
    cell = page.locator(".jp-Notebook .jp-Cell.jp-CodeCell").first
    editor = cell.locator(".cm-content")
    editor.wait_for(timeout=timeout_s * 1000)
    # a cell run before the new kernel is connected is silently skipped: wait for it
    idle = page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first
    idle.wait_for(timeout=timeout_s * 1000)
    editor.click()
    page.keyboard.insert_text(code)  # no key events: no auto-indent or bracket closing
    output = cell.locator(".jp-OutputArea-output")
    prompt = cell.locator(".jp-InputPrompt")
    ran = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = prompt.inner_text()  # "[ ]:" not run, "[*]:" running, "[1]:" done
        if re.search(r"\[\d+\]", shown) and output.count():
            return "\n".join(t.strip("\n") for t in output.all_inner_texts())
        if ran is None or ("[ ]" in shown and time.monotonic() - ran > 20):
            editor.click()
            page.keyboard.press("Control+Enter")  # run this cell, stay on it
            ran = time.monotonic()
        page.wait_for_timeout(250)
    pytest.fail(
        f"the notebook cell gave no output in {timeout_s:.0f} s (prompt {prompt.inner_text()!r})",
        pytrace=False,
    )
