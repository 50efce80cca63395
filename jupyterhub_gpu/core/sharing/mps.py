"""MPS on a node, the pure parts (issue 26, docs/sharing.md "MPS: the node's daemon").

Two halves:

- **What a share container of an ``mps`` GPU gets** (:func:`mps_binds`, :func:`mps_env`):
  the node's MPS pipe directory, mounted at the same path, with ``CUDA_MPS_PIPE_DIRECTORY``
  naming it, and the daemon's own ``/dev/shm`` (a tmpfs of its own on the node, never the
  host's) as the container's ``/dev/shm``. This is what NVIDIA's Kubernetes device plugin
  gives an MPS client (a pipe directory and the daemon's shm directory, no host IPC
  namespace). The container keeps its own IPC namespace: the host's is never shared.
- **What ``check-node --local`` makes of the daemon** (:func:`mps_expectations`,
  :func:`mps_checks`): is the control daemon running (its pipe directory with its control
  pipe), does it use the shared shm directory, are its default limits the largest share
  a server may hold (``get_default_device_pinned_mem_limit <dev>`` and
  ``get_default_active_thread_percentage``), and is each ``mps`` GPU in
  ``EXCLUSIVE_PROCESS`` compute mode (:mod:`.compute_mode`). Each failure is one line
  saying what to run. :mod:`jupyterhub_gpu.edges.mps` gathers the facts.

Which limit holds a server: a server holding ``K`` of ``N`` shares gets ``K`` shares'
memory and ``100 * K / N`` % of the threads in its environment
(:func:`jupyterhub_gpu.core.containers.share_env`), the sizes the ledger, the labels, the
culler and the form count. A client's own values only lower the daemon's defaults, so the
defaults are the largest share a server may hold (:attr:`ShareRule.most_held`: the rule's
``max_held``, 1 by default in ``mps`` mode, so by default every client is held to one
share). They are the hard bound per client process: with ``max_held`` above 1, a user who
raises the environment gets at most ``max_held`` shares per process; the memory a share's
processes hold together is watched by the culler, as in time-slicing (docs/sharing.md).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jupyterhub_gpu.core.checklist import Check
from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.sharing.compute_mode import ComputeModeFacts, compute_mode_checks
from jupyterhub_gpu.core.sharing.policy import SharingPolicy, share_of
from jupyterhub_gpu.errors import ConfigError

#: NVIDIA's default pipe directory (CUDA_MPS_PIPE_DIRECTORY unset): the NVIDIA Container
#: Toolkit mounts it into every container with the ``compute`` capability and libcuda uses
#: it by default, so a daemon there serves every GPU server of the node (issue 30). Never
#: ours: refused as a setting, and check-node fails a node where it exists.
NVIDIA_PIPE_DIRECTORY = "/tmp/nvidia-mps"
#: our daemon's pipe directory (the unit in docs/sharing.md): mounted into mps shares only
DEFAULT_PIPE_DIRECTORY = "/run/jupyterhub-gpu/mps"
#: ``CUDA_MPS_PIPE_DIRECTORY`` of every server that is not an mps share: a directory that
#: does not exist, so libcuda never finds a daemon (nor NVIDIA's default directory)
NO_MPS_PIPE_DIRECTORY = "/nonexistent/jupyterhub-gpu-no-mps"
#: where our daemon unit mounts the tmpfs it uses as its /dev/shm (docs/sharing.md)
DEFAULT_SHM_DIRECTORY = "/run/jupyterhub-gpu/mps-shm"
#: the control daemon's pipe in its pipe directory
CONTROL_PIPE = "control"
#: the file where the control daemon writes its pid, in its pipe directory
PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL_BIN = "nvidia-cuda-mps-control"
#: host paths that must never become a container's /dev/shm or MPS directory
_HOST_ONLY = frozenset(
    {"/", "/dev", "/dev/shm", "/run/shm", "/proc", "/sys", "/run", "/tmp", "/etc"}
)


@dataclass(frozen=True)
class MpsPaths:
    """Where the node's MPS daemon talks (``GPUSharing.mps_pipe_directory``) and the
    tmpfs it uses as its ``/dev/shm`` (``GPUSharing.mps_shm_directory``)."""

    pipe_directory: str = DEFAULT_PIPE_DIRECTORY
    shm_directory: str = DEFAULT_SHM_DIRECTORY


def check_directory(option: str, value: object) -> str:
    """A host directory for an MPS setting, normalised; ``ConfigError`` says what to write.
    Absolute, no ``..``, and never a host directory a user container must not get
    (``/``, ``/dev/shm``, ``/tmp``, ``/run``, ...)."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(f"{option}: an absolute path on the node, got {value!r}")
    if ".." in value.split("/") or any(ch in value for ch in ":,\n\0"):
        raise ConfigError(f"{option}: a plain absolute path (no '..', ':' or ','), got {value!r}")
    path = posixpath.normpath(value)
    if path == NVIDIA_PIPE_DIRECTORY or path.startswith(NVIDIA_PIPE_DIRECTORY + "/"):
        raise ConfigError(
            f"{option}: {path} is refused: the NVIDIA Container Toolkit mounts "
            f"{NVIDIA_PIPE_DIRECTORY} into every GPU container and libcuda uses it by default, "
            "so an MPS daemon there would serve whole-GPU and time-slicing servers too; set "
            f"GPUSharing.mps_pipe_directory to {DEFAULT_PIPE_DIRECTORY} (the default) and "
            f"mps_shm_directory to {DEFAULT_SHM_DIRECTORY}, and start the daemon with "
            f"CUDA_MPS_PIPE_DIRECTORY={DEFAULT_PIPE_DIRECTORY} (docs/upgrade.md)"
        )
    if path in _HOST_ONLY:
        raise ConfigError(
            f"{option}: {path} is the node's own; give the MPS daemon a directory of its "
            f"own (default {DEFAULT_PIPE_DIRECTORY} for pipes, {DEFAULT_SHM_DIRECTORY} for "
            "its /dev/shm): it is mounted into users' containers"
        )
    return path


def mps_paths(pipe_directory: object, shm_directory: object) -> MpsPaths:
    """The checked :class:`MpsPaths` of ``c.GPUSharing``; they must differ."""
    pipe = check_directory("GPUSharing.mps_pipe_directory", pipe_directory)
    shm = check_directory("GPUSharing.mps_shm_directory", shm_directory)
    if pipe == shm or shm.startswith(pipe + "/") or pipe.startswith(shm + "/"):
        raise ConfigError(
            "GPUSharing.mps_pipe_directory and mps_shm_directory must be separate "
            f"directories, got {pipe} and {shm}"
        )
    return MpsPaths(pipe, shm)


def mps_binds(paths: MpsPaths) -> dict[str, dict[str, str]]:
    """The mounts of a share container on an ``mps`` GPU: the pipe directory at the same
    path, the daemon's shm directory as ``/dev/shm``. Read-write: clients open the
    daemon's pipes and sockets and map its shared memory."""
    return {
        paths.pipe_directory: {"bind": paths.pipe_directory, "mode": "rw"},
        paths.shm_directory: {"bind": "/dev/shm", "mode": "rw"},
    }


def mps_env(paths: MpsPaths) -> dict[str, str]:
    """Where a client finds the daemon: set by the spawner last, never from user input."""
    return {"CUDA_MPS_PIPE_DIRECTORY": paths.pipe_directory}


# ---------------------------------------------------------------- check-node --local
def nvidia_pipe_check(node: str, check: str, present: bool, where: str) -> Check:
    """``check`` fails when NVIDIA's default pipe directory exists ``where`` (``"on the
    node"``: ``check-node --local`` looked; ``"in a GPU container"``: a probe saw the
    toolkit mount it). Whatever serves there reaches every GPU container of the node."""
    d = NVIDIA_PIPE_DIRECTORY
    if not present:
        return Check(node, check, True, f"no {d} {where}")
    seen = (
        f"{d} exists {where}: the NVIDIA Container Toolkit mounts it into every GPU "
        "container and libcuda uses it by default, so an MPS daemon there serves every "
        "server of the node"
    )
    fix = (
        f"run the MPS daemon with CUDA_MPS_PIPE_DIRECTORY={DEFAULT_PIPE_DIRECTORY} (the unit "
        f"in docs/sharing.md; GPUSharing.mps_pipe_directory), stop any daemon using {d}, "
        f"then remove {d} on the node (docs/upgrade.md)"
    )
    return Check(node, check, False, seen, fix)


@dataclass(frozen=True)
class MpsDevice:
    """One ``mps`` GPU of the node and the daemon defaults the policy wants for it: the
    sizes of the largest share a server may hold there (``largest``, ``"3/4"``)."""

    index: int  # the daemon's device ordinal (CUDA_DEVICE_ORDER=PCI_BUS_ID: NVML's index)
    uuid: str
    model: str
    memory_mib: int  # the largest share's memory
    thread_percentage: int  # the largest share's threads
    largest: str = ""  # "K/N" of that share


def mps_expectations(node: str, inventory: NodeInventory, policy: SharingPolicy) -> list[MpsDevice]:
    """The node's GPUs the policy shares in ``mps`` mode, each with the sizes of the
    largest share a server may hold (:attr:`ShareRule.most_held` of ``N``; a rule whose
    shares do not fit the card is never used on it, as in placement)."""
    out = []
    for g in inventory.gpus:
        rule = policy.rule(node, g.model)
        if rule is None or rule.mode != "mps" or not rule.fits(g.memory_mib):
            continue
        big = share_of(rule, rule.most_held, g.memory_mib)
        out.append(
            MpsDevice(g.index, g.uuid, g.model, big.memory_mib, big.thread_percentage, big.label)
        )
    return out


@dataclass(frozen=True)
class MpsFacts:
    """What :mod:`jupyterhub_gpu.edges.mps` saw on the node."""

    pipe_directory: str
    shm_directory: str
    pipe_dir_exists: bool = False
    control_pipe: bool = False  # <pipe>/control exists and is a FIFO or a socket
    control_found: bool = True  # nvidia-cuda-mps-control is on PATH
    shm_dir_exists: bool = False
    shm_is_host: bool = False  # the shm directory IS the host's /dev/shm
    #: the daemon's /dev/shm is the shm directory (True), another (False), unknown (None)
    daemon_shm_shared: bool | None = None
    daemon_shm_note: str = ""  # why unknown, or what the daemon uses instead
    #: ``get_default_active_thread_percentage``'s answer, or None with ``errors``
    thread_answer: str | None = None
    #: device ordinal -> ``get_default_device_pinned_mem_limit <dev>``'s answer
    memory_answers: Mapping[int, str] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)  # command -> what went wrong
    #: nvidia-smi's compute modes (:mod:`.compute_mode`)
    compute: ComputeModeFacts = field(default_factory=ComputeModeFacts)


_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\b", re.IGNORECASE)
_UNIT_MIB = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_memory_mib(answer: str) -> int | None:
    """MiB of a pinned memory limit as the control daemon prints it (``6144M``, ``6G``,
    ``6 GiB``; the last amount on its last line); None when it says none (``0``, empty,
    words only). Plain numbers are bytes."""
    lines = [ln for ln in answer.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    found = _AMOUNT.findall(lines[-1])
    if not found:
        return None
    number, unit = found[-1]
    mib = round(float(number) * _UNIT_MIB[unit.upper()])
    return mib or None


def parse_percentage(answer: str) -> float | None:
    """``25.0`` -> 25.0: the daemon's default active thread percentage."""
    found = re.findall(r"\d+(?:\.\d+)?", answer.strip().splitlines()[-1]) if answer.strip() else []
    return float(found[-1]) if found else None


def _pipe(f: MpsFacts, command: str) -> str:
    return f"echo {command} | CUDA_MPS_PIPE_DIRECTORY={f.pipe_directory} {CONTROL_BIN}"


def mps_checks(node: str, devices: Sequence[MpsDevice], f: MpsFacts) -> list[Check]:
    """``mps``, ``mps.shm``, ``mps.threads``, ``mps.gpuN`` and ``mps.gpuN.mode``: the
    node's MPS daemon and GPUs against the policy. Nothing when no GPU of the node is
    shared in ``mps`` mode. The compute modes are checked even without a daemon."""
    if not devices:
        return []
    daemon = _daemon_check(node, f)
    out = [daemon, _shm_check(node, f)]
    modes = compute_mode_checks(node, [(d.index, d.uuid, d.model) for d in devices], f.compute)
    if not daemon.ok:
        because = "the MPS control daemon does not answer"
        names = ["mps.threads", *(f"mps.gpu{d.index}" for d in devices)]
        return [
            *out,
            *(Check(node, n, False, f"not run: {because}", "start it first") for n in names),
            *modes,
        ]
    out.append(_threads_check(node, devices, f))
    out += [_memory_check(node, d, f) for d in devices]
    return out + modes


def _daemon_check(node: str, f: MpsFacts) -> Check:
    start = (
        f"start the daemon as root on the node: CUDA_MPS_PIPE_DIRECTORY={f.pipe_directory} "
        f"{CONTROL_BIN} -d (the unit in docs/sharing.md does it at boot, with the limits)"
    )
    if not f.control_found:
        return Check(
            node,
            "mps",
            False,
            f"{CONTROL_BIN} is not on PATH",
            "install the NVIDIA driver's compute utilities (nvidia-compute-utils), then " + start,
        )
    if not f.pipe_dir_exists or not f.control_pipe:
        seen = (
            f"no MPS pipe directory {f.pipe_directory}"
            if not f.pipe_dir_exists
            else f"no control pipe in {f.pipe_directory}"
        )
        return Check(node, "mps", False, f"{seen}: the MPS control daemon is not running", start)
    failed = f.errors.get("get_default_active_thread_percentage")
    if failed is not None:
        return Check(node, "mps", False, f"the daemon does not answer: {failed}", start)
    return Check(node, "mps", True, f"the MPS control daemon answers at {f.pipe_directory}")


def _shm_check(node: str, f: MpsFacts) -> Check:
    fix = (
        f"mount a tmpfs of its own at {f.shm_directory} (mount -t tmpfs -o "
        f"size=1g,mode=1777,nosuid,nodev,noexec tmpfs {f.shm_directory}) and run the daemon "
        "with it as its /dev/shm (the unit in docs/sharing.md); share containers get it as "
        "their /dev/shm"
    )
    if not f.shm_dir_exists:
        return Check(node, "mps.shm", False, f"no directory {f.shm_directory}", fix)
    if f.shm_is_host:
        seen = f"{f.shm_directory} is the node's own /dev/shm: never give it to users"
        return Check(node, "mps.shm", False, seen, fix)
    if f.daemon_shm_shared is None:
        seen = f"cannot tell if the daemon's /dev/shm is {f.shm_directory}: {f.daemon_shm_note}"
        return Check(node, "mps.shm", False, seen, fix)
    if not f.daemon_shm_shared:
        seen = f"the daemon's /dev/shm is not {f.shm_directory} ({f.daemon_shm_note})"
        return Check(node, "mps.shm", False, seen, fix)
    return Check(node, "mps.shm", True, f"the daemon's /dev/shm is {f.shm_directory}")


def _threads_check(node: str, devices: Sequence[MpsDevice], f: MpsFacts) -> Check:
    wanted = sorted({d.thread_percentage for d in devices})
    got = parse_percentage(f.thread_answer or "")
    if len(wanted) > 1:
        seen = (
            f"the policy's mps GPUs here want {', '.join(map(str, wanted))} % of threads, and "
            "the daemon has one default for all"
        )
        return Check(
            node,
            "mps.threads",
            False,
            seen,
            "give every mps model of this node the same shares and max_held "
            "(GPUSharing.models / nodes)",
        )
    pct = wanted[0]
    largest = " or ".join(sorted({d.largest for d in devices}))
    fix = _pipe(f, f"set_default_active_thread_percentage {pct}")
    if got is None:
        return Check(node, "mps.threads", False, f"unreadable answer {f.thread_answer!r}", fix)
    if round(got) != pct:
        seen = (
            f"the daemon's default active thread percentage is {got:g}, the largest share "
            f"a server may hold ({largest}) is {pct}"
        )
        return Check(node, "mps.threads", False, seen, fix)
    seen = f"default active thread percentage {got:g} (the largest share, {largest})"
    return Check(node, "mps.threads", True, seen)


def _memory_check(node: str, d: MpsDevice, f: MpsFacts) -> Check:
    name = f"mps.gpu{d.index}"
    fix = _pipe(f, f"set_default_device_pinned_mem_limit {d.index} {d.memory_mib}M")
    command = f"get_default_device_pinned_mem_limit {d.index}"
    if command in f.errors:
        return Check(node, name, False, f"{command} failed: {f.errors[command]}", fix)
    answer = f.memory_answers.get(d.index, "")
    got = parse_memory_mib(answer)
    what = f"{d.model} ({d.uuid})"
    if got is None:
        seen = f"{what}: no default pinned memory limit (the daemon said {answer.strip()!r})"
        return Check(node, name, False, seen, fix)
    if got != d.memory_mib:
        seen = (
            f"{what}: default pinned memory limit {got} MiB, the largest share a server may "
            f"hold ({d.largest}) is {d.memory_mib} MiB"
        )
        return Check(node, name, False, seen, fix)
    seen = f"{what}: default pinned memory limit {got} MiB (the largest share, {d.largest})"
    return Check(node, name, True, seen)
