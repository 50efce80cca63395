"""The declared inventory format: valid files load, bad ones name the entry and field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.edges.probe import DeclaredProbe
from jupyterhub_gpu.errors import ConfigError, InventoryError
from jupyterhub_gpu.wire.declared_inventory import dump_inventory, parse_inventory

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"


def test_example_cluster_loads_and_round_trips() -> None:
    nodes = load_inventory_file(DATA)
    assert [n.name for n in nodes] == ["gpu-a", "gpu-b", "gpu-c"]
    a100 = nodes[2].gpus[0]
    assert a100.compute_capability == (8, 0) and a100.memory_mib == 81920
    assert parse_inventory(dump_inventory(nodes)) == [
        type(n)(n.name, n.driver_version, n.gpus, n.cuda_driver_version, n.labels) for n in nodes
    ]


def _base() -> dict:
    return yaml.safe_load(DATA.read_text())


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (
            lambda d: d["nodes"][0]["gpus"][1].update(memory_mib="abc"),
            "nodes[0] (gpu-a).gpus[1].memory_mib",
        ),
        (lambda d: d["nodes"][1]["gpus"][0].update(uuid="1234"), "gpus[0].uuid"),
        (
            lambda d: d["nodes"][1]["gpus"][0].update(compute_capability="sm_61"),
            "compute_capability",
        ),
        (lambda d: d["nodes"][0].update(driver_version="latest"), "driver_version"),
        (lambda d: d["nodes"][0]["gpus"][0].pop("model"), "gpus[0].model: is required"),
        (lambda d: d["nodes"][0]["gpus"][0].update(colour="red"), "unknown field"),
        (
            lambda d: d["nodes"][2]["gpus"][1].update(uuid=d["nodes"][0]["gpus"][0]["uuid"]),
            "appears on",
        ),
        (lambda d: d["nodes"][2].update(name="gpu-a"), "appears twice"),
        (lambda d: d["nodes"][0]["gpus"][1].update(index=0), "indices must be unique"),
        (lambda d: d["nodes"][0]["gpus"][0].update(utilization_pct=140), "0-100"),
        (lambda d: d.pop("nodes"), "'nodes' list"),
    ],
)
def test_bad_inventory_names_entry_and_field(mutate, fragment: str) -> None:
    data = copy.deepcopy(_base())
    mutate(data)
    with pytest.raises(InventoryError) as e:
        parse_inventory(data, "cluster.yaml")
    assert fragment in str(e.value)
    assert str(e.value).startswith("cluster.yaml")


def test_declared_probe_reads_one_node_and_follows_edits(tmp_path: Path) -> None:
    f = tmp_path / "inv.yaml"
    data = _base()
    f.write_text(yaml.safe_dump(data))
    probe = DeclaredProbe(f, "gpu-b")
    assert len(probe.read().gpus) == 4
    data["nodes"][1]["gpus"].pop()
    f.write_text(yaml.safe_dump(data))
    import os

    os.utime(f, (1, 1))  # a different mtime, whatever the clock's resolution
    assert len(probe.read().gpus) == 3
    with pytest.raises(ConfigError, match="no node named"):
        DeclaredProbe(f, "gpu-z").read()
    with pytest.raises(ConfigError, match="name the node"):
        DeclaredProbe(f).read()
