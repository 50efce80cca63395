"""Tell before a cull (issues 35 and 36): when to warn a server's user, when a warned
server may go, and the sentence the user reads. Pure: plain data in, plain data out.

The culler judges each server twice: with its policy (:func:`~.idleness.judge`) and with
the same policy ``warn_before`` seconds shorter (:func:`shortened`). When the shorter one
would cull an idle server, its user is warned: the server will be stopped at the earliest
at the warning's ``at``, never sooner than ``warn_before`` after the first warning. An
idle cull happens only once a warning's ``at`` has passed (:func:`warn_step`), so no idle
server goes without its user having been told ``warn_before`` ahead; any activity that
makes the server not idle any more drops the warning. ``max_age`` and a share over its
memory are not idle culls: they go as before (the dashboard shows ``max_age`` ahead).

"I'm still here" (the hub's API, once per server start) counts as hub activity at the
moment it was pressed (:func:`with_postponement`): the server is judged idle again only a
whole timeout later, and warned again before that cull, with no button then.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.core.culling.idleness import Decision, Policy, ServerObservation, Signal
from jupyterhub_gpu.core.words import duration, gpus, listing

#: Spawner-state key of the moment the user pressed "I'm still here" (ISO, UTC).
POSTPONED_KEY = "cull_postponed_at"


@dataclass(frozen=True)
class CullWarning:
    """A warned server: stopped (``suspend``: suspended) at ``at`` at the earliest if it
    stays idle."""

    at: datetime  # aware UTC
    idle_since: datetime  # the hub's last activity it counts from (aware UTC)
    issued: datetime  # the round that first warned (aware UTC)
    postponable: bool  # its user may still press "I'm still here" (once per start)
    suspend: bool = False  # the culler will ask the hub to suspend it, not stop it


def shortened(policy: Policy, warn_before: float) -> Policy:
    """``policy`` with every idle wait ``warn_before`` seconds shorter (at least 1 s; a
    wait that is off, 0, stays off): what would be culled ``warn_before`` from now."""

    def less(wait: float) -> float:
        return wait if wait <= 0 else max(wait - warn_before, 1.0)

    return replace(
        policy,
        timeout=less(policy.timeout),
        gpu_timeout=less(policy.gpu_timeout),
        gpu_pause_cap=less(policy.gpu_pause_cap),
        gpu_loaded_idle=less(policy.gpu_loaded_idle),
        gpu_held_idle=less(policy.gpu_held_idle),
    )


def with_postponement(obs: ServerObservation, postponed_at: datetime | None) -> ServerObservation:
    """``obs`` with the user's "I'm still here" counted as hub activity at that moment."""
    if postponed_at is None:
        return obs
    last = obs.last_activity
    if last is not None and last >= postponed_at:
        return obs
    return replace(obs, last_activity=postponed_at)


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def warn_step(
    decision: Decision,
    early: Decision,
    previous: CullWarning | None,
    *,
    deadline: datetime | None,
    idle_since: datetime,
    now: datetime,
    warn_before: float,
    postponable: bool,
    suspend: bool = False,
) -> tuple[Decision, CullWarning | None]:
    """One round's decision for a server, with warnings: ``decision`` is the policy's
    judgement, ``early`` the :func:`shortened` policy's, ``previous`` the warning given
    before (this server's start), ``deadline`` the earliest idle cull
    (:func:`~.idleness.earliest_cull`), ``suspend``: the cull will ask to suspend it (the
    warning says so). Returns the decision to act on and the warning to show (``None``:
    none). ``warn_before`` 0: no warnings, ``decision`` as it is."""
    if warn_before <= 0 or (decision.cull and decision.signal is not Signal.IDLE):
        return decision, None
    if decision.cull:
        if previous is not None and previous.at <= now:
            return decision, None
        if previous is None:
            previous = CullWarning(now + timedelta(seconds=warn_before), idle_since, now, False)
        warning = replace(previous, idle_since=idle_since, postponable=postponable, suspend=suspend)
        return _warned(warning, decision), warning
    if not (early.cull and early.signal is Signal.IDLE):
        return decision, None  # active again (or kept for missing data): no warning
    issued = previous.issued if previous is not None else now
    at = max(deadline or now, issued + timedelta(seconds=warn_before))
    warning = CullWarning(at, idle_since, issued, postponable, suspend)
    return decision, warning


def _warned(warning: CullWarning, decision: Decision) -> Decision:
    when = _utc(warning.at).strftime("%H:%M:%S UTC")
    verb = "suspended" if warning.suspend else "stopped"
    reason = f"warned, {verb} at {when} at the earliest: {decision.reason}"
    return Decision(False, reason, Signal.WARNED)


@dataclass(frozen=True)
class WarningWords:
    """What the user reads: ``text`` says the time as ``said`` (UTC), which a page may
    show in the browser's own zone; ``postponable``: offer "I'm still here"."""

    text: str
    said: str
    postponable: bool


def _said_and_idle(warning: CullWarning, now: datetime) -> tuple[str, str]:
    said = _utc(warning.at).strftime("%H:%M UTC")
    if _utc(warning.at).date() != _utc(now).date():
        said = _utc(warning.at).strftime("%a %d %b %H:%M UTC")
    idle = duration(max((_utc(now) - _utc(warning.idle_since)).total_seconds(), 0.0))
    return said, idle


def _what_to_do(warning: CullWarning) -> str:
    if warning.suspend:  # nothing is lost: keeping it running is the only choice left
        if warning.postponable:
            return "Press I'm still here to keep it running."
        return "Run a cell or open a file to keep it running."
    if warning.postponable:
        return "Save your work, or press I'm still here to keep it."
    return "Save your work, or use it (run a cell, open a file) to keep it."


def warning_words(server: str, warning: CullWarning, now: datetime) -> WarningWords:
    """ "Your server will be stopped at 14:05 UTC because it has been idle for 50 min."
    and what to do about it; a server the culler will suspend: "Your server will be
    suspended at 14:05 UTC because it has been idle for 50 min: start it again to resume
    where you left it, with your kernels and their variables." (the words of
    :func:`~jupyterhub_gpu.core.suspend.suspended_words`)."""
    which = f"Your server '{server}'" if server else "Your server"
    said, idle = _said_and_idle(warning, now)
    if warning.suspend:
        text = (
            f"{which} will be suspended at {said} because it has been idle for {idle}: start "
            "it again to resume where you left it, with your kernels and their variables. "
        )
    else:
        text = f"{which} will be stopped at {said} because it has been idle for {idle}. "
    return WarningWords(text + _what_to_do(warning), said, warning.postponable)


#: the most characters a JupyterLab notification shows (JupyterLab 4 cuts longer ones
#: with "…"; the time may grow by 10 in the browser's words, "Tue 25 Nov, 14:05 (local
#: time)")
LAB_TEXT_MAX = 140


def lab_warning_words(warning: CullWarning, now: datetime) -> WarningWords:
    """The same warning inside the server's own JupyterLab, short enough for its
    notification (:data:`LAB_TEXT_MAX`): "Idle for 50 min: this server stops at 14:05
    UTC. Save your work, or press I'm still here to keep it." (suspended: "Idle for 50
    min: this server suspends at 14:05 UTC, kernels kept. Press I'm still here to
    keep it running.")"""
    said, idle = _said_and_idle(warning, now)
    if warning.suspend:
        text = f"Idle for {idle}: this server suspends at {said}, kernels kept. "
    else:
        text = f"Idle for {idle}: this server stops at {said}. "
    return WarningWords(text + _what_to_do(warning), said, warning.postponable)


_IDLE_REASON = re.compile(
    r"idle: no hub activity for (?P<idle>[^,]+),.*\(timeout (?P<limit>[^)]+)\)$"
)


def said_at(at: datetime, now: datetime) -> str:
    """When ``at`` was, as a note says it: "14:05 UTC", or "Tue 01 Dec 14:05 UTC" on
    another day than ``now``'s (a page shows it in the browser's own zone)."""
    if _utc(at).date() != _utc(now).date():
        return _utc(at).strftime("%a %d %b %H:%M UTC")
    return _utc(at).strftime("%H:%M UTC")


def because_of(reason: str) -> str:
    """The culler's one-line decision as a note says it: "because it had been idle for
    1 h 02 min (the limit is 1 h)", or the reason itself in brackets."""
    why = reason.strip().rstrip(".")
    idle = _IDLE_REASON.match(why)
    if idle:
        return f"because it had been idle for {idle['idle']} (the limit is {idle['limit']})"
    return f"({why})"


def stopped_words(server: str, at: datetime, reason: str, now: datetime) -> WarningWords:
    """What a user reads after a cull, e.g. "Your server was stopped at 14:05 UTC because
    it had been idle for 1 h 02 min (the limit is 1 h). Your files are kept: start it
    again when you need it." (``reason``: the culler's one-line decision)."""
    which = f"Your server '{server}'" if server else "Your server"
    said = said_at(at, now)
    text = f"{which} was stopped at {said} {because_of(reason)}. Your files are kept: start it "
    return WarningWords(text + "again when you need it.", said, False)


def freed_words(gpu_count: int, model: str, cpu: float, mem_gib: float) -> str:
    """What a culled server gave back: "1 GPU (RTX 3090), 2 CPUs and 8 GiB of memory"."""
    parts = []
    if gpu_count > 0:
        # here, not at the top: edges/files.py (a node's install too) imports this module,
        # and core.form's package pulls in the hub's dependencies (packaging)
        from jupyterhub_gpu.core.form.availability import short_model_name

        label = short_model_name(model) if model else ""
        parts.append(f"{gpus(gpu_count)} ({label})" if label else gpus(gpu_count))
    if cpu > 0:
        parts.append(f"{cpu:g} CPU{'s' if cpu != 1 else ''}")
    if mem_gib > 0:
        parts.append(f"{mem_gib:g} GiB of memory")
    return listing(parts)


def after_cull_words(freed: str, notebooks: Sequence[str]) -> str:
    """The sentences after a cull's note on the spawn form: what it freed, and the
    notebooks that were open (from JupyterLab's workspace, which the home keeps)."""
    words = []
    if freed:
        words.append(f"It gave {freed} back for others.")
    if notebooks:
        shown = listing(list(notebooks), limit=6)
        words.append(
            f"Notebooks open then: {shown}; JupyterLab opens them again, but their "
            "variables are gone: run them again."
        )
    return " ".join(words)
