"""The queue's admin setting, checked strictly: a plain dict in, the scheduler's data out (pure).

:func:`queue_settings` reads the value of ``GPUDockerSpawner.queue_policy``::

    {
        "half_life_hours": 168,          # PriorityDecayHalfLife (> 0)
        "model_weights": {"NVIDIA A100-SXM4-40GB": 3.0},   # TRESBillingWeights (>= 0)
        "weights": {"fairshare": 1.0, "user_fairshare": 0.1, "admin": 1.0, "age": 1.0},
        "max_age_hours": 1,              # the age term saturates here (> 0; inf: never)
        "backfill": True,
        "reservation_notice_hours": 24,  # users hear of reservations this soon (>= 0)
        "timezone": "Europe/Paris",      # IANA name: clock times in messages (default UTC)
        "groups": {
            "ml-lab": {"priority": 10, "shares": 2, "max_gpus": 8,
                       "max_gpus_per_model": {"NVIDIA A100-SXM4-40GB": 2},
                       "user_max_gpus": 4, "user_max_gpus_per_model": {},
                       "max_queue_wait": 7200},  # s; 0: never wait (refused at once)
        },
        "default_group": {...},          # same keys as a group: groups not listed
        "users": {"alice": {"max_gpus": 2, "max_gpus_per_model": {}}},
    }

Every key is optional; a missing one keeps the dataclass default. An unknown key, a
wrong type or a value out of range is a :class:`~jupyterhub_gpu.errors.ConfigError`
naming the entry (``GPUDockerSpawner.queue_policy.groups.ml-lab.max_gpu: unknown key;
known: ...``), so the hub refuses to start on a typo.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub_gpu.core.scheduling.state import GroupPolicy, Policies, Quota, SchedulerSettings
from jupyterhub_gpu.errors import ConfigError

__all__ = ["queue_settings"]

T = TypeVar("T")

TOP_KEYS = (
    "backfill",
    "default_group",
    "groups",
    "half_life_hours",
    "max_age_hours",
    "model_weights",
    "reservation_notice_hours",
    "timezone",
    "users",
    "weights",
)
WEIGHT_KEYS = {
    "admin": "weight_admin",
    "age": "weight_age",
    "fairshare": "weight_fairshare",
    "user_fairshare": "weight_user_fairshare",
}
GROUP_KEYS = (
    "max_gpus",
    "max_gpus_per_model",
    "max_queue_wait",
    "priority",
    "shares",
    "user_max_gpus",
    "user_max_gpus_per_model",
)
USER_KEYS = ("max_gpus", "max_gpus_per_model")


def queue_settings(
    raw: Mapping[str, Any] | None, where: str = "GPUDockerSpawner.queue_policy"
) -> tuple[SchedulerSettings, Policies]:
    """Turn ``GPUDockerSpawner.queue_policy`` into ``(SchedulerSettings, Policies)``.

    Keys (all optional; see the module docstring and docs/scheduling.md, "Settings"):
    ``half_life_hours`` (> 0), ``model_weights`` ({model: weight >= 0}), ``weights``
    ({fairshare, user_fairshare, admin, age}: >= 0), ``max_age_hours`` (> 0, inf allowed),
    ``backfill`` (bool), ``reservation_notice_hours`` (>= 0), ``timezone`` (an IANA
    name such as ``"Europe/Paris"``: the zone of clock times in users' and admins'
    messages; default UTC), ``groups`` ({name:
    group}), ``default_group`` (group) and ``users`` ({name: {max_gpus,
    max_gpus_per_model}}). A group takes ``priority`` and ``shares`` (numbers >= 0),
    ``max_gpus`` and ``user_max_gpus`` (int >= 0, or None: no cap),
    ``max_gpus_per_model`` and ``user_max_gpus_per_model`` ({model: int >= 0}) and
    ``max_queue_wait`` (seconds >= 0, 0: never wait; missing: the spawner's default).
    The other :class:`SchedulerSettings` fields keep their defaults. ``None`` or ``{}``
    gives ``(SchedulerSettings(), Policies())``. Raises :class:`ConfigError` naming the
    entry (``where.groups.ml-lab.shares: ...``) and what is expected.
    """
    top = _mapping(raw or {}, where, TOP_KEYS)
    values: dict[str, Any] = {}
    if "half_life_hours" in top:
        hours = _number(top["half_life_hours"], f"{where}.half_life_hours", positive=True)
        values["half_life_s"] = 3600.0 * hours
    if "max_age_hours" in top:
        hours = _number(top["max_age_hours"], f"{where}.max_age_hours", positive=True, inf=True)
        values["max_age_s"] = 3600.0 * hours
    if "model_weights" in top:
        values["model_weights"] = _by_name(top["model_weights"], f"{where}.model_weights", _number)
    if "weights" in top:
        weights = _mapping(top["weights"], f"{where}.weights", tuple(sorted(WEIGHT_KEYS)))
        for key, value in weights.items():
            values[WEIGHT_KEYS[key]] = _number(value, f"{where}.weights.{key}")
    if "reservation_notice_hours" in top:
        hours = _number(top["reservation_notice_hours"], f"{where}.reservation_notice_hours")
        values["reservation_notice_s"] = 3600.0 * hours
    if "timezone" in top:
        values["timezone"] = _zone(top["timezone"], f"{where}.timezone")
    if "backfill" in top:
        if not isinstance(top["backfill"], bool):
            raise ConfigError(f"{where}.backfill: expected true or false, got {top['backfill']!r}")
        values["backfill"] = top["backfill"]
    policies = Policies(
        groups=_by_name(top.get("groups", {}), f"{where}.groups", _group),
        default=_group(top["default_group"], f"{where}.default_group")
        if "default_group" in top
        else GroupPolicy(),
        users=_by_name(top.get("users", {}), f"{where}.users", _user),
    )
    try:
        settings = SchedulerSettings(**values)
    except ValueError as e:  # pragma: no cover - the checks above come first
        raise ConfigError(f"{where}: {e}") from None
    return settings, policies


def _mapping(raw: Any, where: str, known: tuple[str, ...]) -> Mapping[str, Any]:
    """``raw`` as a mapping whose keys are all in ``known``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with keys {', '.join(known)}; got {raw!r}")
    for key in raw:
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown key; known: {', '.join(known)}")
    return raw


def _by_name(raw: Any, where: str, read: Callable[[Any, str], T]) -> dict[str, T]:
    """``{name: read(value, where.name)}`` for a mapping keyed by non-empty strings."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of name to value, got {raw!r}")
    out: dict[str, T] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: names must be non-empty strings, got {name!r}")
        out[name] = read(value, f"{where}.{name}")
    return out


def _number(raw: Any, where: str, positive: bool = False, inf: bool = False) -> float:
    """A real number >= 0 (> 0 if ``positive``; infinity only if ``inf``); never a bool."""
    expected = f"expected a {'' if inf else 'finite '}number {'> 0' if positive else '>= 0'}"
    if (
        isinstance(raw, bool)
        or not isinstance(raw, (int, float))
        or math.isnan(raw)
        or raw < 0
        or (positive and raw == 0)
        or (math.isinf(raw) and not inf)
    ):
        raise ConfigError(f"{where}: {expected}, got {raw!r}")
    return float(raw)


def _zone(raw: Any, where: str) -> ZoneInfo:
    """An IANA time zone by name (``Europe/Paris``, ``UTC``), from the system's tz database
    or the ``tzdata`` package."""
    hint = "use an IANA name such as 'Europe/Paris', 'America/New_York' or 'UTC'"
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{where}: expected a time zone name; {hint}; got {raw!r}")
    try:
        return ZoneInfo(raw.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where}: unknown time zone {raw!r}; {hint}") from None


def _count(raw: Any, where: str) -> int:
    """A whole number of GPUs >= 0; never a bool or a float."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ConfigError(f"{where}: expected a whole number of GPUs >= 0, got {raw!r}")
    return raw


def _quota(cap: Any, per_model: Any, where: str, cap_key: str, model_key: str) -> Quota:
    """A :class:`Quota` from ``max_gpus`` (None: no cap) and ``{model: count}``."""
    max_gpus = None if cap is None else _count(cap, f"{where}.{cap_key}")
    return Quota(max_gpus, _by_name(per_model, f"{where}.{model_key}", _count))


def _group(raw: Any, where: str) -> GroupPolicy:
    """One group's :class:`GroupPolicy` (also ``default_group``)."""
    group = _mapping(raw, where, GROUP_KEYS)
    return GroupPolicy(
        priority=_number(group.get("priority", 0.0), f"{where}.priority"),
        shares=_number(group.get("shares", 1.0), f"{where}.shares"),
        quota=_quota(
            group.get("max_gpus"),
            group.get("max_gpus_per_model", {}),
            where,
            "max_gpus",
            "max_gpus_per_model",
        ),
        user_quota=_quota(
            group.get("user_max_gpus"),
            group.get("user_max_gpus_per_model", {}),
            where,
            "user_max_gpus",
            "user_max_gpus_per_model",
        ),
        max_queue_wait_s=_number(group["max_queue_wait"], f"{where}.max_queue_wait")
        if "max_queue_wait" in group
        else None,
    )


def _user(raw: Any, where: str) -> Quota:
    """One user's :class:`Quota`, which replaces their group's per-user quota."""
    user = _mapping(raw, where, USER_KEYS)
    return _quota(
        user.get("max_gpus"),
        user.get("max_gpus_per_model", {}),
        where,
        "max_gpus",
        "max_gpus_per_model",
    )
