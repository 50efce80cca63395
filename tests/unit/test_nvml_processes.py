"""The NVML probe's per-process helpers (issue #26), without a GPU."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.attribution.processes import GpuProcess
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
