"""A workload is one pure description (issue 31): ``make_container`` gives Docker's whole
create request, golden-tested as a whole, and the spawner submits exactly that."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets.config import Config

from jupyterhub_gpu.core.containers import ServerContainer
from jupyterhub_gpu.core.form.resources import ResourceLimits
from jupyterhub_gpu.core.sharing.mps import NO_MPS_PIPE_DIRECTORY, MpsPaths
from jupyterhub_gpu.core.sharing.policy import Share
from jupyterhub_gpu.core.workload import (
    FORBIDDEN_HOST_KEYS,
    ContainerRequest,
    Workload,
    make_container,
)

pytestmark = pytest.mark.unit

LIMITS = ResourceLimits(cpu=2.0, mem_bytes=4 << 30, shm_bytes=1 << 30, pids_limit=4096)


def container(**changes: Any) -> ServerContainer:
    base: dict[str, Any] = {
        "uid": 10001,
        "gid": 5000,
        "supplementary_gids": (5001,),
        "labels": {"jupyterhub-gpu.owner": "alice"},
        "gpu_uuids": ("GPU-1111",),
        "network": "jhgpu-users",
        "limits": LIMITS,
        "home": ("/mnt/homes/alice", "/home/alice"),
        "binds": {"/mnt/data/imagenet": {"bind": "/data/imagenet", "mode": "ro"}},
    }
    base.update(changes)
    return ServerContainer(**base)


def server(**changes: Any) -> Workload:
    base: dict[str, Any] = {
        "name": "jupyter-alice",
        "image": "jupyterhub-gpu/pytorch:2.4",
        "command": ["start-singleuser.sh", "--port=8888"],
        # an image's or a user's GPU variables never win: they come last
        "env": {"JUPYTERHUB_USER": "alice", "NVIDIA_VISIBLE_DEVICES": "all"},
        "container": container(),
        "port": 8888,
        "publish_ip": "10.250.1.2",
        "site_create": {"stop_signal": "SIGINT", "user": "0", "labels": {"x": "y"}},
        "site_host": {"dns": ["10.0.0.53"], "privileged": True, "network_mode": "host",
                      "cap_add": ["SYS_ADMIN"], "binds": {"/": {"bind": "/host"}}},
    }  # fmt: skip
    base.update(changes)
    return Workload(**base)


def plain(request: ContainerRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    host = dict(request.host)
    host["device_requests"] = [
        (r["Driver"], r["DeviceIDs"], r["Capabilities"]) for r in host["device_requests"]
    ]
    return request.create, host


def test_a_server_is_described_whole_and_golden() -> None:
    """Every field Docker gets, all of them: a change to any fails here first. The site's
    extras go under ours (its ``user``, ``labels``, ``privileged``, ``network_mode``,
    ``cap_add`` and ``binds`` never reach the container; its ``dns`` does)."""
    create, host = plain(make_container(server()))
    assert create == {
        "stop_signal": "SIGINT",
        "image": "jupyterhub-gpu/pytorch:2.4",
        "command": ["start-singleuser.sh", "--port=8888"],
        "name": "jupyter-alice",
        "environment": {
            "JUPYTERHUB_USER": "alice",
            "CUDA_MPS_PIPE_DIRECTORY": NO_MPS_PIPE_DIRECTORY,
            "NVIDIA_VISIBLE_DEVICES": "GPU-1111",
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        },
        "user": "10001:5000",
        "labels": {"jupyterhub-gpu.owner": "alice"},
        "working_dir": "/home/alice",
        "ports": {"8888/tcp": None},
    }
    assert list(create["environment"])[-2:] == [
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
    ]  # the GPU variables last
    assert host == {
        "dns": ["10.0.0.53"],
        "device_requests": [("nvidia", ["GPU-1111"], [["gpu"]])],
        "binds": {
            "/mnt/homes/alice": {"bind": "/home/alice", "mode": "rw"},
            "/mnt/data/imagenet": {"bind": "/data/imagenet", "mode": "ro"},
        },
        "network_mode": "jhgpu-users",
        "group_add": ["5001"],
        "shm_size": 1 << 30,
        "pids_limit": 4096,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": 4 << 30,
        "cpu_period": 100_000,
        "cpu_quota": 200_000,
        "auto_remove": True,
        "port_bindings": {8888: ("10.250.1.2",)},
    }


def test_a_job_is_the_same_description_with_another_command_and_no_port() -> None:
    """What a batch job or an SSH session will reuse: same identity, isolation, GPUs and
    limits; nothing published, no JupyterLab."""
    job = server(command=["python", "train.py"], port=None, site_create={}, site_host={})
    create, host = plain(make_container(job))
    _, as_server = plain(make_container(server(site_create={}, site_host={})))
    assert create["command"] == ["python", "train.py"] and "ports" not in create
    assert "port_bindings" not in host
    assert host == {k: v for k, v in as_server.items() if k != "port_bindings"}


def test_an_mps_share_is_told_where_the_daemon_is_and_mounts_it_last() -> None:
    mps = MpsPaths("/run/jupyterhub-gpu/mps", "/run/jupyterhub-gpu/mps-shm")
    w = server(
        container=container(mps=mps),
        share=Share(1, 4, 6144, "mps"),
        env={"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"},
    )
    create, host = plain(make_container(w))
    env = create["environment"]
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/jupyterhub-gpu/mps"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=6144M"
    assert "shm_size" not in host  # /dev/shm is the daemon's
    assert host["binds"]["/run/jupyterhub-gpu/mps-shm"]["bind"] == "/dev/shm"


def test_a_cpu_workload_gets_no_gpu_and_nothing_forbidden_from_the_site() -> None:
    site = dict.fromkeys(FORBIDDEN_HOST_KEYS, "x")
    create, host = plain(make_container(server(container=container(gpu_uuids=()), site_host=site)))
    assert (
        host["device_requests"] == [] and create["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    )
    assert not set(host) & FORBIDDEN_HOST_KEYS


# ---------------------------------------------------------------- the spawner submits it
class Client:
    """Docker's APIClient as far as create_object uses it."""

    def __init__(self) -> None:
        self.created: dict[str, Any] = {}

    def create_host_config(self, **kw: Any) -> dict[str, Any]:
        return {"from-create_host_config": kw}

    def create_container(self, **kw: Any) -> dict[str, Any]:
        self.created = kw
        return {"Id": "c" * 64}


def test_the_spawner_submits_exactly_the_description(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

    c = Config()
    c.DockerSpawner.extra_host_config = {"dns": ["10.0.0.53"], "privileged": True}
    hub = SimpleNamespace(
        public_host="", url="/hub/", base_url="/hub/", api_url="http://h:8081/hub/api"
    )
    orm = SimpleNamespace(name="", server=None, user_options={}, last_activity=None)
    user = SimpleNamespace(name="alice", groups=[], url="/user/alice/")
    s = GPUDockerSpawner(user=user, orm_spawner=orm, config=c, hub=hub)
    s.image = "jupyterhub-gpu/pytorch:2.4"
    s.cmd = ["start-singleuser.sh"]
    s.gpu_uuids = ["GPU-1111"]
    s.host_ip = "10.250.1.2"
    s._container = container(gpu_uuids=("GPU-1111",))
    client = Client()
    networks: list[str] = []

    async def ensure_user_network(node: str, network: str, bridge: str) -> None:
        networks.append(network)

    async def docker(method: str, *args: Any, **kw: Any) -> Any:
        return getattr(client, method)(*args, **kw)

    s.node_name = "node-a"
    s._on_node = docker  # type: ignore[method-assign]
    cluster = SimpleNamespace(ensure_user_network=ensure_user_network, client=lambda node: client)
    monkeypatch.setattr(GPUDockerSpawner, "cluster", property(lambda self: cluster))
    s._node = lambda name: SimpleNamespace(publish_ip="10.250.1.2")  # type: ignore[method-assign]

    async def go() -> tuple[dict[str, Any], ContainerRequest]:
        await s.create_object()
        return client.created, make_container(await s.workload())

    created, expected = asyncio.run(go())
    host = created.pop("host_config")
    assert created == expected.create
    assert host == {"from-create_host_config": expected.host}
    assert "privileged" not in expected.host and expected.host["dns"] == ["10.0.0.53"]
    assert created["environment"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-1111"
    assert networks == [s.site.user_network]
