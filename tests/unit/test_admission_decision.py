"""Admission is one pure decision (issue 31): ``admit`` over plain data answers admit (a
placement), queue (a sentence) or refuse (a sentence, a reason code, a status), in the
order the hub applied them before it was extracted."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.scheduling import Allowed, Refuse, Wait
from jupyterhub_gpu.core.scheduling.admission import (
    QUEUE_AHEAD,
    QUEUE_FENCING,
    Admit,
    Queue,
    QueueView,
    Refused,
    admit,
    overlay,
)
from jupyterhub_gpu.core.snapshot import ClusterSnapshot

pytestmark = pytest.mark.unit

RTX = "NVIDIA GeForce RTX 3090"


def snapshot(n: int = 2, taken: dict[str, str] | None = None) -> ClusterSnapshot:
    gpus = tuple(
        GPU(uuid=f"GPU-{i}", index=i, model=RTX, memory_mib=24576, compute_capability=(8, 6))
        for i in range(n)
    )
    inventory = NodeInventory(name="n1", driver_version="550.54.15", gpus=gpus)
    return ClusterSnapshot(nodes=(NodeState(inventory),), allocations=dict(taken or {}))


ONE = PlacementRequest(1)
ALLOWED = QueueView(quota=Allowed(ONE))


def test_a_free_gpu_is_admitted() -> None:
    verdict = admit(snapshot(), ONE, ALLOWED)
    assert isinstance(verdict, Admit)
    assert verdict.placement.node == "n1" and len(verdict.placement.gpu_uuids) == 1


def test_the_users_own_cap_comes_first() -> None:
    verdict = admit(snapshot(), ONE, ALLOWED, user_cap_refusal="You hold 2 GPUs.")
    assert verdict == Refused("You hold 2 GPUs.", "user_gpu_cap", 429)


@pytest.mark.parametrize(
    "quota, may_wait, expected",
    [
        (Refuse("Never more than 4."), True, Refused("Never more than 4.", "gpu_quota", 403)),
        (Wait("Over the cap: it waits in the queue until one frees."), True,
         Queue("Over the cap: it waits in the queue until one frees.")),
        (Wait("Over the cap: it waits in the queue until one frees."), False,
         Refused("Over the cap: start it again when one frees.", "gpu_quota", 429)),
    ],
)  # fmt: skip
def test_queue_policys_quotas(
    quota: Allowed | Wait | Refuse, may_wait: bool, expected: object
) -> None:
    assert admit(snapshot(), ONE, QueueView(quota=quota, may_wait=may_wait)) == expected


def test_the_quota_narrows_the_request() -> None:
    """Placed as the quota narrowed it: a model the cluster lacks is refused."""
    narrowed = PlacementRequest(1, allowed_models=frozenset({"NVIDIA A100"}))
    verdict = admit(snapshot(), ONE, QueueView(quota=Allowed(narrowed)))
    assert isinstance(verdict, Refused) and "A100" in verdict.sentence


def test_others_in_line_or_a_reservation_make_it_queue_unless_it_never_waits() -> None:
    assert admit(snapshot(), ONE, QueueView(waiting=1, quota=Allowed(ONE))) == Queue(QUEUE_AHEAD)
    assert admit(snapshot(), ONE, QueueView(fencing=True, quota=Allowed(ONE))) == Queue(
        QUEUE_FENCING
    )
    alone = QueueView(waiting=3, fencing=True, quota=Allowed(ONE), may_wait=False)
    assert isinstance(admit(snapshot(), ONE, alone), Admit)


def test_fenced_gpus_look_taken_without_a_queue() -> None:
    view = QueueView(fenced=frozenset({"GPU-0"}), quota=Allowed(ONE), may_wait=False)
    verdict = admit(snapshot(), ONE, view)
    assert isinstance(verdict, Admit) and verdict.placement.gpu_uuids == ("GPU-1",)
    both = QueueView(fenced=frozenset({"GPU-0", "GPU-1"}), quota=Allowed(ONE), may_wait=False)
    refused = admit(snapshot(), ONE, both)
    assert isinstance(refused, Refused) and refused.code == "no_capacity"


def test_a_full_cluster_queues_and_an_impossible_request_is_refused() -> None:
    full = snapshot(taken={"GPU-0": "bob/", "GPU-1": "carol/"})
    assert isinstance(admit(full, ONE, ALLOWED), Queue)
    never = PlacementRequest(3)
    refused = admit(full, never, QueueView(quota=Allowed(never)))
    assert isinstance(refused, Refused) and (refused.code, refused.status) == ("no_capacity", 503)


def test_a_cpu_request_goes_to_the_least_busy_node_and_never_queues() -> None:
    cpu = PlacementRequest(0)
    verdict = admit(snapshot(), cpu, QueueView(waiting=5, fencing=True), servers_on={"n1": 3})
    assert verdict == Admit(verdict.placement) and verdict.placement.gpu_uuids == ()


def test_the_overlay_lays_the_ledgers_holds_over_the_snapshot() -> None:
    old = snapshot(taken={"GPU-0": "gone/"})
    new = overlay(old, {"GPU-1": "alice/"}, {"GPU-0": 2})
    assert new.allocations == {"GPU-1": "alice/"} and new.shares == {"GPU-0": 2}
    assert new.nodes is old.nodes and old.allocations == {"GPU-0": "gone/"}
