"""A person in a real Chromium: LDAP login, the spawn form, progress, JupyterLab, shared home.

Debian's /usr/bin/chromium driven by Playwright (tests/support/browser.py), a real hub
with GPULDAPAuthenticator against the private slapd (``ldap_server``), and two real
Docker engines as GPU nodes with declared inventories: node-a has two RTX 3090, node-b
two TITAN X (Pascal). Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time

import pytest

from tests.conftest import gpu_inventory
from tests.ldap_fixture import DEMO_PASSWORDS, LDAPServer
from tests.support.browser import (
    chromium_page,
    hub_login,
    run_in_new_notebook,
    screenshot,
    watch_spawn,
)
from tests.support.cluster import Engine

pytestmark = [pytest.mark.integration, pytest.mark.browser]

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
TITAN = ("NVIDIA TITAN X (Pascal)", 12288, "6.1")
SPAWN_TIMEOUT = 120  # seconds, from "Start" to JupyterLab (2 shared cores)
FILE = "written-in-browser.txt"


def ldap_extra(ldap: LDAPServer) -> str:
    return f"""
c.JupyterHub.authenticator_class = "jupyterhub_gpu.hub.auth.ldap.GPULDAPAuthenticator"
c.Authenticator.allow_all = False
c.CryptKeeper.keys = [bytes.fromhex({secrets.token_hex(32)!r})]
c.GPULDAPAuthenticator.server_address = {ldap.host!r}
c.GPULDAPAuthenticator.server_port = {ldap.port}
c.GPULDAPAuthenticator.tls_strategy = "insecure"
c.GPULDAPAuthenticator.bind_dn_template = ["uid={{username}},ou=people,{ldap.suffix}"]
c.GPULDAPAuthenticator.group_search_base = "ou=groups,{ldap.suffix}"
c.GPULDAPAuthenticator.allowed_groups = [{ldap.group_dn("gpu-users")!r}]
c.GPULDAPAuthenticator.admin_groups = {{"hub-admins"}}
c.GPULDAPAuthenticator.ldap_timeout = 10
c.GPUDockerSpawner.require_identity = True
c.Spawner.default_url = "/lab"
c.JupyterHub.allow_named_servers = True
c.Spawner.start_timeout = {SPAWN_TIMEOUT}
c.Spawner.http_timeout = {SPAWN_TIMEOUT}
"""


def option_texts(page, select: str) -> dict[str, str]:
    """{value: visible text} of a <select>'s options (whitespace collapsed)."""
    options = page.locator(f"{select} option")
    return {
        options.nth(i).get_attribute("value"): " ".join(options.nth(i).inner_text().split())
        for i in range(options.count())
    }


def container_of(engine: Engine, hub, user: str, server: str):
    with engine.client() as client:
        (container,) = client.containers.list(
            ignore_removed=True,
            filters={
                "label": [
                    f"jupyterhub-gpu.hub={hub.hub_id}",
                    f"jupyterhub-gpu.owner={user}",
                    f"jupyterhub-gpu.server={server}",
                ]
            }
        )
        return container


def test_ldap_user_spawns_from_the_form_and_keeps_files_across_nodes(
    make_hub, engines: list[Engine], ldap_server: LDAPServer, tmp_path
) -> None:
    node_a, node_b = engines[0], engines[1]
    inventory = [
        gpu_inventory(node_a.name, "aaaaaaaa", [RTX, RTX]),
        gpu_inventory(node_b.name, "bbbbbbbb", [TITAN, TITAN]),
    ]
    hub = make_hub([node_a, node_b], inventory, ldap_extra(ldap_server))
    home = tmp_path / "homes" / "alice"  # LDAP homeDirectory /home/alice under the root
    started = time.monotonic()
    try:
        with chromium_page() as page:
            try:
                _walk_through(page, hub, inventory, node_a, node_b, home)
            except BaseException:
                with contextlib.suppress(Exception):
                    screenshot(page, "browser-failure")
                raise
    finally:
        for server in ("second", ""):
            if hub.server("alice", server) is not None:
                hub.stop_server("alice", server)
    print(f"browser walk-through took {time.monotonic() - started:.1f} s")


def _walk_through(page, hub, inventory, node_a: Engine, node_b: Engine, home) -> None:
    # ---- (a) LDAP login, the form with live availability
    hub_login(page, hub.url, "alice", DEMO_PASSWORDS["alice"])
    page.wait_for_selector("#jhgpu-form")
    assert re.search(r"/hub/spawn(/alice)?$", page.url.split("?")[0]), page.url
    user = hub.user("alice")
    assert user["auth_state"]["uid"] == 10001 and user["auth_state"]["gid"] == 5000

    models = option_texts(page, "#jhgpu-gpu-model")
    assert models["any"].startswith("Any model (4 of 4 free)"), models
    assert "RTX 3090: 2 of 2 free · 24 GiB" in models[RTX[0]], models
    assert "TITAN X (Pascal): 2 of 2 free · 12 GiB" in models[TITAN[0]], models
    images = page.locator("#jhgpu-image option")
    cuda13 = page.locator('#jhgpu-image option[value="demo-cuda13"]')
    assert cuda13.is_disabled()
    reason = cuda13.get_attribute("title") or ""
    assert "needs NVIDIA driver >= 580" in reason and "node-a has 550.54.15" in reason, reason
    assert "unavailable" in cuda13.inner_text()
    assert not page.locator('#jhgpu-image option[value="demo-cuda12"]').is_disabled()
    assert images.count() >= 4

    page.select_option("#jhgpu-image", "demo-cuda12")
    page.select_option("#jhgpu-gpu-count", "1")
    page.select_option("#jhgpu-gpu-model", RTX[0])
    page.click("#jhgpu-form details > summary")  # the list of images that can't run now
    cannot = " ".join(page.locator("#jhgpu-form details").inner_text().split())
    assert "Python 3.11 + JupyterLab for CUDA 13.0: No node can run it" in cannot, cannot
    screenshot(page, "browser-1-form")

    # ---- submit, watch the progress page, land in JupyterLab
    page.click("#spawn_form button[type=submit]")
    events = watch_spawn(page, r"/user/alice/lab", "browser-2-progress", SPAWN_TIMEOUT)
    state_a = hub.server("alice")["state"]
    assert state_a["node"] == node_a.name and len(state_a["gpu_uuids"]) == 1, state_a
    (uuid_a,) = state_a["gpu_uuids"]
    index_a = next(g["index"] for g in inventory[0]["gpus"] if g["uuid"] == uuid_a)
    assert f"node node-a, GPU {index_a} (RTX 3090, 24 GiB)" in events, events
    assert "Starting the container" in events, events
    assert events[-1] == "Waiting for the server to answer", events
    container = container_of(node_a, hub, "alice", "")
    assert container.attrs["Config"]["User"] == "10001:5000"

    code = (
        "import os\n"
        "gpus = os.environ['NVIDIA_VISIBLE_DEVICES']\n"
        f"open(os.path.join(os.environ['HOME'], {FILE!r}), 'w').write(gpus)\n"
        "print(gpus)"
    )
    out = run_in_new_notebook(page, f"{hub.url}/user/alice/lab", code)
    screenshot(page, "browser-3-notebook")
    assert out.strip() == uuid_a, out

    # ---- (b) the file on the shared home has alice's LDAP uid/gid
    written = home / FILE
    assert written.read_text() == uuid_a
    st = os.stat(written)
    assert (st.st_uid, st.st_gid) == (10001, 5000), (st.st_uid, st.st_gid)
    st = os.stat(home)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (10001, 5000, 0o700)

    # ---- (c) a second server of alice on the other node sees the same file
    page.goto(f"{hub.url}/hub/spawn/alice/second")
    page.wait_for_selector("#jhgpu-form")
    models = option_texts(page, "#jhgpu-gpu-model")
    assert models["any"].startswith("Any model (3 of 4 free)"), models
    assert "RTX 3090: 1 of 2 free" in models[RTX[0]], models
    page.select_option("#jhgpu-image", "demo-cuda12")
    page.select_option("#jhgpu-gpu-count", "1")
    page.select_option("#jhgpu-gpu-model", TITAN[0])  # only node-b has it
    screenshot(page, "browser-4-form-second")
    page.click("#spawn_form button[type=submit]")
    events = watch_spawn(page, r"/user/alice/second/lab", "browser-5-progress-second", 120)
    state_b = hub.server("alice", "second")["state"]
    assert state_b["node"] == node_b.name and len(state_b["gpu_uuids"]) == 1, state_b
    (uuid_b,) = state_b["gpu_uuids"]
    index_b = next(g["index"] for g in inventory[1]["gpus"] if g["uuid"] == uuid_b)
    assert f"node node-b, GPU {index_b} (TITAN X (Pascal), 12 GiB)" in events, events
    assert container_of(node_b, hub, "alice", "second").attrs["Config"]["User"] == "10001:5000"

    code = (
        "import os\n"
        "home = os.environ['HOME']\n"
        "print(os.environ['NVIDIA_VISIBLE_DEVICES'])\n"
        f"print(open(os.path.join(home, {FILE!r})).read())\n"
        "n = open(os.path.join(home, 'from-node-b.txt'), 'w').write('b')"
    )
    out = run_in_new_notebook(page, f"{hub.url}/user/alice/second/lab", code)
    screenshot(page, "browser-6-notebook-second")
    assert out.split() == [uuid_b, uuid_a], out
    st = os.stat(home / "from-node-b.txt")
    assert (st.st_uid, st.st_gid) == (10001, 5000)
