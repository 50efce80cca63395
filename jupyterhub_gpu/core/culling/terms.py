"""The idle culler's terms in a student's words, for the spawn form (issue 36: the form
says what a student looks for, the idle policy among it). Pure.

The culler (services/culler) writes the terms it runs with, each user's own when group
overrides change them (``wire/cull_policy.py``); the hub's form reads the signed-in user's
and shows, e.g.: "Idle servers stop after at least 30 min with a GPU, 2 h without. You
are warned 10 min before. Your files are kept. Any server stops after 7 days." ("at
least": a GPU that still holds a paused run's memory is given longer.)
"""

from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.core.culling.idleness import Policy
from jupyterhub_gpu.core.words import duration

#: the culler's settings a user is told of (group overrides may change each)
TOLD = ("timeout", "gpu_timeout", "max_age")


@dataclass(frozen=True)
class IdleTerms:
    """One user's terms: the idle timeouts of servers without and with GPUs, and the age
    at which any server stops (0: never, for each)."""

    timeout_s: float
    gpu_timeout_s: float
    max_age_s: float


def idle_terms(policy: Policy) -> IdleTerms:
    """What a user is told of a culler ``policy`` (group overrides applied)."""
    return IdleTerms(policy.timeout, policy.gpu_timeout, policy.max_age)


def idle_terms_words(terms: IdleTerms, warn_before_s: float, suspend: bool) -> str:
    """The form's sentence(s) for ``terms``; ``warn_before_s``: how long before a cull its
    user is warned (0: not); ``suspend``: an idle server is suspended, not stopped."""
    gpu, cpu = terms.gpu_timeout_s, terms.timeout_s
    verb = "are suspended" if suspend else "stop"
    # "at least": a GPU still holding a paused run's memory is given longer (docs/culler.md)
    if gpu and cpu and gpu == cpu:
        head = f"Idle servers {verb} after at least {duration(gpu)}."
    elif gpu and cpu:
        head = (
            f"Idle servers {verb} after at least {duration(gpu)} with a GPU, "
            f"{duration(cpu)} without."
        )
    elif gpu:
        head = f"Idle servers with a GPU {verb} after at least {duration(gpu)}; others run on."
    elif cpu:
        head = (
            f"Idle servers without a GPU {verb} after at least {duration(cpu)}; GPU servers "
            "run on."
        )
    else:
        head = "Idle servers run on."
    parts = [head]
    if gpu or cpu:
        if warn_before_s:
            parts.append(f"You are warned {duration(warn_before_s)} before.")
        if suspend:
            parts.append("Starting your server again resumes your kernels where you left them.")
        else:
            parts.append("Your files are kept.")
    if terms.max_age_s:
        any_verb = "is suspended" if suspend else "stops"
        parts.append(f"Any server {any_verb} after {duration(terms.max_age_s)}.")
    return " ".join(parts)


__all__ = ["TOLD", "IdleTerms", "idle_terms", "idle_terms_words"]
