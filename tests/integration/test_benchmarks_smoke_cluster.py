"""Every benchmark that needs the test cluster, a hub or PostgreSQL runs at its smallest
scale (``--smoke``) and prints the JSON keys benchmarks/README.md documents for it (issue
31: benchmarks are code too); the pure ones are in tests/unit/test_benchmarks_smoke.py.

real_images.py and time_to_lab.py are skipped where the real PyTorch image (7.62 GB,
built from PyPI wheels by real_images.py) is not on the builder: one real image is their
smallest scale, and building it is not a smoke test."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.benchmarks import TRACES, missing, run_benchmark
from tests.support.cluster import STATE, Engine

pytestmark = pytest.mark.integration

BUILDER = f"unix://{STATE / 'engines' / 'builder' / 'docker.sock'}"
REAL_IMAGE = "jupyterhub-gpu/pytorch:2.8.0-cuda12.8-pypi"  # the catalog's pytorch-...-pypi


def _real_image_built() -> bool:
    found = subprocess.run(
        ["docker", "-H", BUILDER, "image", "inspect", REAL_IMAGE],
        capture_output=True,
        check=False,
    )
    return found.returncode == 0


needs_real_image = pytest.mark.skipif(
    not _real_image_built(),
    reason=f"{REAL_IMAGE} is not on the builder: its smallest run needs that real 7.62 GB "
    "image, a multi-GB build from PyPI (benchmarks/real_images.py), not a smoke test",
)


def test_accounting_smoke() -> None:
    """SQLite and a throw-away PostgreSQL server (tests/support/postgres.py)."""
    if not (TRACES / "alibaba-gpu-v2023").is_dir():
        pytest.skip(f"the shared traces are not at {TRACES}")
    out = run_benchmark("accounting").result()
    keys = [
        f"{what}_{db}"
        for what in (
            "report_month_by_group_s",
            "intervals_month_s",
            "aggregate_month_s",
            "report_year_by_group_monthly_s",
            "insert_s",
        )
        for db in ("sqlite", "postgres")
    ]
    keys += ["db_bytes_sqlite", "db_bytes_postgres", "table_bytes_postgres", "allocations"]
    keys += ["month_intervals", "month_report", "reports_agree", "machine"]
    assert not missing(keys, out), sorted(out)
    assert out["allocations"] == 2000 and out["reports_agree"] is True


def test_spawn_smoke(engines: list[Engine]) -> None:
    out = run_benchmark("spawn", timeout=300).result()
    keys = ["ratio_p50", "ratio_p90", "concurrent10_max_s", "stock_concurrent10_max_s"]
    for side in ("gpu", "stock"):
        keys += [f"{side}_spawner_p50_s", f"{side}_spawner_p90_s"]
        keys += [f"{side}_concurrent_{k}" for k in ("p50_s", "p90_s", "max_per_round_s")]
        keys += [f"{side}_hub_cpu_per_spawn_p50_s", f"{side}_hub_cpu_concurrent_p50_s"]
    assert not missing([*keys, "samples", "config", "machine"], out), sorted(out)
    assert out["config"]["concurrent"] == 2
    assert len(out["samples"]["gpu"]["concurrent"][0]) == 2


def test_save_image_smoke(engines: list[Engine]) -> None:
    out = run_benchmark("save_image", timeout=300).result()
    keys = ["save_p50_s", "save_s", "phases_p50_s", "warmup_s", "added_bytes"]
    assert not missing([*keys, "packages_bytes", "added_over_packages"], out), sorted(out)
    assert set(out["phases_p50_s"]) == {"fetch", "build", "push"}
    assert len(out["save_s"]) == 1 and out["added_bytes"] > 0


def test_queue_load_smoke(engines: list[Engine]) -> None:
    out = run_benchmark("queue_load", "--no-cluster-up", timeout=300).result()
    keys = ["api_p50_ms", "api_p95_ms", "api_p99_ms", "api_max_ms", "api_mean_ms"]
    keys += ["read_p99_ms", "requests", "errors", "error_status", "queued", "queued_end"]
    keys += ["running", "running_end", "duration_s", "target_met", "by_kind", "hub_side"]
    keys += ["hub_cpu_pct", "machine_busy_pct", "send_lag_max_ms", "culler_rounds"]
    keys += ["culler_servers_judged", "hub_log_warnings", "hub_log_errors", "setup"]
    assert not missing([*keys, "cleanup", "config", "machine"], out), sorted(out)
    assert out["requests"] > 0 and out["queued"] == 3


@needs_real_image
def test_real_images_smoke(engines: list[Engine]) -> None:
    out = run_benchmark("real_images", timeout=600).result()
    assert not missing(("images", "builder", "base", "nproc"), out)
    (image,) = out["images"].values()
    assert not missing(("image", "build", "size_bytes", "push", "check"), image)
    assert image["check"]["ok"]


@needs_real_image
def test_time_to_lab_smoke(engines: list[Engine]) -> None:
    out = run_benchmark("time_to_lab", timeout=600).result()
    keys = ["local_p50_s", "local_p95_s", "cold_pull_p50_s", "prepull_p50_s"]
    keys += ["no_prepull_p50_s", "loop_stall_max_s", "api_latency_max_s", "image_size_bytes"]
    assert not missing(keys, out), sorted(out)
    assert out["local_p50_s"] is not None and out["cold_pull_p50_s"] is None


def test_suspend_smoke(engines: list[Engine]) -> None:
    """A Jupyter server's kernel (x = 42 and a 16 MiB array) is checkpointed on node-b,
    removed, restored on node-c, and answers the same (issue 35's suspend spike)."""
    out = run_benchmark("suspend", timeout=300).result()
    keys = ["array_mib", "checkpoint_s", "checkpoint_mib", "restore_s", "state_kept"]
    keys += ["kernel_answer_after_restore_s", "from_node", "to_node", "criu", "kernel"]
    assert not missing(keys, out), sorted(out)
    assert out["array_mib"] == 16 and (out["from_node"], out["to_node"]) == ("node-b", "node-c")
    assert out["before"]["out"].startswith("42 "), out["before"]
    assert out["after"] == out["before"], (out["before"], out["after"])  # same kernel id too
    assert out["state_kept"] is True
    assert out["checkpoint_mib"] >= 16  # the array was written out, not left behind


def test_jobs_smoke(engines: list[Engine]) -> None:
    out = run_benchmark("jobs", timeout=400).result()
    keys = ["submit_to_running_p50_s", "jobs_submitted", "jobs_completed", "jobs_lost"]
    keys += ["preempted", "preempted_checkpointed", "double_starts", "hub_restart_s", "config"]
    assert not missing(keys, out), sorted(out)
    assert out["jobs_submitted"] >= 8 and out["jobs_unfinished"] == 0, out
    assert out["double_starts"] == 0 and out["preempted_checkpointed"] == out["preempted"] >= 1
