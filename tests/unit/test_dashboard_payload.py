"""The dashboard's hub side: the cluster payload (pure), the servers read from spawners,
the snapshot cache, and ``configure(c)`` loaded into a real JupyterHub application."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
from jupyterhub.app import JupyterHub
from traitlets.config import Config

from jupyterhub_gpu.core.dashboard.history import History
from jupyterhub_gpu.core.dashboard.view import Viewer, cluster_view
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.hub.api.cluster import (
    ADMIN_SCOPE,
    READ_SCOPE,
    ClusterAPIHandler,
    NodeDrainAPIHandler,
    SnapshotCache,
    active_servers,
)
from jupyterhub_gpu.hub.api.notices import LabNoticesHandler
from jupyterhub_gpu.hub.extensions import HUB_TEMPLATES
from jupyterhub_gpu.hub.extensions import configure_dashboard as configure
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.runtime import SETTINGS_KEY
from jupyterhub_gpu.wire.cluster import (
    GPU_STATUSES,
    ServerInfo,
    build_payload,
    decode_payload,
    gpu_status,
    queue_entries,
)
from jupyterhub_gpu.wire.nodes_file import NodeSpec
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
RTX = "NVIDIA GeForce RTX 3090"


def gpu(uuid: str, index: int = 0, **kw: Any) -> GPU:
    return GPU(uuid, index, kw.pop("model", RTX), 24576, (8, 6), **kw)


def state(name: str, *gpus: GPU, schedulable: bool = True, reachable: bool = True) -> NodeState:
    return NodeState(NodeInventory(name, "550.54.15", gpus), schedulable, reachable)


def spec(name: str, drain: bool = False) -> NodeSpec:
    return NodeSpec(
        name, "unix:///var/run/docker.sock", "10.0.0.1", labels={"rack": "r1"}, drain=drain
    )


# ---------------------------------------------------------------------- payload
def world() -> tuple[ClusterSnapshot, list[NodeSpec], list[ServerInfo]]:
    a = state(
        "node-a",
        gpu("GPU-a0", 0, utilization_pct=87.25, memory_used_mib=9000, temperature_c=71.26),
        gpu("GPU-a1", 1),
        gpu("GPU-a2", 2, process_containers=("foreign-container",)),
        gpu("GPU-a3", 3, healthy=False),
        gpu("GPU-a4", 4),
    )
    b = state("node-b", gpu("GPU-b0", model="NVIDIA A100-SXM4-40GB"), reachable=False)
    c = state("node-c", gpu("GPU-c0"), schedulable=False)
    d = state("node-d", gpu("GPU-d0"), schedulable=False)
    snapshot = ClusterSnapshot(
        (a, b, c, d),
        allocations={"GPU-a0": "alice/train", "GPU-a4": "bob/"},
        our_containers=frozenset({"ours"}),
    )
    servers = [
        ServerInfo("bob", "", "node-a", ("GPU-a4",), "demo-cuda12", "CUDA 12", NOW, NOW, True),
        ServerInfo(
            "alice",
            "train",
            "node-a",
            ("GPU-a0",),
            "demo-cuda12",
            "CUDA 12",
            NOW - timedelta(hours=2),
            NOW - timedelta(minutes=5),
            True,
        ),
        ServerInfo("carol", "cpu", "node-b", (), "demo-cpu", "", None, None, False, "spawn"),
    ]
    return (
        snapshot,
        [spec("node-a"), spec("node-b"), spec("node-c", drain=True), spec("node-d")],
        servers,
    )


def test_payload_says_what_each_gpu_is_and_who_holds_it() -> None:
    snapshot, specs, servers = world()
    p = build_payload(
        snapshot, specs, servers, {"node-d": "new PSU"}, now=NOW, orphans=frozenset({"GPU-a4"})
    )
    nodes = {n["name"]: n for n in p["nodes"]}
    gpus = {g["uuid"]: g for n in p["nodes"] for g in n["gpus"]}
    assert {u: g["status"] for u, g in gpus.items()} == {
        "GPU-a0": "held",
        "GPU-a1": "free",
        "GPU-a2": "foreign",
        "GPU-a3": "broken",
        "GPU-a4": "held",
        "GPU-b0": "offline",
        "GPU-c0": "drained",
        "GPU-d0": "drained",
    }
    assert set(g["status"] for g in gpus.values()) <= set(GPU_STATUSES)
    assert gpus["GPU-a0"]["holder"] == "alice/train" and not gpus["GPU-a0"]["orphan"]
    assert gpus["GPU-a4"]["orphan"] and gpus["GPU-a1"]["holder"] is None
    assert gpus["GPU-a0"]["utilization_pct"] == 87.2 and gpus["GPU-a0"]["temperature_c"] == 71.3
    assert gpus["GPU-a0"]["label"] == "RTX 3090" and gpus["GPU-a3"]["healthy"] is False
    assert [nodes[n]["state"] for n in nodes] == ["up", "down", "drained", "drained"]
    assert (nodes["node-c"]["drained_by"], nodes["node-d"]["drained_by"]) == ("nodes file", "admin")
    assert nodes["node-d"]["drain_note"] == "new PSU" and nodes["node-a"]["labels"] == {
        "rack": "r1"
    }
    assert p["totals"] == {"nodes": 4, "nodes_up": 1, "gpus": 8, "free": 1, "held": 2}
    assert {m["model"]: m["free"] for m in p["models"]} == {RTX: 1, "NVIDIA A100-SXM4-40GB": 0}
    assert p["queue"] == [] and p["reservations"] == []
    assert json.loads(json.dumps(p)) == p  # plain JSON all through


def test_payload_servers_are_sorted_with_utc_times_and_no_secrets() -> None:
    snapshot, specs, servers = world()
    p = build_payload(snapshot, specs, servers, {}, now=NOW)
    assert [s["key"] for s in p["servers"]] == ["alice/train", "bob/", "carol/cpu"]
    alice = p["servers"][0]
    assert alice["started"] == "2026-01-01T10:00:00+00:00"
    assert alice["last_activity"] == "2026-01-01T11:55:00+00:00"
    assert alice["image"] == "demo-cuda12" and alice["image_name"] == "CUDA 12"
    assert alice["cull_at"] is None and p["generated_at"] == "2026-01-01T12:00:00+00:00"
    carol = p["servers"][2]
    assert (
        carol["pending"] == "spawn"
        and carol["started"] is None
        and carol["image_name"] == "demo-cpu"
    )
    assert "token" not in json.dumps(p)


def test_the_hubs_queue_becomes_payload_entries_and_their_rows() -> None:
    two_rtx = SimpleNamespace(gpu_count=2, allowed_models=frozenset({RTX}))
    any_gpu = SimpleNamespace(gpu_count=1, allowed_models=None)
    two_models = SimpleNamespace(gpu_count=1, allowed_models=frozenset({RTX, "A100"}))
    waiting = [
        SimpleNamespace(
            id="bob/big",
            user="bob",
            group="ml",
            request=two_rtx,
            enqueued_at=(NOW - timedelta(minutes=10)).timestamp(),
        ),
        SimpleNamespace(
            id="carol/", user="carol", group="", request=any_gpu, enqueued_at=NOW.timestamp()
        ),
        SimpleNamespace(
            id="dave/x", user="dave", group="", request=two_models, enqueued_at=NOW.timestamp()
        ),
    ]
    entries = queue_entries(waiting)
    assert entries[0] == {
        "user": "bob",
        "server": "big",
        "group": "ml",
        "gpus": 2,
        "model": RTX,
        "models": [RTX],
        "since": "2026-01-01T11:50:00+00:00",
        "position": None,
        "estimate": None,
    }
    assert (entries[1]["server"], entries[1]["model"], entries[1]["models"]) == ("", None, None)
    snapshot, specs, servers = world()
    p = build_payload(snapshot, specs, servers, {}, now=NOW, queue=entries)
    rows = cluster_view(decode_payload(p), Viewer("x"), History(), now=NOW).queue
    assert [(r["position"], r["who"], r["wants"], r["waiting"]) for r in rows] == [
        ("-", "bob/big", f"2 GPU(s), {RTX}", "10 min ago"),
        ("-", "carol", "1 GPU(s), any model", "just now"),
        ("-", "dave/x", "1 GPU(s), one of 2 models", "just now"),
    ]


def test_a_gpu_is_free_exactly_when_the_spawn_form_says_so() -> None:
    snapshot, _, _ = world()
    from jupyterhub_gpu.core.form.availability import gpu_is_free

    for node in snapshot.nodes:
        for g in node.inventory.gpus:
            assert (gpu_status(snapshot, node, g) == "free") == gpu_is_free(snapshot, node, g)


# ---------------------------------------------------------------------- servers from spawners
def spawner(**kw: Any) -> SimpleNamespace:
    orm = SimpleNamespace(started=datetime(2026, 1, 1, 10, 0), last_activity=None)
    defaults: dict[str, Any] = dict(
        active=True,
        ready=True,
        pending=None,
        user_options={},
        orm_spawner=orm,
        node_name="",
        gpu_uuids=[],
    )
    return SimpleNamespace(**{**defaults, **kw})


def test_active_servers_read_the_spawners_and_skip_the_odd_one() -> None:
    class Broken:
        @property
        def active(self) -> bool:
            raise RuntimeError("boom")

    catalog = SimpleNamespace(get=lambda slug: SimpleNamespace(display_name=f"Image {slug}"))
    users = [
        SimpleNamespace(
            name="alice",
            spawners={
                "": spawner(
                    user_options={"image": "demo"},
                    node_name="node-a",
                    gpu_uuids=["GPU-1"],
                    catalog=catalog,
                ),
                "old": spawner(active=False),
                "odd": Broken(),
            },
        ),
        SimpleNamespace(
            name="bob",
            spawners={"x": spawner(user_options={"image": 3}, pending="spawn", ready=False)},
        ),
    ]
    found = active_servers(users)
    assert [s.key for s in found] == ["alice/", "bob/x"]
    alice, bob = found
    assert (alice.node, alice.gpu_uuids, alice.image, alice.image_name) == (
        "node-a",
        ("GPU-1",),
        "demo",
        "Image demo",
    )
    assert alice.started == datetime(2026, 1, 1, 10, 0, tzinfo=timezone.utc)
    assert (bob.image, bob.pending, bob.ready) == ("", "spawn", False)


# ---------------------------------------------------------------------- snapshot cache
class FakeCluster:
    def __init__(self, delay: float = 0.0) -> None:
        self.calls, self.delay = 0, delay
        self.ledger = GPULedger()
        self.log = logging.getLogger("test.cluster")

    async def snapshot(self) -> ClusterSnapshot:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return ClusterSnapshot((state(f"n{self.calls}", gpu("GPU-1")),))

    def last_nodes(self) -> tuple[NodeState, ...]:
        return (state("last-known"),)


async def test_snapshot_cache_reads_the_nodes_at_most_every_max_age() -> None:
    cluster, cache = FakeCluster(), SnapshotCache(max_age=60)
    cluster.ledger.reserve("alice/", "n1", ["GPU-1"])
    cluster.ledger.adopt("bob/", "n1", ["GPU-2"], orphaned=True)
    first, fresh, orphans = await cache.get(cluster)
    again, _, _ = await cache.get(cluster)
    assert cluster.calls == 1 and fresh and again.nodes == first.nodes
    assert dict(first.allocations) == {"GPU-1": "alice/", "GPU-2": "bob/"}
    assert orphans == {"GPU-2"}
    cache.invalidate()  # a drain: the next answer reads the nodes again
    third, _, _ = await cache.get(cluster)
    assert cluster.calls == 2 and third.nodes[0].name == "n2"


async def test_a_slow_snapshot_is_not_waited_for_nor_started_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, cache = FakeCluster(delay=0.3), SnapshotCache(max_age=0, timeout=0.05)
    snapshot, fresh, _ = await cache.get(cluster)
    assert not fresh and [n.name for n in snapshot.nodes] == ["last-known"]
    _, fresh, _ = await cache.get(cluster)
    assert not fresh and cluster.calls == 1  # the first one is still running
    slow = [r for r in caplog.records if "reading the nodes failed or is slow" in r.message]
    assert len(slow) == 1 and "no answer within 0.05 s" in slow[0].message  # once per outage
    # it ends: what it read is kept, late as it is (the event: the cache has kept it)
    await wait_until_async(lambda: cache._snapshot is not None, 10, "the slow read to end")
    cache.max_age = 60
    snapshot, fresh, _ = await cache.get(cluster)
    assert cluster.calls == 1 and fresh and snapshot.nodes[0].name == "n1"


# ---------------------------------------------------------------------- configure(c)
def site_config() -> Config:
    c = Config()
    c.JupyterHub.services = [{"name": "gpu-culler", "command": ["culler"]}]
    c.JupyterHub.load_roles = [
        {"name": "gpu-culler", "scopes": ["list:users"], "services": ["gpu-culler"]},
        {"name": "user", "scopes": ["self", "access:services!service=gpu-accounting"]},
    ]
    c.GPUCluster.accounting_url = "postgresql+psycopg://jhgpu:secret@db/jhgpu"
    return c


def test_configure_adds_api_service_role_and_link_and_keeps_the_sites_own() -> None:
    c = site_config()
    configure(c, show_names=False, config_file="/etc/jupyterhub/dashboard_config.py")
    app = JupyterHub(config=c)  # every value is one the hub's traits accept
    assert set(app.custom_scopes) == {READ_SCOPE, ADMIN_SCOPE}
    assert [h[0] for h in app.extra_handlers] == [
        "/api/gpu/cluster",
        "/api/gpu/nodes/([^/]+)/drain",
        "/gpu/lab-notices",  # each server's GPU readout in its JupyterLab
    ]
    assert [h[1] for h in app.extra_handlers] == [
        ClusterAPIHandler,
        NodeDrainAPIHandler,
        LabNoticesHandler,
    ]
    assert "jhgpu_notices" not in app.template_vars  # the hub pages' notices: not asked
    # the readouts read the nodes through the dashboard's cache: one reading for both
    runtime = app.tornado_settings[SETTINGS_KEY]
    assert runtime.snapshots is app.extra_handlers[0][2]["cache"]
    culler, dashboard = app.services
    assert culler["name"] == "gpu-culler"
    assert dashboard["name"] == "gpu-dashboard" and dashboard["oauth_no_confirm"] is True
    assert dashboard["command"][1:] == [
        "-m",
        "jupyterhub_gpu.services.dashboard",
        "--GPUDashboard.show_names=False",
        "--config=/etc/jupyterhub/dashboard_config.py",
    ]
    assert "secret" not in " ".join(dashboard["command"])  # the password is in the environment
    env = dashboard["environment"]
    assert env == {
        "JUPYTERHUB_GPU_ACCOUNTING_URL": "postgresql+psycopg://jhgpu:secret@db/jhgpu",
        # the hub's navigation bar for the dashboard's pages (edges/hub_page.py)
        "JUPYTERHUB_GPU_PAGE": '{"services": [], "template_vars": {"jhgpu_dashboard": '
        '"gpu-dashboard"}}',
    }
    roles = {r["name"]: r for r in app.load_roles}
    assert roles["gpu-dashboard"] == {
        "name": "gpu-dashboard",
        "scopes": [READ_SCOPE, ADMIN_SCOPE, "delete:servers"],
        "services": ["gpu-dashboard"],
    }
    assert roles["user"]["scopes"] == [
        "self",
        "access:services!service=gpu-accounting",
        "access:services!service=gpu-dashboard",
    ]
    assert roles["gpu-culler"]["scopes"] == ["list:users"]
    assert app.template_paths[0] == str(HUB_TEMPLATES)
    assert app.template_vars["jhgpu_dashboard"] == "gpu-dashboard"


def test_configure_on_a_bare_config_makes_the_user_role() -> None:
    c = Config()
    c.JupyterHub.services.append({"name": "tester", "api_token": "x" * 32})  # a lazy value
    configure(c, name="gpus", nav_link=False)
    app = JupyterHub(config=c)
    assert [s["name"] for s in app.services] == ["tester", "gpus"]
    assert app.services[1]["display"] is True
    # no accounting URL of its own; only the hub's bar for its pages (its own link, in
    # the Services menu, since nav_link is off)
    assert app.services[1]["environment"] == {
        "JUPYTERHUB_GPU_PAGE": '{"services": ["gpus"], "template_vars": {}}'
    }
    roles = {r["name"]: r for r in app.load_roles}
    assert roles["user"]["scopes"] == ["self", "access:services!service=gpus"]
    assert roles["gpus"]["services"] == ["gpus"]
    assert "jhgpu_dashboard" not in app.template_vars
    c.GPUCluster.accounting_url = ""  # a hub that records nothing: no charts either
    configure(c, name="gpus2")
    env = JupyterHub(config=c).services[-1]["environment"]
    assert env["JUPYTERHUB_GPU_ACCOUNTING_URL"] == ""


def hub_page_env() -> jinja2.Environment:
    """JupyterHub's own template loader, with ours first (as app.py builds it)."""
    import jupyterhub.app

    base = JupyterHub()._template_paths_default()[0]
    assert jupyterhub.app  # the hub's templates are installed with it
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [
                jinja2.PrefixLoader({"templates": jinja2.FileSystemLoader([base])}, "/"),
                jinja2.FileSystemLoader([str(HUB_TEMPLATES), base]),
            ]
        ),
        autoescape=True,
    )


def test_the_hubs_pages_get_the_gpus_link_and_the_form_preselection() -> None:
    user = SimpleNamespace(
        name="alice", json_escaped_name="alice", spawner=SimpleNamespace(options_form=True)
    )
    html = (
        hub_page_env()
        .get_template("spawn.html")
        .render(
            static_url=lambda path, **_: f"/hub/static/{path}",
            base_url="/hub/",
            prefix="/",
            user=user,
            parsed_scopes={},
            services=[],
            jhgpu_dashboard="gpu-dashboard",
            spawner_options_form='<select id="jhgpu-gpu-model"></select>',
            url="/hub/spawn",
        )
    )
    assert 'id="jhgpu-dashboard-link" href="/services/gpu-dashboard/">GPUs</a>' in html
    assert 'href="/hub/home">Home</a>' in html  # the hub's own items stay
    assert "gpu_model=" in html and 'getElementById("jhgpu-gpu-model")' in html
    plain = (
        hub_page_env()
        .get_template("home.html")
        .render(
            static_url=lambda path, **_: f"/hub/static/{path}",
            base_url="/hub/",
            prefix="/",
            user=user,
            parsed_scopes={},
            services=[],
            default_server=None,
            named_spawners=[],
            spawner_options_form=None,
        )
    )
    assert "jhgpu-dashboard-link" not in plain  # without configure's template variable
