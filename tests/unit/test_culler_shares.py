"""The culler judges each GPU share by its own processes (issue #26), against the fake hub
and agents of test_culler_service (httpx.MockTransport; time passed in as ``now``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from jupyterhub_gpu.core.culling.idleness import Signal
from jupyterhub_gpu.edges.files import load_share_notices
from jupyterhub_gpu.services.culler import state as culler_state
from jupyterhub_gpu.services.culler.app import GPUIdleCuller
from tests.unit.test_culler_service import T0, World, iso, make_culler, poll, server

pytestmark = pytest.mark.unit

A, B, C = "a" * 64, "b" * 64, "c" * 64
GPU = "GPU-a0"


def share_server(user: str, container: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    state = {"share": [1, 4, 6144, "time-slicing"], "object_id": container, **extra}
    return server(user, gpus=(GPU,), **state)


class SharedWorld(World):
    """alice and bob each hold a quarter of GPU-a0; bob trains, alice's kernel is idle."""

    def __init__(self) -> None:
        super().__init__()
        self.users = [
            self.user("alice", share_server("alice", A)),
            self.user("bob", share_server("bob", B)),
        ]
        self.gpu_util = {GPU: 90.0}
        self.gpu_memory = {GPU: 9000}
        self.kernels = {}  # no busy kernel anywhere: the GPU readings decide
        self.processes: list[dict[str, Any]] | None = [
            {"pid": 100, "container": A, "memory_mib": 1000, "utilization_pct": 0.0},
            {"pid": 200, "container": B, "memory_mib": 8000, "utilization_pct": 90.0},
        ]
        self.agent_answers["agent-a.test"] = self.answer

    def answer(self) -> httpx.Response:
        data = self.agent_a()
        if self.processes is not None:
            data["gpus"][0]["processes"] = self.processes
        return httpx.Response(200, json=data)


@pytest.fixture
def shared() -> SharedWorld:
    return SharedWorld()


async def round_after_polls(world: SharedWorld, tmp_path: Path, **traits: Any) -> dict[str, Any]:
    culler = make_culler(world, tmp_path, **traits)
    await culler.cull_once(now=T0.replace(hour=11))  # first sight: the shares are watched
    await poll(culler)
    return await culler.cull_once(now=T0)


async def test_an_idle_share_is_culled_though_its_gpu_is_busy(
    shared: SharedWorld, tmp_path: Path
) -> None:
    decisions = await round_after_polls(shared, tmp_path)
    assert (decisions["alice"].cull, decisions["alice"].signal) == (True, Signal.IDLE)
    assert (decisions["bob"].cull, decisions["bob"].signal) == (False, Signal.GPU)
    assert shared.deletes() == ["/hub/api/users/alice/server"]


async def test_a_busy_share_is_kept_though_its_neighbour_is_idle(
    shared: SharedWorld, tmp_path: Path
) -> None:
    shared.processes = [
        {"pid": 100, "container": A, "memory_mib": 1000, "utilization_pct": 60.0},
    ]
    shared.gpu_util = {GPU: 60.0}
    decisions = await round_after_polls(shared, tmp_path)
    assert (decisions["alice"].cull, decisions["alice"].signal) == (False, Signal.GPU)
    assert (decisions["bob"].cull, decisions["bob"].signal) == (True, Signal.IDLE)


async def test_without_per_process_data_a_share_is_judged_by_its_whole_gpu(
    shared: SharedWorld, tmp_path: Path
) -> None:
    shared.processes = None  # an older agent
    decisions = await round_after_polls(shared, tmp_path)
    assert not decisions["alice"].cull and decisions["alice"].signal is Signal.GPU
    assert shared.deletes() == []


async def test_a_host_process_on_the_gpu_keeps_no_share_and_culls_none(
    shared: SharedWorld, tmp_path: Path
) -> None:
    shared.processes = [{"pid": 7, "container": "", "memory_mib": 500, "utilization_pct": 95.0}]
    decisions = await round_after_polls(shared, tmp_path)
    # neither share ran anything: both idle by their own processes, the host's are no one's
    assert decisions["alice"].cull and decisions["bob"].cull


@pytest.mark.parametrize(
    "bad",
    [{"share": "1/4"}, {"share": [1, 4, "6 GiB", "mps"]}, {"object_id": None}, {"object_id": "x"}],
)
async def test_a_malformed_share_in_state_is_judged_as_a_whole_gpu(
    shared: SharedWorld, tmp_path: Path, bad: dict[str, Any]
) -> None:
    name, model = share_server("alice", A)
    model["state"].update(bad)
    model["state"] = {k: v for k, v in model["state"].items() if v is not None}
    shared.users[0] = shared.user("alice", (name, model))
    decisions = await round_after_polls(shared, tmp_path)
    # the busy GPU keeps it: never culled on a share the culler can't read
    assert not decisions["alice"].cull and decisions["alice"].signal is Signal.GPU


async def test_a_share_over_its_memory_is_warned_not_stopped_by_default(
    shared: SharedWorld, tmp_path: Path
) -> None:
    shared.processes = [
        {"pid": 100, "container": A, "memory_mib": 1000, "utilization_pct": 0.0},
        {"pid": 200, "container": B, "memory_mib": 8000, "utilization_pct": 90.0},
    ]
    notices = tmp_path / "share-notices.json"
    decisions = await round_after_polls(shared, tmp_path, share_notices_file=str(notices))
    assert not decisions["bob"].cull
    found = load_share_notices(notices)
    assert list(found) == ["bob/"]
    assert found["bob/"].gpu == GPU
    assert "8000 MiB" in found["bob/"].message and "6144 MiB" in found["bob/"].message


async def test_the_stop_policy_stops_a_share_that_stays_over(
    shared: SharedWorld, tmp_path: Path
) -> None:
    shared.users = [shared.user("bob", share_server("bob", B))]
    culler = make_culler(shared, tmp_path, share_memory_action="stop", share_memory_grace=600.0)
    await culler.cull_once(now=T0.replace(hour=11))  # watched from now on
    await poll(culler, 40, 20)
    first = await culler.cull_once(now=T0 - timedelta(minutes=20))
    assert not first["bob"].cull  # over, within the grace
    await poll(culler, 19, 0)
    later = await culler.cull_once(now=T0)
    assert (later["bob"].cull, later["bob"].signal) == (True, Signal.SHARE_MEMORY)
    assert later["bob"].reason.startswith(
        "its processes held 8000 MiB of GPU memory, more than its share's 6144 MiB, for 20 min"
    )
    assert shared.deletes() == ["/hub/api/users/bob/server"]


# -- an episode over memory across a restart of the culler ------------------------------


class Records(logging.Handler):
    """The culler's log records of WARNING and above, from :meth:`watch` on."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.logs: list[Any] = []  # the loggers it listens to

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def watch(self, culler: GPUIdleCuller) -> GPUIdleCuller:
        culler.log.addHandler(self)
        self.logs.append(culler.log)
        return culler


@pytest.fixture
def records() -> Iterator[Records]:
    found = Records()
    yield found
    for log in found.logs:
        log.removeHandler(found)


def saved_episodes(tmp_path: Path) -> dict[str, Any]:
    episodes: dict[str, Any] = json.loads((tmp_path / "state.json").read_text())["share_episodes"]
    return episodes


async def over_then_restart(
    world: SharedWorld,
    tmp_path: Path,
    *,
    restart_at: datetime | None = None,
    records: Records | None = None,
    **traits: Any,
) -> GPUIdleCuller:
    """bob's share is judged over at T0 - 20 min under the ``stop`` policy (grace 10 min ...
    or ``traits``); then the culler restarts (a new one reads the state file) a minute later."""
    world.users = [world.user("bob", share_server("bob", B))]
    traits = {"share_memory_action": "stop", "share_memory_grace": 1500.0, **traits}
    first = make_culler(world, tmp_path, **traits)
    await first.cull_once(now=T0.replace(hour=11))  # watched from now on
    await poll(first, 40, 20)
    assert not (await first.cull_once(now=T0 - timedelta(minutes=20)))["bob"].cull
    assert saved_episodes(tmp_path)["bob/"]["since"] == (T0 - timedelta(minutes=20)).isoformat()
    again = make_culler(world, tmp_path, **traits)
    if records is not None:
        records.watch(again)
    again.load_state(now=restart_at or T0 - timedelta(minutes=19))
    return again


async def test_a_restart_mid_episode_keeps_the_grace_running(
    shared: SharedWorld, tmp_path: Path, records: Records
) -> None:
    notices = tmp_path / "share-notices.json"
    culler = await over_then_restart(
        shared, tmp_path, records=records, share_notices_file=str(notices)
    )
    # the first round after the restart has no reading yet: the episode waits for one
    assert not (await culler.cull_once(now=T0 - timedelta(minutes=18, seconds=30)))["bob"].cull
    assert saved_episodes(tmp_path)["bob/"]["since"] == (T0 - timedelta(minutes=20)).isoformat()
    await poll(culler, 18, 6)
    kept = await culler.cull_once(now=T0 - timedelta(minutes=6))
    assert not kept["bob"].cull
    # the user is told what is left of the grace counted from before the restart
    assert load_share_notices(notices, now=T0)["bob/"].at == T0 - timedelta(minutes=20)
    assert "stopped in 11 min" in load_share_notices(notices, now=T0)["bob/"].message
    await poll(culler, 5, 0)
    stopped = await culler.cull_once(now=T0 + timedelta(minutes=5))  # T0 - 20 min + grace
    assert (stopped["bob"].cull, stopped["bob"].signal) == (True, Signal.SHARE_MEMORY)
    assert "for 25 min" in stopped["bob"].reason
    assert shared.deletes() == ["/hub/api/users/bob/server"]
    assert not [m for m in records.messages if "state" in m or "episode" in m]


@pytest.mark.parametrize(
    "respawn",
    [
        {"object_id": C},  # a new container
        {"started": iso(5)},  # the same container, started again
    ],
    ids=["container", "started"],
)
async def test_a_restored_episode_of_another_server_starts_afresh(
    shared: SharedWorld, tmp_path: Path, respawn: dict[str, Any]
) -> None:
    culler = await over_then_restart(shared, tmp_path)
    name, model = share_server("bob", respawn.get("object_id", B))
    model["started"] = respawn.get("started", model["started"])
    shared.users = [shared.user("bob", (name, model))]
    shared.processes = [
        {"pid": 200, "container": respawn.get("object_id", B), "memory_mib": 8000,
         "utilization_pct": 90.0},
    ]  # fmt: skip
    await culler.cull_once(now=T0 - timedelta(minutes=18, seconds=30))
    await poll(culler, 18, 0)
    decisions = await culler.cull_once(now=T0 + timedelta(minutes=5))
    # over since T0 + 5 min only: the other server's 25 minutes do not count
    assert not decisions["bob"].cull, decisions["bob"].reason
    assert saved_episodes(tmp_path)["bob/"]["since"] == (T0 + timedelta(minutes=5)).isoformat()
    assert shared.deletes() == []


async def test_a_restored_episode_of_a_server_gone_is_dropped(
    shared: SharedWorld, tmp_path: Path
) -> None:
    culler = await over_then_restart(shared, tmp_path)
    shared.users = []
    await culler.cull_once(now=T0 - timedelta(minutes=18))
    assert saved_episodes(tmp_path) == {}


async def test_an_episode_saved_long_before_the_restart_starts_afresh(
    shared: SharedWorld, tmp_path: Path
) -> None:
    # away for longer than interval + gpu_stale_after (120 s + 180 s): unknown meanwhile
    late = T0 - timedelta(minutes=20) + timedelta(seconds=301)
    culler = await over_then_restart(shared, tmp_path, restart_at=late)
    await culler.cull_once(now=late)  # watched again from now on
    await poll(culler, 14, 0)
    decisions = await culler.cull_once(now=T0 + timedelta(minutes=5))
    assert not decisions["bob"].cull
    assert saved_episodes(tmp_path)["bob/"]["since"] == (T0 + timedelta(minutes=5)).isoformat()


def corrupt_episodes(state: dict[str, Any]) -> None:
    state["share_episodes"]["bob/"]["since"] = 1767268800


def future_episode(state: dict[str, Any]) -> None:
    state["share_episodes"]["bob/"]["since"] = (T0 + timedelta(days=1)).isoformat()


def many_episodes(state: dict[str, Any]) -> None:
    one = state["share_episodes"]["bob/"]
    state["share_episodes"] = {f"u{i}/": one for i in range(10_001)}


@pytest.mark.parametrize(
    ("spoil", "warning"),
    [
        (lambda s: s.update(share_episodes=[]), "share episodes must be an object, got list"),
        (corrupt_episodes, "'bob/': since must be a string"),
        (future_episode, "not after now"),
        (many_episodes, "10001 share episodes, more than the 10000 allowed"),
    ],
    ids=["list", "wrong-type", "future", "too-many"],
)
async def test_bad_saved_episodes_are_one_warning_and_a_fresh_grace(
    shared: SharedWorld,
    tmp_path: Path,
    records: Records,
    spoil: Callable[[dict[str, Any]], None],
    warning: str,
) -> None:
    world = shared
    world.users = [world.user("bob", share_server("bob", B))]
    traits = {"share_memory_action": "stop", "share_memory_grace": 1500.0}
    first = make_culler(world, tmp_path, **traits)
    await first.cull_once(now=T0.replace(hour=11))
    await poll(first, 40, 20)
    await first.cull_once(now=T0 - timedelta(minutes=20))
    path = tmp_path / "state.json"
    state = json.loads(path.read_text())
    spoil(state)
    path.write_text(json.dumps(state))
    again = make_culler(world, tmp_path, **traits)
    records.watch(again).load_state(now=T0 - timedelta(minutes=19))
    assert len(records.messages) == 1
    assert warning in records.messages[0] and "grace starts afresh" in records.messages[0]
    assert len(again._trackers) == len(first._trackers)  # the GPU histories are kept
    await again.cull_once(now=T0 - timedelta(minutes=19))  # watched again from now on
    await poll(again, 18, 0)
    decisions = await again.cull_once(now=T0 + timedelta(minutes=5))
    assert not decisions["bob"].cull
    assert saved_episodes(tmp_path)["bob/"]["since"] == (T0 + timedelta(minutes=5)).isoformat()


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[1, 2]", b" " * 2048])
async def test_an_unreadable_or_huge_state_file_is_one_warning_and_a_fresh_start(
    shared: SharedWorld,
    tmp_path: Path,
    records: Records,
    monkeypatch: pytest.MonkeyPatch,
    content: bytes,
) -> None:
    monkeypatch.setattr(culler_state, "MAX_STATE_FILE", 1024)
    (tmp_path / "state.json").write_bytes(content)
    shared.users = [shared.user("bob", share_server("bob", B))]
    culler = make_culler(shared, tmp_path, share_memory_action="stop", share_memory_grace=0.0)
    records.watch(culler).load_state(now=T0)
    assert len(records.messages) == 1 and "starting afresh" in records.messages[0]
    if len(content) > 1024:
        assert "2048 bytes, more than the 1024 read" in records.messages[0]
    await culler.cull_once(now=T0.replace(hour=11))
    await poll(culler, 1, 0)
    decisions = await culler.cull_once(now=T0)  # grace 0: stopped on its first judgement
    assert decisions["bob"].cull and decisions["bob"].signal is Signal.SHARE_MEMORY


async def test_back_under_its_memory_the_episode_leaves_the_state_file(
    shared: SharedWorld, tmp_path: Path
) -> None:
    culler = await over_then_restart(shared, tmp_path)
    shared.processes = [{"pid": 200, "container": B, "memory_mib": 3000, "utilization_pct": 90.0}]
    await culler.cull_once(now=T0 - timedelta(minutes=19))  # watched again from now on
    await poll(culler, 18, 0)
    assert not (await culler.cull_once(now=T0))["bob"].cull
    assert saved_episodes(tmp_path) == {}
    # over again: a new episode, its grace from now
    shared.processes = [{"pid": 200, "container": B, "memory_mib": 8000, "utilization_pct": 90.0}]
    await culler.poll_gpus_once(now=T0 + timedelta(minutes=1))
    assert not (await culler.cull_once(now=T0 + timedelta(minutes=5)))["bob"].cull
    assert saved_episodes(tmp_path)["bob/"]["since"] == (T0 + timedelta(minutes=5)).isoformat()
