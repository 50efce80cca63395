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
