"""The spawn form's share of a GPU (issue 26): what it offers, and the check of what comes
back (a tampered form gets a sentence, never a bigger share). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.core.form.availability import short_model_name
from jupyterhub_gpu.core.sharing.policy import ShareRule, SharingPolicy, parse_share
from jupyterhub_gpu.core.words import article
from jupyterhub_gpu.errors import InvalidRequest

_PARTS = {2: "half", 3: "third", 4: "quarter", 8: "eighth"}


@dataclass(frozen=True)
class ShareChoice:
    """One share the form offers: ``value`` ("1/4") of ``model``, and its label."""

    model: str
    value: str
    label: str


def share_label(model: str, count: int, rule: ShareRule, gpu_memory_mib: int) -> str:
    """``a quarter of an RTX 3090: 6 GiB, for light work``."""
    name = short_model_name(model)
    part = _PARTS.get(rule.shares)
    what = f"a {part}" if count == 1 and part else f"{count}/{rule.shares}"
    what = f"{what} of {article(name)}"
    gib = count * rule.share_memory(gpu_memory_mib) / 1024
    return f"{what}: {gib:g} GiB, for light work"


def share_choices(policy: SharingPolicy, models: Sequence[tuple[str, int]]) -> list[ShareChoice]:
    """The shares to offer, one share of each shared model in ``models`` ((name, GPU
    memory MiB), as the cluster has them); models whose rule overcommits are left out."""
    out = []
    for model, memory in models:
        rule = policy.models.get(model)
        if rule is not None and rule.fits(memory):
            out.append(ShareChoice(model, f"1/{rule.shares}", share_label(model, 1, rule, memory)))
    return out


def check_share(value: Any, count: int, model: str | None, policy: SharingPolicy) -> str:
    """The validated ``gpu_share`` option (``"K/N"``, ``""`` for a whole GPU); raises
    ``InvalidRequest`` with what to choose instead."""
    if value is None or value == "" or value == "whole":
        return ""
    if not isinstance(value, str) or parse_share(value) is None:
        raise InvalidRequest(
            "The GPU share must look like '1/4' (1 share of a GPU split in 4); got "
            f"{str(value)[:40]!r}."
        )
    k, n = parse_share(value) or (0, 0)
    if count != 1:
        raise InvalidRequest("A share is part of one GPU: ask for 1 GPU to take a share.")
    if model is None:
        raise InvalidRequest("Choose the GPU model to take a share of (a share is of one model).")
    rule = policy.models.get(model)
    if rule is None:
        raise InvalidRequest(
            f"{short_model_name(model)} GPUs are not shared on this hub; ask for a whole GPU."
        )
    if n != rule.shares or k > rule.most_held:
        most = "1" if rule.most_held == 1 else f"1 to {rule.most_held}"
        raise InvalidRequest(
            f"{short_model_name(model)} GPUs are split into {rule.shares} shares; ask for "
            f"{most} of {rule.shares} (or a whole GPU), not {value}."
        )
    return value
