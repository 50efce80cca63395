"""The security-critical parts of a server's container spec, against golden values."""

from __future__ import annotations

from typing import Any

import pytest

from jupyterhub_gpu.core.containers import device_requests, gpu_env, published_port
from jupyterhub_gpu.core.usernet import (
    bridge_name_problem,
    network_options,
    network_problem,
)
from jupyterhub_gpu.errors import NodeFailure

pytestmark = pytest.mark.unit

A, B = "GPU-aaaaaaaa-0000-4000-8000-000000000000", "GPU-bbbbbbbb-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    "uuids, driver, golden",
    [
        ([], "nvidia", []),
        ([], "cdi", []),
        (
            [A, B],
            "nvidia",
            [{"Driver": "nvidia", "Count": 0, "DeviceIDs": [A, B], "Capabilities": [["gpu"]],
              "Options": {}}],
        ),
        (
            [A],
            "cdi",
            [{"Driver": "cdi", "Count": 0, "DeviceIDs": [f"nvidia.com/gpu={A}"],
              "Capabilities": [], "Options": {}}],
        ),
    ],
)  # fmt: skip
def test_device_requests_name_exactly_the_assigned_gpus(
    uuids: list[str], driver: str, golden: list[dict[str, Any]]
) -> None:
    assert [dict(r) for r in device_requests(uuids, driver)] == golden


def test_an_unknown_device_driver_is_refused() -> None:
    with pytest.raises(ValueError, match="nvidia or cdi"):
        device_requests([A], "amd")


@pytest.mark.parametrize(
    "uuids, visible",
    [([], "void"), ([A], A), ([A, B], f"{A},{B}")],
)
def test_gpu_env_fences_the_server_whatever_the_image_says(uuids: list[str], visible: str) -> None:
    image_env = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all"}
    env = {**image_env, **gpu_env(uuids)}  # the spawner applies it last
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": visible,
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }


@pytest.mark.parametrize(
    "answer, port",
    [
        ([{"HostIp": "10.250.1.2", "HostPort": "32768"}], 32768),
        (
            [{"HostIp": "0.0.0.0", "HostPort": "41000"}, {"HostIp": "::", "HostPort": "41000"}],
            41000,
        ),
    ],
)
def test_published_port_is_read_back(answer: Any, port: int) -> None:
    assert published_port(answer) == port


@pytest.mark.parametrize(
    "answer",
    [None, [], [{}], [{"HostPort": ""}], [{"HostPort": "0"}], [{"HostPort": "70000"}],
     [{"HostPort": 8888}], "32768", [["32768"]]],
)  # fmt: skip
def test_no_published_port_is_a_clear_node_error(answer: Any) -> None:
    with pytest.raises(NodeFailure, match="did not publish your server's port"):
        published_port(answer)


def test_user_network_options_turn_container_to_container_traffic_off() -> None:
    assert network_options("jhgpu-users") == {
        "com.docker.network.bridge.enable_icc": "false",
        "com.docker.network.bridge.name": "jhgpu-users",
        # explicitly off: an engine whose default-network-opts turn IPv6 on for new networks
        # would otherwise give user servers IPv6, which the node firewall does not filter
        "com.docker.network.enable_ipv6": "false",
    }


GOOD = {"Driver": "bridge", "Internal": False, "Options": network_options("jhgpu-users")}


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({}, None),
        ({"Driver": "overlay"}, "driver 'overlay'"),
        ({"Options": {}}, "reach each other"),
        ({"Options": {**GOOD["Options"], "com.docker.network.bridge.enable_icc": "true"}},
         "reach each other"),
        ({"Options": {**GOOD["Options"], "com.docker.network.bridge.name": "br-1234"}},
         "node firewall"),
        ({"Internal": True}, "internal"),
        ({"EnableIPv6": True}, "without IPv6"),
        ({"EnableIPv6": True}, '"ipv6": false'),
        ({"EnableIPv6": False}, None),
    ],
)  # fmt: skip
def test_an_unfit_user_network_is_refused_with_the_fix(
    change: dict[str, Any], fragment: str | None
) -> None:
    problem = network_problem({**GOOD, **change}, "jupyterhub-gpu-users", "jhgpu-users")
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and fragment in problem


@pytest.mark.parametrize(
    "name, ok",
    [("jhgpu-users", True), ("a" * 15, True), ("a" * 16, False), ("", False), ("br 0", False)],
)
def test_bridge_names_are_linux_interface_names(name: str, ok: bool) -> None:
    assert (bridge_name_problem(name) is None) is ok


# ---------------------------------------------------------------- the whole spec (golden)
def _spec_input(**changes: Any) -> Any:
    from jupyterhub_gpu.core.containers import ServerContainer
    from jupyterhub_gpu.core.form.resources import ResourceLimits

    base = {
        "uid": 10001,
        "gid": 5000,
        "supplementary_gids": (5001, 5002),
        "labels": {"jupyterhub-gpu.owner": "alice"},
        "gpu_uuids": ("GPU-1111",),
        "network": "jhgpu-users",
        "limits": ResourceLimits(cpu=2.0, mem_bytes=4 << 30, shm_bytes=1 << 30, pids_limit=4096),
        "home": ("/mnt/homes/alice", "/home/alice"),
        "binds": {"/mnt/data/imagenet": {"bind": "/data/imagenet", "mode": "ro"}},
    }
    base.update(changes)
    return ServerContainer(**base)


def test_the_container_spec_is_golden() -> None:
    """The security-critical fields of a user's container, all of them, as Docker gets
    them: a change to any of them fails here first."""
    from jupyterhub_gpu.core.containers import container_spec

    create, host = container_spec(_spec_input())
    assert create == {
        "user": "10001:5000",
        "labels": {"jupyterhub-gpu.owner": "alice"},
        "working_dir": "/home/alice",
    }
    requests = host.pop("device_requests")
    assert [(r["Driver"], r["DeviceIDs"], r["Capabilities"]) for r in requests] == [
        ("nvidia", ["GPU-1111"], [["gpu"]])
    ]
    assert "Count" not in requests[0] or requests[0]["Count"] in (0, None)
    assert host == {
        "binds": {
            "/mnt/homes/alice": {"bind": "/home/alice", "mode": "rw"},
            "/mnt/data/imagenet": {"bind": "/data/imagenet", "mode": "ro"},
        },
        "network_mode": "jhgpu-users",
        "group_add": ["5001", "5002"],
        "shm_size": 1 << 30,
        "pids_limit": 4096,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
    }
    assert "privileged" not in host and "network_mode" in host and host["network_mode"] != "host"


def test_a_cpu_server_without_a_home_gets_no_gpu_and_no_working_dir() -> None:
    from jupyterhub_gpu.core.containers import container_spec

    create, host = container_spec(_spec_input(gpu_uuids=(), home=None, binds={}))
    assert host["device_requests"] == [] and host["binds"] == {}
    assert "working_dir" not in create


def test_server_labels_carry_the_allocation_and_its_seal() -> None:
    from datetime import datetime, timezone

    from jupyterhub_gpu.core.allocation import Allocation
    from jupyterhub_gpu.core.containers import server_labels

    claim = Allocation("hub1", "a-1", "alice", "", "node-a", ("GPU-1", "GPU-2"))
    at = datetime(2026, 11, 26, 9, 0, 0, tzinfo=timezone.utc)
    labels = server_labels(claim, "demo:1", at, b"k" * 32)
    assert labels == {
        "jupyterhub-gpu.hub": "hub1",
        "jupyterhub-gpu.owner": "alice",
        "jupyterhub-gpu.server": "",
        "jupyterhub-gpu.node": "node-a",
        "jupyterhub-gpu.gpus": "GPU-1,GPU-2",
        "jupyterhub-gpu.image": "demo:1",
        "jupyterhub-gpu.started": "2026-11-26T09:00:00+00:00",
        "jupyterhub-gpu.allocation": "a-1",
        "jupyterhub-gpu.seal": claim.seal(b"k" * 32),
        # every key of ours, empty where unused: no image label reaches the container
        "jupyterhub-gpu.share": "",
        "jupyterhub-gpu.share_memory_mib": "",
    }
    assert server_labels(claim, "demo:1", at, None)["jupyterhub-gpu.seal"] == ""
