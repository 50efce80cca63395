"""The idle culler's terms, as it runs with them: a small JSON file it rewrites each round,
which the hub reads for the spawn form (``GPUCluster.cull_policy_file``;
``configure_culler`` sets both sides)::

    {"warn_before": 600, "suspend": false,
     "default": {"timeout": 7200, "gpu_timeout": 1800, "max_age": 604800},
     "overrides": {"10-staff": {"groups": ["staff"], "policy_override": {"max_age": 0}}},
     "users": {"bob": {"timeout": 7200, "gpu_timeout": 7200, "max_age": 0}}}

``overrides``: the culler's ``group_overrides`` as written (JupyterHub's shape), limited to
the three terms a user is told; the hub resolves a user's by her groups, as the culler
does (:func:`~jupyterhub_gpu.core.culling.idleness.resolve_policy`). ``users``: where the
overrides are a function, each user's terms as the culler last resolved them (the users
with a running server), only those that differ from the default.

Text that is not such a file decodes as ``None``: the form then says nothing of the
culler, never something wrong. Every number is bounded (0 to 10 years), every user name
too, and at most :data:`MAX_USERS` users (and overrides) are read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.core.culling.idleness import Policy, resolve_policy, validate_overrides
from jupyterhub_gpu.core.culling.terms import TOLD, IdleTerms, idle_terms
from jupyterhub_gpu.errors import ConfigError

MAX_S = 10 * 365 * 86400.0
MAX_USERS = 100_000
MAX_NAME = 255


@dataclass(frozen=True)
class CullPolicy:
    """The culler's terms: its default, each user's own, its warning and suspend."""

    default: IdleTerms
    warn_before_s: float = 0.0
    suspend: bool = False
    users: Mapping[str, IdleTerms] = field(default_factory=dict)
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    per_user: bool = False  # the overrides are a function: only ``users`` are known

    def terms_for(self, user: str, groups: Iterable[str] = ()) -> IdleTerms | None:
        """``user``'s terms: her own as the culler resolved them, else by her groups;
        None when they are not known (overrides that are a function, for a user the
        culler has not resolved: nothing is said rather than the default)."""
        if user in self.users:
            return self.users[user]
        if self.per_user:
            return None
        d = self.default
        base = Policy(timeout=d.timeout_s, gpu_timeout=d.gpu_timeout_s, max_age=d.max_age_s)
        return idle_terms(resolve_policy(base, self.overrides, groups))


def told_overrides(overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Validated ``group_overrides`` limited to the terms a user is told (entries that
    change none of them left out)."""
    out: dict[str, dict[str, Any]] = {}
    for key, entry in overrides.items():
        # a term past any bound (an admin's float("inf")) means never, as 0 does
        kept = {k: v if _bounded(v) else 0.0 for k, v in entry["policy_override"].items()
                if k in TOLD}  # fmt: skip
        if kept:
            out[key] = {"groups": list(entry["groups"]), "policy_override": kept}
    return out


def _terms_json(t: IdleTerms) -> dict[str, float]:
    return {"timeout": t.timeout_s, "gpu_timeout": t.gpu_timeout_s, "max_age": t.max_age_s}


def encode_cull_policy(policy: CullPolicy) -> bytes:
    users = {u: _terms_json(t) for u, t in sorted(policy.users.items()) if t != policy.default}
    data = {
        "warn_before": policy.warn_before_s,
        "suspend": policy.suspend,
        "default": _terms_json(policy.default),
        "overrides": told_overrides(policy.overrides),
        "per_user": policy.per_user,
        "users": users,
    }
    return json.dumps(data, indent=1, sort_keys=True).encode("utf-8")


def _bounded(value: Any) -> bool:
    """A number of seconds a file may say: finite, 0 to :data:`MAX_S`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_S


def _seconds(item: Mapping[str, Any], key: str) -> float:
    value = item[key]
    if not _bounded(value):
        raise ValueError(key)
    return float(value)


def _terms(item: Any) -> IdleTerms:
    if not isinstance(item, Mapping):
        raise ValueError("terms")
    return IdleTerms(
        _seconds(item, "timeout"), _seconds(item, "gpu_timeout"), _seconds(item, "max_age")
    )


def decode_cull_policy(text: str | bytes) -> CullPolicy | None:
    """The policy, or None when ``text`` is not such a file; a bad user entry is skipped."""
    try:
        data: Any = json.loads(text)
        default = _terms(data["default"])
        warn = _seconds(data, "warn_before")
        suspend, per_user = data.get("suspend", False), data.get("per_user", False)
        if not isinstance(suspend, bool) or not isinstance(per_user, bool):
            raise ValueError("suspend")
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    users: dict[str, IdleTerms] = {}
    raw = data.get("users")
    for name, item in list(raw.items())[:MAX_USERS] if isinstance(raw, dict) else ():
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            continue
        try:
            users[name] = _terms(item)
        except (ValueError, KeyError, TypeError):
            continue
    overrides: dict[str, dict[str, Any]] = {}
    raw_overrides = data.get("overrides")
    if isinstance(raw_overrides, dict) and len(raw_overrides) <= MAX_USERS:
        try:
            overrides = told_overrides(validate_overrides(raw_overrides))
        except (ConfigError, TypeError, ValueError):
            overrides = {}  # the default for every group, never a wrong term
    return CullPolicy(default, warn, suspend, users, overrides, per_user)


__all__ = ["CullPolicy", "decode_cull_policy", "encode_cull_policy", "told_overrides"]
