"""The culler's files: its notes of culls (``GPUIdleCuller.notes_file``, which the hub
reads), the terms it runs with (``policy_file``, for the hub's spawn form), and its
state file (``GPUIdleCuller.state_file``): its GPU histories, their holders and the
shares' episodes over their memory, kept across a restart so that it keeps its patience;
its warnings before a cull, so that a restart neither warns (nor mails) a server twice
nor pushes its cull ``warn_before`` later; and the servers the hub would not suspend
(:mod:`.reclaim`). Written atomically; read bounded (:data:`MAX_STATE_FILE`), and a bad
file is one warning and a fresh start."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.attribution.memory import (
    episodes_from_json,
    episodes_to_json,
    recent_episodes,
)
from jupyterhub_gpu.core.culling.idleness import validate_overrides
from jupyterhub_gpu.core.culling.terms import IdleTerms, idle_terms
from jupyterhub_gpu.core.times import parse_time
from jupyterhub_gpu.edges.files import load_notes, save_cull_policy, save_notes, write_json_atomic
from jupyterhub_gpu.wire.cull_notes import CullNote, add_note
from jupyterhub_gpu.wire.cull_notes import drop_note as without_note
from jupyterhub_gpu.wire.cull_policy import CullPolicy
from jupyterhub_gpu.wire.cull_warnings import warnings_from_json, warnings_to_json

MAX_STATE_FILE = 64 << 20  # bytes of the state file read at most


def save_state(culler: Any, now: datetime) -> None:
    """Persist ``culler``'s (a GPUIdleCuller) GPU histories, holders, share episodes,
    warnings and the hub's refusals to suspend, as of ``now``."""
    if not culler.state_file:
        return
    data = {
        "version": 1,
        "saved_at": now.isoformat(),
        "holders": culler._holders,
        "trackers": {u: t.to_dict() for u, t in culler._trackers.items()},
        "share_episodes": episodes_to_json(culler._shares.episodes()),
        "cull_warnings": warnings_to_json(culler._cull_warnings),
        "suspend_refused": dict(culler._suspend_refused),
        "mailed": dict(culler._mailed),
    }
    try:
        write_json_atomic(culler.state_file, data)
    except OSError as e:
        culler.log.warning("Could not save culler state to %s: %s", culler.state_file, e)


def load_state(culler: Any, now: datetime) -> None:
    """Restore :func:`save_state`'s file into ``culler``; a missing file starts afresh, and
    so (with one warning) does a bad one, or larger than :data:`MAX_STATE_FILE`. A bad
    ``share_episodes`` section alone only starts the shares' graces afresh."""
    if not culler.state_file or not Path(culler.state_file).exists():
        return
    path = Path(culler.state_file)
    try:
        size = path.stat().st_size
        if size > MAX_STATE_FILE:
            raise ValueError(f"{size} bytes, more than the {MAX_STATE_FILE} read")
        with path.open("rb") as f:
            data = json.loads(f.read(MAX_STATE_FILE).decode("utf-8"))
        holders = {str(k): str(v) for k, v in data["holders"].items()}
        for uuid, saved in data["trackers"].items():
            culler._tracker(uuid).restore(saved)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        culler.log.warning(
            "Ignoring unreadable culler state %s (%s): starting afresh; it is rewritten "
            "after the next round",
            culler.state_file,
            e,
        )
        culler._trackers.clear()
        return
    culler._holders = holders
    culler.log.info(
        "Restored the history of %d GPU(s) from %s", len(culler._trackers), culler.state_file
    )
    _restore_episodes(culler, data.get("share_episodes", {}), now)
    _restore_warnings(culler, data, now)


def _restore_warnings(culler: Any, data: Any, now: datetime) -> None:
    """The warnings standing at a short restart (saved at most ``interval +
    gpu_stale_after`` s before ``now``): the same warning goes on, mailed once, its cull
    at its time. After a longer one the servers are warned afresh (what happened
    meanwhile is unknown). The hub's refusals to suspend and the idle stretches mailed
    are kept either way (per server start: a server started again starts afresh)."""
    for section, attribute in (("suspend_refused", "_suspend_refused"), ("mailed", "_mailed")):
        saved = data.get(section, {})
        if isinstance(saved, dict):
            kept = {str(k): v[:300] for k, v in saved.items() if isinstance(v, str)}
            setattr(culler, attribute, kept)
    saved_at = parse_time(data.get("saved_at"))
    if saved_at is None:
        return
    age = (now - saved_at).total_seconds()
    if not 0 <= age <= culler.interval + culler.gpu_stale_after:
        return
    culler._cull_warnings = warnings_from_json(data.get("cull_warnings", {}))
    if culler._cull_warnings:
        culler.log.info(
            "Restored %d warning(s) before a cull (saved %.0f s ago)",
            len(culler._cull_warnings),
            age,
        )


def _restore_episodes(culler: Any, data: Any, now: datetime) -> None:
    """The shares' saved episodes over their memory that go on: those judged over at most
    ``interval + gpu_stale_after`` s before ``now`` (a short restart)."""
    try:
        saved = episodes_from_json(data, now)
    except ValueError as e:
        why = f"{e}: their grace starts afresh"
        culler.log.warning(
            "Ignoring the shares' episodes over memory in %s (%s)", culler.state_file, why
        )
        return
    episodes = recent_episodes(saved, now, culler.interval + culler.gpu_stale_after)
    culler._shares.restore(episodes)
    if saved:
        culler.log.info(
            "Restored %d share(s) over their memory; %d older ones start afresh",
            len(episodes),
            len(saved) - len(episodes),
        )


__all__ = [
    "MAX_STATE_FILE",
    "drop_note",
    "load_state",
    "save_state",
    "write_notes",
    "write_policy",
]


def write_notes(culler: Any, notes: list[CullNote]) -> None:
    """Add ``notes`` to ``culler``'s notes file (a GPUIdleCuller's; each user's newest
    ``notes_keep``); a failed write is one warning."""
    if not notes or not culler.notes_file:
        return
    data = load_notes(culler.notes_file)
    for note in notes:
        data = add_note(data, note, keep=culler.notes_keep)
    try:
        save_notes(culler.notes_file, data)
    except OSError as e:
        culler.log.warning("Could not write cull notes to %s: %s", culler.notes_file, e)


def drop_note(culler: Any, note: CullNote) -> None:
    """Take back the note of a stop that did not happen (no await: atomic on the loop)."""
    if not culler.notes_file:
        return
    try:
        save_notes(culler.notes_file, without_note(load_notes(culler.notes_file), note))
    except OSError as e:
        culler.log.warning("Could not write cull notes to %s: %s", culler.notes_file, e)


async def write_policy(culler: Any, users: Sequence[Mapping[str, Any]]) -> None:
    """The terms ``culler`` runs with (a GPUIdleCuller's), each running user's own where
    its overrides are a function, for the hub's spawn form (its ``policy_file``)."""
    if not culler.policy_file or culler.dry_run:
        return
    default = idle_terms(culler.base_policy())
    own: dict[str, IdleTerms] = {}
    overrides: Any = culler.group_overrides
    per_user = callable(overrides)
    if per_user:  # each running user's, as resolved for this round
        for user in users:
            name = user.get("name")
            try:
                terms = idle_terms(await culler.policy_for(user))
            except Exception:  # an override that fails: its user reads the default
                continue
            if isinstance(name, str) and terms != default:
                own[name] = terms
        overrides = {}
    warn, suspend = float(culler.warn_before), bool(culler.suspend)
    policy = CullPolicy(default, warn, suspend, own, validate_overrides(overrides), per_user)
    try:
        save_cull_policy(culler.policy_file, policy)
    except OSError as e:
        culler.log.warning("Could not write the cull policy to %s: %s", culler.policy_file, e)
