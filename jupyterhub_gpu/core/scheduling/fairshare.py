"""Who goes next: fair share by decayed past use, admin priority and age (pure).

Slurm's multifactor priority, reduced to what a lab hub needs:

- **Usage** of a group is its past GPU-hours, each weighted by its model
  (``SchedulerSettings.model_weights``, default 1.0: an A100-hour may count 3 and a
  TITAN X-hour 0.5) and halved every ``half_life_s`` since it ended
  (``PriorityDecayHalfLife``). The same per (group, user).
- **Fair-share factor** ``F = 2 ** (-usage_norm / share_norm)``, in ``[0, 1]``:
  ``usage_norm`` is the group's part of all groups' usage, ``share_norm`` its part of
  all groups' shares (default equal). A group that used exactly its share has 0.5, one
  that used nothing 1.0. A group with no shares has 0. The groups counted are the
  configured ones, those with usage and those in the queue.
- **User factor**: the same formula one level down, within the group: the user's part of
  the group's usage against an equal split among the group's users that have usage or
  wait in the queue.
- **Priority** = ``w_fairshare x F + w_user x F_user + w_admin x admin / max admin +
  w_age x min(waited / max_age, age_cap)``; ties go to the earlier request, then the id.
  With Slurm's cap (``age_cap`` 1, the default) requests that have all waited
  ``max_age`` are ordered by fair share and admin priority alone; with ``age_cap=None``
  an earlier request is passed only by later ones that came less than ``max_age``
  x (their fair-share and admin advantage / ``w_age``) after it: nobody starves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jupyterhub_gpu.core.scheduling.state import (
    ClusterState,
    Policies,
    QueuedRequest,
    SchedulerSettings,
    UsageItem,
    UsageTotals,
)


def decay(elapsed_s: float, half_life_s: float) -> float:
    """The weight left after ``elapsed_s``: 1 now, 0.5 after one half-life."""
    if half_life_s <= 0:
        raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
    return math.pow(0.5, max(elapsed_s, 0.0) / half_life_s)


def advance(
    totals: UsageTotals, items: Iterable[UsageItem], now: float, settings: SchedulerSettings
) -> UsageTotals:
    """``totals`` decayed from ``totals.at`` to ``now``, plus ``items`` (weighted per model,
    decayed from their end; an item ending after ``now`` counts as ending now).

    Decay is exponential, so a total kept this way equals :func:`decayed_usage` over the
    whole history: a hub (or the benchmark) need not re-read it every round.
    """
    if now < totals.at:
        raise ValueError(f"usage totals are as of {totals.at}; they can't go back to {now}")
    k = decay(now - totals.at, settings.half_life_s)
    groups = {g: v * k for g, v in totals.groups.items()}
    users = {u: v * k for u, v in totals.users.items()}
    for item in items:
        ended = min(item.ended_at, now)
        w = item.gpu_hours * settings.weight(item.model) * decay(now - ended, settings.half_life_s)
        groups[item.group] = groups.get(item.group, 0.0) + w
        key = (item.group, item.user)
        users[key] = users.get(key, 0.0) + w
    return UsageTotals(now, groups, users)


def decayed_usage(
    items: Iterable[UsageItem], now: float, settings: SchedulerSettings
) -> UsageTotals:
    """Decayed, model-weighted GPU-hours per group and per (group, user) as of ``now``."""
    return advance(UsageTotals(now), items, now, settings)


def factor(usage_norm: float, share_norm: float) -> float:
    """``2 ** (-usage_norm / share_norm)``; 0 for no shares (1 if also no usage)."""
    if share_norm <= 0:
        return 1.0 if usage_norm <= 0 else 0.0
    return math.pow(2.0, -usage_norm / share_norm)


@dataclass(frozen=True)
class Standing:
    """One group's (or user's) fair share: its normalised ``share`` and ``usage``
    (parts of the whole, 0..1) and the ``factor`` 2^(-usage/share)."""

    share: float
    usage: float
    factor: float


@dataclass(frozen=True)
class PriorityParts:
    """A waiting request's priority and what it is made of (for the progress page)."""

    group_share: float
    group_usage: float
    fairshare: float
    user_fairshare: float
    admin: float
    age: float
    waited_s: float
    priority: float

    def sentence(self) -> str:
        """What fair share means for this request, in plain words: ``Your group has used
        more than its share lately, so others go first.`` when its recent use is over its
        share, else "" (nothing to explain). No numbers and no waiting time: the progress
        page shows a line only when it changes, and a user can't act on 0.40 vs 0.55."""
        if self.group_usage > self.group_share:
            return "Your group has used more than its share lately, so others go first."
        return ""


def group_standings(
    usage: UsageTotals | None, policies: Policies, queued: Iterable[str]
) -> dict[str, Standing]:
    """Every counted group's standing: configured groups, groups with usage, ``queued``."""
    used = usage.groups if usage is not None else {}
    names = set(policies.groups) | set(used) | set(queued)
    shares = {g: max(policies.group(g).shares, 0.0) for g in names}
    total_share = sum(shares.values())
    total_use = sum(used.values())
    out = {}
    for g in names:
        s = shares[g] / total_share if total_share > 0 else 0.0
        u = used.get(g, 0.0) / total_use if total_use > 0 else 0.0
        out[g] = Standing(s, u, factor(u, s))
    return out


def user_standings(
    usage: UsageTotals | None, queue: Iterable[QueuedRequest]
) -> dict[tuple[str, str], Standing]:
    """Per (group, user): the user's part of the group's usage against an equal split
    among the group's users with usage or a waiting request."""
    used = usage.users if usage is not None else {}
    members: dict[str, set[str]] = {}
    for group, user in [*used, *((q.group, q.user) for q in queue)]:
        members.setdefault(group, set()).add(user)
    group_use = {g: sum(used.get((g, u), 0.0) for u in us) for g, us in members.items()}
    out = {}
    for g, us in members.items():
        for u in us:
            s = 1.0 / len(us)
            n = used.get((g, u), 0.0) / group_use[g] if group_use[g] > 0 else 0.0
            out[(g, u)] = Standing(s, n, factor(n, s))
    return out


def prioritise(
    queue: Sequence[QueuedRequest], state: ClusterState, settings: SchedulerSettings
) -> list[tuple[QueuedRequest, PriorityParts]]:
    """The queue in the order the next GPU goes: highest priority first, then the
    earlier request, then the id. Each with its :class:`PriorityParts`."""
    groups = group_standings(state.usage, state.policies, (q.group for q in queue))
    users = user_standings(state.usage, queue)
    top = state.policies.max_priority()
    ranked = []
    for q in queue:
        g, u = groups[q.group], users[(q.group, q.user)]
        admin = state.policies.group(q.group).priority / top if top > 0 else 0.0
        waited = max(state.now - q.enqueued_at, 0.0)
        age = waited / settings.max_age_s if math.isfinite(settings.max_age_s) else 0.0
        if settings.age_cap is not None:
            age = min(age, settings.age_cap)
        total = (
            settings.weight_fairshare * g.factor
            + settings.weight_user_fairshare * u.factor
            + settings.weight_admin * admin
            + settings.weight_age * age
        )
        ranked.append(
            (q, PriorityParts(g.share, g.usage, g.factor, u.factor, admin, age, waited, total))
        )
    ranked.sort(key=lambda qp: (-qp[1].priority, qp[0].enqueued_at, qp[0].id))
    return ranked
