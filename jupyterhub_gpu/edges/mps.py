"""``check-node --local``'s MPS facts: the node's MPS control daemon, asked on the node
itself (its pipe directory, its control pipe, its ``/dev/shm``, its default limits
through ``echo ... | nvidia-cuda-mps-control``), and the GPUs' compute modes
(``nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader``). The judgement is
:func:`jupyterhub_gpu.core.sharing.mps.mps_checks`.

Only checked by fakes here (no GPU on the machines that build this): the unit tests put
a stand-in ``nvidia-cuda-mps-control`` and ``nvidia-smi`` on ``PATH`` (tests/unit/fake-mps/).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from jupyterhub_gpu.core.sharing.compute_mode import QUERY, ComputeModeFacts
from jupyterhub_gpu.core.sharing.mps import (
    CONTROL_BIN,
    CONTROL_PIPE,
    NVIDIA_PIPE_DIRECTORY,
    PID_FILE,
    MpsDevice,
    MpsFacts,
    MpsPaths,
)

#: where processes are read (the daemon's own /dev/shm: /proc/<pid>/root/dev/shm)
PROC = Path("/proc")
#: the node's own /dev/shm, which the shm directory must not be
HOST_SHM = Path("/dev/shm")
TIMEOUT_S = 5.0
#: NVIDIA's default MPS pipe directory, which must not exist on a node (issue 30)
NVIDIA_PIPES = Path(NVIDIA_PIPE_DIRECTORY)


def nvidia_pipes_present() -> bool:
    """Does NVIDIA's default MPS pipe directory exist here (a link to nowhere counts)?"""
    return os.path.lexists(NVIDIA_PIPES)


def ask_daemon(pipe_directory: str, command: str, timeout: float = TIMEOUT_S) -> str:
    """``echo COMMAND | nvidia-cuda-mps-control`` against the daemon at ``pipe_directory``;
    its answer, or ``OSError`` / ``RuntimeError`` with what went wrong."""
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_directory}
    try:
        done = subprocess.run(
            [CONTROL_BIN],
            input=command + "\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no answer within {timeout:g} s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"exit status {done.returncode}: {said[-1] if said else 'no output'}")
    return done.stdout


def compute_modes(timeout: float = TIMEOUT_S) -> ComputeModeFacts:
    """``nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader``'s answer, or why
    there is none (judged by :mod:`jupyterhub_gpu.core.sharing.compute_mode`)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ComputeModeFacts(error="nvidia-smi is not on PATH (the NVIDIA driver's utilities)")
    try:
        done = subprocess.run(
            [smi, *QUERY], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return ComputeModeFacts(error=f"nvidia-smi gave no answer within {timeout:g} s")
    except OSError as e:
        return ComputeModeFacts(error=f"nvidia-smi did not run ({type(e).__name__}: {e})")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        last = said[-1][:200] if said else "no output"
        return ComputeModeFacts(error=f"nvidia-smi exit status {done.returncode}: {last}")
    return ComputeModeFacts(answer=done.stdout)


def _is_pipe(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def daemon_shm(pipe_directory: str, shm_directory: str) -> tuple[bool | None, str]:
    """Whether the control daemon's ``/dev/shm`` (``/proc/<pid>/root/dev/shm``, its pid from
    its pid file) is ``shm_directory``; None with why when that cannot be told."""
    try:
        pid = int((Path(pipe_directory) / PID_FILE).read_text().strip())
    except (OSError, ValueError) as e:
        return None, f"no pid in {pipe_directory}/{PID_FILE} ({type(e).__name__})"
    theirs = PROC / str(pid) / "root" / "dev" / "shm"
    if not (PROC / str(pid)).exists():
        return None, f"the daemon's pid {pid} is not running"
    try:
        return os.path.samefile(theirs, shm_directory), f"pid {pid}"
    except OSError as e:
        return None, f"cannot read {theirs} ({type(e).__name__}: run as root)"


def gather(paths: MpsPaths, devices: Sequence[MpsDevice]) -> MpsFacts:
    """Everything :func:`~jupyterhub_gpu.core.sharing.mps.mps_checks` judges."""
    pipe, shm = Path(paths.pipe_directory), Path(paths.shm_directory)
    found = shutil.which(CONTROL_BIN) is not None
    shared, note = daemon_shm(paths.pipe_directory, paths.shm_directory)
    thread: str | None = None
    memory: dict[int, str] = {}
    errors: dict[str, str] = {}
    control = _is_pipe(pipe / CONTROL_PIPE)
    if found and control:
        commands = ["get_default_active_thread_percentage"]
        commands += [f"get_default_device_pinned_mem_limit {d.index}" for d in devices]
        for command in commands:
            try:
                answer = ask_daemon(paths.pipe_directory, command)
            except (OSError, RuntimeError) as e:
                errors[command] = str(e)
                continue
            if command.startswith("get_default_active"):
                thread = answer
            else:
                memory[int(command.rsplit(" ", 1)[1])] = answer
    return MpsFacts(
        pipe_directory=paths.pipe_directory,
        shm_directory=paths.shm_directory,
        pipe_dir_exists=pipe.is_dir(),
        control_pipe=control,
        control_found=found,
        shm_dir_exists=shm.is_dir(),
        shm_is_host=_same(shm, HOST_SHM),
        daemon_shm_shared=shared,
        daemon_shm_note=note,
        thread_answer=thread,
        memory_answers=memory,
        errors=errors,
        compute=compute_modes(),
    )
