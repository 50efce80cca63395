"""Suspend instead of stop (docs/culler.md): the pure decisions (core/suspend.py), the
spawner state's record of a suspended server (wire/server_state.py) and the ledger's
count of a resumed server's container as that server's (GPULedger.label_allocation)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.core.holds import NodeHolds
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement.request import Placement
from jupyterhub_gpu.core.scheduling.admission import Admit, Queue, Refused
from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.core.suspend import (
    Fresh,
    Resume,
    SuspendedServer,
    checkpoint_name,
    fresh_line,
    kept_line,
    options_key,
    resume_or_fresh,
    suspend_refusal,
    suspended_words,
)
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.wire.server_state import decode_suspension, encode_suspension

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 6, 14, 0, tzinfo=timezone.utc)
OPTIONS = {"image": "demo-cuda11", "gpu_count": 1, "cpu": 1}
SAVED = SuspendedServer(
    node="node-b",
    container_id="c" * 64,
    checkpoint="jhgpu-20261206T120000Z",
    at=NOW - timedelta(hours=2),
    size_bytes=300 * 2**20,
    seconds=4.2,
    gpu_uuids=("GPU-b0",),
    allocation="alloc-a",
    options_key=options_key(OPTIONS),
    token="secret-token",
)


def node(name: str = "node-b", **state: bool) -> NodeState:
    gpus = tuple(
        GPU(uuid=f"GPU-{name[-1]}{i}", index=i, model="RTX", memory_mib=24576,
            compute_capability=(8, 6))
        for i in range(2)
    )  # fmt: skip
    return NodeState(NodeInventory(name, "550.54", gpus), **state)


def snapshot(
    *nodes: NodeState, taken: dict[str, str] | None = None, **kw: object
) -> ClusterSnapshot:
    return ClusterSnapshot(nodes=nodes or (node(),), allocations=dict(taken or {}), **kw)  # type: ignore[arg-type]


def decide(
    saved: SuspendedServer = SAVED, snap: ClusterSnapshot | None = None, **kw: object
) -> object:
    args: dict[str, object] = {"now": NOW, "options": options_key(OPTIONS), "keep_for_s": 7 * 86400}
    args.update(kw)
    return resume_or_fresh(saved, snap or snapshot(), **args)  # type: ignore[arg-type]


def test_a_suspended_server_whose_node_and_gpus_are_free_is_resumed_there() -> None:
    assert decide() == Resume(Placement("node-b", ("GPU-b0",)))


def test_a_cpu_server_is_resumed_on_its_node_whatever_its_gpus() -> None:
    cpu = replace(SAVED, gpu_uuids=())
    taken = {"GPU-b0": "bob/", "GPU-b1": "carol/"}
    assert decide(cpu, snapshot(taken=taken)) == Resume(Placement("node-b", ()))


@pytest.mark.parametrize(
    "change, why",
    [
        ({"snap": snapshot(taken={"GPU-b0": "bob/"})}, "its GPU is in use by another server now"),
        ({"snap": snapshot(node("node-c"))}, "its node node-b is no longer in the cluster"),
        ({"snap": snapshot(node(reachable=False))}, "its node node-b does not answer"),
        ({"snap": snapshot(node(schedulable=False))}, "its node node-b is drained"),
        ({"options": options_key({**OPTIONS, "gpu_count": 2})},
         "you chose other options than the suspended server's"),
        ({"now": NOW + timedelta(days=6, hours=22, minutes=1)},
         "it was suspended 7 days ago, longer than it is kept"),
        ({"fenced": frozenset({"GPU-b0"})}, "its GPU is reserved for another group now"),
    ],
)  # fmt: skip
def test_a_suspended_server_is_started_afresh_when_it_cannot_be_resumed(
    change: dict[str, object], why: str
) -> None:
    assert decide(**change) == Fresh(why)


CAP = Refused("You hold 2 GPUs (max 2 per user); start it without GPUs.", "user_gpu_cap", 429)


@pytest.mark.parametrize(
    "admission",
    [CAP, Refused("Your group holds 8 GPUs, its quota.", "gpu_quota", 403),
     Queue("Others are waiting for GPUs before you."), Queue("Some GPUs are reserved.")],
)  # fmt: skip
def test_a_resume_is_a_start_like_any_refused_or_in_line_as_admission_says(
    admission: Refused | Queue,
) -> None:
    """Its GPUs free or not: the admission decision of a start of its size comes first
    (the checkpoint is kept on a refusal; in line, it resumes if its GPUs are free then)."""
    assert decide(admission=admission) == admission
    assert decide(snap=snapshot(taken={"GPU-b0": "bob/"}), admission=admission) == admission
    # what makes the checkpoint useless still comes first
    old = NOW + timedelta(days=8)
    assert isinstance(decide(now=old, admission=admission), Fresh)
    # a CPU server holds no GPU: nothing to wait for, no GPU quota
    cpu = replace(SAVED, gpu_uuids=())
    assert decide(cpu, admission=admission) == Resume(Placement("node-b", ()))


def test_an_admitted_start_resumes_when_its_gpus_are_free() -> None:
    admitted = Admit(Placement("node-b", ("GPU-b1",)))  # a fresh start would go there
    assert decide(admission=admitted) == Resume(Placement("node-b", ("GPU-b0",)))


def test_a_refused_resume_keeps_the_checkpoint_in_its_words() -> None:
    assert kept_line(CAP.sentence) == (
        "You hold 2 GPUs (max 2 per user); start it without GPUs. Your suspended server is "
        "kept: start it again once this allows, and it resumes where you left it."
    )


def test_a_gpu_gone_from_its_node_or_broken_is_said_so() -> None:
    gone = replace(SAVED, gpu_uuids=("GPU-b9",))
    assert decide(gone) == Fresh("its GPU is no longer on node node-b")
    (state,) = snapshot().nodes
    broken_gpu = replace(state.inventory.gpus[0], healthy=False)
    inventory = replace(state.inventory, gpus=(broken_gpu, state.inventory.gpus[1]))
    assert decide(snap=snapshot(NodeState(inventory))) == Fresh(
        "its GPU on node node-b is not healthy"
    )


def test_a_kept_checkpoint_has_no_age_limit_when_keep_is_zero() -> None:
    assert isinstance(decide(now=NOW + timedelta(days=400), keep_for_s=0), Resume)


def test_a_share_is_resumed_while_its_gpu_has_room_for_it() -> None:
    quarter = replace(SAVED, share=Share(1, 4, 6144, "time-slicing"))
    roomy = snapshot(taken={"GPU-b0": SHARED}, shares={"GPU-b0": 3})
    assert decide(quarter, roomy) == Resume(Placement("node-b", ("GPU-b0",), quarter.share))
    full = snapshot(taken={"GPU-b0": SHARED}, shares={"GPU-b0": 4})
    assert decide(quarter, full) == Fresh("its share of a GPU is in use by other servers now")
    whole = snapshot(taken={"GPU-b0": "bob/"})
    assert decide(quarter, whole) == Fresh("its share of a GPU is in use by other servers now")


def test_the_options_fingerprint_ignores_key_order_and_sees_any_change() -> None:
    assert options_key({"a": 1, "b": [1, 2]}) == options_key({"b": [1, 2], "a": 1})
    assert options_key({"a": 1}) != options_key({"a": 2})
    assert options_key(None) == options_key({})


@pytest.mark.parametrize(
    "kw, refusal",
    [
        ({}, None),
        ({"enabled": False}, "suspending servers is off on this hub (GPUCluster.suspend)"),
        ({"checkpoints": False},
         "node node-b's Docker engine cannot checkpoint containers (it runs without "
         "--experimental)"),
        ({"memory_bytes": 40 * 2**30},
         "it holds 40 GiB of memory, more than a checkpoint may take "
         "(GPUCluster.suspend_max_gib, 32 GiB)"),
        ({"memory_bytes": 40 * 2**30, "max_bytes": 0}, None),
        ({"memory_bytes": None}, None),
        # the node's budget for checkpoints (GPUCluster.suspend_node_gib)
        ({"node_held_bytes": 60 * 2**30, "node_max_bytes": 64 * 2**30, "memory_bytes": 8 * 2**30},
         "node node-b's suspended servers hold 60 GiB of its disk already; this one's 8.0 "
         "GiB would pass its budget (GPUCluster.suspend_node_gib, 64 GiB)"),
        ({"node_held_bytes": 56 * 2**30, "node_max_bytes": 64 * 2**30, "memory_bytes": 8 * 2**30},
         None),  # just fits
        ({"node_held_bytes": 600 * 2**30, "node_max_bytes": 0}, None),  # no limit
    ],
)  # fmt: skip
def test_when_the_hub_refuses_to_suspend(kw: dict[str, object], refusal: str | None) -> None:
    args: dict[str, object] = {
        "enabled": True, "node": "node-b", "checkpoints": True,
        "memory_bytes": 2**30, "max_bytes": 32 * 2**30,
    }  # fmt: skip
    assert suspend_refusal(**{**args, **kw}) == refusal  # type: ignore[arg-type]


def test_what_users_read() -> None:
    idle = "idle: no hub activity for 1 h 02 min, kernels idle (timeout 30 min)"
    words = suspended_words("", NOW - timedelta(minutes=5), idle, NOW)
    assert words.text == (
        "Your server was suspended at 13:55 UTC because it had been idle for 1 h 02 min "
        "(the limit is 30 min). Start it again to resume where you left it, with your "
        "kernels and their variables."
    )
    assert words.said == "13:55 UTC" and not words.postponable
    other_day = suspended_words("train", NOW - timedelta(days=1), "", NOW)
    assert other_day.text.startswith("Your server 'train' was suspended at Sat 05 Dec 14:00 UTC.")
    assert fresh_line("its node node-b is drained") == (
        "Your suspended server could not be resumed: its node node-b is drained. Starting a "
        "new one: your files are kept, your kernels and their variables are not."
    )
    assert checkpoint_name(NOW) == "jhgpu-20261206T140000Z"


def test_the_state_keeps_a_suspended_server_whole_and_never_logs_its_token() -> None:
    shared = replace(SAVED, share=Share(1, 4, 6144, "time-slicing"))
    for saved in (SAVED, shared):
        state = encode_suspension(saved, "")
        assert decode_suspension(state) == (saved, "")
    assert decode_suspension(encode_suspension(None, "alloc-a")) == (None, "alloc-a")
    assert encode_suspension(None, "") == {}
    assert "secret-token" not in repr(SAVED)


@pytest.mark.parametrize(
    "broken",
    [
        {"node": ""},
        {"container_id": 7},
        {"at": "yesterday"},
        {"size_bytes": -1},
        {"seconds": True},
        {"gpu_uuids": "GPU-b0"},
        {"gpu_uuids": ["x"] * 65},
        {"token": "t" * 513},
        {"checkpoint": None},
    ],
)
def test_a_malformed_suspended_record_is_forgotten(broken: dict[str, object]) -> None:
    state = encode_suspension(SAVED, "")
    state["suspended"].update(broken)
    assert decode_suspension(state) == (None, "")
    assert decode_suspension({"suspended": "x", "labelled_allocation": 5}) == (None, "")


def test_a_resumed_servers_container_allocation_is_live_while_its_server_is_placed() -> None:
    """The restored container carries the allocation it was created with (its sealed
    labels cannot change): the ledger counts it as the resumed server's, so that
    reconciliation never removes that container as an interrupted spawn's."""
    ledger = GPULedger()
    ledger.reserve_placement("alice/", Placement("node-b", ("GPU-b0",)), "alloc-b")
    ledger.label_allocation("alice/", "alloc-a")
    assert ledger.live_allocations() == {"alloc-a", "alloc-b"}
    ledger.release_placement("alice/", ["GPU-b0"], "alloc-b", None)
    assert ledger.live_allocations() == set()
    ledger.reserve_placement("alice/", Placement("node-b", ("GPU-b0",)), "alloc-c")
    assert ledger.live_allocations() == {"alloc-c"}  # the label went with its server
    ledger.label_allocation("alice/", "alloc-a")
    ledger.orphan("alice/")  # a stop that could not reach the node: no one's container
    assert ledger.live_allocations() == set()
    assert isinstance(ledger.on_node("node-b"), NodeHolds)


def test_a_resume_keeps_to_the_models_the_groups_quota_leaves_room_on() -> None:
    """The quota narrowed the start to other models: a resume onto its own would pass
    the group's cap on its model, so the start is a fresh one there."""
    admitted = Admit(Placement("node-b", ("GPU-b1",)))
    others = frozenset({"A100"})
    assert decide(admission=admitted, allowed_models=others) == Fresh(
        "your group has no room left on its GPU model now"
    )
    assert decide(admission=admitted, allowed_models=frozenset({"RTX"})) == Resume(
        Placement("node-b", ("GPU-b0",))
    )


def test_a_refusal_keeps_the_checkpoint_whatever_else_holds() -> None:
    """A drained node or other options would make a fresh start, but a start now is
    refused anyway: the checkpoint is kept (before, it was dropped for nothing)."""
    drained = snapshot(node(schedulable=False))
    assert decide(snap=drained, admission=CAP) == CAP
    assert decide(options=options_key({"gpu_count": 2}), admission=CAP) == CAP
    assert kept_line(CAP.sentence, lasting=True).endswith(
        "Your suspended server is kept until it expires, but it holds more than you may "
        "now: a start with fewer GPUs starts a new server."
    )
