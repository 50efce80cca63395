"""Reservations: GPUs kept for one group during a window (pure).

Rules:

- **Validation** (:func:`validate`): a reservation names either a model and a count or
  explicit nodes/GPUs that exist; it ends after it starts; its explicit GPUs are not in
  another reservation whose window overlaps; and at no instant of its window do the
  reservations then active need more GPUs of a model than the cluster has (explicit GPUs
  of the model plus every model-and-count reservation of it). Any GPU counts, busy or
  not: servers on reserved GPUs are stopped when the window starts.
- **Which GPUs** (:func:`assign`): explicit reservations get their GPUs; a model-and-count
  one then takes ``count`` GPUs of its model not taken by another active reservation,
  preferring, in order: free GPUs, GPUs its own group already holds, GPUs of others,
  broken ones last; among equals the node with the most free GPUs of the model (so a
  group gets whole nodes), then node name and GPU index. Deterministic. A GPU held by
  shares (issue 26) is held, never free: it is the group's own when every share on it is
  charged to the group, else others' (so is one whose shares are charged to nobody).
- **Fencing** (:func:`fenced`, :func:`hide`): while a reservation is active, only its
  group's servers may be placed on its GPUs; to everyone else they look taken, a shared
  one included (it takes no more shares of theirs).
- **Conflicts** (:func:`conflicts`): servers of other groups on GPUs of a reservation that
  starts within a horizon are warned; those on GPUs of an active one are to be stopped.
  A share's holder is such a server like a whole GPU's: each share on a reserved GPU
  that is not charged to the reservation's group is a conflict of its own.
- **Notice** (:func:`reserved_lines`): what the spawn form tells a user of the GPUs other
  groups have reserved now or soon.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import tzinfo

from jupyterhub_gpu.core.inventory import GPU, NodeState
from jupyterhub_gpu.core.placement.journal import journaled
from jupyterhub_gpu.core.scheduling.state import SHARE_KEY, Charge, Reservation
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.core.words import UTC, clock, gpus, listing, moment, of_model, zoned_clock


def explicit_gpus(reservation: Reservation, nodes: Sequence[NodeState]) -> tuple[str, ...]:
    """The GPU uuids an explicit reservation names: every GPU of its nodes, and its GPUs."""
    out = {g.uuid for n in nodes if n.name in reservation.nodes for g in n.inventory.gpus}
    return tuple(sorted(out | set(reservation.gpu_uuids)))


def _shape_problem(new: Reservation, nodes: Sequence[NodeState], tz: tzinfo) -> str | None:
    """What is wrong with the reservation on its own, or None."""
    if new.end <= new.start:
        return (
            f"A reservation must end after it starts (from {moment(new.start, tz)} to "
            f"{moment(new.end, tz)}). Choose a later end."
        )
    if new.explicit and (new.model is not None or new.count):
        return "Reserve either a GPU model and a count, or nodes and GPUs, not both."
    if not new.explicit and (new.model is None or new.count < 1):
        return "Say what to reserve: a GPU model and a count of at least 1, or nodes or GPUs."
    names = {n.name for n in nodes}
    unknown_nodes = sorted(new.nodes - names)
    if unknown_nodes:
        return (
            f"No node is called {listing(unknown_nodes)}; the nodes are {listing(sorted(names))}."
        )
    uuids = {g.uuid for n in nodes for g in n.inventory.gpus}
    unknown = sorted(new.gpu_uuids - uuids)
    if unknown:
        return f"No GPU of this cluster has the uuid {listing(unknown)}."
    if new.model is not None:
        total = _model_totals(nodes).get(new.model, 0)
        if total == 0:
            have = listing(sorted(_model_totals(nodes)))
            return f"This cluster has no {new.model} (it has {have}). Choose one of those."
        if new.count > total:
            return (
                f"The cluster has {of_model(total, new.model)} in all; a reservation can't "
                f"take {new.count}. Ask for {total} or fewer."
            )
    return None


def _model_totals(nodes: Sequence[NodeState]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for n in nodes:
        for g in n.inventory.gpus:
            totals[g.model] = totals.get(g.model, 0) + 1
    return totals


def _window(r: Reservation, tz: tzinfo) -> str:
    return f"reservation {r.id} of group {r.group}, {moment(r.start, tz)} to {moment(r.end, tz)}"


def _overlap_problem(
    new: Reservation, others: Sequence[Reservation], nodes: Sequence[NodeState], tz: tzinfo
) -> str | None:
    mine = set(explicit_gpus(new, nodes))
    node_of = {g.uuid: n.name for n in nodes for g in n.inventory.gpus}
    for r in others:
        if not r.explicit:
            continue
        both = mine & set(explicit_gpus(r, nodes))
        if both:
            where = listing(sorted({node_of[u] for u in both}))
            return (
                f"It overlaps {_window(r, tz)}, on {gpus(len(both))} of {where}. "
                "Choose another window or other GPUs."
            )
    return None


def _demand(active: Sequence[Reservation], model: str, models: Mapping[str, str],
            nodes: Sequence[NodeState]) -> int:  # fmt: skip
    """GPUs of ``model`` the ``active`` reservations need at once."""
    named = {u for r in active if r.explicit for u in explicit_gpus(r, nodes)}
    counted = sum(r.count for r in active if not r.explicit and r.model == model)
    return counted + sum(1 for u in named if models.get(u) == model)


def _capacity_problem(
    new: Reservation, others: Sequence[Reservation], nodes: Sequence[NodeState], tz: tzinfo
) -> str | None:
    models = {g.uuid: g.model for n in nodes for g in n.inventory.gpus}
    involved = {new.model} if new.model else {models[u] for u in explicit_gpus(new, nodes)}
    totals = _model_totals(nodes)
    points = sorted({new.start} | {r.start for r in others if new.start < r.start < new.end})
    for t in points:
        active = [r for r in [*others, new] if r.active(t)]
        for model in sorted(m for m in involved if m is not None):
            need = _demand(active, model, models, nodes)
            if need > totals.get(model, 0):
                with_ = listing([r.id for r in active if r is not new])
                return (
                    f"From {moment(t, tz)}, this and reservation {with_} would need "
                    f"{of_model(need, model)}, and the cluster has {totals.get(model, 0)}. "
                    "Choose another window or fewer GPUs."
                )
    return None


def validate(
    new: Reservation,
    existing: Sequence[Reservation],
    nodes: Sequence[NodeState],
    tz: tzinfo = UTC,
) -> str | None:
    """Why ``new`` can't be honoured (a sentence for the admin), or None if it can.

    ``existing`` are the stored reservations (one with ``new.id`` is the one being
    changed and is ignored); ``nodes`` the cluster's inventory.
    """
    others = [r for r in existing if r.id != new.id and r.overlaps(new)]
    return (
        _shape_problem(new, nodes, tz)
        or _overlap_problem(new, others, nodes, tz)
        or _capacity_problem(new, others, nodes, tz)
    )


def share_holders(charges: Mapping[str, Charge]) -> dict[str, dict[str, Charge]]:
    """GPU uuid -> {holder: charge} of the shares held on it (their charges are keyed
    ``uuid#holder``: :data:`~.state.SHARE_KEY`)."""
    out: dict[str, dict[str, Charge]] = {}
    for key, charge in charges.items():
        uuid, sep, holder = key.partition(SHARE_KEY)
        if sep:
            out.setdefault(uuid, {})[holder] = charge
    return out


def _pick(
    r: Reservation,
    snapshot: ClusterSnapshot,
    charges: Mapping[str, Charge],
    taken: set[str],
) -> tuple[str, ...]:
    """``r.count`` GPUs of ``r.model``: free first, then the group's own, then others'.
    A shared GPU is held (by the groups its shares are charged to), whether or not the
    snapshot's allocations mark it :data:`SHARED`."""
    alloc = snapshot.allocations
    sharers = share_holders(charges)

    def held(u: str) -> bool:
        return u in alloc or snapshot.shares.get(u, 0) > 0 or u in sharers

    cands: list[tuple[GPU, str]] = [
        (g, n.name)
        for n in snapshot.nodes
        for g in n.inventory.gpus
        if g.model == r.model and g.uuid not in taken
    ]
    free_on: dict[str, int] = {}
    for g, node in cands:
        free_on[node] = free_on.get(node, 0) + (not held(g.uuid) and g.healthy is not False)

    def groups(u: str) -> set[str | None]:
        """The groups ``u``'s holders are charged to (None: a holder charged to nobody)."""
        if alloc.get(u, SHARED) == SHARED and (u in sharers or snapshot.shares.get(u, 0) > 0):
            return {c.group for c in sharers.get(u, {}).values()} or {None}
        charge = charges.get(u)
        return {charge.group if charge is not None else None}

    def rank(c: tuple[GPU, str]) -> tuple[int, int, str, int]:
        g, node = c
        if g.healthy is False:
            kind = 3
        elif not held(g.uuid):
            kind = 0
        else:
            kind = 1 if groups(g.uuid) == {r.group} else 2
        return (kind, -free_on[node], node, g.index)

    return tuple(g.uuid for g, _ in sorted(cands, key=rank)[: r.count])


def assign(
    reservations: Sequence[Reservation],
    snapshot: ClusterSnapshot,
    charges: Mapping[str, Charge],
    t: float,
) -> dict[str, tuple[str, ...]]:
    """Reservation id -> its GPU uuids, for every reservation active at ``t``."""
    active = sorted((r for r in reservations if r.active(t)), key=lambda r: (r.start, r.id))
    out: dict[str, tuple[str, ...]] = {}
    taken: set[str] = set()
    for r in active:
        if r.explicit:
            out[r.id] = explicit_gpus(r, snapshot.nodes)
            taken.update(out[r.id])
    for r in active:
        if not r.explicit:
            out[r.id] = _pick(r, snapshot, charges, taken)
            taken.update(out[r.id])
    return out


def fenced(
    reservations: Sequence[Reservation], assignment: Mapping[str, tuple[str, ...]], group: str
) -> frozenset[str]:
    """The GPUs of ``assignment`` kept for groups other than ``group``."""
    by_id = {r.id: r for r in reservations}
    return frozenset(
        u for rid, uuids in assignment.items() if by_id[rid].group != group for u in uuids
    )


RESERVED = "reserved"  # the holder :func:`hide` gives the GPUs it hides


def hide(snapshot: ClusterSnapshot, uuids: Collection[str]) -> ClusterSnapshot:
    """``snapshot`` as a placement outside the queue sees it with ``uuids`` fenced: a free
    GPU is held by :data:`RESERVED`, and so is a shared one (it takes no more shares);
    a GPU held whole keeps its holder. ``snapshot`` is left as it is; its allocations are
    forked journaled, so the placement index re-checks only what was hidden."""
    if not uuids:
        return snapshot
    alloc = journaled(snapshot.allocations)
    for u in uuids:
        if alloc.get(u, SHARED) == SHARED:
            alloc[u] = RESERVED
    return replace(snapshot, allocations=alloc)


@dataclass(frozen=True)
class Conflict:
    """A server (``holder``, as in ``snapshot.allocations``, or a share's holder as in its
    charge's key ``uuid#holder``) on GPUs of a reservation of another group: to be warned
    (``stop_now`` False) or stopped now (True)."""

    reservation: Reservation
    holder: str
    gpu_uuids: tuple[str, ...]
    stop_now: bool

    def sentence(self, now: float, tz: tzinfo = UTC) -> str:
        """For the server's owner: what will happen, and when."""
        r = self.reservation
        what = "GPU is" if len(self.gpu_uuids) == 1 else "GPUs are"
        if self.stop_now:
            return (
                f"Stopped: its {what} reserved for group {r.group} until {clock(r.end, now, tz)}."
            )
        return (
            f"Its {what} reserved for group {r.group} from {clock(r.start, now, tz)} to "
            f"{clock(r.end, now, tz)}: this server will be stopped at "
            f"{clock(r.start, now, tz)}. Save your work before then."
        )

    def running_notice(self, server: str, now: float, tz: tzinfo = UTC) -> str:
        """For the owner of a running server (the hub's pages): "Your server 'big' is on
        GPUs reserved for group ml-lab from 14:00 to 18:00 UTC: it will be stopped at
        14:00. Save your work before then." """
        name = f"server '{server}'" if server else "default server"
        what = "a GPU" if len(self.gpu_uuids) == 1 else "GPUs"
        start, until = self._window(now, tz)
        return (
            f"Your {name} is on {what} reserved for group {self.reservation.group} from "
            f"{start} to {until}: it will be stopped at {start}. Save your work before then."
        )

    def notice(self, now: float, tz: tzinfo = UTC) -> str:
        """For the spawn page of a server placed on GPUs reserved soon: "These GPUs are
        reserved for group ml-lab from 14:00 to 18:00 UTC: your server will be stopped at
        14:00. Save your work before then." """
        these = "This GPU is" if len(self.gpu_uuids) == 1 else "These GPUs are"
        start, until = self._window(now, tz)
        return (
            f"{these} reserved for group {self.reservation.group} from {start} to {until}: "
            f"your server will be stopped at {start}. Save your work before then."
        )

    def _window(self, now: float, tz: tzinfo) -> tuple[str, str]:
        """The reservation's start ("14:00") and end with its zone ("18:00 UTC")."""
        r = self.reservation
        return clock(r.start, now, tz), zoned_clock(r.end, now, tz)

    def stopped_note(self, server: str, at: float, tz: tzinfo = UTC) -> str:
        """For the spawn form after the stop (as the culler's notes): "Your server 'big'
        was stopped at 2026-11-24 14:00 UTC: its GPU is reserved for group ml-lab until
        2026-11-24 18:00 UTC." """
        which = f"Your server '{server}'" if server else "Your server"
        what = "its GPU is" if len(self.gpu_uuids) == 1 else "its GPUs are"
        r = self.reservation
        return (
            f"{which} was stopped at {moment(at, tz)}: {what} reserved for group {r.group} "
            f"until {moment(r.end, tz)}."
        )


def _held_by_others(
    r: Reservation, uuids: Sequence[str], snapshot: ClusterSnapshot,
    charges: Mapping[str, Charge], stop_now: bool,
) -> list[Conflict]:  # fmt: skip
    """Whole holders and share holders of ``uuids`` not charged to ``r``'s group (a
    whole holder charged to nobody is one; orphans are in neither ``charges`` nor, as
    the hub builds its snapshots for this, ``allocations``)."""
    by_holder: dict[str, list[str]] = {}
    sharers = share_holders(charges)
    for u in uuids:
        holder = snapshot.allocations.get(u)
        charge = charges.get(u)
        if holder not in (None, SHARED) and (charge is None or charge.group != r.group):
            by_holder.setdefault(holder, []).append(u)
        for h, share in sharers.get(u, {}).items():
            if share.group != r.group:
                by_holder.setdefault(h, []).append(u)
    return [Conflict(r, h, tuple(us), stop_now) for h, us in sorted(by_holder.items())]


def conflicts(
    reservations: Sequence[Reservation],
    snapshot: ClusterSnapshot,
    charges: Mapping[str, Charge],
    now: float,
    horizon_s: float,
) -> list[Conflict]:
    """Holders of other groups on reserved GPUs: of active reservations (stop them now)
    and of reservations starting within ``horizon_s`` (warn them), in start order.

    An upcoming model-and-count reservation's GPUs are chosen as :func:`assign` would
    choose them at its start with today's allocations; the hub should warn again each
    round, since the choice may move to GPUs that become free."""
    out: list[Conflict] = []
    now_assigned = assign(reservations, snapshot, charges, now)
    for r in sorted(reservations, key=lambda r: (r.start, r.id)):
        if r.active(now):
            out += _held_by_others(r, now_assigned[r.id], snapshot, charges, True)
        elif now < r.start <= now + horizon_s:
            later = assign(reservations, snapshot, charges, r.start)
            out += _held_by_others(r, later[r.id], snapshot, charges, False)
    return out


def _what(r: Reservation, snapshot: ClusterSnapshot, assigned: Sequence[str], active: bool) -> str:
    """What ``r`` keeps, in words: its model and count (and where, as things stand) or
    its nodes and GPUs."""
    if not r.explicit:
        taken = set(assigned)
        on = sorted({n.name for n in snapshot.nodes for g in n.inventory.gpus if g.uuid in taken})
        where = f" ({'on' if active else 'likely on'} {listing(on)})" if on else ""
        return f"{of_model(r.count, r.model or 'GPU')}{where}"
    parts = [f"all GPUs of {n}" for n in sorted(r.nodes)]
    for n in snapshot.nodes:
        if n.name in r.nodes:
            continue
        mine = sorted(g.index for g in n.inventory.gpus if g.uuid in r.gpu_uuids)
        if mine:
            noun = "GPU" if len(mine) == 1 else "GPUs"
            parts.append(f"{noun} {listing([str(i) for i in mine])} of {n.name}")
    return listing(parts) if parts else gpus(len(r.gpu_uuids))


def reserved_lines(
    reservations: Sequence[Reservation],
    snapshot: ClusterSnapshot,
    charges: Mapping[str, Charge],
    groups: Collection[str],
    now: float,
    horizon_s: float,
    tz: tzinfo = UTC,
) -> list[str]:
    """For a user who charges one of ``groups``: the reservations of other groups active
    now or starting within ``horizon_s``, one line each in start order: "2 x NVIDIA
    A100-SXM4-40GB (likely on gpu-c) for group course, 14:00 to 18:00 UTC", "all GPUs of
    gpu-a for group ml-lab, now until 18:00 UTC". Where a model-and-count reservation
    lands is :func:`assign`'s choice with today's allocations (it may move)."""
    out = []
    now_assigned = assign(reservations, snapshot, charges, now)
    for r in sorted(reservations, key=lambda r: (r.start, r.id)):
        if r.group in groups or not (r.active(now) or now < r.start <= now + horizon_s):
            continue
        active = r.active(now)
        at_start = now_assigned if active else assign(reservations, snapshot, charges, r.start)
        assigned = at_start[r.id]
        end = zoned_clock(r.end, now, tz)
        window = f"now until {end}" if active else f"{clock(r.start, now, tz)} to {end}"
        out.append(f"{_what(r, snapshot, assigned, active)} for group {r.group}, {window}")
    return out
