"""Notices of running servers (jupyterhub_gpu/hub/api/notices.py): which servers are asked about,
and what their owner reads (the hub's part runs for real in
tests/integration/test_reservations.py)."""

from __future__ import annotations

from datetime import timezone
from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.scheduling import Reservation
from jupyterhub_gpu.core.scheduling.reservations import Conflict
from jupyterhub_gpu.hub.api.notices import server_notices
from tests.unit.test_scheduling import NOW

pytestmark = pytest.mark.unit


class _Queue:
    settings = SimpleNamespace(timezone=timezone.utc)

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str]]] = []

    def upcoming(self, holder: str, gpus: list[str], nodes: Any, now: float) -> list[Conflict]:
        self.asked.append((holder, gpus))
        late = Reservation("r2", "b", NOW + 7200, NOW + 9000, nodes=frozenset({"n"}))
        soon = Reservation("r1", "a", NOW + 1800, NOW + 3600, nodes=frozenset({"n"}))
        return [Conflict(r, holder, tuple(gpus), False) for r in (late, soon)]


def _spawner(active: bool, gpus: list[str]) -> Any:
    return SimpleNamespace(active=active, gpu_uuids=gpus)


def test_only_active_servers_with_gpus_are_asked_and_the_soonest_comes_first() -> None:
    queue = _Queue()
    user = SimpleNamespace(name="alice", spawners={
        "": _spawner(True, ["GPU-1"]), "cpu": _spawner(True, []), "old": _spawner(False, ["GPU-2"]),
    })  # fmt: skip
    got = server_notices(user, queue, (), NOW)
    assert queue.asked == [("alice/", ["GPU-1"])]
    assert [n["at"] for n in got] == sorted(n["at"] for n in got)
    assert got[0]["server"] == "" and "reserved for group a from 12:30" in got[0]["message"]
    assert got[0]["message"].startswith("Your default server is on a GPU reserved")
