"""Which nodes can run which catalog image: pure functions over inventory data.

An image needs (1) a node driver at least its ``min_driver`` (from its CUDA version)
and (2) a GPU whose compute capability lies in the range the image was built for.
A CPU-only image runs anywhere. Placement gets the same rules through
:func:`entry_to_request_constraints`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from jupyterhub_gpu.core.catalog.entries import (
    Catalog,
    CatalogEntry,
    driver_satisfies,
    format_cc,
    format_cc_range,
)
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState


class RequestConstraints(TypedDict):
    """The :class:`~jupyterhub_gpu.core.placement.request.PlacementRequest` fields an image sets."""

    min_driver_version: str | None
    min_compute_capability: tuple[int, int] | None
    max_compute_capability: tuple[int, int] | None


@dataclass(frozen=True)
class ImageAvailability:
    """Whether an entry can run with a GPU somewhere now; ``reason`` says why not.

    ``nodes``: the nodes whose driver and GPUs fit; ``models``: the GPU models it can use.
    """

    slug: str
    runnable: bool
    reason: str = ""
    nodes: tuple[str, ...] = ()
    models: frozenset[str] = frozenset()


def entry_to_request_constraints(entry: CatalogEntry) -> RequestConstraints:
    """The placement constraints of an image (all ``None`` for CPU-only and custom)."""
    return RequestConstraints(
        min_driver_version=entry.min_driver,
        min_compute_capability=entry.min_compute_capability,
        max_compute_capability=entry.max_compute_capability,
    )


def cc_in_range(entry: CatalogEntry, cc: tuple[int, int]) -> bool:
    low, high = entry.min_compute_capability, entry.max_compute_capability
    return (low is None or cc >= low) and (high is None or cc <= high)


def _inventory(node: NodeInventory | NodeState) -> NodeInventory:
    return node.inventory if isinstance(node, NodeState) else node


def _driver_problem(entry: CatalogEntry, node: NodeInventory) -> str | None:
    if entry.min_driver is None:
        return None
    try:
        ok = driver_satisfies(node.driver_version, entry.min_driver)
    except ValueError:
        return f"its driver version {node.driver_version!r} is unreadable"
    if ok:
        return None
    return (
        f"driver {node.driver_version} is older than {entry.min_driver}, "
        f"the minimum for CUDA {entry.cuda_version}"
    )


def compatible_gpus(entry: CatalogEntry, node: NodeInventory | NodeState) -> tuple[GPU, ...]:
    """The node's usable GPUs this image can run on (none if the driver is too old)."""
    inv = _inventory(node)
    if _driver_problem(entry, inv) is not None:
        return ()
    return tuple(
        g for g in inv.gpus if g.healthy is not False and cc_in_range(entry, g.compute_capability)
    )


def image_runs_on(entry: CatalogEntry, node: NodeInventory | NodeState) -> tuple[bool, str]:
    """Can ``entry`` run with at least one of ``node``'s GPUs? ``(ok, reason)``.

    The reason is short and names the node: ``"gpu-b: driver 470.223.02 is older than
    525.60.13, the minimum for CUDA 12.1"``. A CPU-only image runs on every node.
    """
    inv = _inventory(node)
    if entry.cpu_only:
        return True, f"{inv.name}: CPU-only image"
    problem = _driver_problem(entry, inv)
    if problem:
        return False, f"{inv.name}: {problem}"
    usable = [g for g in inv.gpus if g.healthy is not False]
    if not usable:
        return False, f"{inv.name}: no usable GPU"
    fitting = [g for g in usable if cc_in_range(entry, g.compute_capability)]
    if not fitting:
        have = ", ".join(sorted({format_cc(g.compute_capability) for g in usable}))
        built = format_cc_range(entry.min_compute_capability, entry.max_compute_capability)
        return (
            False,
            f"{inv.name}: its GPUs are compute capability {have}; the image is built for {built}",
        )
    return True, f"{inv.name}: {len(fitting)} of {len(usable)} GPUs fit"


def _online(nodes: Iterable[NodeInventory | NodeState]) -> tuple[list[NodeInventory], list[str]]:
    online: list[NodeInventory] = []
    offline: list[str] = []
    for node in nodes:
        if isinstance(node, NodeState) and not (node.reachable and node.schedulable):
            offline.append(node.name)
        else:
            online.append(_inventory(node))
    return online, offline


def _why_not(entry: CatalogEntry, failing: list[NodeInventory], offline: list[str]) -> str:
    """One sentence, grouped by cause: "No node can run it: it needs NVIDIA driver
    >= 580 for CUDA 13.0 (gpu-a has 550.54.15, gpu-c has 535.183.01)."."""
    old_driver: list[str] = []
    wrong_arch: list[str] = []
    no_gpu: list[str] = []
    for inv in failing:
        usable = [g for g in inv.gpus if g.healthy is not False]
        if _driver_problem(entry, inv):
            old_driver.append(f"{inv.name} has {inv.driver_version}")
        elif not usable:
            no_gpu.append(inv.name)
        else:
            ccs = ", ".join(sorted({format_cc(g.compute_capability) for g in usable}))
            wrong_arch.append(f"{inv.name} has {ccs}")
    parts = []
    if old_driver:
        parts.append(
            f"it needs NVIDIA driver >= {entry.min_driver} for CUDA {entry.cuda_version} "
            f"({', '.join(old_driver)})"
        )
    if wrong_arch:
        built = format_cc_range(entry.min_compute_capability, entry.max_compute_capability)
        parts.append(f"it is built for compute capability {built} ({', '.join(wrong_arch)})")
    if no_gpu:
        parts.append(f"no usable GPU on {', '.join(no_gpu)}")
    if offline:
        parts.append(f"{', '.join(offline)} offline")
    return f"No node can run it: {'; '.join(parts)}."


def entry_availability(
    entry: CatalogEntry, nodes: Iterable[NodeInventory | NodeState]
) -> ImageAvailability:
    """:func:`catalog_availability` for one entry."""
    online, offline = _online(nodes)
    if not online:
        where = f" ({', '.join(offline)} offline)" if offline else ""
        return ImageAvailability(entry.slug, False, f"No node is available{where}.")
    if entry.cpu_only or entry.custom:
        return ImageAvailability(entry.slug, True, nodes=tuple(n.name for n in online))
    fits: list[str] = []
    models: set[str] = set()
    failing: list[NodeInventory] = []
    for inv in online:
        gpus = compatible_gpus(entry, inv)
        if gpus:
            fits.append(inv.name)
            models.update(g.model for g in gpus)
        else:
            failing.append(inv)
    if fits:
        return ImageAvailability(entry.slug, True, nodes=tuple(fits), models=frozenset(models))
    return ImageAvailability(entry.slug, False, _why_not(entry, failing, offline))


def catalog_availability(
    catalog: Catalog | Iterable[CatalogEntry], nodes: Iterable[NodeInventory | NodeState]
) -> dict[str, ImageAvailability]:
    """For each entry (by slug, in catalog order): runnable anywhere now, else why not.

    ``nodes`` may be inventories or :class:`NodeState` (unreachable or drained nodes
    don't count). "Runnable" means with a GPU for a CUDA image: the form shows the
    others disabled with the reason.
    """
    node_list = list(nodes)
    return {e.slug: entry_availability(e, node_list) for e in catalog}


def image_allowed_by_patterns(reference: str, patterns: Iterable[str]) -> bool:
    """Whether an image reference outside the catalog matches an admin opt-in pattern."""
    return any(fnmatch.fnmatchcase(reference, p) for p in patterns)


def custom_entry(reference: str) -> CatalogEntry:
    """A stand-in entry for an admin-allowed image outside the catalog (no CUDA facts)."""
    return CatalogEntry(
        slug="custom",
        display_name=reference,
        framework="custom",
        framework_version="unknown",
        cuda_version=None,
        image=reference,
        description="An image outside the catalog, allowed by an admin pattern.",
        custom=True,
    )
