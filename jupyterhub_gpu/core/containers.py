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

from collections.abc import Sequence
from typing import Any

from docker.types import DeviceRequest

from jupyterhub_gpu.errors import NodeFailure

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
