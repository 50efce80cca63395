"""The NVML probe on a real NVIDIA GPU. Skipped where NVML finds no device (CI, laptops).

Run on a GPU host: ``.venv/bin/pytest -m gpu tests/integration/test_nvml_probe.py -v``.
"""

from __future__ import annotations

import ctypes
import shutil
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jupyterhub_gpu.core.inventory import parse_version
from jupyterhub_gpu.edges.probe import make_probe
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.wire.agent import inventory_from_json, inventory_to_json

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def probe() -> Any:
    try:
        from jupyterhub_gpu.edges.nvml import NVMLProbe
    except ImportError as e:
        pytest.skip(f"nvidia-ml-py is not installed ({e})")
    try:
        return NVMLProbe()
    except ProbeError as e:
        pytest.skip(f"no NVIDIA GPU here: {e}")


def test_reads_every_gpu_with_sane_values(probe: Any) -> None:
    inv = probe.read()
    print(inventory_to_json(inv))
    assert inv.name == socket.gethostname()
    assert parse_version(inv.driver_version)[0] >= 400
    assert inv.cuda_driver_version is not None
    assert parse_version(inv.cuda_driver_version)[0] >= 10
    assert inv.gpus
    assert [g.index for g in inv.gpus] == sorted(g.index for g in inv.gpus)
    for g in inv.gpus:
        assert g.uuid.startswith(("GPU-", "MIG-"))
        assert g.model
        assert g.memory_mib > 1000
        assert 0 <= g.memory_used_mib <= g.memory_mib
        assert 0.0 <= g.utilization_pct <= 100.0
        assert g.compute_capability >= (3, 0)
        assert g.temperature_c is None or 0 < g.temperature_c < 120
        assert g.healthy in (True, False, None)
    # the wire format carries what NVML said
    assert inventory_from_json(inventory_to_json(inv, time.time())) == inv


def test_matches_nvidia_smi(probe: Any) -> None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not installed")
    out = subprocess.run(
        [smi, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    rows = [[c.strip() for c in line.split(",")] for line in out.strip().splitlines()]
    inv = probe.read()
    assert [(g.index, g.uuid, g.model) for g in inv.gpus] == [(int(r[0]), r[1], r[2]) for r in rows]
    for g, r in zip(inv.gpus, rows, strict=True):
        assert abs(g.memory_mib - int(r[3])) <= 1


def test_nvml_is_initialised_once_and_reads_are_cheap(probe: Any) -> None:
    again = make_probe("nvml", None, "node-x")  # a second probe in the same process
    assert again.read().name == "node-x"
    durations = []
    for _ in range(10):
        start = time.perf_counter()
        probe.read()
        durations.append(time.perf_counter() - start)
    print(f"NVML read: median {1000 * statistics.median(durations):.1f} ms")
    assert statistics.median(durations) < 0.25  # nvidia-smi -q -x takes ~0.4 s


_HOLD_CONTEXT = textwrap.dedent(
    """
    import ctypes, sys, time
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def cuda_process() -> Iterator[subprocess.Popen[str]]:
    """A host process holding a CUDA context on GPU 0 (libcuda through ctypes)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pytest.skip("libcuda.so.1 is not available")
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_CONTEXT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            pytest.skip("could not create a CUDA context on GPU 0")
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_host_process_is_seen_on_its_gpu(probe: Any, cuda_process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 10
    while True:
        gpu0 = probe.read().gpus[0]
        if gpu0.process_containers or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print("GPU 0 process containers:", gpu0.process_containers)
    # "" on a bare host; a container id when the test itself runs in a container
    assert gpu0.process_containers
    assert gpu0.memory_used_mib > 0


def test_two_cuda_processes_are_each_listed_with_their_memory(
    probe: Any, cuda_process: subprocess.Popen[str]
) -> None:
    """Per-process attribution (#26): every CUDA process on GPU 0 is in ``processes``,
    with its host pid, its container (``""`` on a bare host) and its memory."""
    second = subprocess.Popen(
        [sys.executable, "-c", _HOLD_CONTEXT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert second.stdout is not None and second.stdout.readline().strip() == "ready"
        wanted = {cuda_process.pid, second.pid}
        deadline = time.monotonic() + 10
        while True:
            gpu0 = probe.read().gpus[0]
            seen = {p.pid: p for p in gpu0.processes or ()}
            if wanted <= set(seen) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        print("GPU 0 processes:", gpu0.processes)
        assert gpu0.processes is not None, "NVML gave no per-process data"
        assert wanted <= set(seen)
        for pid in wanted:
            assert seen[pid].memory_mib is None or seen[pid].memory_mib > 0
            util = seen[pid].utilization_pct
            assert util is None or 0 <= util <= 100
    finally:
        second.kill()
        second.wait()
