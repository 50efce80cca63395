"""The culler judges each GPU share by its own processes (issue #26), against the fake hub
and agents of test_culler_service (httpx.MockTransport; time passed in as ``now``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from jupyterhub_gpu.core.culling.idleness import Signal
from jupyterhub_gpu.wire.share_notices import load_share_notices
from tests.unit.test_culler_service import T0, World, make_culler, poll, server

pytestmark = pytest.mark.unit

A, B = "a" * 64, "b" * 64
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
