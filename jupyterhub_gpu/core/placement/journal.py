"""Allocations that remember which GPUs changed, so a decision need not diff them all.

:class:`Allocations` is a ``dict`` (uuid -> holder) whose every change is written to its
*journal*, a list of the uuids changed. Reads are plain ``dict`` reads. ``fork()`` copies
it into a new :class:`Allocations` whose journal starts empty and points at the parent's
journal and version: a family of copies forms a tree, and the uuids that may differ
between any two of its members at any two moments are the entries of the journals on
the path between them. :meth:`ClusterIndex.sync
<jupyterhub_gpu.core.placement.index.ClusterIndex.sync>` uses :func:`changed_between`
to re-check only those uuids instead of a symmetric difference of all allocations.

Correctness never rests on the journal being short or present: a plain ``dict``, a
mapping of another family, a journal trimmed past the needed entries or a path longer
than :data:`_MAX_DEPTH` make :func:`changed_between` answer ``None``, and the index
falls back to the full difference. The uuids it returns are a superset of those whose
presence differs (a uuid set and set back is listed, and the index re-checks it).

Changes made through ``dict`` methods called on the class itself (``dict.__setitem__(a,
...)``) bypass the journal: don't.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 8  # forks between two members of a family before the path is not searched
_KEEP = 4096  # journal entries kept; the older half is dropped when twice as many


class Journal:
    """The uuids changed in one :class:`Allocations`, from its fork on (the oldest may be
    dropped: ``start`` is the version of ``log[0]``). ``parent``: where it was forked."""

    __slots__ = ("log", "parent", "start")

    def __init__(self, parent: tuple[Journal, int] | None) -> None:
        self.log: list[str] = []
        self.start = 0
        self.parent = parent

    @property
    def version(self) -> int:
        return self.start + len(self.log)

    def note(self, uuid: str) -> None:
        log = self.log
        log.append(uuid)
        if len(log) >= 2 * _KEEP:
            del log[:_KEEP]
            self.start += _KEEP

    def between(self, lo: int, hi: int) -> list[str] | None:
        """The uuids changed from version ``lo`` to ``hi``, or None if dropped."""
        if lo < self.start:
            return None
        return self.log[lo - self.start : hi - self.start]


Point = tuple[Journal, int]  # one member of a family at one moment


class Allocations(dict[str, str]):
    """uuid -> holder, journaled (see the module's docstring)."""

    __slots__ = ("journal",)

    def __init__(self, data: Mapping[str, str] | None = None, *, parent: Point | None = None):
        super().__init__(data or {})
        self.journal = Journal(parent)

    def point(self) -> Point:
        """This mapping now, as :func:`changed_between` names it."""
        return self.journal, self.journal.version

    def fork(self) -> Allocations:
        """A copy whose changes are journaled apart from this one's."""
        return Allocations(self, parent=self.point())

    def copy(self) -> Allocations:
        return self.fork()

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        self.journal.note(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.journal.note(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self.journal.note(key)
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, str]:
        item = super().popitem()
        self.journal.note(item[0])
        return item

    def setdefault(self, key: str, default: str = "") -> str:
        if key not in self:
            self.journal.note(key)
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> Allocations:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        for key in list(self):
            self.journal.note(key)
        super().clear()

    def __reduce__(self) -> Any:  # pickles (and deep-copies) as a plain dict
        return (dict, (dict(self),))


def _chain(point: Point) -> list[Point]:
    chain = [point]
    while len(chain) <= _MAX_DEPTH:
        parent = chain[-1][0].parent
        if parent is None:
            break
        chain.append(parent)
    return chain


def changed_between(a: Point, b: Point, limit: int) -> set[str] | None:
    """The uuids whose holder may differ between ``a`` and ``b`` (a superset), or None
    when the journals can't tell (another family, dropped entries, too deep a path) or
    more than ``limit`` changed."""
    up_a = _chain(a)
    where = {id(j): k for k, (j, _) in enumerate(up_a)}
    changed: set[str] = set()
    for k, (journal, version) in enumerate(_chain(b)):
        at = where.get(id(journal))
        if at is None:
            continue
        if up_a[at][0] is not journal:  # pragma: no cover - ids of live objects are unique
            return None
        mine = up_a[at][1]
        parts = [journal.between(min(mine, version), max(mine, version))]
        parts += [j.between(0, v) for j, v in up_a[:at]]
        parts += [j.between(0, v) for j, v in _chain(b)[:k]]
        for part in parts:
            if part is None:
                return None
            changed.update(part)
            if len(changed) > limit:
                return None
        return changed
    return None


def journaled(allocations: Mapping[str, str]) -> Allocations:
    """A journaled working copy of ``allocations`` (a fork when it is journaled already)."""
    if isinstance(allocations, Allocations):
        return allocations.fork()
    return Allocations(allocations)


def point_of(allocations: Mapping[str, str]) -> Point | None:
    """Where ``allocations`` stands in its family, or None for a plain mapping."""
    return allocations.point() if isinstance(allocations, Allocations) else None


__all__ = ["Allocations", "Journal", "Point", "changed_between", "journaled", "point_of"]
