"""The compute mode of the node's ``mps`` GPUs (issue 26), the pure parts of
``check-node --local``'s ``mps.gpuN.mode`` lines. :mod:`jupyterhub_gpu.edges.mps` asks
``nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader``.

NVIDIA's MPS documentation puts a GPU served by MPS in ``EXCLUSIVE_PROCESS`` compute mode:
then one process only, the MPS server, holds a context on it. A share's process that drops
``CUDA_MPS_PIPE_DIRECTORY`` (its environment is the user's) does not use MPS; in
``Default`` mode it gets a context of its own beside the MPS clients, outside every MPS
limit; in ``EXCLUSIVE_PROCESS`` it is refused ("all CUDA-capable devices are busy or
unavailable") while the MPS server holds the GPU. The mode is lost at reboot: the unit in
docs/sharing.md sets it before it starts the daemon.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jupyterhub_gpu.core.checklist import Check
from jupyterhub_gpu.errors import ComputeModeError

#: the arguments of the one nvidia-smi call (its wire format: ``GPU-<uuid>, <mode>`` a line)
QUERY = ("--query-gpu=uuid,compute_mode", "--format=csv,noheader")
EXCLUSIVE_PROCESS = "Exclusive_Process"
#: nvidia-smi's names of the compute modes (NVML's nvmlComputeMode_t), by lower case
MODES = {m.lower(): m for m in ("Default", "Exclusive_Thread", "Prohibited", EXCLUSIVE_PROCESS)}
_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Za-z-]+$")
_SHOWN = 60


def parse_compute_modes(text: str) -> dict[str, str]:
    """``GPU-<uuid>, Exclusive_Process`` lines -> {uuid: mode} (nvidia-smi's spelling).
    Anything else, or no line at all, raises :class:`ComputeModeError`."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2 or not _UUID.match(fields[0]):
            raise ComputeModeError(
                f"line {number} is not 'GPU-<uuid>, <compute mode>': {line[:_SHOWN]!r}"
            )
        mode = MODES.get(fields[1].lower())
        if mode is None:
            raise ComputeModeError(
                f"line {number}: unknown compute mode {fields[1][:_SHOWN]!r} (nvidia-smi says "
                f"one of {', '.join(MODES.values())})"
            )
        out[fields[0]] = mode
    if not out:
        raise ComputeModeError("it listed no GPU")
    return out


@dataclass(frozen=True)
class ComputeModeFacts:
    """nvidia-smi's answer to :data:`QUERY`, or why there is none."""

    answer: str | None = None
    error: str = ""  # "nvidia-smi is not on PATH", "exit status 9: ...", ...


def fix_for(uuid: str) -> str:
    """The command that puts ``uuid`` in ``EXCLUSIVE_PROCESS`` mode, and its caveat."""
    return (
        f"as root on the node: nvidia-smi -i {uuid} -c EXCLUSIVE_PROCESS (lost at reboot "
        "unless the MPS unit sets it: its ExecStartPre in docs/sharing.md)"
    )


def compute_mode_checks(
    node: str, gpus: Sequence[tuple[int, str, str]], facts: ComputeModeFacts
) -> list[Check]:
    """One ``mps.gpuN.mode`` line per ``mps`` GPU (index, UUID, model): passes in
    ``Exclusive_Process``; any other mode, a GPU nvidia-smi does not list, or an answer
    that cannot be read fails with what to run."""
    modes: Mapping[str, str] = {}
    unread = ""
    if facts.answer is None:
        unread = facts.error or "nvidia-smi was not asked"
    else:
        try:
            modes = parse_compute_modes(facts.answer)
        except ComputeModeError as e:
            unread = f"nvidia-smi's answer is unreadable: {e}"
    out = []
    for index, uuid, model in gpus:
        name, what = f"mps.gpu{index}.mode", f"{model} ({uuid})"
        if unread:
            seen = f"{what}: cannot read its compute mode ({unread})"
            fix = (
                f"run nvidia-smi {' '.join(QUERY)} on the node and mend what stops it; "
                f"then, if the mode is not Exclusive_Process, {fix_for(uuid)}"
            )
            out.append(Check(node, name, False, seen, fix))
        elif uuid not in modes:
            seen = f"{what}: nvidia-smi does not list it ({len(modes)} GPU(s) listed)"
            out.append(Check(node, name, False, seen, "check the GPU with nvidia-smi -L"))
        elif modes[uuid] != EXCLUSIVE_PROCESS:
            seen = (
                f"{what} is in compute mode {modes[uuid]}, not Exclusive_Process: a process "
                "that drops CUDA_MPS_PIPE_DIRECTORY runs beside the MPS clients, outside "
                "their limits"
            )
            out.append(Check(node, name, False, seen, fix_for(uuid)))
        else:
            seen = f"{what}: compute mode Exclusive_Process (only the MPS server holds it)"
            out.append(Check(node, name, True, seen))
    return out
