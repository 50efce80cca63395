"""The spawner's side of issue 12's last gaps, over a real Cluster with one fake node (no
engine is called): which group a server is charged to (the form's choice, one place
decides), how long that group may wait in the queue (``queue_policy``'s per-group
``max_queue_wait``), and what a user hears of reservations (the spawn page, the form, and
why a reservation stopped their server)."""

from __future__ import annotations

import asyncio
import re
import time
from html import unescape
from types import SimpleNamespace
from typing import Any

import pytest
from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException
from jupyterhub.utils import format_exception

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.form import SpawnOptions
from jupyterhub_gpu.core.form.user_quota import UserQuota
from jupyterhub_gpu.core.identity import Identity
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement.request import Placement, PlacementRequest
from jupyterhub_gpu.core.scheduling import Reservation, queue_settings
from jupyterhub_gpu.core.sharing import Share, parse_policy
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.queue import MustQueue, QueueTimeout, SpawnQueue
from jupyterhub_gpu.hub.runtime import runtime_of
from jupyterhub_gpu.hub.spawn_form import spawn_form
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner
from tests.support.runtime import queue_of, use_cluster

pytestmark = pytest.mark.unit

RTX = "NVIDIA GeForce RTX 3090"
NODES = (
    NodeState(
        NodeInventory(
            "n1",
            "550.54.15",
            tuple(GPU(f"GPU-{i}", i, RTX, 24576, compute_capability=(8, 6)) for i in range(2)),
        )
    ),
)
POLICY = {
    "groups": {
        "ml-lab": {"max_queue_wait": 120},
        "course": {"max_queue_wait": 0},
        "vision": {},
    },
    "default_group": {"max_queue_wait": 600},
}


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    nodes = [{"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}]
    c = Cluster(ClusterSettings(nodes=nodes), GPUDockerSpawner().log)
    q = queue_of(use_cluster(monkeypatch, c))
    q.settings, q.policies = queue_settings(POLICY)

    async def snapshot() -> ClusterSnapshot:
        return ClusterSnapshot(NODES, c.ledger.allocations())

    monkeypatch.setattr(c, "snapshot", snapshot)
    monkeypatch.setattr(c, "last_nodes", lambda: NODES)
    return c


def queue() -> SpawnQueue:
    """The queue of the cluster the fixture made."""
    return queue_of(runtime_of(None))


def spawner(
    monkeypatch: pytest.MonkeyPatch,
    groups: tuple[str, ...] = ("ml-lab", "vision", "users"),
    options: dict[str, Any] | None = None,
    server: str = "",
    **config: Any,
) -> GPUDockerSpawner:
    orm = SimpleNamespace(name=server, server=None, user_options=options, last_activity=None)
    s = GPUDockerSpawner(user=SimpleNamespace(name="alice", groups=[]), orm_spawner=orm, **config)
    s.user_options = dict(options or {})

    async def identity() -> Identity:
        return Identity("alice", 1000, 100, groups=groups)

    monkeypatch.setattr(s, "identity", identity)
    return s


def ident(*groups: str) -> Identity:
    return Identity("alice", 1000, 100, groups=groups)


# ------------------------------------------------------------------ which group pays


@pytest.mark.parametrize(
    "groups, chosen, group_bounds, allowed, charged",
    [
        # configured groups: queue_policy's ml-lab, course and vision (+ group_bounds)
        (("users", "vision", "ml-lab"), None, {}, ("ml-lab", "vision"), "ml-lab"),
        (("users", "vision", "ml-lab"), "vision", {}, ("ml-lab", "vision"), "vision"),
        (("users", "vision", "ml-lab"), "users", {}, ("ml-lab", "vision"), "ml-lab"),
        (("users", "vision", "ml-lab"), "other", {}, ("ml-lab", "vision"), "ml-lab"),
        (("users", "ai"), None, {"ai": {"max_gpus": 2}}, ("ai",), "ai"),  # group_bounds too
        (("zeta", "users"), None, {}, ("users",), "users"),  # none configured: the first
        ((), "ml-lab", {}, (), ""),  # in no group
    ],
)
def test_one_place_decides_the_charge_group(
    cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
    groups: tuple[str, ...],
    chosen: str | None,
    group_bounds: dict[str, Any],
    allowed: tuple[str, ...],
    charged: str,
) -> None:
    """What the form offers and validation accepts (``_charge_groups``), and the group
    the record, the queue item, quotas, reservations and the wait use (``_group_of``):
    the validated choice, else the default. A choice it may not charge never gets past
    validation; were it to, the default would apply, never that group."""
    s = spawner(monkeypatch, group_bounds=group_bounds)
    assert s._charge_groups(ident(*groups)) == allowed
    assert s._group_of(ident(*groups), chosen) == charged


def test_the_record_is_charged_to_the_chosen_group(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = spawner(monkeypatch)
    decision = s._decide_and_reserve(
        ClusterSnapshot(NODES, {}), PlacementRequest(gpu_count=1), group="vision"
    )
    options = SpawnOptions("img", 1, None, 0.0, 1.0, 2.0, charge_group="vision")
    record = s._record(ClusterSnapshot(NODES, {}), decision, ident("ml-lab", "vision"), options)
    assert record.group == "vision" and s.get_state()["charge_group"] == "vision"
    default = SpawnOptions("img", 1, None, 0.0, 1.0, 2.0)  # previous options: no key
    assert (
        s._record(ClusterSnapshot(NODES, {}), decision, ident("ml-lab", "vision"), default).group
        == "ml-lab"
    )


# ------------------------------------------------------------------ how long a group waits


@pytest.mark.parametrize(
    "group, trait, wait",
    [
        ("ml-lab", 3600.0, 120.0),  # its own
        ("course", 3600.0, 0.0),  # never waits
        ("vision", 3600.0, 3600.0),  # listed without one: the trait (as for every key)
        ("unlisted", 3600.0, 600.0),  # default_group's
        ("ml-lab", 0.0, 120.0),  # the queue off by default, on for this group
    ],
)
def test_each_group_waits_its_own_max_queue_wait(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, group: str, trait: float, wait: float
) -> None:
    assert spawner(monkeypatch, max_queue_wait=trait)._max_wait(group) == wait


def test_without_per_group_waits_the_trait_applies(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue().settings, queue().policies = queue_settings({"groups": {"ml-lab": {}}})
    assert spawner(monkeypatch, max_queue_wait=900)._max_wait("ml-lab") == 900.0


def test_a_group_that_never_waits_is_refused_at_once_others_queue(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both GPUs held: course (max_queue_wait 0) is refused with placement's reason, as
    with the queue off; ml-lab joins the queue."""
    cluster.ledger.reserve("owner/", "n1", ["GPU-0", "GPU-1"])
    snapshot = ClusterSnapshot(NODES, {})
    s = spawner(monkeypatch)
    with pytest.raises(SpawnException) as info:
        s._decide_and_reserve(snapshot, PlacementRequest(gpu_count=1), UserQuota(None), "course")
    assert info.value.status_code == 503 and "free" in info.value.message
    with pytest.raises(MustQueue):
        s._decide_and_reserve(snapshot, PlacementRequest(gpu_count=1), UserQuota(None), "ml-lab")


def test_a_spawn_placed_at_once_puts_no_share_on_a_gpu_reserved_for_another_group(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU-0 is shared (a quarter, bob's of ml-lab) and reserved for ml-lab now; GPU-1 is
    held whole. A share for course (which never waits: placed at once, outside the queue)
    does not join bob on GPU-0; once the reservation is over, it does."""
    cluster.ledger.reserve("owner/", "n1", ["GPU-1"])
    cluster.ledger.reserve_share("bob/", "n1", "GPU-0", (1, 4), "b" * 32)
    cluster.ledger.open_allocation(
        AllocationRecord("b" * 32, "bob", "", "ml-lab", "n1", ("GPU-0",), RTX, "i", "")
    )
    now = time.time()
    queue().reservations = (
        Reservation("r", "ml-lab", now - 60, now + 3600, gpu_uuids=frozenset({"GPU-0"})),
    )
    snapshot = ClusterSnapshot(NODES, {}, sharing=parse_policy({RTX: {"shares": 4}}, {}))
    share = PlacementRequest(gpu_count=1, shares=1)
    s = spawner(monkeypatch)
    with pytest.raises(SpawnException) as info:
        s._decide_and_reserve(snapshot, share, UserQuota(None), "course")
    assert info.value.status_code == 503
    assert [h.holder for h in cluster.ledger.shares_on("GPU-0")] == ["bob/"]
    queue().reservations = ()
    assert s._decide_and_reserve(snapshot, share, UserQuota(None), "course").gpu_uuids == ("GPU-0",)


@pytest.mark.parametrize(
    "options, groups, extension",
    [
        ({}, ("ml-lab", "vision"), 120),  # the default group: ml-lab
        ({"charge_group": "vision"}, ("ml-lab", "vision"), 3600),  # vision: the trait
        ({"charge_group": " course "}, ("ml-lab", "course"), 0),
        ({"charge_group": "not-mine"}, ("ml-lab", "vision"), 120),  # start refuses it
        ({}, (), 600),  # no group: default_group's
    ],
)
def test_the_start_timeout_grows_by_the_charged_group_s_wait(
    cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, Any],
    groups: tuple[str, ...],
    extension: int,
) -> None:
    s = spawner(monkeypatch, groups, options, start_timeout=60, pull_timeout=1000)
    hook = s.run_pre_spawn_hook()
    asyncio.run(hook)
    assert s.start_timeout == 60 + extension + 1000  # and by the pull's own bound
    asyncio.run(s.run_pre_spawn_hook())  # a second start: from the configured bound again
    assert s.start_timeout == 60 + extension + 1000


def test_unreadable_groups_give_the_longest_wait(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = spawner(monkeypatch, start_timeout=60, max_queue_wait=30, pull_timeout=1000)

    async def broken() -> Identity:
        raise RuntimeError("no auth state")

    monkeypatch.setattr(s, "identity", broken)
    asyncio.run(s.run_pre_spawn_hook())
    assert s.start_timeout == 60 + 600 + 1000


def test_the_wait_in_line_uses_the_group_s_wait(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue is asked for ml-lab's 120 s; the progress page and the give-up sentence
    say so."""
    asked: list[float] = []

    async def wait(item: Any, take: Any, news: Any, timeout: float, limit: Any) -> Any:
        asked.append(timeout)
        assert item.group == "ml-lab"
        raise QueueTimeout("1st in line for an NVIDIA GeForce RTX 3090 (group ml-lab)")

    monkeypatch.setattr(queue(), "wait", wait)
    s = spawner(monkeypatch)
    with pytest.raises(SpawnException) as info:
        asyncio.run(
            s._wait_in_line(
                PlacementRequest(gpu_count=1), UserQuota(None), "Nothing free.", "ml-lab"
            )
        )
    assert asked == [120.0]
    assert (
        s._events[-1]["message"]
        == "Nothing free. Your server waits in line for GPUs (up to 2 min)."
    )
    assert info.value.message.startswith(
        "No GPU freed up for your server within 2 min (1st in line for"
    )


# ------------------------------------------------------------------ reservations


def _place(
    cluster: Cluster,
    s: GPUDockerSpawner,
    group: str,
    gpus: list[str],
    share: tuple[int, int] | None = None,
) -> None:
    """``s`` placed on ``gpus`` (whole, or ``share`` of its one GPU) charged to ``group``."""
    s.gpu_uuids = gpus
    s.node_name = "n1"
    s.allocation_id = "a" * 32
    if share is None:
        cluster.ledger.reserve(s.holder, "n1", gpus, s.allocation_id)
    else:
        cluster.ledger.reserve_share(s.holder, "n1", gpus[0], share, s.allocation_id)
    cluster.ledger.place_server(s.holder, "n1", s.allocation_id)
    cluster.ledger.open_allocation(
        AllocationRecord(s.allocation_id, "alice", s.name, group, "n1", tuple(gpus), RTX, "i", "")
    )


@pytest.mark.parametrize(
    "reserved_for, in_hours, told",
    [
        ("course", 3, True),
        ("course", 23, True),
        ("course", 25, False),  # past the 24 h notice
        ("ml-lab", 3, False),  # its own group
    ],
)
def test_the_spawn_page_says_when_a_reservation_will_stop_the_server(
    cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
    reserved_for: str,
    in_hours: float,
    told: bool,
) -> None:
    start = time.time() + in_hours * 3600
    queue().reservations = (
        Reservation("r", reserved_for, start, start + 3600, gpu_uuids=frozenset({"GPU-0"})),
    )
    s = spawner(monkeypatch)
    _place(cluster, s, "ml-lab", ["GPU-0"])
    s._warn_of_reservations(ClusterSnapshot(NODES, {}))
    s._warn_of_reservations(ClusterSnapshot(NODES, {}))  # said once only
    said = [e["message"] for e in s._events]
    if not told:
        assert said == []
        return
    assert len(said) == 1 and said[0].startswith("This GPU is reserved for group course from ")
    assert re.search(r"UTC: your server will be stopped at .*\d\d:\d\d\. Save your work", said[0])


def test_a_preempted_server_s_reason_is_in_the_next_form(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reservation of course began on alice's GPU: the poll stops her server, and the
    form tells her why until she starts again; the state keeps it across a hub restart."""
    stopped: list[bool] = []

    async def stop(self: Any, now: bool = False) -> None:
        stopped.append(now)

    monkeypatch.setattr(DockerSpawner, "stop", stop)
    now = time.time()
    queue().reservations = (
        Reservation("r", "course", now - 60, now + 3600, gpu_uuids=frozenset({"GPU-0"})),
        Reservation("s", "course", now + 7200, now + 9000, gpu_uuids=frozenset({"GPU-1"})),
    )
    s = spawner(monkeypatch, server="big")
    _place(cluster, s, "ml-lab", ["GPU-0"])
    assert asyncio.run(s._preempted()) is True and stopped == [True]
    assert s.gpu_uuids == [] and cluster.ledger.allocations() == {}
    state = s.get_state()
    assert state["ended_note"].startswith("Your server 'big' was stopped at ")
    assert "its GPU is reserved for group course until " in state["ended_note"]
    again = spawner(monkeypatch, server="big")
    again.load_state(state)
    html = asyncio.run(spawn_form(again))
    notice = re.search(r'<span id="jhgpu-notice-text">(.*?)</span>', html, re.S)
    assert notice is not None and unescape(notice[1]).strip() == state["ended_note"]
    reserved = re.findall(r"<li>(.*?)</li>", html.split('id="jhgpu-reserved"')[1].split("</ul>")[0])
    assert unescape(reserved[0]).startswith("GPU 0 of n1 for group course, now until")
    assert len(reserved) == 2  # and GPU 1, later today or tomorrow
    select = re.search(
        r'<select id="jhgpu-charge-group" name="charge_group".*?</select>', html, re.S
    )
    assert select is not None
    assert re.findall(r'<option value="([^"]+)"', select[0]) == ["ml-lab", "vision"]


def test_a_share_holder_on_a_reserved_gpu_is_warned_then_preempted(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice (ml-lab) and carol (course) hold shares of GPU-0. A reservation of course on
    it warns alice's spawn page before it starts; once it has begun, the poll stops her
    server: her share is released, her allocation ends PREEMPTED, carol's share stays."""
    stopped: list[bool] = []

    async def stop(self: Any, now: bool = False) -> None:
        stopped.append(now)

    monkeypatch.setattr(DockerSpawner, "stop", stop)
    ended: list[tuple[str, EndReason | None]] = []
    cluster.ledger.subscribe(lambda e: ended.append((e.allocation, e.reason)))
    s = spawner(monkeypatch, server="big")
    s.share = Share(1, 4, 6144, "time-slicing")
    _place(cluster, s, "ml-lab", ["GPU-0"], share=(1, 4))
    cluster.ledger.reserve_share("carol/", "n1", "GPU-0", (1, 4), "c" * 32)
    cluster.ledger.open_allocation(
        AllocationRecord("c" * 32, "carol", "", "course", "n1", ("GPU-0",), RTX, "i", "")
    )
    now = time.time()
    on_gpu0 = frozenset({"GPU-0"})
    queue().reservations = (Reservation("r", "course", now + 3600, now + 7200, gpu_uuids=on_gpu0),)
    s._warn_of_reservations(ClusterSnapshot(NODES, {}))
    said = [e["message"] for e in s._events]
    assert len(said) == 1 and said[0].startswith("This GPU is reserved for group course from ")
    assert asyncio.run(s._preempted()) is False and stopped == []  # not begun yet
    queue().reservations = (Reservation("r", "course", now - 60, now + 3600, gpu_uuids=on_gpu0),)
    assert asyncio.run(s._preempted()) is True and stopped == [True]
    assert ("a" * 32, EndReason.PREEMPTED) in ended
    assert s.gpu_uuids == [] and s.share is None
    assert [h.holder for h in cluster.ledger.shares_on("GPU-0")] == ["carol/"]
    assert "its GPU is reserved for group course until " in s.get_state()["ended_note"]


def test_a_user_of_the_reserving_group_sees_no_notice_and_no_select(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    queue().reservations = (
        Reservation("r", "course", now - 60, now + 3600, gpu_uuids=frozenset({"GPU-0"})),
    )
    html = asyncio.run(spawn_form(spawner(monkeypatch, groups=("course", "users"))))
    assert "jhgpu-reserved" not in html and "charge_group" not in html
    assert 'id="jhgpu-notice"' not in html


# ------------------------------------------------------------------ quotas outside the queue


@pytest.mark.parametrize(
    "group, held, count, outcome",
    [
        ("vision", 0, 2, "placed"),  # no quota
        ("ml-lab", 0, 1, "placed"),
        (
            "ml-lab",
            0,
            2,
            "403 Group ml-lab may hold at most 1 GPU at once, and this server asks for 2: it "
            "can never start. Ask for 1 or fewer.",
        ),
        (
            "ml-lab",
            1,
            1,
            "queued Group ml-lab holds 1 of 1 GPU allowed at once, and this server asks for "
            "1: it waits in the queue until the group's servers free 1.",
        ),
        (
            "course",  # never waits: refused, told when to start again
            1,
            1,
            "429 Group course holds 1 of 1 GPU allowed at once, and this server asks for 1: "
            "start it again when the group's servers free 1.",
        ),
    ],
)
def test_group_quotas_hold_for_a_spawn_placed_at_once(
    cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
    group: str,
    held: int,
    count: int,
    outcome: str,
) -> None:
    """With nobody waiting a spawn is placed at once, and queue_policy's quotas still
    apply: over the absolute cap it is refused with the number, over the cap now it waits
    in the queue (or, for a group that never waits, is refused)."""
    queue().settings, queue().policies = queue_settings(
        {
            "groups": {
                "ml-lab": {"max_gpus": 1, "max_queue_wait": 120},
                "course": {"max_gpus": 1, "max_queue_wait": 0},
            }
        }
    )
    if held:
        _place(cluster, spawner(monkeypatch, server="other"), group, ["GPU-1"])
    s = spawner(monkeypatch)
    request = PlacementRequest(gpu_count=count)
    snapshot = ClusterSnapshot(NODES, {})
    if outcome == "placed":
        assert len(s._decide_and_reserve(snapshot, request, group=group).gpu_uuids) == count
        return
    kind, words = outcome.split(" ", 1)
    if kind == "queued":
        with pytest.raises(MustQueue) as queued:
            s._decide_and_reserve(snapshot, request, group=group)
        assert queued.value.reason == words
    else:
        with pytest.raises(SpawnException) as info:
            s._decide_and_reserve(snapshot, request, group=group)
        assert (str(info.value.status_code), info.value.message) == (kind, words)
    assert cluster.ledger.held_by(s.holder) == []


# ------------------------------------------------------------------ what the user reads


def test_a_refusal_reads_as_its_sentence_alone(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused spawn (course never waits; both GPUs held) reads as placement's sentence
    wherever JupyterHub shows it (spawn form, progress page, REST answer): never
    "503 SpawnException(reason=no_capacity): ..." (issue 36)."""
    cluster.ledger.reserve("owner/", "n1", ["GPU-0", "GPU-1"])
    s = spawner(monkeypatch)
    with pytest.raises(SpawnException) as info:
        s._decide_and_reserve(
            ClusterSnapshot(NODES, {}), PlacementRequest(gpu_count=1), UserQuota(None), "course"
        )
    shown, shown_html = format_exception(info.value)
    assert shown == info.value.message and shown.startswith("No GPU is free")
    assert "SpawnException" not in shown and "503" not in shown and "no_capacity" not in shown
    assert unescape(shown_html) == shown
    assert info.value.reason == "no_capacity"  # still the metrics' label


def test_waiting_in_line_says_it_once_without_try_later(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The join line drops placement's "Try later" (waiting is trying later); a queue line
    is marked for the page (jhgpu_queued) and sent once while it stays the same; the
    estimate's time is a <time> the page shows in the browser's zone."""
    news: list[Any] = []

    async def wait(item: Any, take: Any, tell: Any, timeout: float, limit: Any) -> Any:
        news.append(tell)
        raise QueueTimeout("1st in line for a GPU (group ml-lab).")

    monkeypatch.setattr(queue(), "wait", wait)
    s = spawner(monkeypatch)
    with pytest.raises(SpawnException):
        asyncio.run(
            s._wait_in_line(
                PlacementRequest(gpu_count=1),
                UserQuota(None),
                "No GPU is free right now. Try later.",
                "ml-lab",
            )
        )
    first = s._events[-1]
    assert first["message"] == (
        "No GPU is free right now. Your server waits in line for GPUs (up to 2 min)."
    )
    assert first["jhgpu_queued"] is True
    (tell,) = news
    for _ in range(3):  # the queue's rounds repeat the line: the log gets it once
        tell("1st in line for a GPU (group ml-lab).")
    assert [e["message"] for e in s._events].count("1st in line for a GPU (group ml-lab).") == 1


# ------------------------------------------------------------------ a suspended server in line


def test_a_suspended_server_in_line_takes_its_own_gpus_when_its_turn_comes(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume waits in line like any start (hub/suspend.py); when its turn comes it
    takes its own GPU if that can be held then (it resumes), else what the queue gave
    (a fresh start)."""
    given = Placement("n1", ("GPU-1",))  # the queue's choice
    own = Placement("n1", ("GPU-0",))  # the suspended server's

    async def wait(item: Any, take: Any, news: Any, timeout: float, limit: Any) -> Any:
        assert take(given)
        return given

    monkeypatch.setattr(queue(), "wait", wait)
    s = spawner(monkeypatch)

    def in_line(prefer: Any) -> Placement:
        return asyncio.run(
            s._wait_in_line(
                PlacementRequest(gpu_count=1), UserQuota(None), "Busy.", "ml-lab", prefer
            )
        )

    assert in_line(lambda: own) == own
    assert cluster.ledger.held_by(s.holder) == ["GPU-0"]
    s._forget_placement()
    cluster.ledger.reserve("bob/", "n1", ["GPU-0"], "b" * 32)  # taken meanwhile
    assert in_line(lambda: own) == given
    assert cluster.ledger.held_by(s.holder) == ["GPU-1"]
    s._forget_placement()
    assert in_line(lambda: None) == given  # its own GPU can't be held: the queue's
