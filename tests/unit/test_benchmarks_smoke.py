"""Every pure benchmark (no Docker, no hub) runs at its smallest scale (``--smoke``) and
prints the JSON keys benchmarks/README.md documents for it (issue 31: benchmarks are code
too). The benchmarks that need the test cluster, a hub or PostgreSQL are in
tests/integration/test_benchmarks_smoke_cluster.py."""

from __future__ import annotations

import pytest

from tests.support.benchmarks import TRACES, missing, run_benchmark

pytestmark = pytest.mark.unit

needs_traces = pytest.mark.skipif(
    not (TRACES / "alibaba-gpu-v2023").is_dir() or not (TRACES / "alibaba-genai-v2026").is_dir(),
    reason=f"the shared traces are not at {TRACES} (the replay benchmarks read them)",
)

POLICY_KEYS = (
    "wait_mean_s",
    "wait_p95_s",
    "wait_p99_s",
    "waited_share",
    "oversized_share",
    "allocation_rate",
    "jain_fairness",
)


@needs_traces
def test_placement_smoke() -> None:
    out = run_benchmark("placement").result()
    assert not missing(
        (
            "latency_1000x8_median_ms",
            "latency_1000x8_p99_ms",
            "queue_decision_200_ms",
            "policies",
            "ratio_to_first_fit",
            "replay",
            "shares_wait_mean_ratio",
            "shares_wait_p95_ratio",
            "shares_over_memory",
            "share_pods_wait_mean_ratio",
            "fractional_pods_wait_mean_ratio",
        ),
        out,
    ), sorted(out)
    policies = out["policies"]
    assert set(policies) == {"ours", "first_fit", "random", "spread", "best_fit", "fairshare"}
    for name, metrics in policies.items():
        assert not missing(POLICY_KEYS, metrics), (name, metrics)
        assert not missing(POLICY_KEYS, out["ratio_to_first_fit"][name])
    assert not missing(("count", "seed", "weights"), out["replay"]["groups"])
    (run,) = out["replay"]["runs"]  # --smoke: one sub-cluster
    assert run["pods"] > 0 and "group_work_share" in run


@needs_traces
def test_placement_variants_smoke() -> None:
    out = run_benchmark("placement_variants").result()
    assert out["seeds"] == [1]
    assert {"ours", "H_k0.5", "H_k2_casc", "fs_spread"} <= set(out["policies"])
    for name, metrics in out["policies"].items():
        assert not missing((*POLICY_KEYS, "wait_mean_by_size_s"), metrics), (name, metrics)
        assert set(metrics["wait_mean_by_size_s"]) == {"1", "2-4", "8"}
    assert sum(out["pods_by_size"].values()) > 0


@needs_traces
def test_culling_smoke() -> None:
    out = run_benchmark("culling").result()
    for policy in ("ours", "stock", "gpu_threshold"):
        assert set(out[policy]) == {"10", "30", "60"}, policy
        for cell in out[policy].values():
            assert not missing(("reclaimed_gpu_hours", "busy_gpu_minutes_killed"), cell)
    assert out["summary"]["sessions"] == 12  # --smoke: the trace's first 12 sessions


def test_dashboard_smoke() -> None:
    out = run_benchmark("dashboard").result()  # exits 1 when a target is missed
    assert not missing(("first_paint_ms", "update_ms", "targets_met", "payload_ms"), out)
    assert out["nodes"] == 4 and out["servers"] > 0
