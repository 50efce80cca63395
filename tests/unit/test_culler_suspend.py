"""The culler's side of suspend instead of stop (docs/culler.md): with ``suspend`` on it
asks the hub to suspend an idle server, and stops it when the hub answers that it did
not; ``configure_culler`` sets both sides and gives the culler's role the suspend API's
scope (against the fake hub of test_culler_service.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from traitlets.config import Config

from jupyterhub_gpu.core.culling.idleness import Signal
from jupyterhub_gpu.core.culling.warning import warning_words
from jupyterhub_gpu.edges.files import load_cull_warnings, load_notes
from jupyterhub_gpu.hub.api.suspend import SUSPEND_SCOPE
from jupyterhub_gpu.hub.extensions import configure_culler
from jupyterhub_gpu.services.culler.app import GPUIdleCuller
from jupyterhub_gpu.wire.cull_notes import notes_for
from tests.unit.test_culler_service import T0, World, iso, make_culler, poll, record_log

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


# -- the rule when suspending: the first idle gap of a cell's work --------------------------

REFUSALS = {
    409: "Not suspended: node node-a's Docker engine cannot checkpoint containers.",
    503: "Not suspended: the checkpoint failed (criu: cuda process).",
}


class SuspendAPI:
    """The hub's suspend API as the culler meets it: 200 (suspended) unless answers are
    queued for a user (``refuse``), each used once; every other call goes to the fake
    hub of test_culler_service.py."""

    def __init__(self, world: World) -> None:
        self.route = world.hub
        self.queued: dict[str, list[int]] = {}
        self.asked: list[str] = []  # the users whose suspend was asked, in order

    def refuse(self, user: str, *codes: int) -> None:
        self.queued.setdefault(user, []).extend(codes)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/suspend"):
            assert request.headers["Authorization"] == "token svc-token"
            user = request.url.path.split("/")[5]  # /hub/api/gpu/users/{user}/...
            self.asked.append(user)
            codes = self.queued.get(user) or [200]
            code = codes.pop(0)
            if code == 200:
                return httpx.Response(200, json={"node": "node-a", "seconds": 3.1})
            return httpx.Response(code, json={"status": code, "message": REFUSALS[code]})
        return self.route(request)


@pytest.fixture
def hub_api(world: World, monkeypatch: pytest.MonkeyPatch) -> SuspendAPI:
    api = SuspendAPI(world)
    monkeypatch.setattr(world, "hub", api)
    return api


async def cell_then_idle(world: World, culler: GPUIdleCuller, *, kernel_min: float = 40) -> None:
    """alice ran a GPU cell from 60 to 41 min before T0 (85 %), whose 4 GiB stay held, her
    kernel's last message ``kernel_min`` minutes before T0 (40: the cell's end), her
    browser gone since then. bob, carol and erin as test_culler_service.py has them."""
    world.gpu_memory["GPU-a0"] = 4096
    world.gpu_util["GPU-a0"] = 85.0
    await poll(culler, start=60, stop=41)
    world.gpu_util["GPU-a0"] = 0.0
    await poll(culler, start=40, stop=0)
    world.kernels["/user/alice/"] = [
        {"id": "k1", "execution_state": "idle", "last_activity": iso(kernel_min)}
    ]
    world.users[0]["servers"][""]["last_activity"] = iso(40)


async def test_a_cells_work_is_suspended_at_its_first_idle_gap_where_a_stop_waits(
    world: World, tmp_path: Path, hub_api: SuspendAPI
) -> None:
    """Suspend on: alice's server goes 40 min after her cell, its memory still held; a stop
    (suspend off) keeps it for the memory-held 5 h, and so does a suspend without the rule
    (``suspend_reclaims_cells`` False)."""
    stop = make_culler(world, tmp_path / "stop")
    kept = make_culler(world, tmp_path / "kept", suspend=True, suspend_reclaims_cells=False)
    early = make_culler(world, tmp_path / "early", suspend=True)
    for path in ("stop", "kept", "early"):
        (tmp_path / path).mkdir()
    for culler in (stop, kept, early):
        await cell_then_idle(world, culler)
    off = await stop.cull_once(now=T0)
    assert off["alice"].signal is Signal.GPU and not off["alice"].cull
    assert "needs 5 h idle" in off["alice"].reason
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]  # alice's is kept
    assert not (await kept.cull_once(now=T0))["alice"].cull
    assert hub_api.asked == ["erin"]
    decisions = await early.cull_once(now=T0)
    assert decisions["alice"].cull and decisions["alice"].signal is Signal.IDLE
    assert sorted(hub_api.asked) == ["alice", "erin", "erin"]
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]  # suspended, not stopped
    # the note the hub shows after it: suspended, and why, in the culler's words
    (note,) = notes_for(load_notes(tmp_path / "early" / "notes.json"), "alice")
    assert note.reason.startswith("idle: no hub activity for 40 min, kernels idle 40 min")


async def test_gpu_work_outside_the_kernels_keeps_the_memory_held_wait(
    world: World, tmp_path: Path, hub_api: SuspendAPI
) -> None:
    """The same GPU readings, but her kernel last spoke 3 h ago: the work was a process of
    its own (a loop in a terminal), which may resume by itself: 5 h, as a stop."""
    culler = make_culler(world, tmp_path, suspend=True)
    await cell_then_idle(world, culler, kernel_min=180)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].signal is Signal.GPU and "needs 5 h idle" in decisions["alice"].reason
    assert hub_api.asked == ["erin"]


@pytest.mark.parametrize("code", [409, 503])
async def test_a_refused_early_suspend_is_no_early_stop(
    world: World, tmp_path: Path, hub_api: SuspendAPI, code: int
) -> None:
    """The hub will not suspend alice (409) or its checkpoint fails (503): her server,
    due only by suspend's rule, is not stopped; from then on it is judged by the stop's
    waits (a restarted culler too) and asked again only when they are over, when the hub
    suspends it."""
    culler = make_culler(world, tmp_path, suspend=True)
    lines = record_log(culler)
    await cell_then_idle(world, culler)
    hub_api.refuse("alice", code)
    decisions = await culler.cull_once(now=T0)
    assert not decisions["alice"].cull and decisions["alice"].signal is Signal.GPU
    assert world.deletes() == []  # nobody stopped (erin's idle CPU server: suspended)
    assert sorted(hub_api.asked) == ["alice", "erin"]
    assert f"Not suspended alice (HTTP {code}: {REFUSALS[code]}): judged as a stop from now " \
        f"on, kept ({decisions['alice'].reason})" in lines  # fmt: skip
    assert notes_for(load_notes(tmp_path / "notes.json"), "alice") == []  # no cull happened
    # the next round does not ask again: the stop's 5 h are not over
    await poll(culler, start=-1, stop=-1)
    assert not (await culler.cull_once(now=T0 + timedelta(minutes=1)))["alice"].cull
    # nor does a restarted culler
    culler.save_state(T0 + timedelta(minutes=1))
    again = make_culler(world, tmp_path, suspend=True)
    again.load_state(now=T0 + timedelta(minutes=2))
    await poll(again, start=-2, stop=-2)
    assert not (await again.cull_once(now=T0 + timedelta(minutes=2)))["alice"].cull
    assert hub_api.asked.count("alice") == 1
    # one minute before the stop's 5 h end (from her GPU's last activity, 37 min before
    # T0, when the window's mean fell under the threshold) she is still kept, not asked
    await poll(again, start=-3, stop=-262)
    assert not (await again.cull_once(now=T0 + timedelta(minutes=262)))["alice"].cull
    assert hub_api.asked.count("alice") == 1
    # at its end: asked again, as every cull is, and suspended this time
    await poll(again, start=-263, stop=-263)
    last = await again.cull_once(now=T0 + timedelta(minutes=263))
    assert last["alice"].cull and hub_api.asked.count("alice") == 2
    assert world.deletes() == []


async def test_a_refused_suspend_is_warned_again_as_a_stop_before_any_stop(
    world: World, tmp_path: Path, hub_api: SuspendAPI
) -> None:
    """With warnings, a server the culler will suspend is warned in suspend's words. The
    hub refuses both alice's (due only by suspend's rule) and erin's (due by either): no
    one is stopped then; alice is not warned any more (the stop's 5 h are far), erin is
    warned afresh in the stop's words, and stopped at that warning's time."""
    warnings = tmp_path / "warnings.json"
    culler = make_culler(world, tmp_path, suspend=True, warn_before=600.0,
                         warnings_file=str(warnings))  # fmt: skip
    await cell_then_idle(world, culler)
    first = await culler.cull_once(now=T0)
    assert first["alice"].signal is Signal.WARNED and first["erin/train"].signal is Signal.WARNED
    shown = load_cull_warnings(warnings)
    assert shown["alice/"].suspend and shown["erin/train"].suspend
    assert warning_words("", shown["alice/"], T0).text == (
        "Your server will be suspended at 12:10 UTC because it has been idle for 40 min: "
        "start it again to resume where you left it, with your kernels and their "
        "variables. Press I'm still here to keep it running."
    )
    hub_api.refuse("alice", 409)
    hub_api.refuse("erin", 409)
    await poll(culler, start=-1, stop=-10)
    due = await culler.cull_once(now=T0 + timedelta(minutes=10))
    assert due["alice"].signal is Signal.GPU and due["erin/train"].signal is Signal.WARNED
    assert world.deletes() == [] and sorted(hub_api.asked) == ["alice", "erin"]
    shown = load_cull_warnings(warnings)
    assert "alice/" not in shown
    assert not shown["erin/train"].suspend
    assert shown["erin/train"].at == T0 + timedelta(minutes=20)
    assert warning_words("train", shown["erin/train"], T0).text.startswith(
        "Your server 'train' will be stopped at 12:20 UTC because it has been idle for "
    )
    # at that time erin's is asked again (every cull is), refused again, and stopped
    hub_api.refuse("erin", 409)
    await poll(culler, start=-11, stop=-20)
    done = await culler.cull_once(now=T0 + timedelta(minutes=20))
    assert done["erin/train"].cull and not done["alice"].cull
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]
    assert sorted(hub_api.asked) == ["alice", "erin", "erin"]
