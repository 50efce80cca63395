"""Admin resource bounds, per-group bounds, and a user's effective bounds. Pure.

How groups combine: for each field, if any of the user's groups sets it, the most
generous of those groups' values applies (highest number, union of patterns);
otherwise the site default applies. A group can thus raise or lower the default
(``students: {max_gpus: 1}`` while the default is 2). ``allowed_models`` and
``allowed_images`` are fnmatch patterns (models case-insensitive, e.g.
``"*RTX 3090*"``; images over catalog slugs, e.g. ``"pytorch-*"``); ``None`` = any.

``max_gpus`` bounds one server; ``max_gpus_per_user`` bounds the GPUs a user holds at
once over all their servers (named ones included; ``None`` = no cap, the default), see
:mod:`.quota`.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from jupyterhub_gpu.core.form.user_quota import NO_QUOTA, UserQuota
from jupyterhub_gpu.errors import ConfigError

GIB = 1024**3


@dataclass(frozen=True)
class GroupBounds:
    """What one group may use; ``None`` fields fall back to the site default."""

    max_gpus: int | None = None
    allowed_models: frozenset[str] | None = None
    allowed_images: frozenset[str] | None = None
    max_cpu: float | None = None
    max_mem_gib: float | None = None
    max_gpus_per_user: int | None = None


@dataclass(frozen=True)
class ResourcePolicy:
    """Site-wide defaults and bounds (set by the admin, checked at hub start-up)."""

    max_gpus: int = 1
    allowed_models: frozenset[str] | None = None
    allowed_images: frozenset[str] | None = None
    max_cpu: float = 4.0
    max_mem_gib: float = 16.0
    min_cpu: float = 0.5
    min_mem_gib: float = 0.5
    default_gpu_count: int = 1
    default_cpu: float = 2.0
    default_mem_gib: float = 8.0
    shm_size_gib: float | None = None  # None: half of the server's memory limit
    pids_limit: int = 4096
    max_gpus_per_user: int | None = None  # None: no cap on the GPUs of all servers together
    group_bounds: Mapping[str, GroupBounds] = field(default_factory=dict)


@dataclass(frozen=True)
class UserBounds:
    """The effective bounds and defaults for one user (see :func:`resolve_bounds`)."""

    groups: frozenset[str]
    max_gpus: int
    allowed_models: frozenset[str] | None
    allowed_images: frozenset[str] | None
    max_cpu: float
    max_mem_gib: float
    min_cpu: float
    min_mem_gib: float
    default_gpu_count: int
    default_cpu: float
    default_mem_gib: float
    quota: UserQuota = NO_QUOTA

    def model_allowed(self, model: str) -> bool:
        if self.allowed_models is None:
            return True
        name = model.lower()
        return any(fnmatch.fnmatchcase(name, p.lower()) for p in self.allowed_models)

    def image_allowed(self, slug: str) -> bool:
        if self.allowed_images is None:
            return True
        return any(fnmatch.fnmatchcase(slug, p) for p in self.allowed_images)


@dataclass(frozen=True)
class ResourceLimits:
    """What the spawner hands Docker: ``nano_cpus = int(cpu * 1e9)``, ``mem_limit``,
    ``shm_size``, ``pids_limit``."""

    cpu: float
    mem_bytes: int
    shm_bytes: int
    pids_limit: int


def _generous_patterns(values: list[frozenset[str] | None]) -> frozenset[str] | None:
    union: set[str] = set()
    for v in values:
        if v is None:
            return None
        union |= v
    return frozenset(union)


def resolve_bounds(policy: ResourcePolicy, groups: Iterable[str]) -> UserBounds:
    """A user's effective bounds from the site policy and their groups."""
    group_set = frozenset(groups)
    mine = [policy.group_bounds[g] for g in sorted(group_set) if g in policy.group_bounds]

    def pick(name: str, default: Any) -> Any:
        values = [getattr(b, name) for b in mine if getattr(b, name) is not None]
        if not values:
            return default
        if name.startswith("allowed_"):
            return _generous_patterns(values)
        return max(values)

    max_gpus = pick("max_gpus", policy.max_gpus)
    max_cpu = pick("max_cpu", policy.max_cpu)
    max_mem = pick("max_mem_gib", policy.max_mem_gib)
    min_cpu = min(policy.min_cpu, max_cpu)
    min_mem = min(policy.min_mem_gib, max_mem)
    return UserBounds(
        groups=group_set,
        max_gpus=max_gpus,
        allowed_models=pick("allowed_models", policy.allowed_models),
        allowed_images=pick("allowed_images", policy.allowed_images),
        max_cpu=max_cpu,
        max_mem_gib=max_mem,
        min_cpu=min_cpu,
        min_mem_gib=min_mem,
        default_gpu_count=min(policy.default_gpu_count, max_gpus),
        default_cpu=min(max(policy.default_cpu, min_cpu), max_cpu),
        default_mem_gib=min(max(policy.default_mem_gib, min_mem), max_mem),
        quota=_resolve_quota(policy, group_set),
    )


def _resolve_quota(policy: ResourcePolicy, groups: frozenset[str]) -> UserQuota:
    """The most generous ``max_gpus_per_user`` of the user's groups that set one (the
    first such group by name on a tie), else the site's."""
    limits = [
        (b.max_gpus_per_user, g)
        for g in sorted(groups)
        if (b := policy.group_bounds.get(g)) is not None and b.max_gpus_per_user is not None
    ]
    if not limits:
        return UserQuota(policy.max_gpus_per_user)
    limit = max(n for n, _ in limits)
    group = next(g for n, g in limits if n == limit)
    return UserQuota(limit, f"for group {group}")


def resource_limits(cpu: float, mem_gib: float, policy: ResourcePolicy) -> ResourceLimits:
    """Docker limits for a validated request (``/dev/shm`` defaults to half the memory:
    PyTorch data loaders fail on Docker's 64 MB default)."""
    mem_bytes = int(mem_gib * GIB)
    shm_gib = policy.shm_size_gib if policy.shm_size_gib is not None else mem_gib / 2
    shm_bytes = min(int(shm_gib * GIB), mem_bytes)
    return ResourceLimits(
        cpu=cpu, mem_bytes=mem_bytes, shm_bytes=shm_bytes, pids_limit=policy.pids_limit
    )


# ---- admin configuration (traitlets dicts) -> policy, with messages naming the key ----

_INT_FIELDS = {"max_gpus", "default_gpu_count", "pids_limit", "max_gpus_per_user"}
_NONE_FIELDS = {"allowed_models", "allowed_images", "shm_size_gib", "max_gpus_per_user"}
_PATTERN_FIELDS = {"allowed_models", "allowed_images"}


def _config_value(name: str, value: Any, where: str) -> Any:
    if value is None and name in _NONE_FIELDS:
        return None
    if name in _PATTERN_FIELDS:
        if isinstance(value, str) or not isinstance(value, Collection):
            raise ConfigError(f"{where}.{name}: must be a list of patterns or None, got {value!r}")
        if not all(isinstance(p, str) and p for p in value):
            raise ConfigError(f"{where}.{name}: patterns must be non-empty strings, got {value!r}")
        return frozenset(value)
    if name in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}.{name}: must be an integer >= 0, got {value!r}")
        return value
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"{where}.{name}: must be a number > 0, got {value!r}")
    return float(value)


def _check_policy(p: ResourcePolicy, where: str) -> None:
    pairs = [
        ("default_gpu_count", p.default_gpu_count, "max_gpus", p.max_gpus),
        ("min_cpu", p.min_cpu, "default_cpu", p.default_cpu),
        ("default_cpu", p.default_cpu, "max_cpu", p.max_cpu),
        ("min_mem_gib", p.min_mem_gib, "default_mem_gib", p.default_mem_gib),
        ("default_mem_gib", p.default_mem_gib, "max_mem_gib", p.max_mem_gib),
    ]
    for low_name, low, high_name, high in pairs:
        if low > high:
            raise ConfigError(f"{where}.{low_name}: {low} is above {high_name} {high}")
    if p.shm_size_gib is not None and p.shm_size_gib > p.max_mem_gib:
        raise ConfigError(
            f"{where}.shm_size_gib: {p.shm_size_gib} is above max_mem_gib {p.max_mem_gib}"
        )
    if p.max_gpus_per_user is not None and p.default_gpu_count > p.max_gpus_per_user:
        raise ConfigError(
            f"{where}.default_gpu_count: {p.default_gpu_count} is above max_gpus_per_user "
            f"{p.max_gpus_per_user}"
        )
    if p.pids_limit < 64:
        raise ConfigError(f"{where}.pids_limit: must be at least 64, got {p.pids_limit}")


def policy_from_config(
    defaults: Mapping[str, Any] | None = None,
    group_bounds: Mapping[str, Mapping[str, Any]] | None = None,
    where: str = "GPUDockerSpawner",
) -> ResourcePolicy:
    """Build and check a :class:`ResourcePolicy` from plain config dicts.

    ``defaults`` takes :class:`ResourcePolicy`'s fields (except ``group_bounds``);
    ``group_bounds`` maps a group name to :class:`GroupBounds`' fields. Raises
    ``ConfigError`` naming the key, so the hub refuses to start on a typo.
    """
    policy_fields = {f.name for f in fields(ResourcePolicy)} - {"group_bounds"}
    group_fields = {f.name for f in fields(GroupBounds)}
    values: dict[str, Any] = {}
    for name, value in (defaults or {}).items():
        if name not in policy_fields:
            raise ConfigError(
                f"{where}.resource_defaults: unknown key {name!r}; allowed: {sorted(policy_fields)}"
            )
        values[name] = _config_value(name, value, f"{where}.resource_defaults")
    groups: dict[str, GroupBounds] = {}
    for group, raw in (group_bounds or {}).items():
        gwhere = f"{where}.group_bounds[{group!r}]"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{gwhere}: must be a mapping of {sorted(group_fields)}")
        unknown = set(raw) - group_fields
        if unknown:
            raise ConfigError(
                f"{gwhere}: unknown key(s) {sorted(map(str, unknown))}; "
                f"allowed: {sorted(group_fields)}"
            )
        groups[str(group)] = GroupBounds(**{k: _config_value(k, v, gwhere) for k, v in raw.items()})
    policy = ResourcePolicy(**values, group_bounds=groups)
    _check_policy(policy, f"{where}.resource_defaults")
    return policy
