"""The culler's side of suspend instead of stop (docs/culler.md): with ``suspend`` on it
asks the hub to suspend an idle server, and stops it when the hub answers that it did
not; ``configure_culler`` sets both sides and gives the culler's role the suspend API's
scope (against the fake hub of test_culler_service.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from traitlets.config import Config

from jupyterhub_gpu.hub.api.suspend import SUSPEND_SCOPE
from jupyterhub_gpu.hub.extensions import configure_culler
from tests.unit.test_culler_service import T0, World, make_culler, poll, record_log

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> World:
    return World()


def suspends(world: World) -> list[str]:
    return sorted(r.url.path for r in world.requests if r.url.path.endswith("/suspend"))


async def test_with_suspend_the_idle_are_suspended_and_the_refused_stopped(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice's server is suspended (no DELETE); the hub refuses erin's (409, its node
    cannot checkpoint): it is stopped, with one line saying why."""
    route = world.hub

    def hub(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/suspend"):
            assert request.headers["Authorization"] == "token svc-token"
            if "erin" in request.url.path:
                message = "Not suspended: node node-c's Docker engine cannot checkpoint."
                return httpx.Response(409, json={"status": 409, "message": message})
            return httpx.Response(200, json={"node": "node-a", "seconds": 3.5})
        return route(request)

    monkeypatch.setattr(world, "hub", hub)
    culler = make_culler(world, tmp_path, suspend=True)
    await poll(culler)
    lines = record_log(culler)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].cull and decisions["erin/train"].cull
    assert suspends(world) == [
        "/hub/api/gpu/users/alice/suspend",
        "/hub/api/gpu/users/erin/servers/train/suspend",
    ]
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]
    assert any(line.startswith("Suspended alice: ") for line in lines), lines
    assert (
        "Not suspended erin/train (HTTP 409: Not suspended: node node-c's Docker engine "
        "cannot checkpoint.): stopping it"
    ) in lines


async def test_without_suspend_nothing_is_asked_of_the_suspend_api(
    world: World, tmp_path: Path
) -> None:
    culler = make_culler(world, tmp_path)
    await poll(culler)
    await culler.cull_once(now=T0)
    assert suspends(world) == []
    assert world.deletes() == ["/hub/api/users/alice/server", "/hub/api/users/erin/servers/train"]


def test_configure_culler_turns_suspend_on_on_both_sides() -> None:
    on, off, by_site = Config(), Config(), Config()
    by_site.GPUCluster.suspend = True
    configure_culler(on, site_secret="s" * 32, suspend=True)
    configure_culler(off, site_secret="s" * 32)
    configure_culler(by_site, site_secret="s" * 32)
    for c, wanted in ((on, True), (off, False), (by_site, True)):
        (command,) = [s["command"] for s in c.JupyterHub.services]
        assert ("--GPUIdleCuller.suspend=True" in command) is wanted
        assert bool(c.GPUCluster.get("suspend", False)) is wanted
        # the API's scope is the culler's role's alone (no user gets it), either way
        (role,) = [r for r in c.JupyterHub.load_roles if r["name"] == "gpu-culler"]
        assert SUSPEND_SCOPE in role["scopes"]
        assert SUSPEND_SCOPE in c.JupyterHub.custom_scopes
        routes = [handler[0] for handler in c.JupyterHub.extra_handlers]
        assert r"/api/gpu/users/(?P<user_name>[^/]+)/suspend" in routes
