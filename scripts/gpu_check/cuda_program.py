"""The CUDA program of scripts/gpu-check.sh, run inside its test containers (and nowhere
else): the standard library only, the CUDA driver through ``ctypes`` on ``libcuda.so.1``
(the NVIDIA Container Toolkit mounts it with the ``compute`` capability; no CUDA toolkit
in the image). Every answer is one JSON line on stdout.

    cuda_program.py hold --mib M --seconds S       # a context, M MiB allocated, then sleep
    cuda_program.py alloc --mib A [--mib B ...] [--env K=V ...]
                                                   # allocations kept one after another
    cuda_program.py mps-client --share-mib S       # the MPS share's checks (gpu-check.sh)
    cuda_program.py suspend --mib M                # M MiB filled with a pattern; on SIGUSR1
                                                   # it reads them back (suspend-gpu)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

MIB = 1024 * 1024
NVIDIA_PIPES = "/tmp/nvidia-mps"  # NVIDIA's default pipe directory (the toolkit mounts it)


def _error_name(cuda: Any, rc: int) -> str:
    name = ctypes.c_char_p()
    if cuda.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUDA error {rc}"


class Cuda:
    """A context on device 0 (the container's one GPU) and allocations in it."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ctx = ctypes.c_void_p()
        self.kept: list[ctypes.c_uint64] = []

    def call(self, fn: str, *args: Any) -> int:
        return int(getattr(self.lib, fn)(*args))

    def start(self) -> dict[str, Any]:
        """cuInit, cuDeviceGet(0), cuCtxCreate: each step's result (``rc`` 0 is success)."""
        out: dict[str, Any] = {"step": "cuInit", "rc": self.call("cuInit", 0)}
        if out["rc"] != 0:
            return {**out, "error": _error_name(self.lib, out["rc"])}
        dev = ctypes.c_int()
        out = {"step": "cuDeviceGet", "rc": self.call("cuDeviceGet", ctypes.byref(dev), 0)}
        if out["rc"] != 0:
            return {**out, "error": _error_name(self.lib, out["rc"])}
        rc = self.call("cuCtxCreate_v2", ctypes.byref(self.ctx), 0, dev)
        out = {"step": "cuCtxCreate", "rc": rc}
        if rc != 0:
            out["error"] = _error_name(self.lib, rc)
        return out

    def alloc(self, mib: int) -> dict[str, Any]:
        """cuMemAlloc of ``mib`` MiB, kept until the process ends."""
        ptr = ctypes.c_uint64()
        rc = self.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(mib * MIB))
        if rc == 0:
            self.kept.append(ptr)
            return {"mib": mib, "rc": 0}
        return {"mib": mib, "rc": rc, "error": _error_name(self.lib, rc)}


def _where() -> dict[str, Any]:
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    return {
        "pid": os.getpid(),
        "uid": os.getuid(),
        "mps_pipe_directory": pipe,
        "mps_pipe_directory_exists": bool(pipe) and os.path.exists(pipe or ""),
        "nvidia_pipes_exist": os.path.lexists(NVIDIA_PIPES),
    }


def hold(mib: int, seconds: float) -> int:
    try:
        cuda = Cuda()
    except OSError as e:
        print(json.dumps({"ready": False, "error": f"libcuda.so.1: {e}", **_where()}), flush=True)
        return 1
    started = cuda.start()
    if started["rc"] != 0:
        print(json.dumps({"ready": False, "start": started, **_where()}), flush=True)
        return 1
    got = cuda.alloc(mib)
    print(json.dumps({"ready": got["rc"] == 0, "alloc": got, **_where()}), flush=True)
    time.sleep(seconds)
    return 0


def alloc(sizes: list[int], env: list[str]) -> int:
    for item in env:  # in this process's own environment, before CUDA starts
        key, _, value = item.partition("=")
        os.environ[key] = value
    out: dict[str, Any] = {"env": {k: os.environ.get(k) for k in _MPS_VARS}, **_where()}
    try:
        cuda = Cuda()
    except OSError as e:
        print(json.dumps({**out, "error": f"libcuda.so.1: {e}"}), flush=True)
        return 1
    out["start"] = cuda.start()
    out["allocs"] = [cuda.alloc(m) for m in sizes] if out["start"]["rc"] == 0 else []
    print(json.dumps(out), flush=True)
    return 0


_MPS_VARS = (
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
)


def _child(args: list[str], timeout: float) -> dict[str, Any]:
    """This program again in a process of its own (a fresh CUDA client)."""
    try:
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"no answer in {timeout:.0f} s (waiting for the MPS server?)"}
    lines = done.stdout.strip().splitlines()
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-300:]}"}


def _control(commands: list[str]) -> dict[str, Any]:
    """``echo COMMAND | nvidia-cuda-mps-control`` as this container's user, per command."""
    found = shutil.which("nvidia-cuda-mps-control") or (
        "/gpucheck-bin/nvidia-cuda-mps-control"
        if os.path.exists("/gpucheck-bin/nvidia-cuda-mps-control")
        else None
    )
    out: dict[str, Any] = {"binary": found, "answers": {}}
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
    probe = os.path.join(pipe, "gpu-check-write-probe")
    try:
        with open(probe, "w"):
            pass
        os.unlink(probe)
        out["pipe_directory_writable"] = True
    except OSError as e:
        out["pipe_directory_writable"] = False
        out["write_error"] = str(e)
    if found is None:
        return out
    for command in commands:
        try:
            done = subprocess.run(
                [found], input=command + "\n", capture_output=True, text=True, timeout=10
            )
            out["answers"][command] = {
                "rc": done.returncode,
                "out": (done.stdout + done.stderr).strip()[-300:],
            }
        except (OSError, subprocess.TimeoutExpired) as e:
            out["answers"][command] = {"rc": None, "out": str(e)}
    return out


def mps_client(share_mib: int, raise_to_mib: int, timeout: float) -> int:
    """An MPS share's user: allocate half the share, then a whole share more (1.5 x the
    share in all: the second must fail); the same with the memory limit raised in the
    process's own environment; then ask the control daemon to raise its default limit and
    to quit (both must be refused: checked on the host afterwards)."""
    half, rest = max(1, share_mib // 2), share_mib
    raised = f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={raise_to_mib}M"
    out = {
        "where": _where(),
        "limit": _child(["alloc", "--mib", str(half), "--mib", str(rest)], timeout),
        "raised": _child(
            ["alloc", "--mib", str(half), "--mib", str(rest), "--env", raised], timeout
        ),
        "control": _control([f"set_default_device_pinned_mem_limit 0 {raise_to_mib}M", "quit"]),
    }
    print(json.dumps(out), flush=True)
    return 0


PATTERN = 0x2A2A2A2A  # what suspend() writes to every 32-bit word of its device memory


def suspend(mib: int) -> int:
    """A CUDA context holding ``mib`` MiB of device memory filled with :data:`PATTERN`;
    each SIGUSR1 copies it back to the host and prints whether every word still holds it
    (after a checkpoint, a restore on a fresh container and ``cuda-checkpoint --toggle``)."""
    import signal

    try:
        cuda = Cuda()
    except OSError as e:
        print(json.dumps({"ready": False, "error": f"libcuda.so.1: {e}", **_where()}), flush=True)
        return 1
    started = cuda.start()
    got = cuda.alloc(mib) if started["rc"] == 0 else {"rc": -1}
    if got["rc"] != 0:
        print(json.dumps({"ready": False, "start": started, "alloc": got}), flush=True)
        return 1
    ptr, words = cuda.kept[0], mib * MIB // 4
    rc = cuda.call("cuMemsetD32_v2", ptr, ctypes.c_uint(PATTERN), ctypes.c_size_t(words))
    sync = cuda.call("cuCtxSynchronize")
    print(json.dumps({"ready": rc == 0 and sync == 0, "memset_rc": rc, **_where()}), flush=True)

    def answer(*_: Any) -> None:
        host = (ctypes.c_uint32 * words)()
        copied = cuda.call("cuMemcpyDtoH_v2", host, ptr, ctypes.c_size_t(words * 4))
        wrong = sum(1 for w in host if w != PATTERN) if copied == 0 else None
        print(json.dumps({"answer": True, "copy_rc": copied, "wrong_words": wrong}), flush=True)

    signal.signal(signal.SIGUSR1, answer)
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cuda_program.py")
    sub = p.add_subparsers(dest="what", required=True)
    h = sub.add_parser("hold")
    h.add_argument("--mib", type=int, default=256)
    h.add_argument("--seconds", type=float, default=120)
    a = sub.add_parser("alloc")
    a.add_argument("--mib", type=int, action="append", default=[])
    a.add_argument("--env", action="append", default=[])
    m = sub.add_parser("mps-client")
    m.add_argument("--share-mib", type=int, required=True)
    m.add_argument("--raise-to-mib", type=int, required=True)
    m.add_argument("--timeout", type=float, default=40)
    s = sub.add_parser("suspend")
    s.add_argument("--mib", type=int, default=256)
    args = p.parse_args(argv)
    if args.what == "suspend":
        return suspend(args.mib)
    if args.what == "hold":
        return hold(args.mib, args.seconds)
    if args.what == "alloc":
        return alloc(args.mib, args.env)
    return mps_client(args.share_mib, args.raise_to_mib, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
