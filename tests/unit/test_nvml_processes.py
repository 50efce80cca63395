"""The NVML probe's per-process helpers (issue #26), without a GPU."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.inventory import GpuProcess
from jupyterhub_gpu.edges.nvml import fold_process_samples, gpu_processes
from jupyterhub_gpu.wire.agent import MAX_PROCESSES

pytestmark = pytest.mark.unit

A = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
CGROUPS = {
    10: f"0::/system.slice/docker-{A}.scope\n",
    11: f"12:memory:/docker/{A}\n1:name=systemd:/docker/{A}\n",
    20: "0::/user.slice/user-1000.slice/session-3.scope\n",
}


def test_fold_samples_means_per_pid_since_the_last_read() -> None:
    samples = [(10, 1_000, 90), (10, 2_000, 30), (11, 2_500, 0), (10, 500, 100), (12, 3_000, 7)]
    util, newest = fold_process_samples(samples, since_us=900)
    assert util == {10: 60.0, 11: 0.0, 12: 7.0}  # the sample at 500 us was read before
    assert newest == 3_000
    assert fold_process_samples([], since_us=42) == ({}, 42)


def test_fold_samples_drops_garbage_values() -> None:
    util, _ = fold_process_samples([(10, 1, 4294967295), (10, 2, 40), (11, 3, -1)], 0)
    assert util == {10: 40.0}


def test_gpu_processes_attributes_each_pid_to_its_container() -> None:
    procs = [(20, 512 * 1024 * 1024), (10, 3 * 1024**3), (11, None), (99, 0)]
    got = gpu_processes(procs, {10: 55.0, 20: 3.0}, CGROUPS.get)
    assert got == (
        GpuProcess(10, A, 3072, 55.0),
        GpuProcess(11, A, None, 0.0),  # no sample: it did not run
        GpuProcess(20, "", 512, 3.0),  # a host process
        GpuProcess(99, "", 0, 0.0),  # cgroup unreadable (exited): no container
    )


def test_gpu_processes_without_utilisation_support_reports_it_unknown() -> None:
    got = gpu_processes([(10, 1024**2)], None, CGROUPS.get)
    assert got == (GpuProcess(10, A, 1, None),)


def test_too_many_processes_means_no_per_process_data_not_a_partial_list() -> None:
    procs = ((pid, 0) for pid in range(1, MAX_PROCESSES + 10))
    assert gpu_processes(procs, {}, lambda pid: None) is None


# --- the probe's glue, against a fake NVML (no driver here) ------------------------------


def _probe(monkeypatch: pytest.MonkeyPatch, utilization: Any) -> tuple[Any, Any]:
    """An NVMLProbe over one fake device, built without a driver; ``utilization`` is what
    ``nvmlDeviceGetProcessUtilization`` returns, or the NVML error code it raises."""
    import pynvml

    from jupyterhub_gpu.edges import nvml

    calls: list[int] = []

    def process_utilization(handle: Any, since: int) -> Any:
        calls.append(since)
        if isinstance(utilization, int):
            raise pynvml.NVMLError(utilization)
        return utilization

    def unsupported(*args: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    fake = {
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=5 * 1024**3, total=24 * 1024**3),
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=80),
        "nvmlDeviceGetTemperature": lambda h, sensor: 50,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [
            SimpleNamespace(pid=10, usedGpuMemory=3 * 1024**3),
            SimpleNamespace(pid=20, usedGpuMemory=None),
        ],
        "nvmlDeviceGetProcessUtilization": process_utilization,
        "nvmlDeviceGetTotalEccErrors": unsupported,
        "nvmlDeviceGetRetiredPagesPendingStatus": unsupported,
        "nvmlDeviceGetRemappedRows": unsupported,
    }
    for name, fn in fake.items():
        monkeypatch.setattr(pynvml, name, fn)
    monkeypatch.setattr(nvml.gpu_processes, "__defaults__", (CGROUPS.get,))
    probe = object.__new__(nvml.NVMLProbe)
    probe._xid_failures, probe._reported, probe._util_seen = {}, {}, {}
    device = nvml._Device("h", "GPU-0", 0, "RTX 3090", 24576, (8, 6), (0, 1, 0))
    return probe, (device, calls)


def _sample(pid: int, stamp: int, sm: int) -> Any:
    return SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm)


def test_the_probe_reports_each_process_and_reads_samples_since_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe, (device, calls) = _probe(monkeypatch, [_sample(10, 100, 40), _sample(10, 200, 60)])
    gpu = probe._read_gpu(device)
    assert gpu.processes == (GpuProcess(10, A, 3072, 50.0), GpuProcess(20, "", None, 0.0))
    assert gpu.process_containers == ("", A)
    probe._read_gpu(device)
    assert calls == [0, 200]  # the second read asks only for newer samples


@pytest.mark.parametrize(
    ("code", "expected"),
    [(0, 0.0), (6, 0.0), (3, None)],  # SUCCESS/NOT_FOUND: no sample; NOT_SUPPORTED: unknown
)
def test_no_samples_mean_idle_and_no_support_means_unknown(
    monkeypatch: pytest.MonkeyPatch, code: int, expected: float | None
) -> None:
    probe, (device, _calls) = _probe(monkeypatch, code)
    gpu = probe._read_gpu(device)
    assert gpu.processes is not None
    assert [p.utilization_pct for p in gpu.processes] == [expected, expected]
    assert gpu.utilization_pct == 80.0 and gpu.healthy is None
