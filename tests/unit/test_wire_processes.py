"""The agent wire's per-process field (issue #26): round trip, old agents, hostile input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyterhub_gpu.core.inventory import GpuProcess
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.errors import InventoryError, ProbeError
from jupyterhub_gpu.wire.agent import (
    MAX_PROCESSES,
    inventory_to_json,
    parse_agent_body,
    parse_live_update,
)

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).parent.parent / "data" / "cluster-hetero.yaml"
A, B = "a" * 64, "b" * 64
PROCS = (
    GpuProcess(4242, A, 3100, 35.0),
    GpuProcess(4243, B, None, None),
    GpuProcess(17, "", 200, 5.0),
)


def body_with(processes: Any, **extra: Any) -> bytes:
    node = load_inventory_file(CLUSTER)[0]
    data = inventory_to_json(node, 1.0)
    data["gpus"][0]["processes"] = processes
    data["gpus"][0].update(extra)
    return json.dumps(data).encode()


def test_processes_round_trip_and_old_answers_have_none() -> None:
    node = load_inventory_file(CLUSTER)[0]
    gpu = dataclasses.replace(node.gpus[0], processes=PROCS, process_containers=("", A, B))
    sent = dataclasses.replace(node, gpus=(gpu, *node.gpus[1:]))
    got, _ = parse_agent_body(json.dumps(inventory_to_json(sent, 1.0)).encode())
    assert got == sent
    old = inventory_to_json(node, 1.0)
    assert "processes" not in old["gpus"][0]  # an older hub sees the answer it knows
    parsed, _ = parse_agent_body(json.dumps(old).encode())
    assert parsed.gpus[0].processes is None  # "no per-process data", not "no processes"


def test_process_containers_follow_processes_when_not_sent() -> None:
    node = load_inventory_file(CLUSTER)[0]
    data = inventory_to_json(node, 1.0)
    del data["gpus"][0]["process_containers"]
    data["gpus"][0]["processes"] = [{"pid": 1, "container": A}, {"pid": 2, "container": ""}]
    got, _ = parse_agent_body(json.dumps(data).encode())
    assert got.gpus[0].process_containers == ("", A)
    assert got.gpus[0].processes == (GpuProcess(1, A), GpuProcess(2, ""))


@pytest.mark.parametrize(
    ("processes", "message"),
    [
        ("all of them", "gpus[0].processes must be a list"),
        ([{"container": A}], "gpus[0].processes[0].pid is missing"),
        ([{"pid": 0}], "processes[0].pid must be an integer >= 1"),
        ([{"pid": 2**40}], "processes[0].pid must be at most"),
        ([{"pid": True}], "processes[0].pid must be an integer"),
        ([{"pid": 1, "container": "abc"}], "64 lowercase hex"),
        ([{"pid": 1, "container": A.upper()}], "64 lowercase hex"),
        ([{"pid": 1, "container": 7}], "64 lowercase hex"),
        ([{"pid": 1, "memory_mib": -1}], "processes[0].memory_mib must be an integer >= 0"),
        ([{"pid": 1, "utilization_pct": 101}], "processes[0].utilization_pct must be a number"),
        ([{"pid": 1}, {"pid": 1}], "a pid is listed once per GPU; repeated: [1]"),
        (["x"], "processes[0] must be a JSON object"),
    ],
)
def test_bad_processes_are_refused_naming_the_entry(processes: Any, message: str) -> None:
    with pytest.raises(ProbeError, match="invalid agent answer") as e:
        parse_agent_body(body_with(processes))
    assert message in str(e.value)


def test_a_million_processes_are_refused_by_count_not_read() -> None:
    many = [{"pid": i + 1} for i in range(MAX_PROCESSES + 1)]
    with pytest.raises(ProbeError, match=f"more than {MAX_PROCESSES}"):
        parse_agent_body(body_with(many))
    huge = b'{"node": "x", "gpus": [{"processes": [' + b'{"pid": 1},' * 10**6
    with pytest.raises(ProbeError, match="not JSON"):  # truncated garbage: refused, bounded
        parse_agent_body(huge)


def test_live_update_sets_processes_and_their_containers() -> None:
    got = parse_live_update({"processes": [{"pid": 9, "container": A, "memory_mib": 7000}]})
    assert got == {
        "processes": (GpuProcess(9, A, 7000, None),),
        "process_containers": (A,),
    }
    assert parse_live_update({"processes": None}) == {"processes": None}
    with pytest.raises(ValueError, match="64 lowercase hex"):
        parse_live_update({"processes": [{"pid": 9, "container": "nope"}]})


def test_declared_inventory_declares_processes(tmp_path: Path) -> None:
    data = yaml.safe_load(CLUSTER.read_text())
    data["nodes"][0]["gpus"][0]["processes"] = [
        {"pid": 4242, "container": A, "memory_mib": 3100, "utilization_pct": 35},
        {"pid": 17, "container": "", "memory_mib": 200},
    ]
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    gpu = load_inventory_file(path)[0].gpus[0]
    assert gpu.processes == (GpuProcess(4242, A, 3100, 35.0), GpuProcess(17, "", 200, None))
    assert gpu.process_containers == ("", A)
    data["nodes"][0]["gpus"][0]["processes"] = [{"pid": "4242"}]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InventoryError, match=r"gpus\[0\]: processes\[0\]\.pid must be an integer"):
        load_inventory_file(path)
