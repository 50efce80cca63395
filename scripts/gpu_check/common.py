"""What the helpers of scripts/gpu-check.sh share: the one-line results, the Docker
client, and containers made exactly as the spawner makes a user's server
(:func:`jupyterhub_gpu.core.workload.make_container` with the product's labels, GPU
fence, MPS environment and mounts), plus the check's own run label for clean-up."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import docker

from jupyterhub_gpu.core.allocation import Allocation, new_allocation_id
from jupyterhub_gpu.core.containers import ServerContainer, server_labels
from jupyterhub_gpu.core.form.resources import ResourceLimits
from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.sharing.mps import MpsPaths
from jupyterhub_gpu.core.sharing.policy import Share
from jupyterhub_gpu.core.workload import Workload, make_container

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_LABEL = "jupyterhub-gpu-check.run"  # every container and image of one run (clean-up)
UID_GID = (64123, 64123)  # a user's uid:gid, as check-node's probes (never root)
IN_CONTAINER = "/gpucheck"  # where this folder is mounted, read-only
PROGRAM = f"{IN_CONTAINER}/cuda_program.py"


def emit(status: str, name: str, detail: str) -> None:
    """One result line: ``PASS name: detail`` (FAIL, SKIP); the detail on one line."""
    text = " ".join(str(detail).split())
    print(f"{status} {name}: {text[:1500]}", flush=True)


def run_id() -> str:
    return os.environ.get("GPU_CHECK_RUN", "manual")


def client() -> docker.APIClient:
    return docker.APIClient(
        base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), timeout=60
    )


def inventory() -> NodeInventory:
    """The node's GPUs as the agent reads them (NVML)."""
    from jupyterhub_gpu.edges.nvml import NVMLProbe

    return NVMLProbe().read()


def start_server(
    api: docker.APIClient,
    name: str,
    image: str,
    command: Sequence[str],
    uuids: Sequence[str],
    share: Share | None = None,
    mps: MpsPaths | None = None,
    uid_gid: tuple[int, int] = UID_GID,
    extra_binds: dict[str, dict[str, str]] | None = None,
    start: bool = True,
) -> str:
    """A container made as the spawner makes a server holding ``uuids`` (and ``share``
    of it, on the node's MPS daemon ``mps``), running ``command``; its id (created only,
    not started, with ``start=False``)."""
    node = socket.gethostname()
    claim = Allocation(
        hub_id="gpu-check",
        id=new_allocation_id(),
        owner=f"gpu-check-{name}",
        server="",
        node=node,
        gpus=tuple(uuids),
        share=share.label if share else "",
        share_memory_mib=share.memory_mib if share else 0,
    )
    labels = server_labels(claim, image, datetime.now(timezone.utc), None)
    labels[RUN_LABEL] = run_id()
    binds = {HERE: {"bind": IN_CONTAINER, "mode": "ro"}, **(extra_binds or {})}
    spec = ServerContainer(
        uid=uid_gid[0],
        gid=uid_gid[1],
        supplementary_gids=(),
        labels=labels,
        gpu_uuids=tuple(uuids),
        network="none",
        limits=ResourceLimits(cpu=2.0, mem_bytes=4 << 30, shm_bytes=64 << 20, pids_limit=256),
        binds=binds,
        mps=mps,
    )
    request = make_container(
        Workload(
            name=f"jhgpu-check-{run_id()}-{name}",
            image=image,
            command=list(command),
            env={"PYTHONUNBUFFERED": "1"},
            container=spec,
            share=share,
            remove_on_exit=False,
        )
    )
    created = api.create_container(
        **request.create, host_config=api.create_host_config(**request.host)
    )
    cid = str(created["Id"])
    if start:
        api.start(cid)
    return cid


def remove(api: docker.APIClient, ids: Iterable[str]) -> None:
    for cid in ids:
        with contextlib.suppress(docker.errors.DockerException):
            api.remove_container(cid, force=True)


def logs(api: docker.APIClient, cid: str) -> str:
    try:
        raw = api.logs(cid, stdout=True, stderr=True)
    except docker.errors.DockerException as e:
        return f"(no logs: {e})"
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


def first_json(api: docker.APIClient, cid: str, timeout: float) -> dict[str, Any] | None:
    """The first JSON line the container prints within ``timeout`` s (None: none; the
    container ended or never answered)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = api.logs(cid, stdout=True, stderr=False).decode(errors="replace")
        for line in out.splitlines():
            if line.startswith("{"):
                try:
                    return dict(json.loads(line))
                except ValueError:
                    continue
        if not api.inspect_container(cid)["State"]["Running"]:
            return None
        time.sleep(0.5)
    return None


def host_pids(api: docker.APIClient, cid: str) -> set[int]:
    """The container's processes as the host sees them (``docker top``)."""
    top = api.top(cid)
    col = top["Titles"].index("PID")
    return {int(row[col]) for row in top["Processes"]}


def tail(text: str, chars: int = 400) -> str:
    return " ".join(text.split())[-chars:]
