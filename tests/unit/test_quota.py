"""max_gpus_per_user: the GPUs a user holds at once over all their servers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.form import policy_from_config, resolve_bounds
from jupyterhub_gpu.core.form.user_quota import (
    GPUQuotaExceeded,
    Holdings,
    UserQuota,
    holder_user,
    holdings_of,
    quota_refusal,
)
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner
from tests.support.runtime import use_cluster

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "holder, user",
    [
        ("alice/", "alice"),
        ("alice/gpu2", "alice"),
        ("al.ice@example.org/x", "al.ice@example.org"),
        ("no-slash", None),
    ],
)
def test_holder_user(holder: str, user: str | None) -> None:
    assert holder_user(holder) == user


ALLOCATIONS = {
    "GPU-1": "alice/",
    "GPU-2": "alice/",
    "GPU-3": "alice/big",
    "GPU-4": "alicia/",  # a prefix of another name is another user
    "GPU-6": "bob/",
}


@pytest.mark.parametrize(
    "user, exclude, expected",
    [
        ("alice", "", Holdings(gpus=3, servers=2)),
        ("alice", "alice/big", Holdings(gpus=2, servers=1)),
        ("alicia", "", Holdings(gpus=1, servers=1)),
        ("bob", "", Holdings(gpus=1, servers=1)),
        ("carol", "", Holdings()),
    ],
)
def test_holdings_of(user: str, exclude: str, expected: Holdings) -> None:
    assert holdings_of(ALLOCATIONS, user, exclude=exclude) == expected


GROUP = UserQuota(4, "for group ml-lab")
SITE = UserQuota(2)


@pytest.mark.parametrize(
    "held, wanted, quota, expected",
    [
        (Holdings(), 2, SITE, None),
        (Holdings(1, 1), 1, SITE, None),
        (Holdings(3, 2), 0, GROUP, None),  # CPU-only: always
        (Holdings(9, 5), 1, UserQuota(None), None),  # no cap
        (Holdings(3, 2), 1, GROUP, None),  # exactly at the cap
        (
            Holdings(3, 2),
            2,
            GROUP,
            "You hold 3 GPUs in 2 servers and asked for 2 more (max 4 for group ml-lab); "
            "stop one of your servers or ask for 1 or fewer.",
        ),
        (
            Holdings(2, 1),
            1,
            SITE,
            "You hold 2 GPUs in 1 server and asked for 1 more (max 2 per user on this hub); "
            "stop one of your servers or start it without GPUs.",
        ),
        (Holdings(), 3, SITE, "You asked for 3 GPUs (max 2 per user on this hub); ask for fewer."),
        (Holdings(), 1, UserQuota(0), "You asked for 1 GPU (max 0 per user on this hub); "
         "ask for fewer."),
    ],
)  # fmt: skip
def test_quota_refusal(held: Holdings, wanted: int, quota: UserQuota, expected: str | None) -> None:
    assert quota_refusal(held, wanted, quota) == expected


@pytest.mark.parametrize(
    "defaults, groups, user_groups, expected",
    [
        ({}, {}, [], UserQuota(None)),
        ({"max_gpus_per_user": 2}, {}, ["x"], UserQuota(2)),
        (
            {"max_gpus_per_user": 2},
            {"ml-lab": {"max_gpus_per_user": 6}, "students": {"max_gpus_per_user": 1}},
            ["students", "ml-lab"],
            UserQuota(6, "for group ml-lab"),
        ),
        (  # a group may lower the site's cap
            {"max_gpus_per_user": 4},
            {"students": {"max_gpus_per_user": 1}},
            ["students"],
            UserQuota(1, "for group students"),
        ),
        (  # a group that sets other bounds only keeps the site's cap
            {"max_gpus_per_user": 4},
            {"ml-lab": {"max_gpus": 4}},
            ["ml-lab"],
            UserQuota(4),
        ),
        (  # a tie names the first group by name
            {},
            {"b": {"max_gpus_per_user": 3}, "a": {"max_gpus_per_user": 3}},
            ["b", "a"],
            UserQuota(3, "for group a"),
        ),
    ],
)
def test_quota_from_config(
    defaults: dict[str, Any], groups: dict[str, Any], user_groups: list[str], expected: UserQuota
) -> None:
    policy = policy_from_config({"max_gpus": 4, **defaults}, groups)
    assert resolve_bounds(policy, user_groups).quota == expected


@pytest.mark.parametrize(
    "defaults, groups, fragment",
    [
        ({"max_gpus_per_user": -1}, {}, "resource_defaults.max_gpus_per_user: must be an integer"),
        ({"max_gpus_per_user": 1.5}, {}, "max_gpus_per_user: must be an integer"),
        ({"max_gpus_per_user": True}, {}, "max_gpus_per_user: must be an integer"),
        ({"max_gpus_per_user": 0}, {}, "default_gpu_count: 1 is above max_gpus_per_user 0"),
        ({}, {"g": {"max_gpus_per_user": "4"}}, "group_bounds['g'].max_gpus_per_user"),
        ({}, {"g": {"max_gpu_per_user": 4}}, "unknown key(s) ['max_gpu_per_user']"),
    ],
)
def test_bad_quota_config_is_refused(
    defaults: dict[str, Any], groups: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError) as e:
        policy_from_config(defaults, groups)
    assert fragment in str(e.value)


# -- the spawner's synchronous step -------------------------------------------------------


def _snapshot() -> ClusterSnapshot:
    gpus = tuple(
        GPU(
            uuid=f"GPU-{i}",
            index=i,
            model="NVIDIA GeForce RTX 3090",
            memory_mib=24576,
            compute_capability=(8, 6),
        )
        for i in range(8)
    )
    inventory = NodeInventory(name="n1", driver_version="550.54.15", gpus=gpus)
    return ClusterSnapshot(nodes=(NodeState(inventory),), allocations={})


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    nodes = [{"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}]
    c = Cluster(ClusterSettings(nodes=nodes), GPUDockerSpawner().log)
    use_cluster(monkeypatch, c)
    return c


def _spawner(user: str, server: str = "") -> GPUDockerSpawner:
    orm = SimpleNamespace(name=server, server=None, user_options={}, last_activity=None)
    return GPUDockerSpawner(user=SimpleNamespace(name=user, groups=[]), orm_spawner=orm)


def test_the_cap_counts_every_server_of_the_user(cluster: Cluster) -> None:
    """Two servers of alice, one after the other in the same event-loop turn: the second
    sees what the first reserved, and is refused before it takes anything."""
    quota = UserQuota(3, "for group ml-lab")
    snapshot = _snapshot()
    first = _spawner("alice")
    first._decide_and_reserve(snapshot, PlacementRequest(gpu_count=2), quota)
    second = _spawner("alice", "big")
    with pytest.raises(GPUQuotaExceeded) as e:
        second._decide_and_reserve(snapshot, PlacementRequest(gpu_count=2), quota)
    assert str(e.value) == (
        "You hold 2 GPUs in 1 server and asked for 2 more (max 3 for group ml-lab); "
        "stop one of your servers or ask for 1 or fewer."
    )
    assert e.value.status_code == 429 and e.value.reason == "gpu_quota"
    assert cluster.ledger.held_by("alice/big") == []
    second._decide_and_reserve(snapshot, PlacementRequest(gpu_count=1), quota)
    assert len(cluster.ledger.held_by("alice/big")) == 1
    cpu_only = _spawner("alice", "cpu")
    cpu_only._decide_and_reserve(snapshot, PlacementRequest(gpu_count=0), quota)
    _spawner("bob")._decide_and_reserve(snapshot, PlacementRequest(gpu_count=3), quota)
    assert len(cluster.ledger.held_by("bob/")) == 3


def test_a_server_is_not_charged_for_its_own_holds(cluster: Cluster) -> None:
    """Holds left by this very server (a retried start) do not count against it."""
    cluster.ledger.reserve("alice/", "n1", ["GPU-0", "GPU-1"])
    _spawner("alice")._decide_and_reserve(_snapshot(), PlacementRequest(gpu_count=2), UserQuota(2))
    with pytest.raises(GPUQuotaExceeded):
        _spawner("alice", "two")._decide_and_reserve(
            _snapshot(), PlacementRequest(gpu_count=1), UserQuota(2)
        )
