"""The hub's GPU queue (spawnqueue.py) over a real ledger and a fixed inventory: who gets
a freed GPU, what waiters are told, and that leaving the queue (cancel, timeout) holds
nothing. The decisions themselves are scheduling's (tests/unit/test_scheduling*.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.accounting.report import Interval
from jupyterhub_gpu.core.culling.idleness import Deadline
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement import Placement, PlacementRequest
from jupyterhub_gpu.core.scheduling import QueuedRequest, Reservation
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.files import save_deadlines
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.queue import QueueFull, QueueTimeout, SpawnQueue, span, usage_items
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit

RTX = "NVIDIA GeForce RTX 3090"


class FakeCluster:
    """What the queue reads of the hub's Cluster: its ledger and a snapshot."""

    def __init__(self, gpus: int) -> None:
        self.ledger = GPULedger()
        self.recorder: Any = None  # no accounting store: no past use
        inventory = NodeInventory(
            "n1",
            "550.54.15",
            tuple(GPU(f"GPU-{i}", i, RTX, 24576, compute_capability=(8, 6)) for i in range(gpus)),
        )
        self.nodes = (NodeState(inventory),)

    async def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(self.nodes, self.ledger.allocations())


class Spawn:
    """A waiting spawn as the spawner does it: ``take`` reserves in the ledger."""

    def __init__(self, queue: SpawnQueue, cluster: FakeCluster, user: str, at: float) -> None:
        self.cluster, self.holder = cluster, f"{user}/"
        self.item = QueuedRequest(self.holder, user, "lab", PlacementRequest(1), at)
        self.news: list[str] = []
        self.queue = queue

    def take(self, placement: Placement) -> bool:
        try:
            self.cluster.ledger.reserve(self.holder, placement.node, placement.gpu_uuids)
        except KeyError:
            return False
        return True

    def wait(self, timeout: float = 30) -> asyncio.Task[Placement]:
        return asyncio.ensure_future(
            self.queue.wait(self.item, self.take, self.news.append, timeout)
        )


def setup(gpus: int = 1) -> tuple[FakeCluster, SpawnQueue]:
    cluster = FakeCluster(gpus)
    cluster.ledger.reserve("owner/", "n1", [f"GPU-{i}" for i in range(gpus)])
    queue = SpawnQueue(cluster, logging.getLogger("test"), interval=60)  # type: ignore[arg-type]
    return cluster, queue


def test_a_freed_gpu_goes_to_the_first_in_line_and_the_second_moves_up() -> None:
    async def scenario() -> None:
        cluster, queue = setup()
        first, second = Spawn(queue, cluster, "ann", 100.0), Spawn(queue, cluster, "ben", 200.0)
        t1, t2 = first.wait(), second.wait()
        await wait_until_async(
            lambda: first.news and second.news, 5, "both to be told where they stand"
        )
        assert first.news[-1].startswith("1st in line for an NVIDIA GeForce RTX 3090 (group lab)")
        assert second.news[-1].startswith("2nd in line"), second.news
        cluster.ledger.release("owner/")
        cluster.ledger.end_allocation("a-owner", EndReason.STOPPED)  # the release event
        placement = await asyncio.wait_for(t1, 5)
        assert placement == Placement("n1", ("GPU-0",))
        assert cluster.ledger.held_by("ann/") == ["GPU-0"] and not t2.done()
        await wait_until_async(
            lambda: second.news[-1].startswith("1st in line"), 5, "ben to move up"
        )
        t2.cancel()
        await asyncio.gather(t2, return_exceptions=True)
        assert len(queue) == 0 and cluster.ledger.held_by("ben/") == []

    asyncio.run(scenario())


def test_a_cancelled_wait_leaves_at_once_and_never_takes_a_gpu_later() -> None:
    async def scenario() -> None:
        cluster, queue = setup()
        ann = Spawn(queue, cluster, "ann", 100.0)
        task = ann.wait()
        await wait_until_async(lambda: ann.news, 5, "ann to be told where she stands")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert len(queue) == 0
        cluster.ledger.release("owner/")
        cluster.ledger.end_allocation("a-owner", EndReason.STOPPED)
        # a decision round after the cancel (the one ben's arrival runs, counted in
        # queue.decisions) finds the freed GPU: it is his, nothing is hers
        decided = queue.decisions
        ben = Spawn(queue, cluster, "ben", 200.0)
        placement = await asyncio.wait_for(ben.wait(), 5)
        assert queue.decisions > decided and placement == Placement("n1", ("GPU-0",))
        assert cluster.ledger.held_by("ann/") == [] and cluster.ledger.held_by("ben/") == ["GPU-0"]

    asyncio.run(scenario())


def test_a_wait_that_runs_out_says_where_it_stood() -> None:
    async def scenario() -> None:
        cluster, queue = setup()
        ann = Spawn(queue, cluster, "ann", 100.0)
        with pytest.raises(QueueTimeout) as info:
            await ann.wait(timeout=0.3)
        assert info.value.where.startswith("1st in line for an NVIDIA GeForce RTX 3090")
        assert len(queue) == 0 and cluster.ledger.held_by("ann/") == []

    asyncio.run(scenario())


def test_a_request_that_fits_elsewhere_backfills_past_the_head() -> None:
    """ann waits for 2 GPUs on a 2-GPU node where one is held; ben's 1 GPU request on
    the same node cannot fit either; a second node with one free GPU takes ben at once."""

    async def scenario() -> None:
        cluster, queue = setup(gpus=2)
        extra = NodeInventory("n2", "550.54.15", (GPU("GPU-x", 0, RTX, 24576, (8, 6)),))
        cluster.nodes = (*cluster.nodes, NodeState(extra))
        cluster.ledger.release("owner/", ["GPU-1"])
        ann = Spawn(queue, cluster, "ann", 100.0)
        ann.item = replace(ann.item, request=PlacementRequest(2))
        ben = Spawn(queue, cluster, "ben", 200.0)
        t_ann, t_ben = ann.wait(), ben.wait()
        placement = await asyncio.wait_for(t_ben, 5)
        assert placement.node in {"n1", "n2"} and not t_ann.done()
        t_ann.cancel()
        await asyncio.gather(t_ann, return_exceptions=True)

    asyncio.run(scenario())


def test_a_cancel_right_after_the_decision_is_not_lost() -> None:
    """JupyterHub cancels a queued spawn (its owner pressed cancel) in the same loop turn
    in which the queue gave it GPUs: the spawn must see the cancel (and undo its start),
    not go on to create a container on GPUs the hub is about to free."""

    async def scenario() -> None:
        cluster, queue = setup()
        ann = Spawn(queue, cluster, "ann", 100.0)
        plain_take, tasks = ann.take, []

        def take_then_cancel(placement: Placement) -> bool:
            asyncio.get_running_loop().call_soon(tasks[0].cancel)  # before the task resumes
            return plain_take(placement)

        ann.take = take_then_cancel  # type: ignore[method-assign]
        task = ann.wait()
        tasks.append(task)
        await wait_until_async(lambda: ann.news, 5, "ann to wait")
        cluster.ledger.release("owner/")
        cluster.ledger.end_allocation("a-owner", EndReason.STOPPED)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(queue) == 0

    asyncio.run(scenario())


def test_a_user_at_their_gpu_cap_waits_and_blocks_nobody() -> None:
    """ann (cap 1) already holds a GPU and waits for another; ben, behind her, gets the
    GPU that frees up; ann keeps waiting."""

    async def scenario() -> None:
        cluster, queue = setup(gpus=2)
        cluster.ledger.release("owner/", ["GPU-1"])
        cluster.ledger.reserve("ann/held", "n1", ["GPU-1"])
        ann, ben = Spawn(queue, cluster, "ann", 100.0), Spawn(queue, cluster, "ben", 200.0)
        t_ann = asyncio.ensure_future(queue.wait(ann.item, ann.take, ann.news.append, 30, 1))
        t_ben = ben.wait()
        await wait_until_async(lambda: ann.news and ben.news, 5, "both to wait")
        cluster.ledger.release("owner/")
        cluster.ledger.end_allocation("a-owner", EndReason.STOPPED)
        assert await asyncio.wait_for(t_ben, 5) == Placement("n1", ("GPU-0",))
        assert not t_ann.done() and cluster.ledger.held_by("ann/") == []
        t_ann.cancel()
        await asyncio.gather(t_ann, return_exceptions=True)

    asyncio.run(scenario())


def test_a_user_may_have_only_so_many_spawns_waiting() -> None:
    async def scenario() -> None:
        cluster, queue = setup()
        queue.max_per_user = 2
        spawns = [Spawn(queue, cluster, "ann", 100.0 + i) for i in range(3)]
        for i, spawn in enumerate(spawns):
            spawn.item = replace(spawn.item, id=f"ann/s{i}")
        tasks = [spawn.wait() for spawn in spawns[:2]]
        with pytest.raises(QueueFull, match="already have 2 servers waiting"):
            await spawns[2].wait()
        assert len(queue) == 2
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())


def test_the_culler_s_deadlines_give_the_estimate(tmp_path: Path) -> None:
    """owner's server (holding the only GPU) would be culled for idleness at 14:20: the
    waiting user is told so, with no other user's name."""

    async def scenario() -> None:
        cluster, queue = setup()
        at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=30)
        save_deadlines(tmp_path / "d.json", {"owner/": Deadline(at, "idle")})
        queue.deadlines_file = str(tmp_path / "d.json")
        ann = Spawn(queue, cluster, "ann", 100.0)
        task = ann.wait()
        await wait_until_async(lambda: ann.news, 5, "ann to be told")
        words = ann.news[-1]
        # 30 minutes on may be tomorrow (a run near midnight): then the day is said too.
        same_day = at.date() == datetime.now(timezone.utc).date()
        when = f"{at:%H:%M}" if same_day else f"{at:%a %d %b %H:%M}"
        assert f"expected to free up by about {when} UTC (" in words, words
        assert queue.expected_at(ann.item.id) == at.timestamp()  # for the page's <time>
        assert "(a server on n1 reaches its idle limit)" in words and "owner" not in words
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


class FakeStore:
    def __init__(self, intervals: list[Interval]) -> None:
        self.found, self.reads = intervals, 0

    def intervals(self, start: datetime, end: datetime) -> list[Interval]:
        self.reads += 1
        return self.found

    def reservations(self, ending_after: datetime) -> list[Any]:
        return []


class FakeRecorder:
    """The accounting recorder's read path: ``call`` runs on "its thread" (here: now)."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def call(self, read: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(read(self.store))
        return done


def test_fair_share_gives_the_freed_gpu_to_the_group_that_used_less() -> None:
    """heavy's group held 4 GPUs for the last 10 hours (the accounting store says so);
    light's group nothing. heavy asked first, a few seconds earlier; the freed GPU goes to
    light, and heavy is told it is 2nd with its group's share and use."""

    async def scenario() -> None:
        cluster, queue = setup()
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        used = Interval("hank", "heavy", RTX, "n1", 4, now - timedelta(hours=10), None)
        store = FakeStore([used])
        cluster.recorder = FakeRecorder(store)
        t0 = time.time()
        hank, lily = Spawn(queue, cluster, "hank", t0 - 5), Spawn(queue, cluster, "lily", t0)
        hank.item = replace(hank.item, group="heavy")
        lily.item = replace(lily.item, group="light")
        t_hank, t_lily = hank.wait(), lily.wait()
        await wait_until_async(lambda: hank.news and lily.news, 5, "both to be told")
        assert hank.news[-1].startswith("2nd in line"), hank.news
        assert lily.news[-1].startswith("1st in line"), lily.news
        cluster.ledger.release("owner/")
        cluster.ledger.end_allocation("a-owner", EndReason.STOPPED)
        assert await asyncio.wait_for(t_lily, 5) == Placement("n1", ("GPU-0",))
        assert not t_hank.done() and store.reads == 1  # read once, not every decision
        t_hank.cancel()
        await asyncio.gather(t_hank, return_exceptions=True)

    asyncio.run(scenario())


def test_usage_items_clip_to_the_window_and_count_open_allocations_to_now() -> None:
    now = datetime(2026, 1, 10, 12)
    since = now - timedelta(days=5)
    found = [
        Interval("a", "g", RTX, "n1", 2, now - timedelta(hours=3), now - timedelta(hours=1)),
        Interval("b", "g", RTX, "n1", 1, now - timedelta(hours=2), None),  # still open
        Interval("c", "h", RTX, "n1", 4, since - timedelta(hours=10), since + timedelta(hours=1)),
        Interval("d", "h", RTX, "n1", 0, now - timedelta(hours=2), None),  # CPU only
    ]
    items = usage_items(found, since, now)
    at = (now - timedelta(hours=1)).replace(tzinfo=timezone.utc).timestamp()
    assert [(i.user, i.gpu_hours) for i in items] == [("a", 4.0), ("b", 2.0), ("c", 4.0)]
    assert items[0].ended_at == at


def test_only_the_server_on_reserved_gpus_is_preempted_and_fenced_gpus_are_hidden() -> None:
    """GPU-0 is reserved for "course" now. alice's orphan (a stop that could not reach the
    node) holds GPU-0; her new server of the same name holds GPU-1: it is not stopped.
    bob's server on GPU-0 would be; to others than "course" GPU-0 looks taken."""
    cluster, queue = setup(gpus=2)
    cluster.ledger.release("owner/")
    now = time.time()
    queue.reservations = (
        Reservation("r", "course", now - 60, now + 3600, gpu_uuids=frozenset({"GPU-0"})),
    )
    cluster.last_nodes = lambda: cluster.nodes  # type: ignore[attr-defined]
    cluster.ledger.reserve("alice/", "n1", ["GPU-0"], "old")
    cluster.ledger.orphan("alice/")
    cluster.ledger.reserve("alice/", "n1", ["GPU-1"], "new")
    assert queue.preempted("alice/", ["GPU-1"]) is None
    cluster.ledger.release_orphan("old")
    cluster.ledger.reserve("bob/", "n1", ["GPU-0"], "b")
    conflict = queue.preempted("bob/", ["GPU-0"])
    assert conflict is not None and conflict.gpu_uuids == ("GPU-0",)
    snapshot = ClusterSnapshot(cluster.nodes, {})
    assert queue.fenced_for("lab", snapshot) == {"GPU-0"}
    assert queue.fenced_for("course", snapshot) == frozenset()


def test_callers_during_a_store_read_wait_for_it() -> None:
    """At hub start a spawn and several polls ask at once: one read, and none of them goes
    on without the reservations it brings."""

    class SlowStore(FakeStore):
        def reservations(self, ending_after: datetime) -> list[Any]:
            return [Reservation("r", "course", 0.0, 9e9, gpu_uuids=frozenset({"GPU-0"}))]

    class ThreadRecorder(FakeRecorder):
        def call(self, read: Any) -> Future[Any]:
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(1)
            return pool.submit(lambda: (time.sleep(0.2), read(self.store))[1])

    async def scenario() -> None:
        cluster, queue = setup()
        store = SlowStore([])
        cluster.recorder = ThreadRecorder(store)
        seen: list[int] = []

        async def caller() -> None:
            await queue.refresh()
            seen.append(len(queue.reservations))

        await asyncio.gather(*(caller() for _ in range(3)))
        assert seen == [1, 1, 1] and store.reads == 1

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "seconds, words",
    [
        (4, "4 s"),
        (119.4, "119 s"),
        (150, "2 min"),
        (3600, "1 h"),
        (7200, "2 h"),
        (9e3, "2 h 30 min"),
    ],
)
def test_span(seconds: float, words: str) -> None:
    assert span(seconds) == words


def _open(cluster: FakeCluster, holder: str, group: str, gpus: list[str]) -> None:
    """A server of ``holder`` charged to ``group`` on ``gpus``, as the spawner opens it."""
    user, server = holder.split("/", 1)
    allocation = f"alloc-{user}-{server}"
    cluster.ledger.reserve(holder, "n1", gpus, allocation)
    cluster.ledger.open_allocation(
        AllocationRecord(allocation, user, server, group, "n1", tuple(gpus), RTX, "img", "")
    )


@pytest.mark.parametrize(
    "case, reservation, warned",
    [
        ("another group's, in 2 h, on its GPU", ("course", 2, ["GPU-0"]), True),
        ("its own group's", ("lab", 2, ["GPU-0"]), False),
        ("on another GPU", ("course", 2, ["GPU-1"]), False),
        ("past the 24 h notice", ("course", 30, ["GPU-0"]), False),
        ("active already (a stop, not a warning)", ("course", -1, ["GPU-0"]), False),
    ],
)
def test_a_new_server_hears_of_a_reservation_that_will_take_its_gpus(
    case: str, reservation: tuple[str, float, list[str]], warned: bool
) -> None:
    cluster, queue = setup(gpus=2)
    cluster.ledger.release("owner/")
    group, in_hours, gpus = reservation
    now = time.time()
    start = now + in_hours * 3600
    queue.reservations = (Reservation("r", group, start, start + 7200, gpu_uuids=frozenset(gpus)),)
    _open(cluster, "alice/", "lab", ["GPU-0"])
    found = queue.upcoming("alice/", ["GPU-0"], cluster.nodes, now)
    assert [(c.reservation.id, c.gpu_uuids) for c in found] == (
        [("r", ("GPU-0",))] if warned else []
    ), case
    if warned:
        assert "your server will be stopped at" in found[0].notice(now)


def test_a_model_reservation_warns_only_when_it_would_take_the_server_s_gpu() -> None:
    """A reservation of 1 x RTX 3090 prefers a free GPU: while one is free, alice's server
    is not warned; once both are held, it would take one (the first by index)."""
    cluster, queue = setup(gpus=2)
    cluster.ledger.release("owner/")
    now = time.time()
    queue.reservations = (Reservation("m", "course", now + 3600, now + 7200, model=RTX, count=1),)
    _open(cluster, "alice/", "lab", ["GPU-0"])
    assert queue.upcoming("alice/", ["GPU-0"], cluster.nodes, now) == []
    _open(cluster, "bob/", "lab", ["GPU-1"])
    assert [c.holder for c in queue.upcoming("alice/", ["GPU-0"], cluster.nodes, now)] == ["alice/"]
    assert queue.upcoming("bob/", ["GPU-1"], cluster.nodes, now) == []


def test_the_form_lists_reservations_of_groups_the_user_may_not_charge() -> None:
    cluster, queue = setup(gpus=2)
    now = datetime(2026, 11, 24, 12, tzinfo=timezone.utc).timestamp()
    queue.reservations = (
        Reservation("a", "course", now + 3600, now + 7200, gpu_uuids=frozenset({"GPU-1"})),
        Reservation("b", "lab", now + 3600, now + 7200, gpu_uuids=frozenset({"GPU-0"})),
    )
    assert queue.reserved_for_others(["lab"], cluster.nodes, now) == [
        "GPU 1 of n1 for group course, 13:00 to 14:00 UTC"
    ]
    assert len(queue.reserved_for_others([], cluster.nodes, now)) == 2
    queue.reservations = ()
    assert queue.reserved_for_others(["lab"], cluster.nodes, now) == []


def free_setup(gpus: int) -> tuple[FakeCluster, SpawnQueue]:
    """:func:`setup` with every GPU free, and the queue's view of the nodes the cluster's
    (the hub's reservation checks read ``last_nodes``)."""
    cluster, queue = setup(gpus)
    cluster.ledger.release("owner/")
    cluster.last_nodes = lambda: cluster.nodes  # type: ignore[attr-defined]
    return cluster, queue


def _open_share(cluster: FakeCluster, holder: str, group: str, gpu: str) -> None:
    """A server of ``holder`` charged to ``group`` on one quarter of ``gpu``."""
    user, server = holder.split("/", 1)
    allocation = f"alloc-{user}-{server}"
    cluster.ledger.reserve_share(holder, "n1", gpu, (1, 4), allocation)
    cluster.ledger.open_allocation(
        AllocationRecord(allocation, user, server, group, "n1", (gpu,), RTX, "img", "")
    )


def test_share_holders_of_other_groups_are_preempted_and_warned() -> None:
    """GPU-0 holds shares of alice (lab) and carol (course); bob (lab) holds GPU-1 whole.
    A reservation of course on GPU-0 stops alice's server, not carol's; one starting in
    an hour warns alice; a model-and-count one of course takes a held GPU only when none
    is free, and a shared GPU is held (never taken for a free one)."""
    cluster, queue = free_setup(gpus=3)
    now = time.time()
    _open_share(cluster, "alice/", "lab", "GPU-0")
    _open_share(cluster, "carol/", "course", "GPU-0")
    _open(cluster, "bob/", "lab", ["GPU-1"])
    on_gpu0 = frozenset({"GPU-0"})
    queue.reservations = (Reservation("r", "course", now - 60, now + 3600, gpu_uuids=on_gpu0),)
    conflict = queue.preempted("alice/", ["GPU-0"], now)
    assert conflict is not None and (conflict.holder, conflict.gpu_uuids) == ("alice/", ("GPU-0",))
    assert queue.preempted("carol/", ["GPU-0"], now) is None
    assert queue.preempted("bob/", ["GPU-1"], now) is None
    queue.reservations = (Reservation("r", "course", now + 3600, now + 7200, gpu_uuids=on_gpu0),)
    assert [c.holder for c in queue.upcoming("alice/", ["GPU-0"], cluster.nodes, now)] == ["alice/"]
    assert queue.upcoming("carol/", ["GPU-0"], cluster.nodes, now) == []
    assert queue.preempted("alice/", ["GPU-0"], now) is None  # not begun yet
    # 1 x RTX 3090 for course: GPU-2 is free, nobody is warned
    model = (Reservation("m", "course", now + 3600, now + 7200, model=RTX, count=1),)
    queue.reservations = model
    for holder, gpu in (("alice/", "GPU-0"), ("bob/", "GPU-1")):
        assert queue.upcoming(holder, [gpu], cluster.nodes, now) == [], holder
    # GPU-2 taken whole too: the first held GPU by index, the shared one: alice is warned
    _open(cluster, "dan/", "lab", ["GPU-2"])
    assert [c.holder for c in queue.upcoming("alice/", ["GPU-0"], cluster.nodes, now)] == ["alice/"]
    assert queue.upcoming("bob/", ["GPU-1"], cluster.nodes, now) == []
    assert queue.reserved_for_others(["lab"], cluster.nodes, now)[0].startswith(
        f"1 x {RTX} (likely on n1) for group course"
    )


def test_a_users_two_shares_of_one_gpu_keep_each_its_own_group() -> None:
    """A charge is per server, not per user: alice's two servers on quarters of GPU-0,
    one charged to course and one to lab. Course's reservation stops the lab one only;
    once that one is stopped, the course one is still course's (never preempted by its
    own group's reservation, as when the charges were kept per GPU and user)."""
    cluster, queue = free_setup(gpus=2)
    now = time.time()
    _open_share(cluster, "alice/a", "course", "GPU-0")
    _open_share(cluster, "alice/b", "lab", "GPU-0")
    on_gpu0 = frozenset({"GPU-0"})
    queue.reservations = (Reservation("r", "course", now - 60, now + 3600, gpu_uuids=on_gpu0),)
    stopped = queue.preempted("alice/b", ["GPU-0"], now)
    assert stopped is not None and stopped.holder == "alice/b"
    assert queue.preempted("alice/a", ["GPU-0"], now) is None
    cluster.ledger.release("alice/b")
    cluster.ledger.end_allocation("alloc-alice-b", EndReason.STOPPED)
    assert queue.preempted("alice/a", ["GPU-0"], now) is None
