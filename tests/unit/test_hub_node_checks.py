"""The hub's own node checks (issue 23): what it makes of check-node's lines
(core/nodecheck.py's ``hub_verdict``, ``verdict_log``, ``next_check_in``), how the Cluster
runs them (in the background, one node at a time each, a node failing its firewall check
taking no new servers until a check passes) and how the dashboard payload shows them
(``drained_by: "check"``). The real thing on a namespaced node:
tests/integration/test_hub_node_check.py."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from traitlets.config import Config

from jupyterhub_gpu.core import nodecheck as nc
from jupyterhub_gpu.core.dashboard.view import _state_label
from jupyterhub_gpu.core.inventory import NodeInventory, NodeState
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.nodecheck import CheckSettings, remove_leftovers
from jupyterhub_gpu.errors import BadPayload, ConfigError
from jupyterhub_gpu.hub import node_checks as checks_module
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner
from jupyterhub_gpu.wire.cluster import build_payload, decode_payload, payload_json
from jupyterhub_gpu.wire.nodes_file import NodeSpec

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"
NODE = "gpu-c"
ENGINE_OK = nc.Check(NODE, "engine", True, "Docker 24.0 (API 1.43) answers")
NETWORK_OK = nc.Check(NODE, "user-network", True, "users on bridge jhgpu-users, ICC off")
FIREWALL_OK = nc.Check(NODE, "firewall", True, "a user's container reached none of 9 targets")
HUB_API_OK = nc.Check(NODE, "firewall.hub-api", True, "the hub's API 10.0.0.1:8081 is reachable")
LEAK = nc.firewall_checks(
    NODE,
    [nc.Target("10.0.0.3", 2376, "Docker TLS port on the node")],
    {"10.0.0.3:2376": "open"},
    64123,
    "jhgpu-users",
    ("10.0.0.1", 8081),
)[0]
ICC_ON = nc.network_checks(
    NODE,
    {"Driver": "bridge", "Options": {"com.docker.network.bridge.enable_icc": "true"}},
    "users",
    "jhgpu-users",
)[0]
HUB_API_OUT = nc.Check(NODE, "firewall.hub-api", False, "out of reach (timeout)", "--allow it")
PASSING = [ENGINE_OK, NETWORK_OK, FIREWALL_OK, HUB_API_OK]
FAILING = [ENGINE_OK, NETWORK_OK, LEAK, HUB_API_OK]
ENGINE_DOWN = [
    nc.Check(NODE, "engine", False, "no answer from tcp://10.0.0.3:2376: timeout", "start it"),
    nc.not_run(NODE, "user-network", "the engine does not answer"),
    nc.not_run(NODE, "firewall", "the engine does not answer"),
]
NO_IMAGE = [
    ENGINE_OK,
    NETWORK_OK,
    nc.Check(NODE, "firewall", False, f"{nc.NOT_RUN} no probe image", "load the CPU image"),
]
PROBE_BROKE = [ENGINE_OK, NETWORK_OK, nc.Check(NODE, "firewall", False, f"{nc.PROBE_FAILED} x")]
NO_NETWORK = [
    *nc.network_checks(NODE, None, "users", "jhgpu-users"),
    nc.not_run(NODE, "firewall", "no user network"),
]


# ---------------------------------------------------------------- the decision
def test_a_firewall_that_lets_a_container_through_keeps_servers_off() -> None:
    v = nc.hub_verdict(NODE, FAILING)
    assert v.state == nc.FAILED and not v.schedulable
    assert [c.check for c in v.failed] == ["firewall"] and v.what == "firewall"
    assert "10.0.0.3:2376" in v.note and "jupyterhub-gpu firewall --bridge jhgpu-users" in v.note
    assert v.note.startswith("firewall check failed: a user's container reached")


def test_a_user_network_with_icc_on_keeps_servers_off() -> None:
    v = nc.hub_verdict(NODE, [ENGINE_OK, ICC_ON, FIREWALL_OK, HUB_API_OK])
    assert not v.schedulable and v.what == "user network"
    assert "docker network rm users" in v.note


def test_a_probe_that_ran_as_root_keeps_servers_off() -> None:
    root = nc.firewall_checks(NODE, [], {}, 0, "jhgpu-users", ("10.0.0.1", 8081))
    v = nc.hub_verdict(NODE, [ENGINE_OK, NETWORK_OK, *root])
    assert not v.schedulable and [c.check for c in v.failed] == ["firewall.probe"]


@pytest.mark.parametrize("checks", [ENGINE_DOWN, NO_IMAGE, PROBE_BROKE, NO_NETWORK])
def test_a_check_that_could_not_judge_keeps_nothing_off(checks: list[nc.Check]) -> None:
    v = nc.hub_verdict(NODE, checks)
    assert v.state == nc.UNCHECKED and v.schedulable and v.note == ""
    assert nc.next_check_in(v, 300) == nc.RETRY_S and nc.next_check_in(v, 10) == 10


@pytest.mark.parametrize("checks", [ENGINE_DOWN, NO_IMAGE, PROBE_BROKE])
def test_a_failed_node_stays_out_until_a_check_passes(checks: list[nc.Check]) -> None:
    failed = nc.hub_verdict(NODE, FAILING)
    kept = nc.hub_verdict(NODE, checks, failed)
    assert kept.state == nc.FAILED and kept.kept and not kept.schedulable
    assert kept.failed == failed.failed and kept.note == failed.note
    assert nc.next_check_in(kept, 300) == nc.RETRY_S  # tried again soon
    assert nc.verdict_log(failed, kept, 30) is None  # still the same failure: no new line
    passed = nc.hub_verdict(NODE, PASSING, kept)
    assert passed.state == nc.PASSED and passed.schedulable
    assert nc.next_check_in(passed, 300) == 300


def test_failures_that_keep_nothing_off_are_warnings() -> None:
    """The hub's API out of reach, the engine on plain TCP: said, but the node takes servers."""
    plain = nc.Check(NODE, "engine.plain-tcp", False, "10.0.0.3:2375 answers", "remove -H")
    v = nc.hub_verdict(NODE, [ENGINE_OK, plain, NETWORK_OK, FIREWALL_OK, HUB_API_OUT])
    assert v.state == nc.PASSED and v.schedulable
    assert [c.check for c in v.warnings] == ["engine.plain-tcp", "firewall.hub-api"]
    level, message = nc.verdict_log(None, v, 300) or ("", "")
    assert level == "warning" and "passed its checks" in message and "--allow it" in message


def test_the_log_says_each_change_once_with_what_was_reached_and_the_fix() -> None:
    first = nc.hub_verdict(NODE, FAILING)
    level, message = nc.verdict_log(None, first, 300) or ("", "")
    assert level == "warning"
    assert message.startswith(f"Node {NODE} failed its firewall check: a user's container ")
    assert "10.0.0.3:2376" in message and "Fix: apply the node firewall" in message
    assert message.endswith("No new servers there until a check passes (next check in 5 min).")
    again = nc.hub_verdict(NODE, FAILING, first)
    assert nc.verdict_log(first, again, 300) is None
    passed = nc.hub_verdict(NODE, PASSING, again)
    level, message = nc.verdict_log(again, passed, 300) or ("", "")
    assert level == "info"
    assert message == (
        f"Node {NODE} passed its checks (engine, user network, firewall) again, after its "
        "firewall check failed: it takes new servers."
    )
    assert nc.verdict_log(passed, nc.hub_verdict(NODE, PASSING, passed), 300) is None
    unchecked = nc.hub_verdict(NODE, NO_IMAGE, passed)
    level, message = nc.verdict_log(passed, unchecked, 30) or ("", "")
    assert level == "warning" and "could not be checked" in message
    assert "load the CPU image" in message and "next check in 30 s" in message


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("http://10.250.0.1:20123/hub/api", ("10.250.0.1", 20123)),
        ("https://hub.example.org/hub/api", ("hub.example.org", 443)),
        ("hub.example.org:8081", ("hub.example.org", 8081)),
        ("http://127.0.0.1:8081/hub/api", None),
        ("http://0.0.0.0:8081", None),
        ("http://localhost:8081", None),
        ("", None),
    ],
)
def test_the_hub_api_a_container_must_reach(url: str, target: tuple[str, int] | None) -> None:
    assert nc.hub_api_target(url) == target


# ---------------------------------------------------------------- the cluster
class Checks:
    """Stands in for edges.nodecheck.check_node: returns the node's scripted lines (all
    passing by default); ``hold`` makes it wait (a slow probe)."""

    def __init__(self) -> None:
        self.lines: dict[str, list[nc.Check]] = {}
        self.calls: list[tuple[str, CheckSettings, str]] = []
        self.hold = threading.Event()
        self.hold.set()

    def __call__(self, spec: NodeSpec, settings: CheckSettings, run: str) -> nc.NodeReport:
        self.calls.append((spec.name, settings, run))
        self.hold.wait(10)
        lines = self.lines.get(spec.name, PASSING)
        return nc.NodeReport(spec.name, [replace(c, node=spec.name) for c in lines])


def make_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval: float = 300.0
) -> tuple[Cluster, Checks, Path]:
    inventory = tmp_path / "inventory.yaml"
    shutil.copy(DATA, inventory)
    nodes = [
        {"name": n["name"], "docker_url": f"unix://{tmp_path}/{n['name']}.sock", "address": "::1"}
        for n in yaml.safe_load(DATA.read_text())["nodes"]
    ]
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump({"nodes": nodes[2:]}))
    checks = Checks()
    monkeypatch.setattr(checks_module, "check_node", checks)
    settings = ClusterSettings(
        nodes=nodes[:2],
        nodes_file=str(nodes_file),
        probe_mode="declared",
        inventory_file=str(inventory),
        node_checks=CheckSettings(owner="hub1"),
        node_check_interval=interval,
        reconcile_interval=0,
    )
    cluster = Cluster(settings, logging.getLogger("test.checks"))
    cluster.reconciler.reconciled = True  # no engines here

    async def engine_ok(node: str) -> bool:
        return True

    async def network(node: str, name: str, bridge: str) -> None:
        return None

    async def images_on(node: str) -> frozenset[str]:
        return frozenset()  # no engines to list (a failed listing marks the node down)

    cluster.engine_ok = engine_ok  # type: ignore[method-assign]
    cluster.ensure_user_network = network  # type: ignore[method-assign]
    cluster.images_on = images_on  # type: ignore[method-assign]
    return cluster, checks, nodes_file


async def checked(cluster: Cluster) -> None:
    """Start the due checks and wait for them."""
    cluster.checks.start_due()
    await asyncio.gather(*list(cluster.checks.checking.values()))


def schedulable(snapshot: ClusterSnapshot) -> dict[str, bool]:
    return {n.name: n.schedulable for n in snapshot.nodes}


def test_a_node_failing_its_firewall_check_takes_no_servers_until_one_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cluster, checks, _ = make_cluster(tmp_path, monkeypatch)
    checks.lines[NODE] = FAILING
    checks.hold.clear()

    async def scenario() -> None:
        before = await cluster.snapshot()  # its first snapshot starts the checks ...
        # ... and a node not checked yet is placed on as before
        assert schedulable(before) == {"gpu-a": True, "gpu-b": True, NODE: True}
        checks.hold.set()
        await checked(cluster)
        assert sorted(name for name, _, _ in checks.calls) == ["gpu-a", "gpu-b", NODE]
        _, settings, run = checks.calls[0]
        assert settings.only == nc.HUB_CHECKS and settings.owner == "hub1"
        assert run.startswith("hub-")
        assert schedulable(await cluster.snapshot())[NODE] is False
        failures = cluster.check_failures()
        assert list(failures) == [NODE] and "jupyterhub-gpu firewall" in failures[NODE]
        # checked again (its entry unchanged, its time not come): nothing new in the log
        cluster.checks.checked[NODE] = (0.0, cluster.spec(NODE), 0.0)
        await checked(cluster)
        checks.lines[NODE] = PASSING
        cluster.checks.checked[NODE] = (0.0, cluster.spec(NODE), 0.0)
        await checked(cluster)
        assert schedulable(await cluster.snapshot())[NODE] is True
        assert cluster.check_failures() == {}

    with caplog.at_level(logging.INFO, "test.checks"):
        asyncio.run(scenario())
    lines = [r for r in caplog.records if NODE in r.getMessage()]
    failed = [r for r in lines if "failed its firewall check" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert "Fix: apply the node firewall" in failed[0].getMessage()
    assert [r.getMessage() for r in lines if "again" in r.getMessage()] == [
        f"Node {NODE} passed its checks (engine, user network, firewall) again, after its "
        "firewall check failed: it takes new servers."
    ]


def test_a_spawn_never_waits_for_a_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe that hangs: snapshots (what a spawn places from) answer at once, the node
    placeable as before; one check per node at a time."""
    cluster, checks, _ = make_cluster(tmp_path, monkeypatch)
    checks.hold.clear()

    async def scenario() -> None:
        cluster.checks.start_due()
        snapshot = await asyncio.wait_for(cluster.snapshot(), 2)
        assert all(schedulable(snapshot).values())
        cluster.checks.start_due()  # still running: not started twice
        checks.hold.set()
        await asyncio.gather(*list(cluster.checks.checking.values()))

    asyncio.run(scenario())
    assert len(checks.calls) == 3


def test_a_node_added_to_the_nodes_file_or_changed_there_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, checks, nodes_file = make_cluster(tmp_path, monkeypatch)

    async def scenario() -> None:
        await checked(cluster)
        assert len(checks.calls) == 3
        await checked(cluster)  # nothing due
        assert len(checks.calls) == 3
        data = yaml.safe_load(nodes_file.read_text())
        data["nodes"].append(
            {"name": "gpu-d", "docker_url": "unix:///run/d.sock", "address": "::1"}
        )
        data["nodes"][0]["labels"] = {"rack": "r9"}  # gpu-c's entry changes
        nodes_file.write_text(yaml.safe_dump(data))
        os.utime(nodes_file, (1, 1))
        await checked(cluster)
        assert sorted(name for name, _, _ in checks.calls[3:]) == [NODE, "gpu-d"]

    asyncio.run(scenario())


def test_the_interval_and_a_node_that_answers_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, checks, _ = make_cluster(tmp_path, monkeypatch, interval=0.0)

    async def scenario() -> None:
        await checked(cluster)
        await checked(cluster)  # interval 0: every round
        assert len(checks.calls) == 6
        cluster.settings.node_check_interval = 300.0
        for name in ("gpu-a", "gpu-b", NODE):
            cluster.checks.checked[name] = (
                cluster.checks.checked[name][0],
                cluster.spec(name),
                300.0,
            )
        cluster._mark_down(NODE, ConnectionError("gone"))
        await checked(cluster)  # down: not checked while it does not answer
        assert len(checks.calls) == 6
        cluster._health.pop(NODE)  # it answers again
        await checked(cluster)
        assert [name for name, _, _ in checks.calls[6:]] == [NODE]

    asyncio.run(scenario())


def test_a_check_that_raises_judges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, _, _ = make_cluster(tmp_path, monkeypatch)

    def broken(spec: NodeSpec, settings: CheckSettings, run: str) -> nc.NodeReport:
        raise OSError("no such socket")

    monkeypatch.setattr(checks_module, "check_node", broken)
    asyncio.run(checked(cluster))
    verdict = cluster.verdict(NODE)
    assert verdict is not None and verdict.state == nc.UNCHECKED
    assert "no such socket" in verdict.warnings[0].detail


def test_checks_off_start_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, checks, _ = make_cluster(tmp_path, monkeypatch)
    cluster.settings.node_checks = None

    async def scenario() -> None:
        cluster.start_checking()
        await cluster.snapshot()

    asyncio.run(scenario())
    assert cluster.checks.task is None and checks.calls == []


# ---------------------------------------------------------------- the dashboard
def test_the_payload_shows_a_node_the_check_keeps_out() -> None:
    inv = NodeInventory(NODE, "550.54.15", ())
    snapshot = ClusterSnapshot(nodes=(NodeState(inv, schedulable=False),))
    note = nc.hub_verdict(NODE, FAILING).note
    payload = build_payload(
        snapshot,
        [NodeSpec(name=NODE, docker_url="unix:///x.sock", address="::1")],
        [],
        {},
        now=datetime.now(timezone.utc),
        check_failures={NODE: note},
    )
    (node,) = payload["nodes"]
    assert (node["state"], node["drained_by"], node["drain_note"]) == ("drained", "check", note)
    decoded = decode_payload(payload)
    assert decoded.nodes[0].drained_by == "check" and decoded.nodes[0].drain_note == note
    assert payload_json(decoded) == payload
    label = _state_label(decoded.nodes[0])
    assert label.startswith("no new servers: the hub's node check failed: firewall check")
    # an admin's drain says the admin's note first
    admin = build_payload(
        snapshot, [], [], {NODE: "PSU"}, now=decoded.generated_at, check_failures={NODE: note}
    )
    assert (admin["nodes"][0]["drained_by"], admin["nodes"][0]["drain_note"]) == ("admin", "PSU")


def test_the_decoder_knows_who_drains_a_node() -> None:
    inv = NodeInventory(NODE, "550.54.15", ())
    snapshot = ClusterSnapshot(nodes=(NodeState(inv),))
    payload: dict[str, Any] = build_payload(
        snapshot, [], [], {}, now=datetime(2026, 11, 26, tzinfo=timezone.utc)
    )
    payload["nodes"][0]["drained_by"] = "the cat"
    with pytest.raises(BadPayload, match=r"nodes\[0\]\.drained_by must be one of admin"):
        decode_payload(payload)


# ---------------------------------------------------------------- the probes
class Listing:
    def __init__(self) -> None:
        self.filters: list[Any] = []
        self.removed: list[str] = []

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, str]]:
        self.filters.append(filters)
        return [{"Id": "c1"}]

    def remove_container(self, cid: str, force: bool) -> None:
        self.removed.append(cid)


def test_a_hub_removes_only_its_own_leftover_probes() -> None:
    client = Listing()
    assert remove_leftovers(client, owner="hub1") == 1  # type: ignore[arg-type]
    assert client.filters[-1] == {"label": [nc.PROBE_LABEL, f"{nc.PROBE_OWNER_LABEL}=hub1"]}
    remove_leftovers(client)  # type: ignore[arg-type]  # the command: every probe left
    assert client.filters[-1] == {"label": [nc.PROBE_LABEL]}
    remove_leftovers(client, "run1")  # type: ignore[arg-type]
    assert client.filters[-1] == {"label": [f"{nc.PROBE_LABEL}=run1"]}


def test_the_spawner_builds_the_checks_settings_from_its_own() -> None:
    c = Config()
    c.GPUDockerSpawner.hub_connect_url = "http://10.250.0.1:20123"
    c.GPUDockerSpawner.image = "site/cpu:1"
    c.GPUDockerSpawner.user_bridge = "jhgpu-u"
    c.GPUDockerSpawner.hub_id = "hub7"
    user = SimpleNamespace(name="alice", settings={})
    settings = GPUDockerSpawner(user=user, config=c)._node_check_settings()
    assert settings is not None and settings.only == nc.HUB_CHECKS
    assert settings.hub_api == ("10.250.0.1", 20123) and settings.user_bridge == "jhgpu-u"
    assert settings.owner == "hub7" and settings.images == ("site/cpu:1",)
    assert any(e.cpu_only for e in settings.catalog)  # the probe's image comes from there
    c.GPUDockerSpawner.check_nodes = False
    assert GPUDockerSpawner(user=user, config=c)._node_check_settings() is None
    with pytest.raises(ConfigError, match="node_check_interval"):
        GPUDockerSpawner(user=user, node_check_interval=0)
