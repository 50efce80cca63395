"""The agent's JSON contract: round trips, and clear errors for bad answers and updates."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.wire.agent import (
    DEFAULT_MAX_GPUS,
    LIVE_FIELDS,
    agent_error_text,
    inventory_from_json,
    inventory_to_json,
    parse_agent_body,
    parse_live_update,
    snapshot_time,
)

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).parent.parent / "data" / "cluster-hetero.yaml"


def busy_node() -> NodeInventory:
    node = load_inventory_file(CLUSTER)[0]
    first = dataclasses.replace(
        node.gpus[0],
        utilization_pct=87.5,
        memory_used_mib=20000,
        temperature_c=71.0,
        healthy=None,
        process_containers=("", "c" * 64),
    )
    return dataclasses.replace(node, gpus=(first, *node.gpus[1:]))


def answer() -> dict[str, Any]:
    return json.loads(json.dumps(inventory_to_json(busy_node(), 1767225600.5)))


@pytest.mark.parametrize("node", load_inventory_file(CLUSTER), ids=lambda n: n.name)
def test_round_trip_through_json_text(node: NodeInventory) -> None:
    data = json.loads(json.dumps(inventory_to_json(node, 1.0)))
    assert inventory_from_json(data) == node


def test_round_trip_keeps_live_values() -> None:
    assert inventory_from_json(answer()) == busy_node()


def test_answer_shape() -> None:
    data = answer()
    assert set(data) == {"node", "driver_version", "cuda_driver_version", "labels", "time", "gpus"}
    assert data["node"] == "gpu-a"
    assert data["labels"] == {"site": "lab", "rack": "r1"}
    assert data["time"] == 1767225600.5
    gpu = data["gpus"][0]
    assert gpu == {
        "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000000",
        "index": 0,
        "model": "NVIDIA GeForce RTX 3090",
        "memory_mib": 24576,
        "memory_used_mib": 20000,
        "utilization_pct": 87.5,
        "temperature_c": 71.0,
        "compute_capability": "8.6",
        "healthy": None,
        "process_containers": ["", "c" * 64],
        "topology_group": "pcie0",
    }


def test_unknown_fields_are_ignored_for_newer_agents() -> None:
    data = answer()
    data["fan_speed"] = 40
    data["gpus"][0]["power_w"] = 250.0
    assert inventory_from_json(data) == busy_node()


def test_optional_fields_may_be_missing() -> None:
    data = {
        "node": "n",
        "driver_version": "550.54.15",
        "gpus": [
            {
                "uuid": "GPU-1",
                "index": 0,
                "model": "M",
                "memory_mib": 1,
                "compute_capability": "7.5",
            }
        ],
    }
    node = inventory_from_json(data)
    assert node.cuda_driver_version is None
    assert node.labels == {}
    assert node.gpus[0] == GPU("GPU-1", 0, "M", 1, (7, 5), healthy=None)


def _set(path: str, value: Any) -> dict[str, Any]:
    data = answer()
    target: Any = data
    *parents, last = path.split(".")
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    key: Any = int(last) if last.isdigit() else last
    if value is KeyError:
        del target[key]
    else:
        target[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "the answer must be a JSON object"),
        (_set("node", KeyError), "answer.node is missing"),
        (_set("node", ""), "node must be a non-empty string"),
        (_set("driver_version", "new"), "driver_version must be a dotted version"),
        (_set("cuda_driver_version", 12.4), "cuda_driver_version must be a non-empty string"),
        (_set("labels", {"a": 1}), "labels must map strings to strings"),
        (_set("gpus", {}), "gpus must be a list"),
        (_set("gpus.0", "GPU-1"), r"gpus\[0\] must be a JSON object"),
        (_set("gpus.1.uuid", KeyError), r"gpus\[1\].uuid is missing"),
        (_set("gpus.0.index", -1), r"gpus\[0\].index must be an integer >= 0"),
        (_set("gpus.0.index", True), r"gpus\[0\].index must be an integer"),
        (_set("gpus.0.memory_mib", 0), r"gpus\[0\].memory_mib must be an integer >= 1"),
        (_set("gpus.0.memory_mib", "24GB"), r"gpus\[0\].memory_mib must be an integer"),
        (_set("gpus.0.memory_used_mib", 1.5), r"gpus\[0\].memory_used_mib must be an integer"),
        (_set("gpus.0.utilization_pct", 101), r"gpus\[0\].utilization_pct must be a number"),
        (_set("gpus.0.utilization_pct", "50"), r"gpus\[0\].utilization_pct must be a number"),
        (_set("gpus.0.temperature_c", "hot"), r"gpus\[0\].temperature_c must be a number"),
        (_set("gpus.0.healthy", "yes"), r"gpus\[0\].healthy must be true, false or null"),
        (_set("gpus.0.compute_capability", "sm_86"), r"gpus\[0\].compute_capability"),
        (_set("gpus.0.compute_capability", 8.6), r"gpus\[0\].compute_capability"),
        (_set("gpus.0.process_containers", "abc"), r"gpus\[0\].process_containers must be a list"),
        (_set("gpus.0.process_containers", [1]), r"gpus\[0\].process_containers must be a list"),
        (_set("gpus.0.topology_group", 3), r"gpus\[0\].topology_group must be a non-empty string"),
        (
            _set("gpus.1.uuid", "GPU-aaaaaaaa-0000-4000-8000-000000000000"),
            "GPU uuid values must be unique",
        ),
        (_set("gpus.1.index", 0), "GPU index values must be unique"),
    ],
)
def test_bad_answers_name_the_field(data: Any, message: str) -> None:
    with pytest.raises(ProbeError, match=f"^invalid agent answer: {message}"):
        inventory_from_json(data)


def test_nan_is_rejected() -> None:
    with pytest.raises(ProbeError, match="utilization_pct"):
        inventory_from_json(_set("gpus.0.utilization_pct", float("nan")))


def test_validation_does_not_change_the_input() -> None:
    data = answer()
    before = copy.deepcopy(data)
    inventory_from_json(data)
    assert data == before


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"time": 12.5}, 12.5),
        ({"time": 12}, 12.0),
        ({"time": None}, None),
        ({"time": "12"}, None),
        ({"time": True}, None),
        ({"time": float("inf")}, None),
        ({}, None),
        ([], None),
    ],
)
def test_snapshot_time(data: Any, expected: float | None) -> None:
    assert snapshot_time(data) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"utilization_pct": 55}, {"utilization_pct": 55.0}),
        ({"memory_used_mib": 1024, "healthy": False}, {"memory_used_mib": 1024, "healthy": False}),
        ({"healthy": None}, {"healthy": None}),
        ({"temperature_c": None}, {"temperature_c": None}),
        ({"temperature_c": 80}, {"temperature_c": 80.0}),
        ({"process_containers": ["b", "", "b"]}, {"process_containers": ("", "b")}),
        ({"process_containers": []}, {"process_containers": ()}),
    ],
)
def test_live_update_accepts(body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert parse_live_update(body) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "the body must be a JSON object"),
        ({}, "the body must be a JSON object"),
        ([1], "the body must be a JSON object"),
        ({"model": "A100"}, r"unknown field\(s\) \['model'\]"),
        ({"utilization_pct": 101}, "utilization_pct must be a number from 0 to 100"),
        ({"utilization_pct": True}, "utilization_pct must be a number"),
        ({"memory_used_mib": -1}, "memory_used_mib must be an integer >= 0"),
        ({"healthy": "false"}, "healthy must be true, false or null"),
        ({"process_containers": "abc"}, "process_containers must be a list"),
        ({"process_containers": ["x" * 129]}, "at most 128 characters"),
        ({"temperature_c": 1000}, "temperature_c must be a number"),
    ],
)
def test_live_update_rejects_with_a_sentence(body: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_live_update(body)


def test_live_fields() -> None:
    assert set(LIVE_FIELDS) == {
        "utilization_pct",
        "memory_used_mib",
        "healthy",
        "process_containers",
        "processes",
        "temperature_c",
    }


# -- hostile bodies: what a node's root could serve the hub -----------------------------


def _text() -> str:
    return json.dumps(answer())


def _gpus(count: int) -> bytes:
    data = answer()
    gpu = data["gpus"][0]
    data["gpus"] = [{**gpu, "uuid": f"GPU-{i}", "index": i} for i in range(count)]
    return json.dumps(data).encode()


HOSTILE: dict[str, tuple[bytes, str]] = {
    "deep nesting": (
        _text()[:-1].encode() + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "JSON nested too deeply",
    ),
    "1e400": (
        _text().replace('"utilization_pct": 87.5', '"utilization_pct": 1e400').encode(),
        "the number 1e400 is out of range",
    ),
    "-1e400 in a field nobody reads": (
        _text()[:-1].encode() + b', "x": -1e400}',
        "the number -1e400 is out of range",
    ),
    "NaN": (
        _text().replace('"utilization_pct": 87.5', '"utilization_pct": NaN').encode(),
        "NaN is not a number an agent may send",
    ),
    "Infinity": (
        _text().replace('"time": 1767225600.5', '"time": Infinity').encode(),
        "Infinity is not a number an agent may send",
    ),
    "a 5000-digit integer": (
        _text().replace('"memory_mib": 24576', '"memory_mib": ' + "9" * 5000, 1).encode(),
        "an integer of 5000 digits is out of range",
    ),
    "an integer too big for a GPU": (
        _text().replace('"memory_mib": 24576', '"memory_mib": 99999999999', 1).encode(),
        r"gpus\[0\].memory_mib must be at most 16777216",
    ),
    "not UTF-8": (
        _text().encode().replace(b'"gpu-a"', b'"gpu-\xe9"'),  # Latin-1, not UTF-8
        "not UTF-8 \\(bad byte at offset 14\\)",
    ),
    "UTF-16": (_text().encode("utf-16"), "not UTF-8"),
    "not JSON": (b"<html><body>It works!</body></html>", "not JSON"),
    "empty": (b"", "not JSON"),
    "a list": (b"[]", "the answer must be a JSON object, got list"),
    "wrong type: gpus": (
        _text().replace('"gpus": [', '"gpus": {"0": [').replace("]}", "]}}", 1).encode(),
        "gpus must be a list, got dict",
    ),
    "wrong type: node": (
        _text().replace('"node": "gpu-a"', '"node": ["gpu-a"]').encode(),
        "node must be a non-empty string, got a list of 1",
    ),
    "thousands of GPUs": (_gpus(5000), f"gpus lists 5000 GPUs, more than the {DEFAULT_MAX_GPUS}"),
    "a control character in a name": (
        _text().replace("NVIDIA GeForce RTX 3090", "RTX\\nWARNING forged log line", 1).encode(),
        r"gpus\[0\].model must be printable text",
    ),
    "a lone surrogate": (
        _text().replace('"gpu-a"', '"gpu-\\ud800"').encode(),
        "node must be printable text",
    ),
    "a 10,000-character model": (
        _text().replace("NVIDIA GeForce RTX 3090", "M" * 10_000, 1).encode(),
        r"gpus\[0\].model must be at most 256 characters, got 10000",
    ),
    "too many labels": (
        json.dumps({**answer(), "labels": {f"k{i}": "v" for i in range(100)}}).encode(),
        "labels: at most 64 labels, got 100",
    ),
    "too many containers": (
        _text()
        .replace(
            '"process_containers": ["", ',
            '"process_containers": ["", ' + ", ".join(f'"c{i}"' for i in range(2000)) + ", ",
            1,
        )
        .encode(),
        r"gpus\[0\].process_containers lists 2002 containers",
    ),
}


@pytest.mark.parametrize(("body", "message"), HOSTILE.values(), ids=list(HOSTILE))
def test_hostile_bodies_are_refused_with_a_reason(body: bytes, message: str) -> None:
    with pytest.raises(ProbeError, match=f"^invalid agent answer: {message}") as e:
        parse_agent_body(body)
    text = str(e.value)
    assert len(text) < 300 and text.isprintable()  # one short log line, never the body


def test_a_good_body_parses_with_its_time() -> None:
    assert parse_agent_body(_text().encode()) == (busy_node(), 1767225600.5)


@pytest.mark.parametrize(("count", "limit", "ok"), [(3, 3, True), (4, 3, False), (1, 1, True)])
def test_the_gpu_cap_is_the_callers(count: int, limit: int, ok: bool) -> None:
    if ok:
        assert len(parse_agent_body(_gpus(count), max_gpus=limit)[0].gpus) == count
    else:
        with pytest.raises(ProbeError, match=f"more than the {limit} allowed"):
            parse_agent_body(_gpus(count), max_gpus=limit)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": "the GPUs have not been read yet"}', "the GPUs have not been read yet"),
        (b"Internal Server Error", "Internal Server Error"),
        (b"", ""),
        (b'{"error": "two\\nlines"}', "two?lines"),
        (b"\xff\xfe\x00bad", "\ufffd\ufffd?bad"),  # U+FFFD is printable
        (b'{"error": "' + b"e" * 5000 + b'"}', '{"error": "' + "e" * 186 + "..."),
        (b"[" * 3000, "[" * 197 + "..."),
    ],
)
def test_error_text_is_short_and_printable(body: bytes, expected: str) -> None:
    assert agent_error_text(body) == expected
