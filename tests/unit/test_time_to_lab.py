"""The pure parts of benchmarks/time_to_lab.py (the benchmark itself is run by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

from jupyterhub_gpu.edges.adminfiles import load_catalog
from jupyterhub_gpu.wire.catalog_file import parse_catalog

ROOT = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "jhgpu_time_to_lab", ROOT / "benchmarks" / "time_to_lab.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_percentiles_are_nearest_rank() -> None:
    ttl = _module()
    assert ttl.pct([], 50) is None
    assert ttl.pct([3.0], 95) == 3.0
    xs = [5.21, 4.7, 4.42, 194.88, 193.25, 184.59]
    assert ttl.pct(xs, 50) == 5.21 and ttl.pct(xs, 95) == 194.88


def test_loop_lag_is_read_within_the_window(tmp_path: Path) -> None:
    ttl = _module()
    f = tmp_path / "lag.txt"
    f.write_text("100.000 0.0200\n105.000 0.7000\n110.000 0.1500\n")
    assert ttl.loop_lag_max(f, 104, 111) == (0.7, 1)
    assert ttl.loop_lag_max(f, 106, 111) == (0.15, 0)
    assert ttl.loop_lag_max(tmp_path / "none.txt", 0, 1) == (0.0, 0)


def test_summary_names_the_issue_keys_and_takes_the_worst_stall() -> None:
    ttl = _module()
    results = {
        "scenarios": {
            "local": {"p50_s": 5.0, "p95_s": 8.0, "loop_stall_max_s": 0.02},
            "no_prepull": {"p50_s": 5.2, "p95_s": 195.0, "loop_stall_max_s": 0.16},
        }
    }
    s = ttl.summary(results)
    for key in (
        "local_p50_s",
        "cold_pull_p50_s",
        "prepull_p50_s",
        "prepull_p95_s",
        "no_prepull_p50_s",
        "loop_stall_max_s",
        "browser_to_lab_s",
        "browser_torch_versions",
        "spawned_versions",
    ):
        assert key in s
    assert s["local_p50_s"] == 5.0 and s["cold_pull_p50_s"] is None
    assert s["loop_stall_max_s"] == 0.16


def test_the_benchmark_catalog_and_inventory_are_valid(tmp_path: Path) -> None:
    ttl = _module()
    entry = load_catalog(ROOT / "images" / "catalog.yaml").get(ttl.SLUG)
    assert entry is not None
    doc = ttl.catalog(entry, "10.250.0.1:5052/" + entry.image)
    bench = parse_catalog(yaml.safe_load(yaml.safe_dump(doc))).get(ttl.BENCH_SLUG)
    assert bench is not None and bench.image.startswith("10.250.0.1:5052/jupyterhub-gpu/")
    assert (bench.framework_version, bench.cuda_version) == ("2.8.0", "12.8")
    inv = ttl.inventory([], 8)
    assert inv == {"nodes": []}


def test_the_notebook_output_must_name_the_entrys_versions() -> None:
    ttl = _module()
    entry = load_catalog(ROOT / "images" / "catalog.yaml").get(ttl.SLUG)
    assert entry is not None
    assert ttl.names_versions("2.8.0+cu128 12.8\n", entry)
    assert ttl.names_versions("2.8.0 12.8", entry)
    assert not ttl.names_versions("2.8.0+cpu None", entry)
    assert not ttl.names_versions("2.7.1+cu126 12.6", entry)
    assert not ttl.names_versions("", entry)
    tf = load_catalog(ROOT / "images" / "catalog.yaml").get("tensorflow-2.20-cuda12.5-pypi")
    assert tf is not None
    assert ttl.names_versions("2.20.0 12.5.1", tf)  # TensorFlow's build info: 12.5.1
    assert not ttl.names_versions("2.20.0 12.50", tf)
    assert not ttl.names_versions("2.19.0 12.5.1", tf)
    assert set(ttl.VERSION_CODE) == {"pytorch", "tensorflow"}
