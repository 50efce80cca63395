"""The cluster payload's one typed decoder (``wire/cluster.py``): what the hub builds
comes back typed and, encoded again, byte for byte the same; a malformed payload is
refused with the bad field named."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.dashboard.payload import ClusterPayload, ReservationEntry
from jupyterhub_gpu.core.dashboard.view import Viewer, redact
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.errors import BadPayload
from jupyterhub_gpu.wire.cluster import (
    ServerInfo,
    build_payload,
    decode_payload,
    payload_json,
    queue_entries,
    reservation_entry,
)
from jupyterhub_gpu.wire.nodes_file import NodeSpec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
RTX, A100 = "NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-40GB"


def built(**kw: Any) -> dict[str, Any]:
    """The hub's payload with every kind of entry: held, orphaned, free, foreign, broken,
    offline and drained GPUs, a GPU and a CPU server, a queue and reservations."""
    a = NodeState(
        NodeInventory(
            "node-a",
            "550.54.15",
            (
                GPU("GPU-a0", 0, RTX, 24576, (8, 6), utilization_pct=87.25, temperature_c=71.26),
                GPU("GPU-a1", 1, RTX, 24576, (8, 6), memory_used_mib=900),
                GPU("GPU-a2", 2, RTX, 24576, (8, 6), process_containers=("theirs",)),
                GPU("GPU-a3", 3, RTX, 24576, (8, 6), healthy=False),
            ),
            cuda_driver_version="12.4",
        )
    )
    b = NodeState(
        NodeInventory("node-b", "535.1", (GPU("GPU-b0", 0, A100, 40960, (8, 0)),)),
        reachable=False,
    )
    c = NodeState(
        NodeInventory("node-c", "535.1", (GPU("GPU-c0", 0, A100, 40960, (8, 0)),)),
        schedulable=False,
    )
    snapshot = ClusterSnapshot((a, b, c), allocations={"GPU-a0": "alice/train", "GPU-a3": "bob/"})
    specs = [
        NodeSpec("node-a", "unix:///x", "10.0.0.1", labels={"rack": "r1"}),
        NodeSpec("node-b", "unix:///x", "10.0.0.2"),
        NodeSpec("node-c", "unix:///x", "10.0.0.3", drain=True),
    ]
    servers = [
        ServerInfo(
            "alice",
            "train",
            "node-a",
            ("GPU-a0",),
            "demo",
            "Demo",
            NOW - timedelta(hours=2),
            NOW - timedelta(minutes=3),
            True,
            cull_at=NOW + timedelta(hours=1),
        ),
        ServerInfo("carol", "", "", (), "cpu", "", None, None, False, "spawn"),
    ]
    waiting = [
        SimpleNamespace(
            id="dave/big",
            user="dave",
            group="ml",
            request=SimpleNamespace(gpu_count=2, allowed_models=frozenset({A100})),
            enqueued_at=(NOW - timedelta(minutes=10)).timestamp(),
        ),
        SimpleNamespace(
            id="erin/",
            user="erin",
            group="",
            request=SimpleNamespace(gpu_count=1, allowed_models=None),
            enqueued_at=NOW.timestamp(),
        ),
    ]
    reservations = [
        SimpleNamespace(
            id="r1",
            group="course",
            nodes=frozenset({"node-c"}),
            gpu_uuids=frozenset(),
            model=None,
            count=0,
            start=NOW.timestamp(),
            end=(NOW + timedelta(hours=4)).timestamp(),
        ),
        SimpleNamespace(
            id="r2",
            group="ml",
            nodes=frozenset(),
            gpu_uuids=frozenset(),
            model=A100,
            count=1,
            start=NOW.timestamp(),
            end=(NOW + timedelta(days=1)).timestamp(),
        ),
    ]
    return build_payload(
        snapshot,
        specs,
        servers,
        {"node-b": "new PSU"},
        now=NOW,
        named_servers=True,
        named_server_limit=3,
        fresh=False,
        orphans=frozenset({"GPU-a3"}),
        queue=queue_entries(waiting, {"dave/big": (1, "about 2 h")}),
        reservations=[reservation_entry(r) for r in reservations],
        **kw,
    )


# ---------------------------------------------------------------------- round trip
def test_the_hubs_payload_comes_back_typed_and_encodes_to_the_same_bytes() -> None:
    sent = json.dumps(built())
    payload = decode_payload(json.loads(sent))
    assert json.dumps(payload_json(payload)) == sent  # key order and all
    alice = payload.servers[0]
    assert alice.started == NOW - timedelta(hours=2) and alice.started.tzinfo is not None
    assert alice.cull_at == NOW + timedelta(hours=1) and payload.servers[1].started is None
    a0 = payload.nodes[0].gpus[0]
    assert (a0.utilization_pct, a0.temperature_c, a0.holder) == (87.2, 71.3, "alice/train")
    statuses = [g.status for n in payload.nodes for g in n.gpus]
    assert statuses == ["held", "free", "foreign", "held", "offline", "drained"]
    assert payload.nodes[0].gpus[3].orphan and payload.nodes[0].labels == {"rack": "r1"}
    assert [n.state for n in payload.nodes] == ["up", "down", "drained"]
    assert payload.queue[0].models == (A100,) and payload.queue[0].position == 1
    assert payload.queue[1].models is None and payload.queue[1].since == NOW
    r1 = payload.reservations[0]
    assert (r1.nodes, r1.start, r1.user, r1.note) == (("node-c",), NOW, None, None)
    assert payload.totals.free == 1 and not payload.fresh and payload.message == ""


def test_the_hubs_message_and_a_reservation_for_one_person_come_back_too() -> None:
    raw = built()
    raw["message"] = "The hub has not read its nodes yet."
    raw["reservations"].append({**raw["reservations"][0], "user": "carol", "note": "thesis"})
    raw["nodes"][0]["unknown_key"] = "ignored"  # a newer hub's field: not read
    payload = decode_payload(raw)
    assert payload.message == "The hub has not read its nodes yet."
    assert (payload.reservations[-1].user, payload.reservations[-1].note) == ("carol", "thesis")
    del raw["nodes"][0]["unknown_key"]
    assert json.dumps(payload_json(payload)) == json.dumps(raw)


def test_a_redacted_payload_says_what_is_hidden_and_names_no_one_else() -> None:
    raw = built()
    raw["reservations"].append({**raw["reservations"][0], "user": "carol", "note": "thesis"})
    visible = payload_json(redact(decode_payload(raw), Viewer("erin"), show_names=False))
    text = json.dumps(visible)
    for other in ("alice", "carol", "dave", "thesis", "about 2 h"):
        assert other not in text, other
    assert visible["servers"][0]["hidden"] is True and visible["servers"][0]["key"] == ""
    assert visible["nodes"][0]["gpus"][0]["hidden_holder"] is True
    assert [q.get("hidden", False) for q in visible["queue"]] == [True, False]  # erin's own
    assert visible["queue"][0]["estimate"] == "" and visible["queue"][1]["user"] == "erin"
    assert [r.get("hidden", False) for r in visible["reservations"]] == [False, False, True]
    assert visible["reservations"][2]["note"] == ""  # a group's stays; a person's is gone


def test_the_dashboards_empty_payload_is_a_payload_too() -> None:
    empty = ClusterPayload(message="reading")
    assert decode_payload(json.loads(json.dumps(payload_json(empty)))) == empty
    kept = ReservationEntry("r", group="g")
    assert decode_payload(payload_json(ClusterPayload(reservations=(kept,)))).reservations == (
        kept,
    )


# ---------------------------------------------------------------------- refused
def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets ``path`` (``nodes.0.gpus.1.status``) to ``value``."""

    def change(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = raw
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[int(last) if isinstance(target, list) else last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = raw
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        del target[last]

    return change


MALFORMED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("version", _set("version", 2), "version must be 1, got 2"),
    ("no-nodes", _drop("nodes"), "nodes is missing"),
    ("nodes-object", _set("nodes", {}), "nodes must be a list"),
    ("node-list", _set("nodes.0", []), "nodes[0] must be a JSON object"),
    ("node-state", _set("nodes.0.state", "sideways"), "nodes[0].state must be one of up,"),
    ("node-name", _set("nodes.1.name", None), "nodes[1].name must be a string"),
    ("label", _set("nodes.0.labels", {"rack": 1}), "nodes[0].labels.rack must be a string"),
    ("reachable", _set("nodes.0.reachable", "yes"), "nodes[0].reachable must be true or"),
    ("no-uuid", _drop("nodes.0.gpus.1.uuid"), "nodes[0].gpus[1].uuid is missing"),
    ("status", _set("nodes.0.gpus.1.status", "lost"), "nodes[0].gpus[1].status must be one"),
    ("util-high", _set("nodes.0.gpus.0.utilization_pct", 100.5), "from 0 to 100, got 100.5"),
    ("util-text", _set("nodes.0.gpus.0.utilization_pct", "7"), "gpus[0].utilization_pct must"),
    ("util-nan", _set("nodes.0.gpus.0.utilization_pct", float("nan")), "utilization_pct must"),
    ("temperature", _set("nodes.0.gpus.0.temperature_c", "hot"), "gpus[0].temperature_c must"),
    ("index", _set("nodes.0.gpus.2.index", -1), "nodes[0].gpus[2].index must be an integer >="),
    ("memory-bool", _set("nodes.0.gpus.0.memory_mib", True), "gpus[0].memory_mib must be an"),
    ("healthy", _set("nodes.0.gpus.0.healthy", "yes"), "gpus[0].healthy must be true, false or"),
    ("holder", _set("nodes.0.gpus.0.holder", 3), "nodes[0].gpus[0].holder must be a string or"),
    ("started", _set("servers.0.started", "yesterday"), "servers[0].started must be an ISO"),
    ("server-gpu", _set("servers.0.gpus", ["GPU-a0", 3]), "servers[0].gpus[1] must be a string"),
    ("ready", _set("servers.1.ready", None), "servers[1].ready must be true or false"),
    ("free", _set("totals.free", -1), "totals.free must be an integer >= 0, got -1"),
    ("totals", _set("totals", []), "totals must be a JSON object"),
    ("model-total", _set("models.0.total", "3"), "models[0].total must be an integer"),
    ("position", _set("queue.0.position", 0), "queue[0].position must be an integer >= 1"),
    ("models", _set("queue.0.models", A100), "queue[0].models must be a list of strings"),
    ("since", _drop("queue.1.since"), "queue[1].since is missing"),
    ("from", _set("reservations.0.from", 1767225600), "reservations[0].from must be an ISO"),
    ("note", _set("reservations.1.note", 5), "reservations[1].note must be a string"),
    ("count", _set("reservations.1.count", 1.5), "reservations[1].count must be an integer"),
    ("message", _set("message", 3), "message must be a string"),
    ("fresh", _set("fresh", "no"), "fresh must be true or false"),
    ("generated", _drop("generated_at"), "generated_at is missing"),
]


@pytest.mark.parametrize(
    ("change", "named"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_a_malformed_payload_is_refused_with_the_field_named(
    change: Callable[[dict[str, Any]], None], named: str
) -> None:
    raw = copy.deepcopy(built())
    change(raw)
    with pytest.raises(BadPayload) as refused:
        decode_payload(raw)
    assert str(refused.value).startswith("cluster payload: ")
    assert named in str(refused.value)


@pytest.mark.parametrize("raw", [None, [], "{}", 1])
def test_what_is_not_an_object_is_refused(raw: object) -> None:
    with pytest.raises(BadPayload, match="the payload must be a JSON object"):
        decode_payload(raw)


def test_a_bad_value_is_shown_short() -> None:
    raw = built()
    raw["hub_prefix"] = ["x"] * 1000
    with pytest.raises(BadPayload, match=r"hub_prefix must be a string, got a list of 1000$"):
        decode_payload(raw)
    raw = built()
    raw["servers"][0]["pending"] = 10**60
    with pytest.raises(BadPayload) as refused:
        decode_payload(raw)
    assert len(str(refused.value)) < 120 and str(refused.value).endswith("...")
