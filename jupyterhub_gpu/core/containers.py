"""Pure parts of a user server's container spec: how GPUs are requested and fenced, and
how the published port is read back. The security-critical fields have golden tests
(tests/unit/test_containers.py).

GPUs are given twice, on purpose: a Docker ``DeviceRequest`` naming the UUIDs (the engine
passes them to the NVIDIA Container Toolkit), and ``NVIDIA_VISIBLE_DEVICES`` set by the
spawner to exactly those UUIDs (``void`` for a CPU-only server). The toolkit honours that
variable in unprivileged containers by default, and CUDA base images set it to ``all``:
the spawner's value, set last, is what keeps an image's own ``ENV`` from widening it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from docker.types import DeviceRequest

from jupyterhub_gpu.core.allocation import (
    ALLOCATION_LABEL,
    LABEL,
    OWNED_LABELS,
    SEAL_LABEL,
    SHARE_LABEL,
    SHARE_MEMORY_LABEL,
    Allocation,
)
from jupyterhub_gpu.core.nodecheck import PROBE_LABEL, PROBE_OWNER_LABEL
from jupyterhub_gpu.core.sharing.mps import NO_MPS_PIPE_DIRECTORY, MpsPaths, mps_binds, mps_env
from jupyterhub_gpu.core.sharing.policy import MODES, Share
from jupyterhub_gpu.errors import NodeFailure

if TYPE_CHECKING:  # core.form imports the hub's install's libraries; a node's check-node does not
    from jupyterhub_gpu.core.form.resources import ResourceLimits

CDI_KIND = "nvidia.com/gpu"


def device_requests(uuids: Sequence[str], driver: str = "nvidia") -> list[DeviceRequest]:
    """The DeviceRequests for exactly ``uuids`` (none for a CPU-only server).

    ``nvidia``: ``DeviceIDs`` are the UUIDs (never ``Count``: ``Count=N`` means GPUs 0..N-1
    on every container). ``cdi``: fully qualified CDI names ``nvidia.com/gpu=<UUID>``.
    """
    if not uuids:
        return []
    if driver == "nvidia":
        return [DeviceRequest(driver="nvidia", device_ids=list(uuids), capabilities=[["gpu"]])]
    if driver == "cdi":
        return [DeviceRequest(driver="cdi", device_ids=[f"{CDI_KIND}={u}" for u in uuids])]
    raise ValueError(f"unknown GPU device driver {driver!r} (nvidia or cdi)")


def gpu_env(uuids: Sequence[str]) -> dict[str, str]:
    """The environment that fences a server to its GPUs (applied after everything else)."""
    return {
        "NVIDIA_VISIBLE_DEVICES": ",".join(uuids) if uuids else "void",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }


def share_env(share: Share, mps: MpsPaths | None = None) -> dict[str, str]:
    """The environment of a server holding ``share`` of its GPU (issue 26), applied after
    everything else (never from the user's options).

    Every mode says what the share is (``JUPYTERHUB_GPU_SHARE``, its memory in MiB). In
    ``mps`` mode, the MPS client's pinned memory limit on its one visible device (device
    0 in the container) and its active thread percentage, both for all ``K`` shares held
    (:attr:`Share.memory_mib`, :attr:`Share.thread_percentage`): a client could change
    its own environment, so the hard limit is the node's MPS control daemon's
    ``set_default_device_pinned_mem_limit`` / ``set_default_active_thread_percentage``,
    the largest share a server may hold, per client process (docs/sharing.md).
    Time-slicing enforces nothing here: the agent watches the share's memory. MIG needs
    nothing more: ``NVIDIA_VISIBLE_DEVICES`` names the MIG instance.
    ``mps``: where the node's daemon listens (``CUDA_MPS_PIPE_DIRECTORY``, ``mps``'s pipe
    directory, mounted by :func:`container_spec`).
    """
    env = {
        "JUPYTERHUB_GPU_SHARE": share.label,
        "JUPYTERHUB_GPU_SHARE_MEMORY_MIB": str(share.memory_mib),
    }
    if share.mode == "mps":
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={share.memory_mib}M"
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(share.thread_percentage)
        env.update(mps_env(mps or MpsPaths()))
    return env


def server_env(
    uuids: Sequence[str], share: Share | None = None, mps: MpsPaths | None = None
) -> dict[str, str]:
    """The environment the spawner applies after everything else (the user's options and
    an image's ``ENV`` never decide it): where MPS is, the share's sizes, then the GPUs.

    ``CUDA_MPS_PIPE_DIRECTORY`` is set for every server: an ``mps`` share's is the node's
    pipe directory (``mps``, from :func:`share_env`); every other server (CPU-only, whole
    GPUs, time-slicing and MIG shares) gets :data:`NO_MPS_PIPE_DIRECTORY`, which does not
    exist, so libcuda never becomes a client of a daemon at NVIDIA's default
    ``/tmp/nvidia-mps``, which the container toolkit mounts into every GPU container
    (issue 30). :func:`gpu_env` last.
    """
    env = {"CUDA_MPS_PIPE_DIRECTORY": NO_MPS_PIPE_DIRECTORY}
    if share is not None:
        env.update(share_env(share, mps))
    env.update(gpu_env(uuids))
    return env


def share_from_state(raw: object) -> Share | None:
    """The share a spawner's state kept (``[count, of, memory_mib, mode]``), None when
    none or malformed (then the GPU is held whole: never an overcommit)."""
    if not isinstance(raw, list) or len(raw) != 4:
        return None
    count, of, memory, mode = raw
    numbers = (count, of, memory)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in numbers):
        return None
    if mode not in MODES or not 1 <= count <= of:
        return None
    return Share(count, of, memory, mode)


def published_port(bindings: Any) -> int:
    """The host port of ``docker port CONTAINER PORT`` (docker-py's ``APIClient.port``)."""
    if isinstance(bindings, list):
        for b in bindings:
            port = b.get("HostPort") if isinstance(b, dict) else None
            if isinstance(port, str) and port.isdigit() and 0 < int(port) < 65536:
                return int(port)
    raise NodeFailure(
        "The node did not publish your server's port; start again, and if it keeps failing "
        "tell an admin (the node's Docker engine may lack iptables or its user network)."
    )


@dataclass(frozen=True)
class ServerContainer:
    """What decides one user server's container, as plain data (the spawner fills it)."""

    uid: int
    gid: int
    supplementary_gids: Sequence[int]
    labels: Mapping[str, str]
    gpu_uuids: Sequence[str]
    network: str  # the node's user network (never the host's)
    limits: ResourceLimits
    home: tuple[str, str] | None = None  # (path on the node, path in the container)
    binds: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # datasets
    device_driver: str = "nvidia"
    #: a share of an ``mps`` GPU: the node's MPS pipe and shm directories (mounted last)
    mps: MpsPaths | None = None


def container_spec(c: ServerContainer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The identity and isolation part of Docker's create call, ``(create_kwargs,
    host_config)``, that :func:`jupyterhub_gpu.core.workload.make_container` completes
    (image, command, environment, limits, port): the user's uid:gid, its labels, the
    home as working directory; exactly its GPUs, the user network, the limits, every
    capability dropped and no privilege gain; a share of an ``mps`` GPU also the node's
    MPS pipe directory and the daemon's shm directory as ``/dev/shm`` (its own IPC
    namespace all the same: never the host's). Golden tests: tests/unit/test_containers.py.
    """
    binds: dict[str, dict[str, str]] = {}
    if c.home is not None:
        binds[c.home[0]] = {"bind": c.home[1], "mode": "rw"}
    binds.update({k: dict(v) for k, v in c.binds.items()})
    if c.mps is not None:  # last: no other mount decides where the daemon is
        taken = {"/dev/shm", c.mps.pipe_directory}
        binds = {k: v for k, v in binds.items() if v["bind"] not in taken}
        binds.update(mps_binds(c.mps))
    create_kwargs: dict[str, Any] = {"user": f"{c.uid}:{c.gid}", "labels": dict(c.labels)}
    if c.home is not None:
        create_kwargs["working_dir"] = c.home[1]
    host_config: dict[str, Any] = {
        "device_requests": device_requests(c.gpu_uuids, c.device_driver),
        "binds": binds,
        "network_mode": c.network,
        "group_add": [str(g) for g in c.supplementary_gids],
        "shm_size": c.limits.shm_bytes,
        "pids_limit": c.limits.pids_limit,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
    }
    if c.mps is not None:  # /dev/shm is the daemon's tmpfs, sized on the node
        del host_config["shm_size"]
    return create_kwargs, host_config


def server_labels(
    claim: Allocation, image: str, started: datetime, seal_key: bytes | None
) -> dict[str, str]:
    """The labels of a server's container: who, where, which GPUs, and the allocation id
    with its seal (:mod:`.allocation`) when the hub has a key. Every key of
    :data:`~.allocation.OWNED_LABELS` is written, empty where unused (a whole GPU's share
    labels, the seal without a key): Docker would otherwise copy the image's own labels
    of those keys into the container (issue 30)."""
    labels = dict.fromkeys(OWNED_LABELS, "")
    labels.update(
        {
            f"{LABEL}.hub": claim.hub_id,
            f"{LABEL}.owner": claim.owner,
            f"{LABEL}.server": claim.server,
            f"{LABEL}.node": claim.node,
            f"{LABEL}.gpus": ",".join(claim.gpus),
            f"{LABEL}.image": image,
            f"{LABEL}.started": started.isoformat(timespec="seconds"),
            ALLOCATION_LABEL: claim.id,
        }
    )
    if claim.share:
        labels[SHARE_LABEL] = claim.share
        labels[SHARE_MEMORY_LABEL] = str(claim.share_memory_mib)
    if seal_key is not None:
        labels[SEAL_LABEL] = claim.seal(seal_key)
    return labels


#: Label keys that mark a container for the hub or its tools and that no image may carry
#: (a probe label would make ``check-node`` remove the user's server as a leftover probe).
RESERVED_IMAGE_LABELS = (*OWNED_LABELS, PROBE_LABEL, PROBE_OWNER_LABEL)


def reserved_label_refusal(image: str, labels: object) -> str | None:
    """Why a server may not start from ``image`` whose labels (the engine's inspect,
    ``Config.Labels``) are ``labels``: it carries a label the hub writes on containers;
    ``None`` when it carries none."""
    if not isinstance(labels, Mapping):
        return None
    found = sorted(k for k in labels if isinstance(k, str) and k in RESERVED_IMAGE_LABELS)
    if not found:
        return None
    return (
        f"The image {image[:200]} carries the label {found[0]}, which only the hub may set "
        "on a server's container; rebuild the image without that LABEL line (or choose "
        "another image)."
    )
