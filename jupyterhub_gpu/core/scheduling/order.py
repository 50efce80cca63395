"""The queue decision: which waiting requests start now, and where (pure).

``schedule(queue, state, settings)`` walks the queue in priority order
(:func:`~.fairshare.prioritise`) over working copies of the allocations and holdings:

1. A request that can never start is **refused** (:func:`~.quota.never_fits`, or over an
   absolute quota). One over its quota now **waits** and blocks nobody.
2. GPUs of **reservations** active now for other groups look taken. A request of a group
   with an active reservation is tried on its own reserved GPUs first; any request is
   tried first without the GPUs of other groups' reservations that start within
   ``reservation_lookahead_s`` (then with them, and the start carries a warning).
3. ``place_fn`` (``jupyterhub_gpu.core.placement.place`` in the hub) places it; if it fits it
   **starts**, and what it takes is taken for everyone after it.
4. **Backfill.** A request that does not fit stays queued and those behind it may still
   start, with one limit: the first ``backfill_claims`` blocked requests (highest
   priority first) each *claim* the node where they are closest to fitting (the most free
   GPUs among the nodes that could hold them; then the smaller class, then placement's
   node order), and nobody behind them may take a free GPU of that node. A blocked
   request can use no free GPU now (else it would have started): what it needs is for
   one node to drain, and the claim lets that node drain. Everything else is free for
   backfill, so a 1-GPU request never waits behind an 8-GPU one for GPUs the 8-GPU one
   could not use. ``backfill=False`` is strict order: nothing passes a blocked request.

The decision is stateless: every call starts from the snapshot, so claims move when
another node gets closer to fitting. ``positions`` tells each request where it stands.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from jupyterhub_gpu.core.placement import NoFit, Placement, PlacementRequest, place
from jupyterhub_gpu.core.placement.index import ClusterIndex, index_for
from jupyterhub_gpu.core.placement.journal import Allocations, journaled
from jupyterhub_gpu.core.placement.view import View
from jupyterhub_gpu.core.scheduling.fairshare import PriorityParts, prioritise
from jupyterhub_gpu.core.scheduling.quota import (
    Allowed,
    Holdings,
    Refuse,
    Wait,
    check_quota,
    gpu_models,
    holdings_of,
    never_fits,
)
from jupyterhub_gpu.core.scheduling.reservations import Conflict, assign, fenced
from jupyterhub_gpu.core.scheduling.state import ClusterState, QueuedRequest, SchedulerSettings
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.core.words import article, gpus, ordinal

PlaceFn = Callable[[ClusterSnapshot, PlacementRequest], Placement | NoFit]

FENCE = "reserved:"  # holder prefix of GPUs hidden from a request in the working copy
CLAIM = "claimed:"
STARTED = "queued:"


@dataclass(frozen=True)
class Start:
    """Start ``request`` now on ``placement``; ``note`` warns of a reservation soon."""

    request: QueuedRequest
    placement: Placement
    parts: PriorityParts
    note: str | None = None


@dataclass(frozen=True)
class Waiting:
    """Stays queued; ``reason`` is a sentence, ``for_quota`` when its quota is full."""

    request: QueuedRequest
    parts: PriorityParts
    reason: str
    for_quota: bool = False


@dataclass(frozen=True)
class Refused:
    """Can never start: take it out of the queue and tell the user ``reason``."""

    request: QueuedRequest
    reason: str


@dataclass(frozen=True)
class Decision:
    """What one ``schedule`` call decided, each list in priority order."""

    starts: tuple[Start, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    refused: tuple[Refused, ...] = ()
    claims: Mapping[str, str] = field(default_factory=dict)  # request id -> node


def _has_quotas(state: ClusterState) -> bool:
    p = state.policies
    groups = [p.default, *p.groups.values()]
    return any(not g.quota.unlimited or not g.user_quota.unlimited for g in groups) or any(
        not q.unlimited for q in p.users.values()
    )


class _Pass:
    """Working copies for one ``schedule`` call: what is taken, held and hidden so far."""

    def __init__(self, state: ClusterState, settings: SchedulerSettings, place_fn: PlaceFn):
        self.state, self.settings, self.place_fn = state, settings, place_fn
        snap = state.snapshot
        self.index: ClusterIndex = index_for(snap.nodes)
        # journaled: the index re-checks only what this pass (and the ledger) changed
        self.alloc: Allocations = journaled(snap.allocations)
        self.shares: dict[str, int] = dict(snap.shares)  # uuid -> parts held (issue 26)
        slot_of = self.index.slot_of
        self.free_bound = len(slot_of) - len(slot_of.keys() & self.alloc.keys())
        self.models = gpu_models(snap) if _has_quotas(state) else None
        self.holdings = None if self.models is None else holdings_of(state.charges, self.models)
        self.cluster_models = frozenset(self.index.slot_model)
        res, now = state.reservations, state.now
        self.active = assign(res, snap, state.charges, now) if res else {}
        soon = [r for r in res if now < r.start <= now + settings.reservation_lookahead_s]
        self.soon = {r.id: assign(res, snap, state.charges, r.start)[r.id] for r in soon}
        self.failed: dict[tuple[PlacementRequest, frozenset[str]], str] = {}

    def admit(self, item: QueuedRequest) -> Allowed | Wait | Refuse:
        """Refuse what never fits; otherwise the quota's verdict (narrowed request)."""
        never = never_fits(self.state.snapshot, item.request)
        if never is not None:
            return Refuse(never)
        if self.holdings is None:
            return Allowed(item.request)
        return check_quota(item, self.holdings, self.state.policies, self.cluster_models)

    def _view(self, hidden: Collection[str]) -> ClusterSnapshot:
        snap = self.state.snapshot
        alloc = self.alloc
        if hidden:
            alloc = alloc.fork()
            for u in hidden:
                if alloc.get(u, SHARED) == SHARED:  # a hidden shared GPU takes no more shares
                    alloc[u] = FENCE
        return ClusterSnapshot(snap.nodes, alloc, snap.our_containers, self.shares, snap.sharing)

    def _reserved(self, group: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """(kept for others now, kept for others soon, kept for ``group`` now)."""
        res = self.state.reservations
        if not res:
            return frozenset(), frozenset(), frozenset()
        others = fenced(res, self.active, group)
        soon = fenced(res, self.soon, group) - others
        own = frozenset(u for uuids in self.active.values() for u in uuids) - others
        return others, soon, own

    def place(self, item: QueuedRequest, request: PlacementRequest) -> Placement | str:
        """Where ``request`` starts now, or why not (a sentence)."""
        others, soon, own = self._reserved(item.group)
        key = (request, others)
        if key in self.failed:
            return self.failed[key]
        if not request.shares and request.gpu_count > self.free_bound:
            return _too_few(self.free_bound, request.gpu_count)
        if own:
            everything = frozenset(self.index.slot_of)
            result = self.place_fn(self._view(everything - own), request)
            if isinstance(result, Placement):
                return result
        if soon:
            result = self.place_fn(self._view(others | soon), request)
            if isinstance(result, Placement):
                return result
        result = self.place_fn(self._view(others), request)
        if isinstance(result, NoFit):
            self.failed[key] = result.reason
            return result.reason
        return result

    def take(self, item: QueuedRequest, placement: Placement) -> None:
        """Mark ``placement``'s GPUs taken by ``item`` (and held by its group and user); a
        share's parts are added to its GPU's, and count as their fraction of a GPU."""
        if placement.share is not None:
            self._take_share(item, placement)
            return
        for u in placement.gpu_uuids:
            self.alloc[u] = STARTED + item.id
            if self.holdings is not None and self.models is not None:
                _add(self.holdings, item.group, item.user, self.models.get(u, ""))
        self.free_bound -= len(placement.gpu_uuids)

    def _take_share(self, item: QueuedRequest, placement: Placement) -> None:
        share = placement.share
        assert share is not None
        (u,) = placement.gpu_uuids
        if self.alloc.get(u) != SHARED:
            self.alloc[u] = SHARED
            self.free_bound -= 1
        self.shares[u] = self.shares.get(u, 0) + share.count
        if self.holdings is not None and self.models is not None:
            _add(self.holdings, item.group, item.user, self.models.get(u, ""), share.fraction)

    def claim(self, item: QueuedRequest, request: PlacementRequest) -> str | None:
        """Hide the free GPUs of the node where ``request`` is closest to fitting; its name.
        A blocked share claims nothing: any share that ends makes room for it."""
        if request.shares:
            return None
        others, _, _ = self._reserved(item.group)
        view = View(self._view(others))
        best, most = -1, -1
        for group in view.index.candidates(request):
            for s in group.slots:
                if view.free(s) > most:
                    best, most = s, view.free(s)
        if best < 0:
            return None
        for d in view.free_devices(best):
            self.alloc[d[0]] = CLAIM + item.id
            self.free_bound -= 1
        for d in self.index.slot_devices[best]:  # its shared GPUs take no new shares: they drain
            if self.alloc.get(d[0]) == SHARED:
                self.alloc[d[0]] = CLAIM + item.id
        return self.index.node_name[self.index.slot_node[best]]

    def soon_note(self, item: QueuedRequest, placement: Placement) -> str | None:
        """A warning when ``placement`` uses GPUs another group has reserved soon."""
        res = {r.id: r for r in self.state.reservations}
        for rid, uuids in self.soon.items():
            r = res[rid]
            hit = tuple(u for u in placement.gpu_uuids if u in uuids)
            if hit and r.group != item.group:
                conflict = Conflict(r, STARTED + item.id, hit, False)
                return conflict.notice(self.state.now, self.settings.timezone)
        return None


def _too_few(free: int, count: int) -> str:
    """Why nothing fits when fewer GPUs than asked for are free in the whole cluster."""
    if free <= 0:
        return "No GPU is free right now. It waits in the queue."
    verb = "is" if free == 1 else "are"
    return f"At most {gpus(free)} {verb} free right now, and this server needs {count}."


def _add(holdings: Holdings, group: str, user: str, model: str, amount: float = 1) -> None:
    for table, key in ((holdings.groups, group), (holdings.users, user)):
        assert isinstance(table, dict)
        row = table.setdefault(key, {})
        row[model] = row.get(model, 0) + amount


def schedule(
    queue: Sequence[QueuedRequest],
    state: ClusterState,
    settings: SchedulerSettings | None = None,
    place_fn: PlaceFn = place,
) -> Decision:
    """Decide which of ``queue`` start now, where; who keeps waiting and why; who is refused.

    The caller starts each :class:`Start` (in order, all of them: each was placed with the
    GPUs of the earlier ones taken), removes them and the refused from its queue.
    """
    settings = settings if settings is not None else SchedulerSettings()
    work = _Pass(state, settings, place_fn)
    starts: list[Start] = []
    waiting: list[Waiting] = []
    refused: list[Refused] = []
    claims: dict[str, str] = {}
    head: QueuedRequest | None = None  # strict order: the first blocked request
    for item, parts in prioritise(queue, state, settings):
        if head is not None:
            waiting.append(Waiting(item, parts, f"It waits behind {head.user}'s request."))
            continue
        verdict = work.admit(item)
        if isinstance(verdict, Refuse):
            refused.append(Refused(item, verdict.reason))
            continue
        if isinstance(verdict, Wait):
            waiting.append(Waiting(item, parts, verdict.reason, for_quota=True))
            continue
        result = work.place(item, verdict.request)
        if isinstance(result, Placement):
            starts.append(Start(item, result, parts, work.soon_note(item, result)))
            work.take(item, result)
            continue
        waiting.append(Waiting(item, parts, result))
        if not settings.backfill:
            head = item
        elif len(claims) < settings.backfill_claims and parts.waited_s >= settings.claim_after_s:
            node = work.claim(item, verdict.request)
            if node is not None:
                claims[item.id] = node
    return Decision(tuple(starts), tuple(waiting), tuple(refused), claims)


@dataclass(frozen=True)
class Position:
    """Where one request stands: ``position`` (1 = next) among the ``competing`` requests
    that could use the same GPUs (itself included), for ``kind`` ("an NVIDIA TITAN X")."""

    request: QueuedRequest
    position: int
    competing: int
    kind: str
    parts: PriorityParts

    def sentence(self) -> str:
        """``2nd in line for an NVIDIA GeForce RTX 3090 (group ml-lab).``, then fair
        share's plain sentence when it has one (:meth:`PriorityParts.sentence`)."""
        group = f" (group {self.request.group})" if self.request.group else ""
        where = f"{ordinal(self.position)} in line for {self.kind}{group}."
        why = self.parts.sentence()
        return f"{where} {why}" if why else where


def kind_of(request: PlacementRequest, slots: Collection[int], index: ClusterIndex) -> str:
    """What the request waits for, in words: its one model if it can use one only."""
    models = {index.slot_model[s] for s in slots}
    if request.allowed_models is not None and len(request.allowed_models) == 1:
        models = set(request.allowed_models)
    name = next(iter(models)) if len(models) == 1 else None
    if request.gpu_count == 1:
        return article(name or "GPU")
    return f"{request.gpu_count} x {name}" if name else gpus(request.gpu_count)


def positions(
    queue: Sequence[QueuedRequest], state: ClusterState, settings: SchedulerSettings | None = None
) -> list[Position]:
    """Each request's place in line, in priority order.

    Two requests compete when some node could hold either (their static candidate
    node-and-model slots intersect: an "any GPU" request competes with a TITAN X-only
    one, a TITAN X-only one not with an RTX 3090-only one). ``position`` is 1 + the
    competing requests ahead of it.
    """
    settings = settings if settings is not None else SchedulerSettings()
    index = index_for(state.snapshot.nodes)
    ranked = prioritise(queue, state, settings)
    keys: dict[frozenset[int], int] = {}  # distinct candidate sets (few request shapes)
    of = [
        keys.setdefault(
            frozenset(s for g in index.candidates(q.request) for s in g.slots), len(keys)
        )
        for q, _ in ranked
    ]
    sets = list(keys)
    meets = [[not a.isdisjoint(b) for b in sets] for a in sets]
    total = [sum(of.count(j) for j in range(len(sets)) if meets[i][j]) for i in range(len(sets))]
    seen = [0] * len(sets)
    out = []
    for (q, parts), k in zip(ranked, of, strict=True):
        ahead = sum(seen[j] for j in range(len(sets)) if meets[k][j])
        seen[k] += 1
        kind = kind_of(q.request, sets[k], index)
        out.append(Position(q, ahead + 1, max(total[k], 1), kind, parts))
    return out
