"""A workload's whole container, as one pure description (issue 31).

kubespawner's ``objects.make_pod`` is the model: one function turns what was decided (the
placement, the identity, the image and its command, the site's settings) into the
complete request Docker gets: image, command, name, environment (the GPU variables last),
user, working directory, labels and seal, mounts, devices, limits, network, published
port. The spawner submits it as it is; nothing is added afterwards. A JupyterLab server
is one workload; a batch job or an SSH session is the same description with another
command and no published port.

What the site may add (DockerSpawner's ``extra_create_kwargs`` / ``extra_host_config``,
e.g. ``dns`` or ``ulimits``) goes *under* it: a key this module sets is never the site's
(:data:`OWNED_CREATE_KEYS`, :data:`OWNED_HOST_KEYS`; ``check-config`` warns about them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.core.containers import ServerContainer, container_spec, server_env
from jupyterhub_gpu.core.sharing.policy import Share

#: Docker's default CFS period (µs): the CPU limit is ``cpu * period`` of it
CPU_PERIOD_US = 100_000

#: ``create_container`` keys :func:`make_container` always sets (never the site's)
OWNED_CREATE_KEYS: frozenset[str] = frozenset(
    {"image", "command", "name", "environment", "user", "labels", "working_dir", "ports",
     "host_config"}
)  # fmt: skip
#: ``create_host_config`` keys :func:`make_container` always sets (never the site's)
OWNED_HOST_KEYS: frozenset[str] = frozenset(
    {"device_requests", "binds", "network_mode", "group_add", "shm_size", "pids_limit",
     "cap_drop", "security_opt", "mem_limit", "cpu_period", "cpu_quota", "port_bindings",
     "auto_remove"}
)  # fmt: skip
#: ``create_host_config`` keys a user's container never gets from the site either: each
#: would undo its isolation (privileges, the host's namespaces, devices, other runtimes)
FORBIDDEN_HOST_KEYS: frozenset[str] = frozenset(
    {"privileged", "cap_add", "devices", "device_cgroup_rules", "ipc_mode", "pid_mode",
     "userns_mode", "uts_mode", "runtime", "volumes_from", "links", "sysctls"}
)  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """Everything that decides one container of a user's, as plain data."""

    name: str  # the container's name (unique on its node)
    image: str
    command: Sequence[str]
    #: the workload's own environment (a server's: JupyterHub's, with its token); the
    #: GPU, share and MPS variables are laid over it last
    env: Mapping[str, str]
    container: ServerContainer  # identity, labels, GPUs, network, limits, mounts
    share: Share | None = None
    #: the port to publish on the node's ``publish_ip`` (a server's), None for none
    port: int | None = None
    publish_ip: str = ""
    remove_on_exit: bool = True
    site_create: Mapping[str, Any] = field(default_factory=dict)  # under ours
    site_host: Mapping[str, Any] = field(default_factory=dict)  # under ours


@dataclass(frozen=True)
class ContainerRequest:
    """Docker's create call: ``create_container(**create, host_config=
    create_host_config(**host))``."""

    create: dict[str, Any]
    host: dict[str, Any]


def workload_env(w: Workload) -> dict[str, str]:
    """The environment: the workload's own, then :func:`.containers.server_env` (where
    MPS is, the share's sizes, the GPUs) last."""
    ours = server_env(w.container.gpu_uuids, w.share, w.container.mps)
    return {**{k: v for k, v in w.env.items() if k not in ours}, **ours}


def make_container(w: Workload) -> ContainerRequest:
    """The complete create request of ``w``. Golden tests: tests/unit/test_workload.py."""
    fenced_create, fenced_host = container_spec(w.container)
    create: dict[str, Any] = {k: v for k, v in w.site_create.items() if k not in OWNED_CREATE_KEYS}
    create.update(
        image=w.image,
        command=list(w.command),
        name=w.name,
        environment=workload_env(w),
        **fenced_create,  # user, labels, working_dir (where there is a home)
    )
    ours = OWNED_HOST_KEYS | FORBIDDEN_HOST_KEYS
    host: dict[str, Any] = {k: v for k, v in w.site_host.items() if k not in ours}
    host.update(fenced_host)
    limits = w.container.limits
    host.update(
        mem_limit=limits.mem_bytes,
        cpu_period=CPU_PERIOD_US,
        cpu_quota=int(limits.cpu * CPU_PERIOD_US),
        auto_remove=w.remove_on_exit,
    )
    if w.port is not None:
        create["ports"] = {f"{w.port}/tcp": None}
        host["port_bindings"] = {w.port: (w.publish_ip,)}
    return ContainerRequest(create, host)
