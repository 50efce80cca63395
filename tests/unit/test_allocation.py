"""Allocation ids and seals (issue 15): which running containers reconciliation removes as
left by an interrupted spawn, and which it respects; the spawner writes and keeps both."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker
import pytest

from jupyterhub_gpu.core.accounting.records import EndReason
from jupyterhub_gpu.core.allocation import (
    ALLOCATION_LABEL,
    SEAL_LABEL,
    Allocation,
    LabelledContainer,
    containers_from_docker,
    interrupted,
    new_allocation_id,
    seal_key,
)
from jupyterhub_gpu.core.placement import PlacementRequest
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.runtime import seal_key_of
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner
from tests.support.runtime import use_cluster
from tests.unit.test_quota import _snapshot

pytestmark = pytest.mark.unit

KEY = seal_key(b"0123456789abcdef" * 4)
HUB = "hub1"
CLAIM = Allocation(HUB, "a" * 32, "alice", "", "node-c", ("GPU-c0",))


def labelled(claim: Allocation = CLAIM, seal: str | None = None, **kw: Any) -> LabelledContainer:
    assert KEY is not None
    return LabelledContainer(
        node=claim.node,
        id="c" * 64,
        holder=f"{claim.owner}/{claim.server}",
        gpus=claim.gpus,
        running=kw.pop("running", True),
        owner=claim.owner,
        server=claim.server,
        allocation=claim.id,
        seal=claim.seal(KEY) if seal is None else seal,
        **kw,
    )


# ------------------------------------------------------------------ the seal
def test_the_key_is_derived_stable_and_never_the_secret() -> None:
    assert seal_key(None) is None and seal_key(b"") is None and seal_key("") is None
    key = seal_key(b"s3cret" * 8)
    assert key == seal_key("s3cret" * 8) and key is not None and len(key) == 32
    assert b"s3cret" not in key and key != seal_key(b"other" * 8)


@pytest.mark.parametrize(
    "change",
    [
        {"hub_id": "hub2"},
        {"id": "b" * 32},
        {"owner": "mallory"},
        {"server": "gpu"},
        {"node": "node-a"},
        {"gpus": ("GPU-c1",)},
        {"gpus": ("GPU-c0", "GPU-c1")},
        {"gpus": ()},
    ],
)
def test_the_seal_covers_every_field(change: dict[str, Any]) -> None:
    assert KEY is not None
    seal = CLAIM.seal(KEY)
    assert CLAIM.sealed_by(KEY, seal)
    assert not replace(CLAIM, **change).sealed_by(KEY, seal)


def test_the_canonical_form_is_unambiguous() -> None:
    """Fields can't run into each other ("a|b" + "" vs "a" + "b|")."""
    one = Allocation(HUB, "x", "a|b", "", "n", ("g",))
    two = Allocation(HUB, "x", "a", "b|", "n", ("g",))
    assert one.canonical() != two.canonical()
    gpus = Allocation(HUB, "x", "a", "", "n", ("g1,g2",))
    assert gpus.canonical() != replace(gpus, gpus=("g1", "g2")).canonical()


def test_no_key_no_id_or_no_seal_never_verifies() -> None:
    assert KEY is not None
    seal = CLAIM.seal(KEY)
    assert not CLAIM.sealed_by(None, seal)
    assert not CLAIM.sealed_by(KEY, "")
    assert not replace(CLAIM, id="").sealed_by(KEY, replace(CLAIM, id="").seal(KEY))
    assert not CLAIM.sealed_by(seal_key(b"another hub's secret"), seal)


def test_allocation_ids_are_fresh_uuid_hex() -> None:
    ids = {new_allocation_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_labels_are_read_back() -> None:
    listing = [
        {
            "Id": "c" * 64,
            "State": "running",
            "Labels": {
                "jupyterhub-gpu.owner": "alice",
                "jupyterhub-gpu.server": "",
                "jupyterhub-gpu.gpus": "GPU-c0",
                ALLOCATION_LABEL: CLAIM.id,
                SEAL_LABEL: "ab" * 32,
            },
        },
        {"Id": "d" * 64, "State": "running", "Labels": {"other": "x"}},
    ]
    (c,) = containers_from_docker("node-c", listing)
    assert (c.holder, c.owner, c.server, c.allocation, c.seal) == (
        "alice/",
        "alice",
        "",
        CLAIM.id,
        "ab" * 32,
    )
    assert c.claim(HUB) == CLAIM


# ------------------------------------------------------------------ the decision
@pytest.mark.parametrize(
    "container, live, pending, removed",
    [
        (labelled(), set(), set(), True),  # ours, and nobody's any more: interrupted
        (labelled(), {CLAIM.id}, set(), False),  # a server the hub runs (or is starting)
        (labelled(), set(), {"alice/"}, False),  # a spawn of that server in progress
        (labelled(running=False), set(), set(), False),  # exited: holds nothing
        (labelled(seal=""), set(), set(), False),  # made by hand: respected
        (labelled(seal="00" * 32), set(), set(), False),  # a forged seal: respected
        (labelled(seal=CLAIM.seal(b"k" * 32)), set(), set(), False),  # another key's
        # the labels copied to another node: the seal names the node it was made for
        (replace(labelled(), node="node-a"), set(), set(), False),
        (replace(labelled(), gpus=("GPU-c0", "GPU-c1")), set(), set(), False),  # widened
        (replace(labelled(), allocation=""), set(), set(), False),  # before seals
    ],
)
def test_which_containers_are_interrupted_spawns(
    container: LabelledContainer, live: set[str], pending: set[str], removed: bool
) -> None:
    found = interrupted([container], hub_id=HUB, key=KEY, live=live, pending=pending)
    assert found == ([container] if removed else [])


def test_without_a_key_nothing_is_removed() -> None:
    assert interrupted([labelled()], hub_id=HUB, key=None, live=set(), pending=set()) == []


def test_another_hub_id_never_verifies() -> None:
    assert interrupted([labelled()], hub_id="hub2", key=KEY, live=set(), pending=set()) == []


def test_orphans_are_not_live() -> None:
    ledger = GPULedger()
    ledger.place_server("alice/", "n1", "a1")
    ledger.place_server("bob/", "n1", "b1")
    ledger.place_server("carol/", "n1")  # state from before allocation ids
    ledger.orphan("bob/")  # stopped while its node was unreachable
    assert ledger.live_allocations() == {"a1"}


# ------------------------------------------------------------------ reconciliation
class Engine:
    """A node's Docker client as far as reconciliation uses it."""

    def __init__(
        self, listing: list[dict[str, Any]], fail: bool = False, gone: bool = False
    ) -> None:
        self.listing, self.fail, self.gone = listing, fail, gone
        self.removed: list[str] = []

    def containers(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        return self.listing

    def remove_container(self, cid: str, force: bool) -> None:
        if self.fail:
            raise docker.errors.APIError("500 boom")
        if self.gone:
            raise docker.errors.NotFound("404 no such container")
        self.removed.append(cid)
        self.listing = [c for c in self.listing if c["Id"] != cid]


def as_docker(c: LabelledContainer) -> dict[str, Any]:
    labels = {
        "jupyterhub-gpu.hub": HUB,
        "jupyterhub-gpu.owner": c.owner,
        "jupyterhub-gpu.server": c.server,
        "jupyterhub-gpu.gpus": ",".join(c.gpus),
        ALLOCATION_LABEL: c.allocation,
        SEAL_LABEL: c.seal,
    }
    return {"Id": c.id, "State": "running" if c.running else "exited", "Labels": labels}


def engine_cluster(engine: Engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cluster:
    nodes = [{"name": "node-c", "docker_url": f"unix://{tmp_path}/c.sock", "address": "x"}]
    cluster = Cluster(
        ClusterSettings(nodes=nodes, hub_id=HUB, seal_key=KEY), logging.getLogger("test")
    )

    async def engine_ok(node: str) -> bool:
        return True

    monkeypatch.setattr(cluster, "engine_ok", engine_ok)
    monkeypatch.setattr(cluster, "client", lambda node: engine)
    return cluster


def test_an_interrupted_spawn_is_removed_and_its_gpus_freed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A restarted hub (empty ledger) finds alice's sealed container: removed in the first
    round, with one line naming user, server, node and GPUs; bob's live one, a hand-made
    one and a pending spawn's are kept."""
    bob = Allocation(HUB, "b" * 32, "bob", "", "node-c", ("GPU-c1",))
    hand = replace(labelled(Allocation(HUB, "", "admin", "", "node-c", ("GPU-c2",))), id="h")
    carol = Allocation(HUB, "d" * 32, "carol", "x", "node-c", ("GPU-c3",))
    containers = [
        labelled(),
        replace(labelled(bob), id="b"),
        hand,
        replace(labelled(carol), id="d"),
    ]
    engine = Engine([as_docker(c) for c in containers])
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    cluster.ledger.place_server("bob/", "node-c", bob.id)  # load_state of a running server
    cluster.pending.add("carol/x")
    with caplog.at_level(logging.INFO):
        asyncio.run(cluster.reconcile())
    assert engine.removed == ["c" * 64]
    assert cluster.ledger.allocations() == {
        "GPU-c1": "bob/",
        "GPU-c2": "admin/",
        "GPU-c3": "carol/x",
    }
    (line,) = [r.getMessage() for r in caplog.records if "removed container" in r.getMessage()]
    assert "user alice" in line and "server ''" in line and "node-c" in line, line
    assert "GPU-c0" in line, line


def test_a_container_that_cannot_be_removed_keeps_its_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = Engine([as_docker(labelled())], fail=True)
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    asyncio.run(cluster.reconcile())
    hold = cluster.ledger.hold_of("GPU-c0")  # nobody gets it, nobody is charged for it
    assert hold is not None and hold.orphaned and hold.allocation == CLAIM.id
    assert cluster.ledger.charged() == {} and cluster.ledger.live_allocations() == set()
    engine.fail = False
    asyncio.run(cluster.reconcile())
    assert cluster.ledger.allocations() == {}


def test_a_container_removed_meanwhile_frees_its_gpus_quietly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Removed by someone else (a failed start's clean-up) between listing and removal."""
    engine = Engine([as_docker(labelled())], gone=True)
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    with caplog.at_level(logging.INFO):
        asyncio.run(cluster.reconcile())
    assert cluster.ledger.allocations() == {}
    assert not [r for r in caplog.records if "removed container" in r.getMessage()]


def test_a_stop_that_could_not_reach_the_node_is_finished(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The hub let go of alice's server while her node was unreachable (an orphan hold):
    when the node answers with the container still running, it is removed."""
    engine = Engine([as_docker(labelled())])
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    cluster.ledger.reserve("alice/", "node-c", ["GPU-c0"], CLAIM.id)
    cluster.ledger.place_server("alice/", "node-c", CLAIM.id)
    cluster.ledger.orphan("alice/")
    ended: list[tuple[str, object]] = []
    cluster.ledger.subscribe(lambda e: ended.append((e.allocation, e.reason)))
    asyncio.run(cluster.reconcile())
    assert engine.removed == ["c" * 64] and cluster.ledger.allocations() == {}
    # its placement goes too (no phantom server), and a second round ends nothing again
    assert cluster.ledger.servers_on("node-c") == 0
    engine.listing = []
    asyncio.run(cluster.reconcile())
    assert ended == [(CLAIM.id, EndReason.INTERRUPTED)]


def test_an_orphan_whose_container_is_gone_ends_as_node_lost_and_spares_the_new_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """alice's stop could not reach node-c (orphan of CLAIM); she started the same server
    again there (allocation "e..."). The node answers with only the new container: the
    orphan's GPU is freed and its allocation ends as NODE_LOST, once; the new server keeps
    its GPU and is not ended."""
    again = Allocation(HUB, "e" * 32, "alice", "", "node-c", ("GPU-c1",))
    engine = Engine([as_docker(replace(labelled(again), id="e" * 64))])
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    cluster.ledger.reserve("alice/", "node-c", ["GPU-c0"], CLAIM.id)
    cluster.ledger.place_server("alice/", "node-c", CLAIM.id)
    cluster.ledger.orphan("alice/")
    cluster.ledger.reserve("alice/", "node-c", ["GPU-c1"], again.id)
    cluster.ledger.place_server("alice/", "node-c", again.id)
    ended: list[tuple[str, object]] = []
    cluster.ledger.subscribe(lambda e: ended.append((e.allocation, e.reason)))
    asyncio.run(cluster.reconcile())
    asyncio.run(cluster.reconcile())
    assert ended == [(CLAIM.id, EndReason.NODE_LOST)]
    assert engine.removed == [] and cluster.ledger.allocations() == {"GPU-c1": "alice/"}
    assert cluster.ledger.live_allocations() == {again.id}
    assert cluster.ledger.servers_on("node-c") == 1


# ------------------------------------------------------------------ the spawner
def test_the_spawner_makes_keeps_and_seals_its_allocation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nodes = [{"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}]
    cluster = Cluster(ClusterSettings(nodes=nodes, seal_key=KEY), logging.getLogger("test"))
    use_cluster(monkeypatch, cluster)
    orm = SimpleNamespace(name="", server=None, user_options={}, last_activity=None)
    user = SimpleNamespace(name="alice", groups=[], settings={})
    spawner = GPUDockerSpawner(user=user, orm_spawner=orm, hub_id="default")
    spawner._decide_and_reserve(_snapshot(), PlacementRequest(gpu_count=1))
    allocation = spawner.allocation_id
    assert len(allocation) == 32 and cluster.ledger.live_allocations() == {allocation}
    labels = spawner._labels()
    assert labels[ALLOCATION_LABEL] == allocation
    claim = Allocation("default", allocation, "alice", "", "n1", tuple(spawner.gpu_uuids))
    assert claim.sealed_by(KEY, labels[SEAL_LABEL])
    state = spawner.get_state()
    assert state["allocation"] == allocation

    restarted = GPUDockerSpawner(user=user, orm_spawner=orm)
    cluster.ledger.release("alice/")
    cluster.ledger.release_server("alice/")
    restarted.load_state(state)
    assert restarted.allocation_id == allocation
    assert cluster.ledger.live_allocations() == {allocation}
    restarted.clear_state()
    assert restarted.allocation_id == "" and cluster.ledger.live_allocations() == set()


def test_the_key_comes_from_the_hubs_cookie_secret() -> None:
    user = SimpleNamespace(name="alice", settings={"cookie_secret": b"0123456789abcdef" * 4})
    log = logging.getLogger("test")
    assert seal_key_of(user.settings, log) == KEY
    assert seal_key_of(SimpleNamespace(name="a", settings={}).settings, log) is None
