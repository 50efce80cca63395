"""Which package index each saved package is taken from (against dependency confusion). Pure.

With more than one index, pip looks for a pinned ``name==version`` in all of them and
takes the best file it finds anywhere: a higher build tag or a more specific platform tag
on any index wins, so whoever can publish that name on one index (PyPI: anyone) can
replace the package of a private index. The hub therefore takes every name from ONE
index, chosen by this rule (uv's default ``first-index`` strategy, plus uv's pinning of a
name to an index):

1. a name matched by ``index_for`` (``SavedImages.index_for``: exact names first, then
   the patterns in the admin's order) is taken from that index only, found or not;
2. otherwise from the first of ``extra_index_urls``, in the admin's order, whose simple
   API lists the name (a project page with at least one file);
3. otherwise from ``index_url`` (the default index: pip's own configuration when empty).

An extra index that can't be asked stops the save: falling through to the next index
is the very substitution the rule prevents. pip then runs once per index with that index
only (:func:`route`). Put the indexes you trust most in ``extra_index_urls``, or pin
names with ``index_for``; ``index_url`` only serves the names no other index lists.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from jupyterhub_gpu.core.saving.data import PipRequirement

#: what ``index_for`` keys may be: a project name, or a pattern of one with ``*`` and ``?``
NAME_PATTERN = re.compile(r"^[A-Za-z0-9*?]([A-Za-z0-9._*?-]*[A-Za-z0-9*?])?$")


@dataclass(frozen=True)
class IndexPolicy:
    """The admin's indexes: ``default`` (``None``: pip's configured index), ``extras`` in
    order, and ``pinned``: (name or pattern, index URL) pairs in the admin's order."""

    default: str | None = None
    extras: tuple[str, ...] = ()
    pinned: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class IndexRun:
    """One pip run: ``index`` (``None``: pip's configured index) and what it fetches."""

    index: str | None
    requirements: tuple[PipRequirement, ...]


def shown_index(url: str | None) -> str:
    """An index URL for messages: credentials (``user:password@``) made ``***@``."""
    if url is None:
        return "the site's index"
    return re.sub(r"(\w+://)[^/\s@]+@", r"\1***@", url)[:200]


def pinned_index(name: str, policy: IndexPolicy) -> str | None:
    """The index ``index_for`` pins ``name`` to, or ``None``: an exact (canonical) name
    first, then the first pattern that matches, in the admin's order."""
    name = canonicalize_name(name)
    patterns = [(canonicalize_name(p), url) for p, url in policy.pinned]
    for pattern, url in patterns:
        if pattern == name:
            return url
    for pattern, url in patterns:
        if fnmatch.fnmatchcase(name, pattern):
            return url
    return None


def lookups(requirements: Sequence[PipRequirement], policy: IndexPolicy) -> list[tuple[str, str]]:
    """The (index, name) pairs whose listing :func:`route` needs: every name that no
    ``index_for`` entry pins, on every extra index."""
    return [
        (index, r.name)
        for r in requirements
        if pinned_index(r.name, policy) is None
        for index in policy.extras
    ]


def index_for(name: str, policy: IndexPolicy, listed: Collection[tuple[str, str]]) -> str | None:
    """The one index ``name`` is taken from; ``listed``: the (index, canonical name)
    pairs an extra index lists (from :func:`lookups`)."""
    pinned = pinned_index(name, policy)
    if pinned is not None:
        return pinned
    name = canonicalize_name(name)
    return next((i for i in policy.extras if (i, name) in listed), policy.default)


def route(
    requirements: Sequence[PipRequirement],
    policy: IndexPolicy,
    listed: Collection[tuple[str, str]],
) -> tuple[IndexRun, ...]:
    """One run per index that serves something, in the order: extras, pinned-only
    indexes, the default; requirements keep their order within a run."""
    chosen: dict[str | None, list[PipRequirement]] = {}
    for r in requirements:
        chosen.setdefault(index_for(r.name, policy, listed), []).append(r)
    order: list[str | None] = [*policy.extras, *(url for _, url in policy.pinned)]
    order.append(policy.default)
    ranked = sorted(chosen, key=lambda i: order.index(i) if i in order else len(order))
    return tuple(IndexRun(i, tuple(chosen[i])) for i in ranked)
