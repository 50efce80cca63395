"""The pre-puller's runner (hub/prepull.py) on fake engines with a fake pull function:
one pull per node at a time, spawns first, new nodes and entries served without a
restart, removals never of an image a container uses; and the real pull's background
mode stopping when a spawn starts pulling on its node."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import requests
from docker.errors import APIError

from jupyterhub_gpu.core.accounting.records import AllocationRecord
from jupyterhub_gpu.core.catalog import Catalog, CatalogEntry
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.prepull import CATALOG_LABEL, GIB
from jupyterhub_gpu.core.progress import DISK_FULL, MISSING
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.errors import ImageUnavailable, PullYielded
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.prepull import PrePuller, PrePullRunner
from jupyterhub_gpu.hub.pull import pull, pulls_on
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit
log = logging.getLogger("test-prepull")

REG = "reg:5000/jhgpu"
CPU = CatalogEntry("cpu", "CPU", "none", "0", None, f"{REG}/cpu:1")
TORCH = CatalogEntry(
    "torch", "PyTorch", "pytorch", "2.8", "12.8", f"{REG}/torch:2.8",
    min_driver="525.60.13", min_compute_capability=(7, 0),
)  # fmt: skip


def conflict() -> APIError:
    response = requests.Response()
    response.status_code = 409
    return APIError("conflict", response=response, explanation="image is being used")


class Engine:
    """A node's engine: images and containers, as docker-py's APIClient lists them."""

    def __init__(self) -> None:
        self.images: list[dict[str, Any]] = []
        self.containers: list[dict[str, Any]] = []
        self.removed: list[str] = []
        self.on_remove: Callable[[], None] = lambda: None

    def add(self, ref: str, gib: float, labels: Mapping[str, str] | None = None) -> str:
        image_id = f"sha256:{abs(hash(ref)):064x}"[:71]
        self.images.append(
            {"Id": image_id, "RepoTags": [ref], "RepoDigests": [], "Size": int(gib * GIB),
             "Labels": dict(labels or {}), "Created": 1}
        )  # fmt: skip
        return image_id

    def use(self, image_id: str) -> None:
        self.containers.append({"ImageID": image_id, "Created": 2})

    def images_list(self) -> list[dict[str, Any]]:
        return [dict(i) for i in self.images]

    def remove_image(self, ref: str) -> None:
        self.on_remove()
        found = [i for i in self.images if ref in i["RepoTags"]]
        if not found:
            response = requests.Response()
            response.status_code = 404
            raise APIError("gone", response=response)
        if any(c["ImageID"] == found[0]["Id"] for c in self.containers):
            raise conflict()
        self.images.remove(found[0])
        self.removed.append(ref)


class Client:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def images(self) -> list[dict[str, Any]]:
        return self.engine.images_list()

    def containers(self, all: bool = False) -> list[dict[str, Any]]:
        assert all
        return list(self.engine.containers)

    def remove_image(self, ref: str) -> None:
        self.engine.remove_image(ref)


class FakeCluster:
    def __init__(self, **nodes: Engine) -> None:
        self.engines = dict(nodes)
        self.recorder = None
        self.ledger = GPULedger()

    async def snapshot(self) -> ClusterSnapshot:
        inventories = [
            NodeInventory(n, "550.54.15", (GPU(f"GPU-{n}", 0, "A100", 40960, (8, 0)),))
            for n in self.engines
        ]
        return ClusterSnapshot(nodes=tuple(NodeState(i) for i in inventories))

    async def run(self, node: str, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        return fn()

    def client(self, node: str) -> Client:
        return Client(self.engines[node])


class FakePull:
    """Pulls that end when the test says so; counts how many run at once per node."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.calls: list[tuple[str, str, bool]] = []
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.gates: dict[tuple[str, str], asyncio.Event] = {}
        self.failures: dict[tuple[str, str], ImageUnavailable] = {}
        self.stall_timeouts: list[float] = []

    def gate(self, node: str, image: str) -> asyncio.Event:
        return self.gates.setdefault((node, image), asyncio.Event())

    async def __call__(
        self,
        cluster: Any,
        node: str,
        image: str,
        timeout: float,
        report: Callable[[int, str], None],
        log: logging.Logger,
        auth_config: Mapping[str, str] | None = None,
        *,
        background: bool = False,
        stall_timeout: float = 120.0,
    ) -> None:
        self.calls.append((node, image, background))
        self.stall_timeouts.append(stall_timeout)
        self.running[node] = self.running.get(node, 0) + 1
        self.most[node] = max(self.most.get(node, 0), self.running[node])
        try:
            report(50, "half")
            failure = self.failures.get((node, image))
            if failure is not None:
                raise failure
            await self.gate(node, image).wait()
            self.cluster.engines[node].add(image, 1)
        finally:
            self.running[node] -= 1


def runner(
    cluster: FakeCluster, catalog: list[Catalog], fake: FakePull, **policy: Any
) -> PrePullRunner:
    settings = PrePuller(enabled=True, **policy)
    return PrePullRunner(cluster, settings, lambda: catalog[0], log, pull_fn=fake)  # type: ignore[arg-type]


def open_all(fake: FakePull) -> None:
    for node, image in [(n, i) for n, i, _ in fake.calls]:
        fake.gate(node, image).set()


async def test_one_pull_per_node_at_a_time_and_nodes_in_parallel() -> None:
    cluster = FakeCluster(a=Engine(), b=Engine())
    fake = FakePull(cluster)
    r = runner(cluster, [Catalog((CPU, TORCH))], fake, disk_budget_gib=0)
    await r.round()
    await wait_until_async(lambda: len(fake.calls) == 2, 5, "the pulls")
    assert sorted(fake.calls) == [("a", CPU.image, True), ("b", CPU.image, True)]
    assert r.state()["nodes"]["a"]["pulling"] == "cpu"
    assert r.state()["nodes"]["a"]["percent"] == 50
    await r.round()  # the busy nodes are left alone: no second pull starts there
    assert len(fake.calls) == 2
    fake.gate("a", CPU.image).set()
    await wait_until_async(lambda: ("a", TORCH.image, True) in fake.calls, 5, "the pulls")
    assert fake.running["a"] == 1
    fake.gate("a", TORCH.image).set()
    fake.gate("b", CPU.image).set()
    fake.gate("b", TORCH.image).set()
    await r.idle()
    assert fake.most == {"a": 1, "b": 1}
    assert r.state()["nodes"]["a"]["has"] == ["cpu", "torch"]
    assert r.state()["nodes"]["a"]["needs"] == []
    await r.round()  # all there: nothing more
    assert len(fake.calls) == 4


async def test_yields_to_a_spawns_pull_on_that_node() -> None:
    cluster = FakeCluster(a=Engine(), b=Engine())
    fake = FakePull(cluster)
    r = runner(cluster, [Catalog((CPU,))], fake)
    with pulls_on(cluster).spawn("a"):  # type: ignore[arg-type]
        await r.round()
        await wait_until_async(lambda: len(fake.calls) == 1, 5, "the pulls")
        open_all(fake)
        await r.idle()
    assert fake.calls == [("b", CPU.image, True)]
    await r.round()  # the spawn's pull ended: node a gets its turn
    await wait_until_async(lambda: len(fake.calls) == 2, 5, "the pulls")
    assert fake.calls[1] == ("a", CPU.image, True)
    open_all(fake)
    await r.idle()


async def test_a_new_node_and_a_new_entry_are_served_at_the_next_round() -> None:
    cluster = FakeCluster(a=Engine())
    fake = FakePull(cluster)
    catalog = [Catalog((CPU,))]
    r = runner(cluster, catalog, fake)
    await r.round()
    await wait_until_async(lambda: len(fake.calls) == 1, 5, "the pulls")
    open_all(fake)
    await r.idle()
    cluster.engines["b"] = Engine()
    catalog[0] = Catalog((CPU, TORCH))
    await r.round()
    await wait_until_async(lambda: len(fake.calls) == 3, 5, "the pulls")
    assert sorted(fake.calls[1:]) == [("a", TORCH.image, True), ("b", CPU.image, True)]
    open_all(fake)
    await wait_until_async(lambda: len(fake.calls) == 4, 5, "the pulls")
    open_all(fake)
    await r.idle()
    assert {n: s["has"] for n, s in r.state()["nodes"].items()} == {
        "a": ["cpu", "torch"],
        "b": ["cpu", "torch"],
    }
    del cluster.engines["a"]  # taken out of the nodes file
    await r.round()
    assert list(r.state()["nodes"]) == ["b"]


async def test_removal_never_of_an_image_a_container_uses() -> None:
    engine = Engine()
    old = engine.add(f"{REG}/old:1", 3, {CATALOG_LABEL: "old"})
    engine.use(old)  # a stopped container made from it
    engine.add(f"{REG}/older:1", 3, {CATALOG_LABEL: "older"})
    engine.add(f"{REG}/cpu:1", 1)
    engine.add("postgres:16", 50)  # not ours
    cluster = FakeCluster(a=engine)
    fake = FakePull(cluster)
    # labelled, out of the catalog: custom images (6 GiB), with a budget of their own
    r = runner(cluster, [Catalog((CPU,))], fake, disk_budget_gib=4, custom_disk_budget_gib=4)
    await r.round()
    await r.idle()
    assert engine.removed == [f"{REG}/older:1"]  # 6 GiB of custom images; 3 once it is gone
    assert f"{REG}/old:1" in [t for i in engine.images for t in i["RepoTags"]]
    assert r.state()["nodes"]["a"]["removed"] == [f"{REG}/older:1"]
    assert fake.calls == []


async def test_custom_images_swept_through_the_engine_but_not_one_a_server_starts_from() -> None:
    engine = Engine()
    lab = "hub.example.org/lab"
    engine.add(f"{REG}/cpu:1", 1)  # the catalog's one image, held: nothing to pull
    a_id = engine.add(f"{lab}/a:1", 2)
    engine.add(f"{lab}/b:1", 2)
    engine.add(f"{lab}/c:1", 2)
    engine.add("postgres:16", 50)  # no pattern lets users spawn it: never touched
    cluster = FakeCluster(a=engine)
    catalog = Catalog((CPU,), allowed_image_patterns=(f"{lab}/*",))
    r = runner(cluster, [catalog], FakePull(cluster), images=["cpu"], custom_disk_budget_gib=3)
    record = AllocationRecord(
        id="alloc-1", user="ann", server="", group="", node="a", gpu_uuids=(),
        gpu_model="", image=f"{lab}/a:1", cuda="",
    )  # fmt: skip
    cluster.ledger.open_allocation(record)  # ann's server is starting from lab/a
    await r.round()
    await r.idle()
    assert sorted(engine.removed) == [f"{lab}/b:1", f"{lab}/c:1"]  # 6 GiB; a is pinned
    assert "postgres:16" in [t for i in engine.images for t in i["RepoTags"]]
    # the server runs: its container uses the image, which no longer needs the pin
    engine.use(a_id)
    cluster.ledger.allocation_started("alloc-1")
    assert r._starting == {}
    engine.add(f"{lab}/d:1", 2)  # 4 GiB of custom images: d goes, a (in use) stays
    await r.round()
    await r.idle()
    assert sorted(engine.removed) == [f"{lab}/b:1", f"{lab}/c:1", f"{lab}/d:1"]


async def test_a_container_created_after_the_listing_keeps_its_image() -> None:
    engine = Engine()
    old = engine.add(f"{REG}/old:1", 3, {CATALOG_LABEL: "old"})
    engine.on_remove = lambda: engine.use(old)  # created between the listing and removal
    cluster = FakeCluster(a=engine)
    fake = FakePull(cluster)
    r = runner(cluster, [Catalog((CPU,))], fake, disk_budget_gib=1, custom_disk_budget_gib=1)
    plans = await r.round()
    assert [x.image.id for x in plans["a"].removals] == [old]
    await wait_until_async(lambda: fake.calls, 5, "the pull after the removal")
    open_all(fake)
    await r.idle()
    assert engine.removed == [] and old in [i["Id"] for i in engine.images]
    assert r.state()["nodes"]["a"]["removed"] == []


async def test_a_failed_pull_is_a_sentence_in_the_log_and_the_state_never_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pull the registry can't serve: the node's last error and a warning say why, the
    image is still needed (tried again next round), not held, and nothing is "pulling";
    the next image is pulled. A full disk stops the node's pulls until the next round."""
    cluster = FakeCluster(a=Engine(), b=Engine())
    fake = FakePull(cluster)
    missing = "Could not pull reg:5000/jhgpu/torch:2.8 on node a: manifest unknown. Ask an admin"
    fake.failures[("a", TORCH.image)] = ImageUnavailable(missing, cause=MISSING)
    full = "Could not pull reg:5000/jhgpu/torch:2.8 on node b: the node's disk is full"
    fake.failures[("b", TORCH.image)] = ImageUnavailable(full, cause=DISK_FULL)
    r = runner(cluster, [Catalog((TORCH, CPU))], fake, pull_stall_timeout=7.0, disk_budget_gib=0)
    with caplog.at_level(logging.WARNING, logger=log.name):
        await r.round()
        await wait_until_async(lambda: ("a", CPU.image, True) in fake.calls, 5, "a's next pull")
        a = r.state()["nodes"]["a"]
        assert a["last_error"] == missing and a["pulling"] == "cpu" and a["has"] == [], a
        open_all(fake)
        await r.idle()
    a, b = r.state()["nodes"]["a"], r.state()["nodes"]["b"]
    assert a["has"] == ["cpu"] and a["needs"] == ["torch"] and a["pulling"] is None, a
    assert b["last_error"] == full and b["has"] == [] and b["pulling"] is None, b
    assert b["needs"] == ["torch", "cpu"]  # cpu not tried on a full disk
    assert ("b", CPU.image, True) not in fake.calls
    assert set(fake.stall_timeouts) == {7.0}  # PrePuller.pull_stall_timeout reaches the pull
    logged = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any(missing in m and "node a" in m for m in logged), logged
    assert any(full in m for m in logged), logged
    plans = await r.round()  # the next round plans the failed ones again
    assert plans["a"].pulls == (TORCH,) and plans["b"].pulls == (TORCH, CPU)
    fake.failures.clear()
    open_all(fake)
    await wait_until_async(lambda: fake.calls.count(("b", CPU.image, True)) == 1, 5, "b's pulls")
    open_all(fake)
    await r.idle()


# ---------------------------------------------------------------------- the real pull
class StreamingClient:
    """A node client whose pull streams events until told to stop."""

    def __init__(self, on_event: Callable[[int], None]) -> None:
        self.on_event = on_event
        self.closed = False
        self.events = 0

    def pull(self, image: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        for i in range(1000):
            self.events += 1
            self.on_event(i)
            yield {"status": "Downloading", "id": "l1",
                   "progressDetail": {"current": i, "total": 1000}}  # fmt: skip

    def close(self) -> None:
        self.closed = True


class PoolCluster:
    def __init__(self, client: StreamingClient) -> None:
        self.streaming = client

    def new_client(self, node: str, timeout: float) -> StreamingClient:
        return self.streaming

    def client(self, node: str) -> StreamingClient:
        return self.streaming

    async def run(
        self, node: str, fn: Callable[[], Any], timeout: float | None = None, *,
        executor: Any = None,
    ) -> Any:  # fmt: skip
        return await asyncio.get_running_loop().run_in_executor(executor, fn)


async def test_a_background_pull_stops_when_a_spawn_starts_pulling_there() -> None:
    cluster: Any = None
    spawn = None

    def on_event(i: int) -> None:
        nonlocal spawn
        if i == 10:  # a spawn starts pulling on the node mid-way
            spawn = pulls_on(cluster).spawn("a")
            spawn.__enter__()

    client = StreamingClient(on_event)
    cluster = PoolCluster(client)
    with pytest.raises(PullYielded, match="spawn started pulling on node a"):
        await pull(cluster, "a", "x:1", 30, lambda p, m: None, log, background=True)
    assert client.events == 11 and client.closed
    # while that spawn pulls, no background pull starts there; another node's may
    with pytest.raises(PullYielded, match="a spawn is pulling on node a"):
        await pull(cluster, "a", "x:1", 30, lambda p, m: None, log, background=True)
    assert spawn is not None
    spawn.__exit__(None, None, None)
    assert not pulls_on(cluster).spawning("a")


async def test_most_used_reads_the_spawn_counts_and_says_when_it_cannot() -> None:
    cluster = FakeCluster(a=Engine())
    fake = FakePull(cluster)
    asked: list[Any] = []

    async def counts(since: Any) -> Mapping[str, int]:
        asked.append(since)
        return {"torch": 3, "cpu": 1}

    r = PrePullRunner(
        cluster,  # type: ignore[arg-type]
        PrePuller(enabled=True, images="most-used:1"),
        lambda: Catalog((CPU, TORCH)),
        log,
        pull_fn=fake,
        spawn_counts=counts,
    )
    plans = await r.round()
    assert plans["a"].pulls == (TORCH,) and len(asked) == 1
    await wait_until_async(lambda: fake.calls, 5, "the pull")
    open_all(fake)
    await r.idle()
    off = runner(cluster, [Catalog((CPU, TORCH))], fake, images="most-used:1")
    assert (await off.round())["a"].pulls == ()
    assert "accounting database" in off.state()["message"]


async def test_with_a_registry_only_its_images_are_pulled() -> None:
    """PrePuller.registry (the site's): the catalog's images elsewhere are not pulled (not
    published yet), those of the registry are."""
    local = CatalogEntry("local", "Local", "none", "0", None, "jupyterhub-gpu/local:1")
    cluster = FakeCluster(a=Engine())
    fake = FakePull(cluster)
    r = runner(cluster, [Catalog((local, CPU))], fake, registry="reg:5000", disk_budget_gib=0)
    await r.round()
    await wait_until_async(lambda: len(fake.calls) == 1, 5, "the pull")
    fake.gate("a", CPU.image).set()
    await r.idle()
    assert fake.calls == [("a", CPU.image, True)]
    assert r.state()["nodes"]["a"]["has"] == ["cpu"]
    with pytest.raises(Exception, match="HOST\\[:PORT\\]"):
        PrePuller(registry="https://reg:5000/x")


async def test_a_changed_catalog_or_node_list_starts_a_round_before_the_interval() -> None:
    """Between rounds the runner looks at what ``changes`` returns (the hub's: the
    catalog file's time and the nodes with their drains) every change_check_interval
    seconds; a change starts a round at once, not after ``interval`` (an hour here)."""
    cluster = FakeCluster(a=Engine())
    fake = FakePull(cluster)
    catalog = [Catalog(())]
    version = [1]
    settings = PrePuller(enabled=True, interval=3600, change_check_interval=0.05)
    r = PrePullRunner(cluster, settings, lambda: catalog[0], log, pull_fn=fake,  # type: ignore[arg-type]
                      changes=lambda: version[0])  # fmt: skip
    r.start()
    try:
        await wait_until_async(lambda: r.rounds == 1, 5, "the first round")
        assert fake.calls == []
        catalog[0] = Catalog((CPU,))  # an image published: the catalog file changed
        version[0] = 2
        await wait_until_async(lambda: r.rounds == 2, 5, "a round on the change")
        await wait_until_async(lambda: fake.calls == [("a", CPU.image, True)], 5, "the pull")
    finally:
        r.stop()
        fake.gate("a", CPU.image).set()
        await r.idle()
