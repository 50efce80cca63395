"""gpu-check ``suspend-gpu``: a GPU server suspended to disk and resumed with its device
memory (issue 35, suspend instead of stop; docs/culler.md, "Suspend instead of stop").

A container made as the spawner makes a server with one GPU runs a CUDA process holding
256 MiB of device memory filled with a pattern. Then, as the product's suspend would:
NVIDIA's ``cuda-checkpoint --toggle`` moves the process's CUDA state into host memory
(the GPU is free: NVML must no longer list the process), Docker's checkpoint (CRIU)
writes the container to disk (:func:`jupyterhub_gpu.edges.suspend.checkpoint`), the
container is removed, a new one is created from the same description and restored
(:func:`~jupyterhub_gpu.edges.suspend.restore`), ``cuda-checkpoint --toggle`` puts the
CUDA state back on the GPU, and the process copies its device memory back to the host:
every word must still hold the pattern.

Needs, besides a GPU: ``cuda-checkpoint`` on PATH (github.com/NVIDIA/cuda-checkpoint,
driver 550 or later), CRIU 4 or later (``scripts/criu/build.sh``), and the engine
started with ``--experimental``. Each missing one is a SKIP saying so. Never run on a
GPU yet: no GPU has been lent to this project so far.

    python scripts/gpu_check/suspend.py --image IMAGE
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
from common import PROGRAM, client, emit, first_json, host_pids, inventory, remove, start_server
from common import tail as short

from jupyterhub_gpu.edges.suspend import checkpoint, restore
from jupyterhub_gpu.errors import SuspendFailed

NAME = "suspend-gpu"
MIB = 256


def _toggle(pid: int) -> str:
    """``cuda-checkpoint --toggle --pid PID``; "" on success, else what it said."""
    done = subprocess.run(
        ["cuda-checkpoint", "--toggle", "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode == 0:
        return ""
    return f"exit {done.returncode}: {short(done.stderr + done.stdout)}"


def _program_pid(api: docker.APIClient, cid: str) -> int | None:
    for pid in sorted(host_pids(api, cid)):
        try:
            if b"cuda_program.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


def _answer(api: docker.APIClient, cid: str, timeout: float) -> dict[str, object] | None:
    api.kill(cid, signal="SIGUSR1")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in api.logs(cid, stdout=True, stderr=False).decode(errors="replace").splitlines():
            if line.startswith('{"answer"'):
                return dict(json.loads(line))
        time.sleep(0.5)
    return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--image", required=True)
    args = p.parse_args()
    if shutil.which("cuda-checkpoint") is None:
        emit("SKIP", NAME, "cuda-checkpoint is not on PATH (github.com/NVIDIA/cuda-checkpoint)")
        return 0
    if subprocess.run(["criu", "check"], capture_output=True, check=False).returncode != 0:
        emit("SKIP", NAME, "no working CRIU (`criu check` fails): scripts/criu/build.sh")
        return 0
    api = client()
    if not api.info().get("ExperimentalBuild"):
        emit("SKIP", NAME, "the engine runs without --experimental (no docker checkpoint)")
        return 0
    gpu = inventory().gpus[0].uuid
    command = ["python3", PROGRAM, "suspend", "--mib", str(MIB)]
    made: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="gpu-check-suspend-"))
    engine = docker.DockerClient(base_url=api.base_url, version="auto", timeout=600)
    try:
        made.append(start_server(api, "suspend-a", args.image, command, [gpu]))
        said = first_json(api, made[0], 60)
        if not said or not said.get("ready"):
            logs = short(api.logs(made[0]).decode(errors="replace"))
            emit("FAIL", NAME, f"no CUDA process with its memory set: {said or logs}")
            return 1
        pid = _program_pid(api, made[0])
        if pid is None or (err := _toggle(pid)):
            why = err if pid else "no process"
            emit("FAIL", NAME, f"cuda-checkpoint could not move the CUDA state to the host: {why}")
            return 1
        held = {p.pid for g in inventory().gpus for p in (g.processes or ())}
        if pid in held:
            emit("FAIL", NAME, f"after cuda-checkpoint, NVML still lists pid {pid} on the GPU")
            return 1
        saved = checkpoint(engine, made[0], work, "suspend")
        remove(api, [made.pop()])
        made.append(start_server(api, "suspend-b", args.image, command, [gpu], start=False))
        restore_s = restore(engine, made[0], saved, Path(api.info()["DockerRootDir"]))
        pid = _program_pid(api, made[0])
        if pid is None or (err := _toggle(pid)):
            why = err if pid else "no process"
            emit("FAIL", NAME, f"restored, but cuda-checkpoint could not put it back: {why}")
            return 1
        got = _answer(api, made[0], 60)
        if not got or got.get("copy_rc") != 0 or got.get("wrong_words") != 0:
            emit("FAIL", NAME, f"the device memory after the restore: {got}")
            return 1
        emit(
            "PASS",
            NAME,
            f"{MIB} MiB of device memory kept through checkpoint ({saved.seconds:.1f} s, "
            f"{saved.size_bytes / 2**20:.0f} MiB on disk) and restore ({restore_s:.1f} s) "
            "on a new container",
        )
        return 0
    except SuspendFailed as e:
        emit("FAIL", NAME, str(e))
        return 1
    finally:
        remove(api, made)
        engine.close()
        shutil.rmtree(work, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    sys.exit(main())
