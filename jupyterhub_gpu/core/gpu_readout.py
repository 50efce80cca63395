"""A server's GPUs in a few words, for its JupyterLab's status bar (pure: plain data in).

The hub reads its nodes' agents (the cluster snapshot); this turns the readings of one
server's GPUs into what the student reads at the bottom of her JupyterLab (the
``jupyterhub-gpu-lab`` extension, images/lab; ``GET /hub/gpu/lab-notices``)::

    RTX 3090 · 95 % · 4.0 of 24 GiB
    2x RTX 3090 · 95 %, 10 % · 8.0 of 48 GiB
    RTX 3090, your share · 35 % · 3.0 of 6.0 GiB

and a longer tooltip, one line per GPU. A whole GPU's reading is the card's: it is all
hers. A share (issue 26) reads its own processes when the agent reports them
(:func:`~jupyterhub_gpu.core.attribution.processes.share_reading`), out of its share's
memory; an agent without per-process figures gives the whole card's, and the words say
so. A node whose agent did not answer says "no reading now", never an old figure as new.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jupyterhub_gpu.core.attribution.labels import Share
from jupyterhub_gpu.core.attribution.processes import share_reading
from jupyterhub_gpu.core.form.availability import short_model_name
from jupyterhub_gpu.core.inventory import GPU, NodeState

NO_READING = "no reading now"


@dataclass(frozen=True)
class GpuReading:
    """One of a server's GPUs as its user reads it (``None``: unknown)."""

    uuid: str
    index: int
    model: str  # short ("RTX 3090")
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_mib: int  # the card's, or the share's
    healthy: bool | None
    own: bool  # the server's own processes (a share's), not the whole card's


@dataclass(frozen=True)
class Readout:
    """The status bar's words (``text``), its tooltip (``title``) and the readings."""

    text: str
    title: str
    gpus: tuple[GpuReading, ...]

    def to_json(self) -> dict[str, str]:
        return {"text": self.text, "title": self.title}


def _gib(mib: float) -> str:
    value = mib / 1024
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} %"


def reading_of(gpu: GPU, container: str, share: Share | None) -> GpuReading:
    """One GPU's reading for the server in ``container`` (its Docker id) holding it whole
    (``share=None``) or by ``share``."""
    model = short_model_name(gpu.model)
    if share is None:
        return GpuReading(
            gpu.uuid, gpu.index, model, gpu.utilization_pct, gpu.memory_used_mib,
            gpu.memory_mib, gpu.healthy, own=False,
        )  # fmt: skip
    seen = share_reading(gpu.processes, container, gpu.utilization_pct, gpu.memory_used_mib)
    memory = share.memory_mib if seen.own else gpu.memory_mib  # the card's figures: its size
    return GpuReading(
        gpu.uuid, gpu.index, model, seen.utilization_pct, seen.memory_used_mib,
        memory, gpu.healthy, own=seen.own,
    )  # fmt: skip


def _line(r: GpuReading, share: Share | None) -> str:
    """The tooltip's line of one GPU."""
    head = f"GPU {r.index} ({r.model}, {r.uuid[:12]})"
    if r.healthy is False:
        return f"{head}: reports a fault: save your work and tell your admin."
    whose = ""
    if share is not None:
        whose = " (your share's processes)" if r.own else " (the whole card: shared with others)"
    used = "?" if r.memory_used_mib is None else _gib(r.memory_used_mib)
    return (
        f"{head}: {_pct(r.utilization_pct)} busy, {used} of {_gib(r.memory_mib)} GiB "
        f"of memory in use{whose}."
    )


def server_readout(
    node: NodeState | None,
    gpu_uuids: Sequence[str],
    container: str = "",
    share: Share | None = None,
) -> Readout | None:
    """What a server holding ``gpu_uuids`` on ``node`` reads of them (``None``: a server
    without GPUs, nothing to show). ``node`` is ``None`` or unreachable when its agent
    did not answer, or the GPUs are not in its last inventory: "no reading now"."""
    if not gpu_uuids:
        return None
    found = [node.inventory.gpu(u) for u in gpu_uuids] if node is not None else []
    gpus = [g for g in found if g is not None]
    if node is None or not node.reachable or len(gpus) != len(gpu_uuids):
        count = len(gpu_uuids)
        label = "GPU" if count == 1 else f"{count} GPUs"
        return Readout(
            f"{label} · {NO_READING}",
            f"Your server's {'GPU' if count == 1 else 'GPUs'}: the hub has no reading of "
            "its node now (its agent did not answer). The figures come back by themselves.",
            (),
        )
    readings = tuple(reading_of(g, container, share) for g in gpus)
    return Readout(_text(readings, share), _title(readings, share, node.name), readings)


def _text(readings: Sequence[GpuReading], share: Share | None) -> str:
    models = sorted({r.model for r in readings})
    head = models[0] if len(models) == 1 else " + ".join(models)
    if len(readings) > 1 and len(models) == 1:
        head = f"{len(readings)}x {head}"
    if share is not None:
        head += ", your share" if readings[0].own else ", shared card"
    if any(r.healthy is False for r in readings):
        return f"{head} · fault: save your work"
    busy = ", ".join(_pct(r.utilization_pct) for r in readings)
    used: list[float] = [r.memory_used_mib for r in readings if r.memory_used_mib is not None]
    memory = sum(r.memory_mib for r in readings)
    if len(used) == len(readings):
        return f"{head} · {busy} · {_gib(sum(used))} of {_gib(memory)} GiB"
    return f"{head} · {busy} · {_gib(memory)} GiB"


def _title(readings: Iterable[GpuReading], share: Share | None, node: str) -> str:
    lines = [f"Your server's GPUs on node {node}, as its agent read them:"]
    lines += [_line(r, share) for r in readings]
    lines.append("Busy: how much of the last moments the GPU was computing. The hub's GPU "
                 "dashboard has more.")  # fmt: skip
    return "\n".join(lines)
