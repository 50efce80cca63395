"""VS Code in the browser (issue 33, docs/vscode.md): a real hub starts alice's server
from the VS Code test image (images/vscode-test: the shared test image plus code-server
behind jupyter-server-proxy, installed by images/vscode/install-code-server.sh as in the
framework images), and Debian's Chromium clicks JupyterLab's "VS Code" tile: code-server's
workbench loads through the hub's proxy and shows her home folder. The same URL without
her login, or with another user's token, is refused by the hub's auth and never reaches
code-server; code-server listens on no TCP port of its own.

The image is built on the builder engine the first time (tests/support/vscode_image.py,
2 to 4 minutes on 2 shared cores), then reused while its inputs are unchanged.
Screenshots go to artifacts/screenshots/ (``vscode-*``).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import CATALOG, gpu_inventory
from tests.support import vscode_image
from tests.support.browser import chromium_page, hub_login, screenshot
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub

pytestmark = [pytest.mark.integration, pytest.mark.browser]

UID, GID = 10001, 5000
SLUG = "vscode-test"
FILE = "hello-from-alice.py"  # put in her home before the server starts
SPAWN_TIMEOUT = 120
WORKBENCH_TIMEOUT = 120  # seconds from the click to her file in the explorer (2 shared cores)
RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")


def vscode_extra(work: Path) -> str:
    """The demo catalog plus the VS Code test image, alice's uid:gid for her home."""
    catalog = yaml.safe_load(CATALOG.read_text())
    catalog["images"].append(
        {
            "slug": SLUG,
            "display_name": "Python + JupyterLab + VS Code (CPU only)",
            "framework": "python",
            "framework_version": "3.11",
            "cuda_version": None,
            "image": vscode_image.VSCODE_IMAGE,
            "description": "The test image with code-server behind jupyter-server-proxy.",
        }
    )
    work.mkdir(parents=True, exist_ok=True)
    (work / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    return f"""
c.GPUCluster.catalog_file = {str(work / "catalog.yaml")!r}
c.GPUDockerSpawner.default_uid = {UID}
c.GPUDockerSpawner.default_gid = {GID}
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = {SPAWN_TIMEOUT}
c.Spawner.http_timeout = {SPAWN_TIMEOUT}
{TOKEN_ROLE_CONFIG}
"""


def listening_tcp_ports(engine: Engine, hub: Hub, user: str) -> set[int]:
    """The TCP ports something listens on inside ``user``'s container (/proc/net/tcp*)."""
    with engine.client() as client:
        (container,) = client.containers.list(
            ignore_removed=True,
            filters={"label": [f"jupyterhub-gpu.hub={hub.hub_id}", f"jupyterhub-gpu.owner={user}"]}
        )
        code, out = container.exec_run(["sh", "-c", "cat /proc/net/tcp /proc/net/tcp6"])
    assert code == 0, out
    ports = set()
    for line in out.decode().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def code_server_args(engine: Engine, hub: Hub, user: str) -> list[str]:
    """The command line of the code-server process in ``user``'s container ([] if none)."""
    with engine.client() as client:
        (container,) = client.containers.list(
            ignore_removed=True,
            filters={"label": [f"jupyterhub-gpu.hub={hub.hub_id}", f"jupyterhub-gpu.owner={user}"]}
        )
        code, out = container.exec_run(
            ["sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"],
            user=f"{UID}:{GID}",
        )
    assert code == 0, out
    for line in out.decode(errors="replace").splitlines():
        if "code-server/out/node/entry.js" in line and "--auth" in line:
            return line.split()
    return []


def test_vs_code_tile_opens_code_server_on_her_home_through_the_hub(
    make_hub: Callable[..., Hub], engines: list[Engine], tmp_path: Path
) -> None:
    node = engines[0]
    built_s = vscode_image.ensure([node])
    print(
        f"VS Code test image: built in {built_s:.0f} s"
        if built_s
        else "VS Code test image: up to date"
    )
    inventory = [gpu_inventory(node.name, "dddddddd", [RTX])]
    hub = make_hub([node], inventory, vscode_extra(tmp_path / "cfg"))
    home = tmp_path / "homes" / "alice"
    home.mkdir(parents=True)
    (home / FILE).write_text("print('hello from alice')\n")
    for path in (home, home / FILE):
        os.chown(path, UID, GID)
    home.chmod(0o700)

    hub.create_user("alice")
    hub.create_user("bob")
    started = time.monotonic()
    r = hub.spawn("alice", {"image": SLUG, "gpu_count": 0})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice", timeout=SPAWN_TIMEOUT)
    ports_before = listening_tcp_ports(node, hub, "alice")
    url = f"{hub.url}/user/alice/vscode/"
    try:
        with chromium_page(timeout_s=60) as page:
            try:
                _open_vs_code(page, hub, url)
            except BaseException:
                with contextlib.suppress(Exception):
                    screenshot(page, "vscode-failure")
                raise
        # code-server runs with the hub's auth in front and its own off, on a unix socket:
        # no TCP port was opened in her container, and nothing was written to her config
        args = code_server_args(node, hub, "alice")
        assert args, "no code-server process in alice's container"
        assert "--auth" in args and args[args.index("--auth") + 1] == "none", args
        assert "--disable-telemetry" in args and "--socket" in args, args
        assert args[args.index("--config") + 1] == "/opt/code-server/config.yaml", args
        assert listening_tcp_ports(node, hub, "alice") == ports_before, ports_before
        assert not (home / ".config" / "code-server" / "config.yaml").exists()

        # the same URL without her login: the single-user server sends it to the hub's
        # login, and code-server's page is never served
        anonymous = httpx.get(url, follow_redirects=False, timeout=30)
        assert anonymous.status_code in (302, 303), (anonymous.status_code, anonymous.text[:300])
        assert "/hub/" in anonymous.headers["location"], anonymous.headers
        followed = httpx.get(url, follow_redirects=True, timeout=30)
        assert followed.url.path == "/hub/login", followed.url
        assert "code-server" not in followed.text and "vscode" not in followed.url.path
        # another user's token: refused by her server's auth (no access to alice's server)
        bob = httpx.get(
            url, headers={"Authorization": f"token {hub.user_token('bob')}"}, timeout=30
        )
        assert bob.status_code == 403, (bob.status_code, bob.text[:300])
        # her own token reaches code-server (the refusals above are about who asks)
        own = httpx.get(
            url, headers={"Authorization": f"token {hub.user_token('alice')}"}, timeout=30
        )
        assert own.status_code in (200, 302), (own.status_code, own.text[:300])
    finally:
        hub.stop_server("alice")
    print(f"VS Code walk-through took {time.monotonic() - started:.1f} s")


def _open_vs_code(page, hub: Hub, url: str) -> None:
    hub_login(page, hub.url, "alice", "any password")
    page.goto(f"{hub.url}/user/alice/lab?reset")
    # the tile reads "VS Code [↗]": it opens a new tab
    tile = page.locator(".jp-LauncherCard").filter(has_text=re.compile(r"^\s*VS Code\b"))
    tile.wait_for(timeout=SPAWN_TIMEOUT * 1000)
    screenshot(page, "vscode-1-launcher")
    with page.context.expect_page(timeout=30_000) as opened:
        tile.click()
    vs = opened.value
    vs.set_default_timeout(WORKBENCH_TIMEOUT * 1000)
    vs.wait_for_url(re.compile(r"/user/alice/vscode/"))
    # the workbench, opened on her home folder, lists the file put there
    vs.locator(".monaco-workbench").wait_for()
    trust = vs.get_by_role("button", name=re.compile(r"Yes, I trust the authors"))
    explorer_file = vs.locator(".explorer-folders-view .monaco-list-row").filter(has_text=FILE)
    # workspace trust is kept on: code-server 4.139 opens the folder in Restricted Mode (a
    # banner); should a version ask with a dialog instead, she answers yes, as a user would
    deadline = time.monotonic() + WORKBENCH_TIMEOUT
    while time.monotonic() < deadline and not explorer_file.count():
        if trust.count() and trust.first.is_visible():
            trust.first.click()
        vs.wait_for_timeout(250)
    explorer_file.first.wait_for(timeout=1000)
    if trust.count() and trust.first.is_visible():
        trust.first.click()
    assert vs.url.startswith(url), vs.url
    assert "folder=/home/alice" in vs.url.replace("%2F", "/"), vs.url
    header = vs.locator(".explorer-folders-view, .explorer-viewlet").first.inner_text()
    assert FILE in header, header
    screenshot(vs, "vscode-2-workbench")
