"""Saving one's environment as an image, through a real hub (issue 14; docs/my-images.md).

Real engines (node-a, node-b, one declared GPU each), a real registry (Debian's
``docker-registry`` on the site address), a real hub with real single-user servers.
alice ``pip install --user``s a package in her running server, saves it under a name
on the My images page (Chromium), stops the server, removes the package from her home,
and starts her saved image on the other node (by asking for that node's GPU model): the
package imports from the image, which that node pulled from the registry (which asks for
credentials, as a site's would). Also: bob can't see or start her private image; a group share is
visible to the group only; a save of a package the site's index lacks fails naming it;
the per-user count limit refuses one more save with the numbers; a delete removes the
image from the registry.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import CATALOG, gpu_inventory
from tests.support.browser import chromium_page, hub_login, screenshot
from tests.support.cluster import Engine
from tests.support.distribution import Distribution
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub
from tests.support.waiting import wait_until
from tests.support.wheels import module_name, package_wheel

pytestmark = [pytest.mark.integration, pytest.mark.browser]

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
TITAN = ("NVIDIA TITAN Xp", 12288, "6.1")
PACKAGE, MISSING = "jhgpu-saved-probe", "jhgpu-not-on-index"
ON_GPU = {"image": "demo-cuda12", "gpu_count": 1, "cpu": 0.5, "mem_gib": 1}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Distribution]:
    """A real registry that asks for credentials, as a site's would: pushes (node-a),
    pulls (node-b) and deletes (the hub) all log in."""
    password = secrets.token_urlsafe(16)
    with Distribution(tmp_path_factory.mktemp("auth-registry"), credentials=("hub", password)) as r:
        yield r


def extra_config(registry: Distribution, index: Path, max_images: int) -> str:
    assert registry.credentials is not None
    user, password = registry.credentials
    return (
        f"""
c.SavedImages.registry_username = {user!r}
c.SavedImages.registry_password = {password!r}
c.JupyterHub.allow_named_servers = True
from jupyterhub_gpu.hub.extensions import configure_my_images as add_my_images
add_my_images(c)
c.SavedImages.registry = {registry.address!r}
c.SavedImages.registry_url = "http://" + {registry.address!r}
c.SavedImages.namespace = "saved-test"
c.SavedImages.no_index = True
c.SavedImages.find_links = [{str(index)!r}]
c.SavedImages.max_images = {max_images}
c.JupyterHub.load_roles = c.JupyterHub.load_roles + [
    {{"name": "group-maker", "scopes": ["admin:groups"], "services": ["tester"]}}
]
"""
        + TOKEN_ROLE_CONFIG
    )


class As:
    """The hub's API with one user's own token (the scopes a user really has)."""

    def __init__(self, hub: Hub, user: str) -> None:
        self.hub, self.user = hub, user
        self.token = hub.user_token(user)

    def __call__(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"token {self.token}"}
        return httpx.request(method, f"{self.hub.url}/hub/api{path}", headers=headers,
                             timeout=60, **kw)  # fmt: skip

    def images(self, of: str | None = None) -> dict[str, Any]:
        r = self("GET", f"/gpu/users/{of or self.user}/images")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def save(self, name: str, server: str = "", timeout: float = 240) -> dict[str, Any]:
        """Start a save and follow it to its end (the page polls the same endpoint)."""
        r = self("POST", f"/gpu/users/{self.user}/images", json={"server": server, "name": name})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self("GET", f"/gpu/users/{self.user}/save").json()
            if job["state"] != "running":
                return dict(job)
            time.sleep(0.5)
        raise TimeoutError(f"save {name} still running after {timeout}s")


def save_in_the_browser(
    hub: Hub, user: str, server: str, name: str, saved_as: str = ""
) -> dict[str, Any]:
    """What a person does: log in, follow "My images" in the navigation bar, choose the
    server, type the name (a name with spaces and capitals is saved as ``saved_as``),
    press Save, watch the progress to its end: a short log (one line for the upload's
    figures, at most 12 lines). The save as the API then reports it."""
    saved_as = saved_as or name
    with chromium_page(timeout_s=60) as page:
        hub_login(page, hub.url, user, "any password")
        page.goto(f"{hub.url}/hub/home")
        page.click("#jhgpu-my-images-link")
        page.wait_for_selector("#jhgpu-save-form:not(.d-none)")
        page.select_option("#jhgpu-save-server", server)
        page.fill("#jhgpu-save-name", name)
        page.click("#jhgpu-save-button")
        page.wait_for_selector("#jhgpu-save-status:not(.d-none)")
        screenshot(page, "my-images-1-saving")
        page.wait_for_function(
            "() => !document.querySelector('#jhgpu-save-bar')"
            ".classList.contains('progress-bar-animated')",
            timeout=240_000,
        )
        message = page.inner_text("#jhgpu-save-message")
        log = page.inner_text("#jhgpu-save-log").splitlines()
        assert len(log) <= 12 and sum(line.startswith("Uploading") for line in log) <= 1, log
        if message.startswith("Saved as"):
            row = page.locator(f"#jhgpu-images tr[data-image='saved:{user}/{saved_as}']")
            row.wait_for()
            cells = row.locator("td")
            assert cells.nth(0).inner_text() == saved_as
            base = cells.nth(2).inner_text()  # the catalog's name for it, not its slug
            assert base == display_name("demo-cuda12") and base != "demo-cuda12", base
        screenshot(page, "my-images-2-saved")
    r = httpx.get(f"{hub.url}/hub/api/gpu/users/{user}/save",
                  headers={"Authorization": f"token {hub.token}"}, timeout=30)  # fmt: skip
    job = dict(r.json())
    assert job["message"] == message, (job["message"], message)  # the page shows the result
    return job


def restart_in_the_browser(hub: Hub, user: str, image: str) -> None:
    """On My images, the image's "Restart with this image" (her default server runs):
    confirmed, the page leaves for the server's progress page (or, when the restart is
    done within the hub's slow-spawn timeout, straight for the server itself)."""
    with chromium_page(timeout_s=60) as page:
        hub_login(page, hub.url, user, "any password")
        page.goto(f"{hub.url}/hub/my-images")
        button = page.locator(f"#jhgpu-images tr[data-image='{image}'] button.jhgpu-restart")
        button.wait_for()
        assert button.inner_text() == "Restart with this image"
        screenshot(page, "first-hour-my-images-after")
        page.once("dialog", lambda dialog: dialog.accept())
        button.click()
        page.wait_for_url(
            lambda url: "/hub/spawn-pending/" in url or f"/user/{user}/" in url, timeout=120_000
        )


def display_name(slug: str) -> str:
    entries = yaml.safe_load(CATALOG.read_text())["images"]
    return str(next(e["display_name"] for e in entries if e["slug"] == slug))


def engine_of(engines: list[Engine], node: str) -> Engine:
    return next(e for e in engines if e.name == node)


def in_server(engines: list[Engine], state: dict[str, Any], *argv: str) -> tuple[int, str]:
    """Run ``argv`` in a server's container as the container's user (the server's)."""
    with engine_of(engines, state["node"]).client() as client:
        result = client.containers.get(state["object_id"]).exec_run(list(argv))
    return result.exit_code, result.output.decode(errors="replace")


def test_save_my_environment_and_start_it_on_another_node(
    make_hub: Callable[..., Hub], engines: list[Engine], registry: Distribution,
    tmp_path: Path,
) -> None:  # fmt: skip
    node_a, node_b = engines[0], engines[1]
    index = tmp_path / "site-index"  # the site's package mirror, as the hub sees it
    index.mkdir()
    package_wheel(index, PACKAGE, "1.2.0", 64 * 1024)
    hub = make_hub(
        [node_a, node_b],
        [gpu_inventory(node_a.name, "a1a1a1a1", [RTX]),
         gpu_inventory(node_b.name, "b2b2b2b2", [TITAN])],
        extra_config(registry, index, max_images=1),
    )  # fmt: skip
    for name in ("alice", "bob", "carol"):
        assert hub.create_user(name).status_code == 201
    alice, bob, carol = As(hub, "alice"), As(hub, "bob"), As(hub, "carol")
    assert hub.api("POST", "/groups/lab", json={"users": ["alice", "bob"]}).status_code == 201

    # alice's server "work" (one GPU, any model); she installs into her home
    assert hub.spawn("alice", ON_GPU, server="work").status_code in (201, 202)
    work = hub.wait_ready("alice", "work")["state"]
    home = tmp_path / "homes" / "alice"
    wheels = home / "wheels"
    wheels.mkdir()
    package_wheel(wheels, PACKAGE, "1.2.0", 64 * 1024)
    package_wheel(wheels, MISSING, "0.1.0", 1024)
    code, out = in_server(engines, work, "python", "-m", "pip", "install", "--user",
                          "--no-index", "--find-links", "/home/alice/wheels", MISSING)  # fmt: skip
    assert code == 0, out

    # 1. a package the site's index lacks: the save fails and names it; nothing is kept
    failed = alice.save("broken", "work")
    assert failed["state"] == "failed", failed
    assert f"{MISSING}==0.1.0" in failed["message"], failed["message"]
    assert alice.images()["images"] == []
    assert registry.tags("saved-test/u-alice/broken") == []

    # the registry really asks for credentials: without them, nothing
    anonymous = httpx.get(f"{registry.url}/v2/_catalog", timeout=10)
    assert anonymous.status_code == 401, anonymous.text

    # 2. the package the index has: saved, pushed, recorded
    # (pip in a venv won't uninstall from ~/.local: "outside environment"; remove by hand)
    site = home / ".local" / "lib" / "python3.11" / "site-packages"
    for path in site.glob(f"{module_name(MISSING)}*"):
        shutil.rmtree(path)
    code, out = in_server(engines, work, "python", "-m", "pip", "install", "--user",
                          "--no-index", "--find-links", "/home/alice/wheels", PACKAGE)  # fmt: skip
    assert code == 0, out
    saved = save_in_the_browser(hub, "alice", "work", "My Env 1", saved_as="my-env-1")
    assert saved["state"] == "saved", (saved["message"], saved["events"][-8:])
    image = saved["image"]
    assert image["packages"] == [f"pip:{PACKAGE}==1.2.0"], image
    assert image["base"] == "demo-cuda12" and image["shared_with"] is None
    repo = "saved-test/u-alice/my-env-1"
    assert registry.tags(repo) == [image["reference"].rsplit(":", 1)[1]]
    percents = [e["percent"] for e in saved["events"] if "percent" in e]
    assert percents, saved["events"]  # the build/push reported how far it was

    # 3. the count limit: one more save is refused at once, with the numbers
    r = alice("POST", "/gpu/users/alice/images", json={"server": "work", "name": "env2"})
    assert r.status_code == 403, r.text
    assert "You have 1 saved images, the most this hub allows is 1" in r.json()["message"]

    # 4. she stops the server, the package leaves her home; "My image" starts on the
    # other node (its GPU model is asked for) and has it
    hub.stop_server("alice", "work")
    shutil.rmtree(home / ".local")
    shutil.rmtree(home / "wheels")
    assert not list(home.rglob(f"{module_name(PACKAGE)}*"))  # what follows is the image's
    other, model = (node_b, TITAN[0]) if work["node"] == node_a.name else (node_a, RTX[0])
    with other.client() as client:
        assert not client.images.list(name=f"{registry.address}/{repo}")
    with httpx.Client(base_url=hub.url, timeout=60, follow_redirects=True) as browser:
        login = browser.get("/hub/login")
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', login.text)
        assert xsrf, login.text
        data = {"username": "alice", "password": "any", "_xsrf": xsrf[1]}
        assert browser.post("/hub/login", data=data).status_code == 200
        form = browser.get("/hub/spawn/alice/mine").text
        page = browser.get("/hub/my-images").text
    assert 'label="My images"' in form and 'value="saved:alice/my-env-1"' in form, form[-3000:]
    assert 'id="jhgpu-my-images"' in page and 'id="jhgpu-my-images-link"' in page
    # her default server from the catalog on the other node's kind of GPU; then, on My
    # images, "Restart with this image": the same choices, with her image
    r = alice("POST", "/users/alice/server", json={**ON_GPU, "gpu_model": model})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice", "", timeout=180)
    restart_in_the_browser(hub, "alice", "saved:alice/my-env-1")
    wait_until(lambda: (hub.server("alice") or {}).get("ready") is True, 180,
               "alice's server to start again with her image", details=hub.log_tail)  # fmt: skip
    restarted = hub.server("alice") or {}
    assert restarted["user_options"]["image"] == "saved:alice/my-env-1", restarted
    assert restarted["user_options"]["gpu_model"] == model, restarted
    mine = restarted["state"]
    assert mine["node"] == other.name
    probe = f"import {module_name(PACKAGE)} as m; print(m.__file__, m.VERSION)"
    code, out = in_server(engines, mine, "python", "-c", probe)
    assert code == 0, out
    assert out.split()[0].startswith("/opt/venv/") and out.split()[1] == "1.2.0", out
    code, out = in_server(engines, mine, "id", "-u")
    assert out.strip() != "0"  # runs as alice, never root
    code, out = in_server(engines, mine, "sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES")
    prefix = "a1a1a1a1" if other is node_a else "b2b2b2b2"  # the other node's GPU
    assert out.strip() == f"GPU-{prefix}0000-0000-4000-8000-000000000000", out

    # 5. bob neither sees nor starts alice's private image
    assert bob.images()["images"] == []
    assert bob("GET", "/gpu/users/alice/images").status_code in (403, 404)
    r = bob("POST", "/users/bob/server", json={**ON_GPU, "gpu_count": 0,
                                               "image": "saved:alice/my-env-1"})  # fmt: skip
    assert r.status_code == 400 and "not in the image catalog" in r.json()["message"], r.text
    assert bob("DELETE", "/gpu/users/alice/images/my-env-1").status_code in (403, 404)

    # 6. shared with lab: bob (lab) sees it, carol does not; not with a group not hers
    r = alice("PATCH", "/gpu/users/alice/images/my-env-1", json={"shared_with": "admins"})
    assert r.status_code == 400 and "only with one of your groups (lab)" in r.json()["message"]
    r = alice("PATCH", "/gpu/users/alice/images/my-env-1", json={"shared_with": "lab"})
    assert r.status_code == 200 and r.json()["shared_with"] == "lab", r.text
    assert [i["image"] for i in bob.images()["images"]] == ["saved:alice/my-env-1"]
    assert carol.images()["images"] == []

    # 7. deleted: gone from the registry and from everyone's list
    hub.stop_server("alice")
    assert alice("DELETE", "/gpu/users/alice/images/my-env-1").status_code == 204
    assert registry.tags(repo) == []
    assert alice.images()["images"] == [] and bob.images()["images"] == []


# ------------------------------------------------ issue 24: one spelling, nothing left on nodes


def spawn_events(hub: Hub, user: str, server: str, options: dict[str, Any]) -> list[dict[str, Any]]:
    """Spawn ``user``'s ``server`` with ``options`` and follow its progress to the end (a
    spawn refused at once is one failed event with the hub's sentence)."""
    r = hub.spawn(user, options, server=server)
    if r.status_code == 400:
        return [{"failed": True, "message": r.json()["message"]}]
    assert r.status_code in (201, 202), r.text
    events = []
    url = f"{hub.url}/hub/api/users/{user}/servers/{server}/progress"
    with httpx.stream("GET", url, headers={"Authorization": f"token {hub.token}"},
                      timeout=300) as stream:  # fmt: skip
        for line in stream.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    return events


def node_images(engine: Engine) -> dict[str, int]:
    """The node's images (not the intermediate ones), id -> size: what its disk holds."""
    with engine.client() as client:
        return {i["Id"]: int(i["Size"]) for i in client.api.images()}


# alone: it compares node-a's whole image list, which other tests' images change
@pytest.mark.alone
def test_other_spellings_are_refused_and_deletes_leave_no_images_on_the_node(
    make_hub: Callable[..., Hub], engines: list[Engine], registry: Distribution,
    tmp_path: Path,
) -> None:  # fmt: skip
    node_a = engines[0]
    index = tmp_path / "site-index"
    index.mkdir()
    package_wheel(index, PACKAGE, "1.2.0", 64 * 1024)
    catalog = tmp_path / "catalog.yaml"
    data = yaml.safe_load(CATALOG.read_text())
    catalog.write_text(yaml.safe_dump({**data, "allowed_image_patterns": ["*"]}))
    hub = make_hub(
        [node_a], [gpu_inventory(node_a.name, "a1a1a1a1", [RTX])],
        extra_config(registry, index, max_images=3)
        + f"c.GPUCluster.catalog_file = {str(catalog)!r}\n"
        + "c.SavedImages.node_sweep_interval = 1\n",
    )  # fmt: skip
    for name in ("alice", "bob"):
        assert hub.create_user(name).status_code == 201
    alice = As(hub, "alice")
    assert hub.spawn("alice", ON_GPU, server="work").status_code in (201, 202)
    work = hub.wait_ready("alice", "work")["state"]
    wheels = tmp_path / "homes" / "alice" / "wheels"
    wheels.mkdir()
    package_wheel(wheels, PACKAGE, "1.2.0", 64 * 1024)
    code, out = in_server(engines, work, "python", "-m", "pip", "install", "--user",
                          "--no-index", "--find-links", "/home/alice/wheels", PACKAGE)  # fmt: skip
    assert code == 0, out
    before = node_images(node_a)

    # 1. a save-delete loop leaves the node's images as they were (2 cycles: the second
    # shows nothing adds up)
    for cycle in range(2):
        job = alice.save("loop", "work")
        assert job["state"] == "saved", job["message"]
        assert alice("DELETE", "/gpu/users/alice/images/loop").status_code == 204
        assert node_images(node_a) == before, f"cycle {cycle + 1}: {len(node_images(node_a))}"

    # 2. alice's private image, started by her by its name (by digest, not its tag)
    job = alice.save("env", "work")
    assert job["state"] == "saved", job["message"]
    image = job["image"]
    events = spawn_events(hub, "alice", "mine", {**ON_GPU, "gpu_count": 0,
                                                 "image": "saved:alice/env"})  # fmt: skip
    assert events[-1].get("ready") is True, events[-3:]
    repo = image["reference"].rsplit(":", 1)[0]
    with node_a.client() as client:
        used = client.api.inspect_container(hub.server("alice", "mine")["state"]["object_id"])
        assert used["Config"]["Image"] == f"{repo}@{image['digest']}"
        image_id = client.api.inspect_image(used["Image"])["Id"]

    # 3. bob, by any other spelling of it: refused, with what to do
    for spelling in (image_id, image_id.split(":")[1][:12], f"{repo}@{image['digest']}"):
        events = spawn_events(hub, "bob", "x", {"image": spelling, "gpu_count": 0,
                                                "cpu": 0.5, "mem_gib": 1})  # fmt: skip
        assert events[-1].get("failed") is True, (spelling, events[-3:])
        assert "start it by its name under My images" in events[-1]["message"], events[-1]
        assert hub.server("bob", "x") is None

    # 4. deleted while "mine" runs on it: the image stays until the server is gone
    assert alice("DELETE", "/gpu/users/alice/images/env").status_code == 204
    assert image_id in node_images(node_a)
    hub.stop_server("alice", "mine")
    wait_until(lambda: image_id not in node_images(node_a), 30, "the sweep removed the image")
    assert node_images(node_a) == before
