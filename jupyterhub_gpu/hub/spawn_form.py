"""The spawn form of a GPU spawner (``GPUDockerSpawner.options_form``, which JupyterHub
calls with the spawner): the catalog with the user's saved images, what is free now,
the reservations of other groups, what the user holds already, and why their last server
ended (a cull: when, what it freed, the notebooks open then; a suspend: that its next
start resumes it). Rendered by the pure
:func:`~jupyterhub_gpu.core.form.spawn_form_html`."""

from __future__ import annotations

import contextlib
from datetime import datetime, timezone
from typing import Any

from jupyterhub_gpu.core.culling.terms import idle_terms_words
from jupyterhub_gpu.core.culling.warning import stopped_words
from jupyterhub_gpu.core.form import resolve_bounds, spawn_form_html
from jupyterhub_gpu.core.form.user_quota import holdings_of
from jupyterhub_gpu.core.placement import availability
from jupyterhub_gpu.core.suspend import suspended_words
from jupyterhub_gpu.edges.files import load_cull_policy
from jupyterhub_gpu.hub.cull_notes import after_cull, cull_note
from jupyterhub_gpu.hub.image_checks import user_catalog


async def spawn_form(spawner: Any) -> str:
    """The form's HTML for ``spawner``'s user (a GPUDockerSpawner)."""
    cluster = spawner.cluster
    snapshot = await cluster.snapshot()
    free = {a.model: a.free for a in availability(snapshot)}
    orm = spawner.orm_spawner
    previous = orm.user_options if orm else None
    ident = await spawner.identity()
    bounds = resolve_bounds(spawner.policy, ident.groups)
    catalog, unlisted = await user_catalog(spawner.catalog, spawner.saved_images(), ident)
    last = orm.last_activity if orm else None
    note = cull_note(spawner.site.cull_notes_file, spawner.user.name, spawner.name, last)
    notes = [spawner._ended_note] if spawner._ended_note else []
    notice_time = None
    suspended = spawner.suspended
    if suspended is not None and not notes:  # its next start resumes it (docs/culler.md)
        reason = note.reason if note is not None else ""
        words = suspended_words(spawner.name, suspended.at, reason, datetime.now(timezone.utc))
        notes, notice_time = [words.text], (words.said, suspended.at.isoformat())
    elif note is not None and not notes:  # the newest is shown: a cull, then its start
        words = stopped_words(note.server, note.at, note.reason, datetime.now(timezone.utc))
        more = after_cull(spawner._freed, lambda: spawner.home_host_path(ident))
        notes = [f"{words.text} {more}".strip()]
        notice_time = (words.said, note.at.isoformat())
    charge_groups = spawner._charge_groups(ident)
    group = charge_groups[0] if charge_groups else ""
    waits = spawner._max_wait(group) > 0  # a group that never waits is refused instead
    queue = spawner.queue
    with contextlib.suppress(Exception):  # the reservations, if not read yet
        await queue.refresh()
    return spawn_form_html(
        catalog,
        snapshot,
        bounds,
        previous,
        free,
        notes=notes,
        unlisted=unlisted,
        charge_groups=charge_groups,
        reserved=queue.reserved_for_others(charge_groups, snapshot.nodes),
        image_sizes=cluster.image_sizes(),
        sharing=snapshot.sharing,
        held=holdings_of(cluster.ledger.charged(), spawner.user.name, exclude=spawner.holder),
        notice_time=notice_time,
        wait_view=queue.wait_view(snapshot) if waits else None,
        user=spawner.user.name,
        tz=queue.settings.timezone,
        # the groups the culler sees (JupyterHub's), not the authenticator's
        idle_terms=_idle_terms(
            spawner.site, spawner.user.name, [g.name for g in spawner.user.groups], spawner.log
        ),
    )


def _idle_terms(site: Any, user: str, groups: Any, log: Any = None) -> str:
    """The culler's terms for ``user`` as it last wrote them (``GPUCluster.cull_policy_file``;
    "" when there is none, it is stale, or hers are not known: nothing said rather than
    something wrong). Never fails the form."""
    path = str(getattr(site, "cull_policy_file", "") or "")
    try:
        policy = load_cull_policy(path) if path else None
        terms = policy.terms_for(user, groups or ()) if policy is not None else None
        if policy is None or terms is None:
            return ""
        return idle_terms_words(terms, policy.warn_before_s, policy.suspend)
    except Exception:  # a file the hub can't make sense of: the form goes on without it
        if log is not None:
            log.exception("The culler's terms in %s could not be read", path)
        return ""


__all__ = ["spawn_form"]
