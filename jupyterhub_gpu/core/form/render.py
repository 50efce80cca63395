"""Render the spawn form (``templates/spawn_form.html``) from plain data. Pure.

The spawner calls :func:`spawn_form_html` from ``options_form``; :func:`render_form`
is the lower-level entry point when the caller already has the pieces.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

from jupyterhub_gpu.core.catalog.compat import ImageAvailability, catalog_availability
from jupyterhub_gpu.core.catalog.entries import Catalog, CatalogEntry, format_cc_range
from jupyterhub_gpu.core.form.availability import ModelAvailability, gpu_model_availability
from jupyterhub_gpu.core.form.offer import (
    Allowance,
    fit_offers,
    gpu_allowance,
    student_facts,
    wait_outlooks,
)
from jupyterhub_gpu.core.form.readiness import readiness
from jupyterhub_gpu.core.form.resources import UserBounds
from jupyterhub_gpu.core.form.shares import share_choices
from jupyterhub_gpu.core.form.user_quota import Holdings
from jupyterhub_gpu.core.form.validation import ANY_MODEL, finite_number, whole_number
from jupyterhub_gpu.core.scheduling.outlook import Outlook, WaitView
from jupyterhub_gpu.core.sharing.policy import NO_SHARING, SharingPolicy
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.words import UTC, moment

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "spawn_form.html"


@dataclass(frozen=True)
class ImageChoice:
    """One ``<option>`` of the image select."""

    slug: str
    display_name: str
    description: str
    cuda_label: str
    facts: str  # "CUDA 12.1 · driver >= 525.60.13 · compute capability 5.0 to 9.0 · gpu-a, gpu-c"
    gpu: bool
    disabled: bool
    reason: str
    models: tuple[str, ...]
    saved: bool = False  # a saved image: listed under "My images"
    said: str = ""  # the UTC time its description names ("2026-11-24 14:00 UTC"), if any,
    at: str = ""  # and that time (ISO 8601): the browser writes it in its own zone


@functools.cache
def _environment() -> jinja2.Environment:
    import jinja2  # the hub's install (a node's check-node imports this package, never renders)

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = lambda x: f"{float(x):g}"
    return env


def visible_entries(catalog: Catalog, bounds: UserBounds) -> tuple[CatalogEntry, ...]:
    """The catalog entries this user may choose (entry groups and group bounds)."""
    return tuple(
        e for e in catalog.for_groups(bounds.groups) if bounds.image_allowed(e.policy_slug)
    )


def _facts(entry: CatalogEntry, info: ImageAvailability, ready: str = "") -> str:
    """What a student looks for first (framework, Python or its version, CUDA, where it
    runs), then the admin's details (:func:`~.offer.student_facts`)."""
    admin = []
    if entry.min_driver:
        admin.append(f"driver >= {entry.min_driver}")
    if entry.min_compute_capability or entry.max_compute_capability:
        cc = format_cc_range(entry.min_compute_capability, entry.max_compute_capability)
        admin.append(f"compute capability {cc}")
    where = "runs on " + ", ".join(info.nodes) if info.runnable and info.nodes else ""
    return student_facts(
        entry.framework,
        entry.framework_version,
        entry.cuda_label,
        where,
        ready if info.runnable else "",
        admin,
    )


def _image_choices(
    entries: Sequence[CatalogEntry],
    availability: Mapping[str, ImageAvailability],
    allowed_models: Sequence[str],
    ready: Mapping[str, str] | None = None,
) -> list[ImageChoice]:
    choices = []
    for e in entries:
        info = availability.get(e.slug) or ImageAvailability(e.slug, False, "Availability unknown.")
        choices.append(
            ImageChoice(
                slug=e.slug,
                display_name=e.display_name,
                description=e.description,
                cuda_label=e.cuda_label,
                facts=_facts(e, info, (ready or {}).get(e.slug, "")),
                gpu=not e.cpu_only,
                disabled=not info.runnable,
                reason=info.reason,
                models=tuple(m for m in allowed_models if m in info.models),
                saved=bool(e.saved_from),
                said=moment(e.saved_at) if e.saved_at is not None else "",
                at=_iso(e.saved_at),
            )
        )
    return choices


def _iso(at: float | None) -> str:
    return "" if at is None else datetime.fromtimestamp(at, timezone.utc).isoformat()


def _clamped(value: Any, low: float, high: float, default: float) -> float:
    number = finite_number(value)
    return number if number is not None and low <= number <= high else default


def initial_choices(
    images: Sequence[ImageChoice],
    models: Sequence[ModelAvailability],
    bounds: UserBounds,
    previous: Mapping[str, Any] | None,
    most: int | None = None,
) -> dict[str, Any]:
    """What the form preselects: the previous choices where still valid, else defaults
    (``most``: the GPUs this server may ask for now, default ``bounds.max_gpus``)."""
    most = bounds.max_gpus if most is None else most
    prev = dict(previous or {})
    enabled = [i for i in images if not i.disabled]
    image = next((i for i in enabled if i.slug == prev.get("image")), None)
    image = image or (enabled[0] if enabled else (images[0] if images else None))
    count = whole_number(prev.get("gpu_count"))
    if count is None or not 0 <= count <= most:
        count = min(bounds.default_gpu_count, most)
    if image is not None and not image.gpu:
        count = 0
    model = prev.get("gpu_model")
    if not any(m.model == model and m.free for m in models):
        model = ANY_MODEL
    max_mem = max((m.memory_gib for m in models), default=0)
    return {
        "image": image.slug if image else None,
        "gpu_count": count,
        "gpu_model": model,
        "min_gpu_memory_gib": _clamped(prev.get("min_gpu_memory_gib"), 0, max_mem, 0),
        "cpu": _clamped(prev.get("cpu"), bounds.min_cpu, bounds.max_cpu, bounds.default_cpu),
        "mem_gib": _clamped(
            prev.get("mem_gib"), bounds.min_mem_gib, bounds.max_mem_gib, bounds.default_mem_gib
        ),
    }


def initial_charge_group(
    charge_groups: Sequence[str], previous: Mapping[str, Any] | None
) -> str | None:
    """The charge group the form preselects: the previous one if the user may still
    charge it, else the default (the first), None without a group to charge."""
    chosen = (previous or {}).get("charge_group")
    if chosen in charge_groups:
        return str(chosen)
    return charge_groups[0] if charge_groups else None


def render_form(
    catalog_view: Sequence[CatalogEntry],
    availability: Mapping[str, ImageAvailability],
    bounds: UserBounds,
    previous_choices: Mapping[str, Any] | None = None,
    *,
    models: Sequence[ModelAvailability] = (),
    notes: Sequence[str] = (),
    charge_groups: Sequence[str] = (),
    reserved: Sequence[str] = (),
    unlisted: Sequence[Any] = (),
    ready: Mapping[str, str] | None = None,
    sharing: SharingPolicy = NO_SHARING,
    held: Holdings | None = None,
    notice_time: tuple[str, str] | None = None,
    wait_view: WaitView | None = None,
    user: str = "",
    tz: tzinfo = UTC,
    idle_terms: str = "",
) -> str:
    """The form's HTML (inserted into JupyterHub's ``spawn.html``).

    ``idle_terms``: the idle culler's terms for this user, in her words
    (:func:`~jupyterhub_gpu.core.culling.terms.idle_terms_words`), shown under the choices.

    ``wait_view``: the GPU queue as plain data (the hub's ``SpawnQueue.wait_view``); with
    it, each offer also says where ``user``'s server would stand in line and the queue's
    estimate (:func:`~.offer.wait_outlooks`), its time said in ``tz`` and shown by the
    form's script in the browser's zone.

    ``notice_time``: (the time as the newest note says it, e.g. ``14:05 UTC``; the same
    time in ISO): the form's script shows it in the browser's zone.

    ``held``: what the user's other servers hold now; with ``bounds.quota`` it bounds the
    GPU count (:func:`~.offer.gpu_allowance`). A count more than a choice has free offers
    the count that starts now (:func:`~.offer.fit_offers`); a model with none free may
    still be chosen, to wait for it.

    ``sharing``: the admin's sharing policy; a share of each shared model the user may
    use is offered beside whole GPUs (:func:`~.shares.share_choices`, issue 26).

    ``catalog_view``: the entries this user may choose (:func:`visible_entries`);
    ``availability``: from :func:`~jupyterhub_gpu.core.catalog.catalog_availability`;
    ``models``: from :func:`~jupyterhub_gpu.core.form.availability.gpu_model_availability`
    (models the user's groups may not use are left out here); ``previous_choices``:
    the server's last ``user_options``, preselected where still valid; ``notes``:
    sentences for the user, oldest first (e.g. why the culler stopped the server,
    ``core/culling/warning.stopped_words``): the newest is shown above the form, dismissable;
    ``charge_groups``: the groups the user may charge, the default first (a select only
    when there are two or more: with one there is nothing to choose); ``reserved``:
    lines on GPUs reserved for other groups now or soon
    (:func:`~jupyterhub_gpu.core.scheduling.reservations.reserved_lines`), shown as a notice;
    ``unlisted``: saved images the user sees but can't start (``slug``, ``display_name``,
    ``reason``: :class:`~jupyterhub_gpu.core.saving.entries.Unlisted`), shown disabled under
    "My images" with the reason. Saved images (``saved_from``) are listed there too.
    ``ready``: slug -> where the image is ready (:func:`~.readiness.readiness`), shown
    with its facts.
    """
    allowed = [m for m in models if bounds.model_allowed(m.model)]
    images = _image_choices(catalog_view, availability, [m.model for m in allowed], ready)
    allowance: Allowance = gpu_allowance(bounds.max_gpus, bounds.quota, held or Holdings())
    choice = initial_choices(images, allowed, bounds, previous_choices, allowance.most)
    offers = fit_offers(allowed, allowance.most, ANY_MODEL)
    group = initial_charge_group(charge_groups, previous_choices) or ""
    waits = (
        wait_outlooks(wait_view, offers, ANY_MODEL, user, group) if wait_view is not None else {}
    )
    now = wait_view.state.now if wait_view is not None else 0.0
    selected = next((i for i in images if i.slug == choice["image"]), None)
    return (
        _environment()
        .get_template(TEMPLATE_NAME)
        .render(
            images=images,
            unavailable=[i for i in images if i.disabled],
            selected_description=selected.description if selected else "",
            selected_facts=selected.facts if selected else "",
            models=allowed,
            free_total=sum(m.free for m in allowed),
            gpu_total=sum(m.total for m in allowed),
            max_gpus=allowance.most,
            allowance=allowance.text,
            offers={
                key: {
                    str(n): {
                        "text": o.text,
                        "now": o.start_now,
                        "button": o.button,
                        **_wait_words(waits.get(key, {}).get(n), now, tz),
                    }
                    for n, o in by_count.items()
                }
                for key, by_count in offers.items()
            },
            max_gpu_memory_gib=max((m.memory_gib for m in allowed), default=0),
            bounds=bounds,
            choice=choice,
            any_model=ANY_MODEL,
            notice=notes[-1] if notes else "",
            notice_said=notice_time[0] if notice_time and notes else "",
            notice_at=notice_time[1] if notice_time and notes else "",
            charge_groups=list(charge_groups) if len(charge_groups) > 1 else [],
            charge_group=initial_charge_group(charge_groups, previous_choices),
            reserved=list(reserved),
            unlisted=list(unlisted),
            shares=share_choices(sharing, [(m.model, m.memory_mib) for m in allowed]),
            chosen_share=str((previous_choices or {}).get("gpu_share") or ""),
            idle_terms=idle_terms,
        )
    )


def _wait_words(found: Outlook | None, now: float, tz: tzinfo) -> dict[str, str]:
    """An offer's outlook for the form's script: the sentence, its time as said and in ISO
    (the script shows it in the browser's zone); nothing without an outlook."""
    if found is None:
        return {}
    said = found.said(now, tz)
    iso = (
        datetime.fromtimestamp(found.at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if said and found.at is not None
        else ""
    )
    return {"wait": found.sentence(now, tz), "said": said, "at": iso}


def spawn_form_html(
    catalog: Catalog,
    snapshot: ClusterSnapshot,
    bounds: UserBounds,
    previous_choices: Mapping[str, Any] | None = None,
    free_counts: Mapping[str, int] | None = None,
    *,
    notes: Sequence[str] = (),
    charge_groups: Sequence[str] = (),
    reserved: Sequence[str] = (),
    unlisted: Sequence[Any] = (),
    image_sizes: Mapping[str, int] | None = None,
    sharing: SharingPolicy = NO_SHARING,
    held: Holdings | None = None,
    notice_time: tuple[str, str] | None = None,
    wait_view: WaitView | None = None,
    user: str = "",
    tz: tzinfo = UTC,
    idle_terms: str = "",
) -> str:
    """Everything in one call: the user's images, their availability on ``snapshot``'s
    nodes and where each is ready (``image_sizes``: identity -> bytes on disk, for what
    a first start pulls), per-model free counts (``free_counts`` from placement, if
    given) and the form, with the newest of ``notes`` above it, the charge group select
    and the notice of reserved GPUs (see :func:`render_form`)."""
    view = visible_entries(catalog, bounds)
    availability = catalog_availability(view, snapshot.nodes)
    by_name = {n.name: n for n in snapshot.nodes}
    ready = {
        e.slug: readiness(
            e.image,
            [by_name[name] for name in availability[e.slug].nodes if name in by_name],
            image_sizes or {},
        )
        for e in view
        if not e.custom
    }
    models = gpu_model_availability(snapshot, free_counts)
    return render_form(
        view,
        availability,
        bounds,
        previous_choices,
        models=models,
        notes=notes,
        charge_groups=charge_groups,
        reserved=reserved,
        unlisted=unlisted,
        ready=ready,
        sharing=sharing,
        held=held,
        notice_time=notice_time,
        wait_view=wait_view,
        user=user,
        tz=tz,
        idle_terms=idle_terms,
    )
