"""The hub's GPU queue: spawns that found nothing free wait here for their turn.

The I/O edge of :mod:`jupyterhub_gpu.core.scheduling` (which decides, purely): one
:class:`SpawnQueue` per hub process, beside the :class:`~jupyterhub_gpu.hub.cluster.Cluster`.
A waiting spawn is an ``await`` in its spawner's ``start`` (nothing is held while it
waits); the queue decides again whenever the ledger announces a release, a spawn joins
or leaves, and every ``interval`` seconds (ages grow, nodes come back). Each decision
takes a fresh cluster snapshot, then, with no ``await`` in between, asks
:func:`~jupyterhub_gpu.core.scheduling.schedule` who starts and lets each of them reserve its
GPUs through the spawner's own ``take`` (the same synchronous ledger step as an
immediate spawn), so a queued start and a fresh spawn can never take one GPU twice.
Everyone still waiting is told where they stand (:func:`~.scheduling.positions`) and
what is known of when GPUs free up (:func:`~.scheduling.estimates`).

Order: :func:`~jupyterhub_gpu.core.scheduling.prioritise`'s (admin priority, fair share,
age). Past use is read from the accounting store every ``usage_every`` s; each held GPU
is charged to the group and user of its allocation record (the ledger's events).
Each waiting user's GPU cap (``max_gpus_per_user``) is a per-user quota of the decision
(a user at their cap waits, blocking nobody) and is checked again in ``take``. A user has at
most ``max_per_user`` spawns waiting (:class:`QueueFull`).

Leaving the queue: the spawn is cancelled (the spawn-pending page's cancel, or a stop
through the API: JupyterHub cancels the pending start), its wait runs out
(:class:`QueueTimeout`), or it can never start (:class:`QueueRefused`). The queue lives
in the hub's memory: a hub restart ends every waiting spawn (JupyterHub reports them as
failed spawns), and users start again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any

from jupyterhub_gpu.core.accounting.records import AllocationEvent, EventKind, utcnow
from jupyterhub_gpu.core.accounting.report import Interval
from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.placement import Placement
from jupyterhub_gpu.core.scheduling import (
    Allowed,
    Charge,
    ClusterState,
    Conflict,
    Estimate,
    Policies,
    Position,
    QueuedRequest,
    Quota,
    Refuse,
    Release,
    Reservation,
    SchedulerSettings,
    UsageItem,
    UsageTotals,
    Wait,
    advance,
    assign,
    check_quota,
    conflicts,
    decayed_usage,
    estimates,
    fenced,
    gpu_models,
    holdings_of,
    positions,
    reserved_lines,
    schedule,
)
from jupyterhub_gpu.core.scheduling.admission import QueueView
from jupyterhub_gpu.core.scheduling.outlook import WaitView
from jupyterhub_gpu.core.scheduling.state import SHARE_KEY
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.core.words import UTC, duration
from jupyterhub_gpu.edges.accounting.store import AccountingUnavailable
from jupyterhub_gpu.edges.files import load_deadlines
from jupyterhub_gpu.errors import MustQueue as MustQueue
from jupyterhub_gpu.errors import QueueFull, QueueRefused, QueueTimeout

if TYPE_CHECKING:
    from jupyterhub_gpu.hub.cluster import Cluster

Take = Callable[[Placement], bool]
# why GPUs may free up, in words a waiting user reads (no other user's name)
RELEASE_WORDS = {
    "idle": "a server on {node} reaches its idle limit",
    "max_age": "a server on {node} reaches its maximum age",
}
News = Callable[[str], None]


#: The old name of :func:`~jupyterhub_gpu.core.words.duration` (tests import it from here).
span = duration


@dataclass
class _Waiter:
    item: QueuedRequest
    take: Take
    news: News
    done: asyncio.Future[Placement]
    limit: int | None = None  # the user's cap on GPUs held at once (max_gpus_per_user)
    told: str = ""  # the latest sentence sent to its progress page
    where: str = field(default="")  # its position sentence
    position: int = 0  # 1 = next for the GPUs it waits for; 0 = not decided yet
    expected: float | None = None  # when its GPUs should free up (epoch s), if known


class SpawnQueue:
    def __init__(
        self,
        cluster: Cluster,
        log: logging.Logger,
        settings: SchedulerSettings | None = None,
        policies: Policies | None = None,
        interval: float = 5.0,
        max_per_user: int = 3,
    ) -> None:
        self.cluster = cluster
        self.log = log
        self.settings = settings if settings is not None else SchedulerSettings()
        self.policies = policies if policies is not None else Policies()
        self.interval = interval
        self.max_per_user = max_per_user
        self.deadlines_file = ""  # the culler's (GPUCluster.cull_deadlines_file)
        self.usage_every = 300.0  # seconds between reads of past use from the accounting store
        self.reservations: tuple[Reservation, ...] = ()  # from the store, see _read_store
        self._usage: UsageTotals | None = None
        self._store_read = float("-inf")
        self._reading: asyncio.Future[None] | None = None  # the store read in flight
        # (GPU uuid, holder "user/server") -> its allocation's group and user: per server,
        # since a shared GPU has several holders, one user's among them
        self._charge_of: dict[tuple[str, str], Charge] = {}
        self._gpus_of: dict[str, tuple[str, ...]] = {}  # allocation -> its GPUs
        self._holder_of: dict[str, str] = {}  # allocation -> its holder
        self._waiters: dict[str, _Waiter] = {}
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.decisions = 0  # rounds decided (tests and metrics read it)
        cluster.ledger.subscribe(self._on_event)

    def __len__(self) -> int:
        return len(self._waiters)

    def waiting(self) -> list[QueuedRequest]:
        """What waits now, in arrival order."""
        return [w.item for w in self._waiters.values()]

    def standings(self) -> dict[str, tuple[int, str]]:
        """Request id -> (position, what its progress page says now), for the dashboard."""
        return {k: (w.position, w.told) for k, w in self._waiters.items()}

    def expected_at(self, request_id: str) -> float | None:
        """When the GPUs ``request_id`` waits for should free up (epoch seconds), as its
        latest news said; None when nothing is known (or it no longer waits)."""
        waiter = self._waiters.get(request_id)
        return waiter.expected if waiter is not None else None

    def _on_event(self, event: AllocationEvent) -> None:
        record = event.record
        if event.kind in (EventKind.RESERVED, EventKind.REJOINED) and record is not None:
            self._gpus_of[event.allocation] = record.gpu_uuids
            holder = f"{record.user}/{record.server}"  # as the ledger names it
            self._holder_of[event.allocation] = holder
            for uuid in record.gpu_uuids:
                self._charge_of[(uuid, holder)] = Charge(record.group, record.user)
        if event.kind is EventKind.RELEASED:
            holder = self._holder_of.pop(event.allocation, "")
            for uuid in self._gpus_of.pop(event.allocation, ()):
                self._charge_of.pop((uuid, holder), None)
            if self._waiters:
                self.kick()

    def kick(self) -> None:
        """Decide again soon (from any code on the hub's event loop)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def wait(
        self,
        item: QueuedRequest,
        take: Take,
        news: News,
        timeout: float,
        limit: int | None = None,
    ) -> Placement:
        """Wait in line until ``take`` has reserved a placement for ``item`` (returned);
        :class:`QueueTimeout` after ``timeout`` s, :class:`QueueRefused` if it can never
        start; :class:`QueueFull` at once if the user already has ``max_per_user`` spawns
        waiting. Cancelling the caller leaves the queue at once, holding nothing (a cancel
        that arrives after ``take`` reached the caller, which then undoes its start)."""
        mine = sum(1 for w in self._waiters.values() if w.item.user == item.user)
        if mine >= self.max_per_user:
            raise QueueFull(
                f"You already have {mine} servers waiting for GPUs (at most "
                f"{self.max_per_user}); cancel one or wait for it to start."
            )
        loop = asyncio.get_running_loop()
        waiter = _Waiter(item, take, news, loop.create_future(), limit)
        self._waiters[item.id] = waiter
        self.log.info("%s waits in the GPU queue (%d waiting)", item.id, len(self._waiters))
        self.kick()

        def run_out() -> None:
            if not waiter.done.done():
                waiter.done.set_exception(QueueTimeout(waiter.where))

        timer = loop.call_later(timeout, run_out)
        try:
            # no wait_for/shield: a cancel is never lost, even one that arrives after
            # the decision (the caller's start then undoes what take reserved)
            return await waiter.done
        finally:
            timer.cancel()
            if self._waiters.get(item.id) is waiter:
                del self._waiters[item.id]
            if not waiter.done.done():
                waiter.done.cancel()
            if self._waiters:
                self.kick()  # who was behind it moves up

    async def _run(self) -> None:
        assert self._changed is not None
        while self._waiters:
            self._changed.clear()
            try:
                await self._decide()
            except Exception:
                self.log.exception("GPU queue decision failed; will retry")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.interval)

    async def _decide(self) -> None:
        await self._read_store()
        snapshot = await self.cluster.snapshot()
        # from here on no await: the ledger can't change under the decision
        snapshot = self.cluster.ledger.overlay(snapshot)
        waiters = {k: w for k, w in self._waiters.items() if not w.done.done()}
        now = time.time()
        usage = self._usage
        state = ClusterState(
            snapshot,
            now=now,
            charges=self._charges(),
            policies=self._policies(waiters.values()),
            usage=advance(usage, (), now, self.settings) if usage is not None else None,
            reservations=self.reservations,
        )
        decision = schedule([w.item for w in waiters.values()], state, self.settings)
        self.decisions += 1
        for start in decision.starts:
            waiter = waiters.pop(start.request.id)
            if waiter.take(start.placement):
                waiter.done.set_result(start.placement)
                if start.note:
                    waiter.news(start.note)
        for refused in decision.refused:
            waiter = waiters.pop(refused.request.id)
            waiter.done.set_exception(QueueRefused(refused.reason))
        if waiters:  # what the starts took is taken for the estimates
            taken = self.cluster.ledger.overlay(snapshot)
            self._tell(waiters, replace(state, snapshot=taken))

    def wait_view(self, snapshot: ClusterSnapshot, now: float | None = None) -> WaitView:
        """The queue as plain data for the spawn form's outlook (what the waiting page's
        news are computed from): what waits, the state a decision now would read (the
        ledger's holds laid over ``snapshot``, charges, usage, reservations) and the
        culler's deadlines as releases."""
        t = time.time() if now is None else now
        waiters = [w for w in self._waiters.values() if not w.done.done()]
        usage = self._usage
        state = ClusterState(
            self.cluster.ledger.overlay(snapshot),
            now=t,
            charges=self._charges(),
            policies=self._policies(waiters),
            usage=advance(usage, (), t, self.settings) if usage is not None else None,
            reservations=self.reservations,
        )
        items = tuple(w.item for w in waiters)
        return WaitView(items, state, tuple(self._releases()), self.settings)

    def _releases(self) -> list[Release]:
        """GPUs the culler would free at the earliest (its deadlines file), as releases."""
        if not self.deadlines_file:
            return []
        ledger, out = self.cluster.ledger, []
        for holder, deadline in load_deadlines(self.deadlines_file).items():
            uuids = ledger.held_by(holder)
            hold = ledger.hold_of(uuids[0]) if uuids else None
            if hold is not None:
                why = RELEASE_WORDS[deadline.why].format(node=hold.node)
                out.append(Release(hold.node, tuple(uuids), deadline.at.timestamp(), why))
        return out

    def _charges(self) -> dict[str, Charge]:
        """Held GPU -> the group and user it is charged to (orphans: nobody's, not listed);
        a share is listed as ``uuid#holder`` with its fraction (issue 26)."""
        ledger = self.cluster.ledger
        out = {uuid: self._charge(uuid, holder) for uuid, holder in ledger.charged().items()}
        for uuid, holder, fraction in ledger.charged_shares():
            charge = self._charge(uuid, holder)
            out[f"{uuid}{SHARE_KEY}{holder}"] = Charge(charge.group, charge.user, fraction)
        return out

    def _charge(self, uuid: str, holder: str) -> Charge:
        user = holder.split("/", 1)[0]
        return self._charge_of.get((uuid, holder)) or Charge("", user)

    def _live(self, nodes: Sequence[NodeState]) -> ClusterSnapshot:
        """``nodes`` with the holds the reservation checks read: GPUs live servers hold
        whole (no orphans: their holds are no server's, and an orphan of the same name is
        not the live server) and every shared GPU, as :data:`SHARED` with its parts, so a
        model-and-count reservation never takes it for a free one; its live holders are
        :meth:`_charges`' ``uuid#holder`` keys."""
        ledger = self.cluster.ledger
        shares = ledger.share_use()
        held = {**ledger.charged(), **dict.fromkeys(shares, SHARED)}
        return ClusterSnapshot(tuple(nodes), held, shares=shares)

    def fencing(self, now: float | None = None) -> bool:
        """Whether a reservation is active or starts soon: then every GPU spawn goes
        through the queue, whose decision keeps reserved GPUs for their group."""
        t = time.time() if now is None else now
        soon = t + self.settings.reservation_lookahead_s
        return any(r.start <= soon and t < r.end for r in self.reservations)

    def fenced_for(self, group: str, snapshot: ClusterSnapshot) -> frozenset[str]:
        """GPUs active reservations keep from ``group`` now (for a placement outside the
        queue: with ``max_queue_wait`` 0)."""
        if not self.reservations:
            return frozenset()
        now = time.time()
        assigned = assign(self.reservations, snapshot, self._charges(), now)  # active ones
        return fenced(self.reservations, assigned, group)

    def admit(self, item: QueuedRequest, snapshot: ClusterSnapshot) -> Allowed | Wait | Refuse:
        """The quotas of ``queue_policy`` for a spawn placed outside the queue (what
        :func:`~.scheduling.schedule` checks for a queued one): Refuse (over an absolute
        cap: never), Wait (over a cap now: it must queue) or Allowed with the request
        narrowed to the models with room. Holdings are the live holds' charges. No I/O."""
        models = gpu_models(snapshot)
        holdings = holdings_of(self._charges(), models)
        return check_quota(item, holdings, self.policies, frozenset(models.values()))

    def view(self, item: QueuedRequest, snapshot: ClusterSnapshot, may_wait: bool) -> QueueView:
        """What the queue says about ``item`` (for :func:`~.scheduling.admission.admit`),
        as plain data: how many wait, whether reservations fence GPUs, which ones they keep
        from its group, and ``queue_policy``'s quotas. No I/O."""
        fencing = self.fencing()
        return QueueView(
            waiting=len(self),
            fencing=fencing,
            fenced=self.fenced_for(item.group, snapshot),
            quota=self.admit(item, snapshot),
            may_wait=may_wait,
        )

    def preempted(
        self, holder: str, gpus: Iterable[str], now: float | None = None
    ) -> Conflict | None:
        """The conflict that stops ``holder``'s live server on ``gpus`` now (a reservation
        of another group began on them), or None; a share server's ``gpus`` is its one
        GPU. No I/O: the last node states and the ledger's live holds, whole and shares
        (an orphan of the same name is not this server)."""
        if not self.reservations:
            return None
        t = time.time() if now is None else now
        mine = set(gpus)
        snapshot = self._live(self.cluster.last_nodes())
        found = conflicts(self.reservations, snapshot, self._charges(), t, 0.0)
        return next(
            (c for c in found if c.holder == holder and c.stop_now and mine & set(c.gpu_uuids)),
            None,
        )

    def upcoming(
        self,
        holder: str,
        gpus: Iterable[str],
        nodes: Sequence[NodeState],
        now: float | None = None,
    ) -> list[Conflict]:
        """The reservations of other groups that will take ``holder``'s ``gpus`` (its
        server on ``nodes``) within ``settings.reservation_notice_s``: the server will be
        stopped at their start (``Conflict.notice`` says so). No I/O: the ledger's live
        holds and their charges; a model-and-count reservation's GPUs as :func:`assign`
        would choose them at its start with today's holds (a shared GPU is held)."""
        if not self.reservations:
            return []
        t = time.time() if now is None else now
        mine = set(gpus)
        snapshot = self._live(nodes)
        horizon = self.settings.reservation_notice_s
        found = conflicts(self.reservations, snapshot, self._charges(), t, horizon)
        return [
            c for c in found if c.holder == holder and not c.stop_now and mine & set(c.gpu_uuids)
        ]

    def reserved_for_others(
        self, groups: Collection[str], nodes: Sequence[NodeState], now: float | None = None
    ) -> list[str]:
        """For the spawn form of a user who may charge ``groups``: one line per reservation
        of another group active now or starting within ``settings.reservation_notice_s``
        (:func:`~.scheduling.reservations.reserved_lines`)."""
        if not self.reservations:
            return []
        t = time.time() if now is None else now
        snapshot = self._live(nodes)
        return reserved_lines(
            self.reservations,
            snapshot,
            self._charges(),
            groups,
            t,
            self.settings.reservation_notice_s,
            self.settings.timezone,
        )

    async def _read_store(self, force: bool = False) -> None:
        """Past use for fair share and the reservations, from the accounting store on its
        worker thread every ``usage_every`` s (``force``: now). Past use: allocations of
        the last five half-lives (older ones weigh under 3 %). A store that does not
        answer leaves what was read before (one warning)."""
        if self._reading is not None and not self._reading.done():
            await asyncio.shield(self._reading)  # one read at a time; callers share it
            if not force:
                return
        recorder = self.cluster.recorder
        if recorder is None or (
            not force and time.monotonic() - self._store_read < self.usage_every
        ):
            return
        self._store_read = time.monotonic()
        self._reading = asyncio.ensure_future(self._read(recorder))
        await asyncio.shield(self._reading)

    async def _read(self, recorder: Any) -> None:
        now = utcnow().replace(tzinfo=None)  # the store's times are naive UTC
        since = now - timedelta(seconds=min(5 * self.settings.half_life_s, 10 * 365 * 86400))

        def read(store: Any) -> tuple[list[Interval], list[Reservation]]:
            return store.intervals(since, now), store.reservations(now)

        try:
            found, reserved = await asyncio.wrap_future(recorder.call(read))
        except AccountingUnavailable as e:
            self.log.warning("GPU queue: accounting store unreadable (%s); as before", e)
            return
        at = now.replace(tzinfo=timezone.utc).timestamp()
        self._usage = decayed_usage(usage_items(found, since, now), at, self.settings)
        self.reservations = tuple(reserved)

    async def refresh(self) -> None:
        """Read the store if it is due (spawners' polls call it, so reservations are known
        with nobody waiting)."""
        await self._read_store()

    async def reload(self) -> None:
        """Read the store again now (a reservation was added or deleted), then decide."""
        await self._read_store(force=True)
        if self._waiters:
            self.kick()

    def _policies(self, waiters: Iterable[_Waiter]) -> Policies:
        """The site's policies plus each waiting user's GPU cap: a user at their cap waits
        (blocking nobody) instead of being given GPUs they may not hold."""
        caps = {w.item.user: Quota(max_gpus=w.limit) for w in waiters if w.limit is not None}
        return replace(self.policies, users={**self.policies.users, **caps})

    def _tell(self, waiters: dict[str, _Waiter], state: ClusterState) -> None:
        """Tell each waiter where it stands and what is known of its wait (once per change)."""
        queue = [w.item for w in waiters.values()]
        known: dict[str, Estimate] = estimates(queue, state, self._releases(), self.settings)
        tz = self.settings.timezone
        for place in positions(queue, state, self.settings):
            waiter = waiters[place.request.id]
            estimate = known.get(place.request.id)
            words = _words(place, estimate, state.now, tz)
            waiter.where, waiter.position = place.sentence(), place.position
            waiter.expected = estimate.at if estimate is not None else None
            if words != waiter.told:
                waiter.told = words
                waiter.news(words)


def usage_items(intervals: Iterable[Interval], since: datetime, now: datetime) -> list[UsageItem]:
    """Accounting intervals (naive UTC) as fair share's items: GPU-hours allocated within
    [since, now], ending at their end (an open one: now)."""
    items = []
    for i in intervals:
        start, end = max(i.start, since), min(i.end or now, now)
        if end > start and i.gpus:
            hours = i.gpus * (end - start).total_seconds() / 3600
            ended = end.replace(tzinfo=timezone.utc).timestamp()
            items.append(UsageItem(i.group, i.user, i.model, hours, ended))
    return items


def _words(place: Position, estimate: Estimate | None, now: float, tz: tzinfo = UTC) -> str:
    """ "2nd in line for an RTX 3090 (group ml-lab). <estimate, its time in tz>" """
    tail = f" {estimate.sentence(now, tz)}" if estimate is not None else ""
    return place.sentence() + tail
