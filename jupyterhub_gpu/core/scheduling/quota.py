"""Quotas: may this request take GPUs now, later, or never? (pure)

A group's quota caps the GPUs its servers hold together, a user's quota the GPUs one
user holds (over all their servers, whatever group they charge); each has a cap over all
models (``max_gpus``) and caps per model (``per_model``; 0 forbids a model).

- **Refuse** when the request could never be within a cap, even with nothing held: more
  GPUs than ``max_gpus``, or more than the per-model cap of every model it may use. The
  sentence names the number. So is a request that no GPU of the cluster can ever hold
  (:func:`never_fits`: a model nobody has, more GPUs than any node has, an image no
  driver runs).
- **Wait** when it would fit the caps once the group's (or user's) own servers free
  GPUs: it stays queued and keeps its place; the sentence says how many are held.
- **Allowed** otherwise. A per-model cap *narrows* the request: an "any GPU" request of
  a group at its A100 cap may still start on the other models, so the request placed is
  the original one with ``allowed_models`` restricted to the models with room.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from jupyterhub_gpu.core.placement.explain import _static_gap
from jupyterhub_gpu.core.placement.index import index_for
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.placement.shares import never_shares
from jupyterhub_gpu.core.placement.view import View
from jupyterhub_gpu.core.scheduling.state import SHARE_KEY, Charge, Policies, QueuedRequest, Quota
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.words import gpus, listing, of_model


@dataclass(frozen=True)
class Holdings:
    """GPUs held now, per group and per user, each per model name (a share counts as its
    fraction of a GPU)."""

    groups: Mapping[str, Mapping[str, float]]
    users: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class Allowed:
    """Within every cap; ``request`` is narrowed to the models with room."""

    request: PlacementRequest


@dataclass(frozen=True)
class Wait:
    """Over a cap now, within it once the group's or user's servers free GPUs."""

    reason: str


@dataclass(frozen=True)
class Refuse:
    """Can never start; ``reason`` says why and what to ask for instead."""

    reason: str


Verdict = Allowed | Wait | Refuse


def gpu_models(snapshot: ClusterSnapshot) -> dict[str, str]:
    """GPU uuid -> model name, for every GPU in the snapshot (broken ones too)."""
    return {g.uuid: g.model for n in snapshot.nodes for g in n.inventory.gpus}


def holdings_of(charges: Mapping[str, Charge], models: Mapping[str, str]) -> Holdings:
    """What each group and user holds, from the charged GPUs (uuid -> model via
    ``models``; a GPU no longer in the inventory counts under the model ``""``)."""
    groups: dict[str, dict[str, float]] = {}
    users: dict[str, dict[str, float]] = {}
    for key, charge in charges.items():
        model = models.get(key.split(SHARE_KEY, 1)[0], "")
        g = groups.setdefault(charge.group, {})
        g[model] = g.get(model, 0) + charge.fraction
        u = users.setdefault(charge.user, {})
        u[model] = u.get(model, 0) + charge.fraction
    return Holdings(groups, users)


@dataclass(frozen=True)
class _Scope:
    who: str  # "Group ml-lab" / "You"
    has: str  # "holds" / "hold"
    whose: str  # "the group's" / "your"
    quota: Quota
    held: Mapping[str, float]


def _scopes(item: QueuedRequest, holdings: Holdings, policies: Policies) -> list[_Scope]:
    group = policies.group(item.group).quota
    user = policies.user_quota(item.user, item.group)
    return [
        _Scope(f"Group {item.group}", "holds", "the group's", group,
               holdings.groups.get(item.group, {})),
        _Scope("You", "hold", "your", user, holdings.users.get(item.user, {})),
    ]  # fmt: skip


_OK, _BUSY, _NEVER = 0, 1, 2


def _model_status(scope: _Scope, model: str, count: float) -> int:
    cap = scope.quota.per_model.get(model)
    if cap is None:
        return _OK
    if count > cap:
        return _NEVER
    return _BUSY if scope.held.get(model, 0) + count > cap + 1e-9 else _OK


def _total(scope: _Scope, count: float) -> Verdict | None:
    """Refuse or Wait on ``max_gpus``; None when within it."""
    cap = scope.quota.max_gpus
    if cap is None:
        return None
    if count > cap:
        fix = f"Ask for {cap} or fewer." if cap else "Ask an admin for GPUs for this group."
        return Refuse(
            f"{scope.who} may hold at most {gpus(cap)} at once, and this server asks for "
            f"{count:g}{'' if count == int(count) else ' of a GPU'}: it can never start. {fix}"
        )
    held = sum(scope.held.values())
    if held + count <= cap + 1e-9:
        return None
    need = f"{held + count - cap:g}"
    sooner = " Stop one of your servers to start this one sooner." if scope.who == "You" else ""
    return Wait(
        f"{scope.who} {scope.has} {held:g} of {gpus(cap)} allowed at once, and this server asks "
        f"for {count:g}: it waits in the queue until {scope.whose} servers free {need}.{sooner}"
    )


def _amount(count: float) -> str:
    """``2 GPUs``, or ``0.25 of a GPU`` for a share."""
    return gpus(int(count)) if count == int(count) else f"{count:g} of a GPU"


def _never_reason(scopes: list[_Scope], models: list[str], count: float) -> Refuse:
    caps = []
    for scope in scopes:
        mine = [m for m in models if m in scope.quota.per_model]
        if mine:
            shown = [of_model(scope.quota.per_model[m], m) for m in mine]
            caps.append(f"{scope.who} may hold at most {listing(shown)} at once")
    best = max(min(s.quota.per_model.get(m, count) for s in scopes) for m in models)
    best = int(best) if best == int(best) else best
    fix = f"Ask for {best} or fewer." if best else "Choose another GPU model."
    return Refuse(
        f"{'; '.join(caps)}, and this server asks for {_amount(count)}: it can never start. {fix}"
    )


def _busy_reason(scopes: list[_Scope], models: list[str], count: float) -> Wait:
    parts = []
    for scope in scopes:
        for m in models:
            if _model_status(scope, m, count) == _BUSY:
                cap = scope.quota.per_model[m]
                parts.append(
                    f"{scope.who} {scope.has} {scope.held.get(m, 0):g} of {of_model(cap, m)}"
                )
    return Wait(
        f"{'; '.join(parts)} allowed at once, and this server asks for {count:g}: it waits in "
        "the queue until those servers free enough of them."
    )


def check_quota(
    item: QueuedRequest, holdings: Holdings, policies: Policies, models: Collection[str]
) -> Verdict:
    """Allowed (narrowed), Wait or Refuse for ``item`` given what is held now.

    ``models`` are the cluster's model names: the models an "any GPU" request may use.
    """
    request = item.request
    count: float = request.gpu_count if not request.shares else request.gpu_amount
    scopes = [s for s in _scopes(item, holdings, policies) if not s.quota.unlimited]
    if not scopes:
        return Allowed(request)
    for scope in scopes:
        verdict = _total(scope, count)
        if isinstance(verdict, Refuse):
            return verdict
    considered = sorted(request.allowed_models if request.allowed_models is not None else models)
    status = {m: max((_model_status(s, m, count) for s in scopes), default=_OK) for m in considered}
    if considered and all(v == _NEVER for v in status.values()):
        return _never_reason(scopes, considered, count)
    for scope in scopes:
        verdict = _total(scope, count)
        if verdict is not None:
            return verdict
    usable = frozenset(m for m, v in status.items() if v == _OK)
    if considered and not usable:
        return _busy_reason(scopes, considered, count)
    if len(usable) == len(considered):
        return Allowed(request)
    return Allowed(replace(request, allowed_models=usable))


def never_fits(snapshot: ClusterSnapshot, request: PlacementRequest) -> str | None:
    """Why no GPU of this cluster could ever hold ``request`` (placement's own sentence and
    advice), or None when it could once GPUs are free. A request that fits only drained
    or unreachable nodes may wait: they can come back."""
    if request.shares:
        return never_shares(snapshot, request)
    if index_for(snapshot.nodes).candidates(request):
        return None
    gap = _static_gap(View(snapshot), request)
    if gap is None or gap[1] is None:
        return None
    return f"{gap[0]}. {gap[1]}"
