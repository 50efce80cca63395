"""Shared fixtures. Integration fixtures start the real local cluster (scripts/cluster.sh)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml


def _import_the_package_under_test() -> None:
    """With ``$JHGPU_UNDER_TEST`` (scripts/test.sh: the wheel installed apart), import
    ``jupyterhub_gpu`` from there, not from the working tree that pytest put first on
    ``sys.path`` for the ``tests`` package; later imports of its modules follow it."""
    under_test = os.environ.get("JHGPU_UNDER_TEST")
    if not under_test:
        return
    tree = Path(__file__).resolve().parents[1]
    before = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != tree]
    try:
        import jupyterhub_gpu
    finally:
        sys.path[:] = before
    where = Path(jupyterhub_gpu.__file__).resolve()
    if not where.is_relative_to(Path(under_test).resolve()):
        raise pytest.UsageError(
            f"JHGPU_UNDER_TEST is {under_test}, but jupyterhub_gpu was imported from {where}"
        )


_import_the_package_under_test()

from tests.ldap_fixture import ldap_server  # noqa: E402, F401
from tests.support.agent import AgentProcess  # noqa: E402
from tests.support.cluster import REPO, TEST_IMAGE, Engine, cluster_up, remove_hub_containers  # noqa: E402
from tests.support.distribution import Distribution  # noqa: E402
from tests.support.hub import Hub  # noqa: E402

CATALOG = REPO / "scripts" / "demo" / "catalog.yaml"


@pytest.fixture(scope="session")
def engines() -> list[Engine]:
    """Three real Docker engines (node-a, node-b, node-c), started once per session."""
    return cluster_up(3)


@pytest.fixture
def engine(engines: list[Engine]) -> Engine:
    return engines[0]


@pytest.fixture(scope="session")
def real_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Distribution]:
    """A real registry (Debian's docker-registry) on the site address, which the nodes'
    engines push to and pull from: ``.address`` is ``host:port``; ``.tags(repo)`` and
    ``.catalog()`` read its API. Its storage is a folder of the session."""
    with Distribution(tmp_path_factory.mktemp("real-registry")) as registry:
        yield registry


def gpu_inventory(
    node: str,
    prefix: str,
    models: list[tuple[str, int, str]],
    driver_version: str = "550.54.15",
    cuda_driver_version: str = "12.4",
) -> dict:
    """A declared-inventory node: ``models`` is a list of (model, memory_mib, cc)."""
    return {
        "name": node,
        "driver_version": driver_version,
        "cuda_driver_version": cuda_driver_version,
        "gpus": [
            {
                "uuid": f"GPU-{prefix}{i:04d}-0000-4000-8000-000000000000",
                "index": i,
                "model": m,
                "memory_mib": mem,
                "compute_capability": cc,
            }
            for i, (m, mem, cc) in enumerate(models)
        ],
    }


@pytest.fixture
def make_hub(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator:
    """Factory: start a real hub whose GPUDockerSpawner uses the given engines/inventory."""
    hubs: list[tuple[Hub, list[Engine]]] = []

    def factory(
        nodes: list[Engine],
        inventory: list[dict],
        extra: str = "",
        agents: dict[str, AgentProcess] | None = None,
        extra_engines: Sequence[Engine] = (),
    ) -> Hub:
        """``extra_engines``: engines not configured at start (a test may add them through
        a nodes file); this hub's containers there are logged and removed like the others."""
        work = tmp_path / f"hub{len(hubs)}"
        work.mkdir()
        inv = work / "inventory.yaml"
        inv.write_text(yaml.safe_dump({"nodes": inventory}))
        homes = tmp_path / "homes"
        homes.mkdir(exist_ok=True)
        if agents:
            node_cfg = [e.node_config(agent_url=agents[e.name].url) for e in nodes]
            token = next(iter(agents.values())).token
            extra = f"c.GPUCluster.agent_token = {token!r}\n" + extra
        else:
            node_cfg = [e.node_config() for e in nodes]
        hub = Hub(work)
        hub.extra_config = (
            f"""
c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.nodes = {node_cfg!r}
c.GPUCluster.probe_mode = "declared"
c.GPUCluster.inventory_file = {str(inv)!r}
c.GPUDockerSpawner.image = {TEST_IMAGE!r}
c.GPUCluster.catalog_file = {str(CATALOG)!r}
c.GPUDockerSpawner.resource_defaults = {{
    "max_gpus": 8, "max_cpu": 2, "max_mem_gib": 4, "default_cpu": 1, "default_mem_gib": 1,
}}
c.GPUDockerSpawner.home_template = "{homes}/{{username}}"
c.GPUCluster.hub_id = {hub.hub_id!r}
c.GPUDockerSpawner.prefix = "jhgpu-" + {hub.hub_id!r}
"""
            + extra
        )
        hubs.append((hub, [*nodes, *(e for e in extra_engines if e not in nodes)]))
        return hub.start()

    yield factory
    failed = getattr(request.node, "rep_call", None)
    for hub, nodes in hubs:
        try:
            if failed is not None and failed.failed:
                print(f"\n===== hub log tail ({hub.workdir}) =====\n{hub.log_tail(80)}")
                _print_container_logs(hub, nodes)
        finally:
            hub.stop()
            for e in nodes:
                try:
                    remove_hub_containers(e, hub.hub_id)
                except Exception as exc:  # a dead engine must not leak the other nodes' containers
                    print(f"could not clean {e.name}: {exc}")


def _print_container_logs(hub: Hub, nodes: list[Engine]) -> None:
    for e in nodes:
        with e.client() as client:
            for c in client.containers.list(
                ignore_removed=True,
                all=True, filters={"label": f"jupyterhub-gpu.hub={hub.hub_id}"}
            ):
                print(f"===== container {c.name} on {e.name} ({c.status}) =====")
                print(c.logs(tail=30).decode(errors="replace"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


#: the lock the tests marked ``site_ports`` take for their whole run (set-up to teardown)
SITE_PORTS_LOCK = Path("/tmp/jhgpu-site-ports.lock")


@pytest.fixture(autouse=True)
def _site_ports(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``site_ports`` runs a hub as an installed site does, on the site
    address's fixed ports (8000, 8001, 8081, 9451): two such tests on two workers at once
    would meet each other's hub (one CI run did). They take turns; others pass freely."""
    if request.node.get_closest_marker("site_ports") is None:
        yield
        return
    import fcntl

    with open(SITE_PORTS_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
