"""A spawn's options validated (strictly: a tampered form is refused with a sentence) into
what to start and where it may go, against the catalog with the user's saved images."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.core.catalog.entries import CatalogEntry
from jupyterhub_gpu.core.form import (
    ResourcePolicy,
    SpawnOptions,
    gpu_model_availability,
    placement_request,
    resolve_bounds,
    resolve_entry,
    validate_options,
)
from jupyterhub_gpu.core.identity import Identity
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.saving.entries import PREFIX
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.hub.image_checks import refuse_saved_reference, user_catalog
from jupyterhub_gpu.hub.saves import MyImages


@dataclass(frozen=True)
class SpawnRequest:
    options: SpawnOptions
    entry: CatalogEntry  # the catalog's (or a saved image's) entry chosen
    request: PlacementRequest
    saved_choice: tuple[str, str] | None  # (owner, name) of a saved image chosen by name


async def spawn_request(
    user_options: Any,
    ident: Identity,
    *,
    catalog: Catalog,
    saves: MyImages,
    policy: ResourcePolicy,
    charge_groups: Sequence[str],
    snapshot: ClusterSnapshot,
) -> SpawnRequest:
    """``user_options`` validated for ``ident``: ``UserFacingError`` (its sentence) when
    they can't be served as they are."""
    bounds = resolve_bounds(policy, ident.groups)
    wanted = (user_options or {}).get("image")
    catalog, _ = await user_catalog(catalog, saves, ident, wanted)
    options = validate_options(
        user_options,
        catalog=catalog,
        bounds=bounds,
        models=gpu_model_availability(snapshot),
        charge_groups=charge_groups,
        sharing=snapshot.sharing,
    )
    entry = resolve_entry(catalog, options)
    if entry.custom:
        await refuse_saved_reference(saves, entry.image)
    chosen = options.image[len(PREFIX) :] if entry.saved_from else ""
    owner, _, name = chosen.rpartition("/")
    names = {g.model for n in snapshot.nodes for g in n.inventory.gpus}
    request = placement_request(options, entry, bounds, names)
    return SpawnRequest(options, entry, request, (owner, name) if chosen else None)


__all__ = ["SpawnRequest", "spawn_request"]
