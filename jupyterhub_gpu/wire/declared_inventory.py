"""The declared inventory: a YAML file that lists nodes and their GPUs.

A first-class mode, not a test hack: demos, tests, and sites that want to pin their
inventory (or have no NVML on the hub's host) use it. Format::

    nodes:
      - name: gpu-a                     # unique node name
        driver_version: "550.54.15"     # the node's NVIDIA driver
        cuda_driver_version: "12.4"     # optional: newest CUDA the driver supports
        labels: {site: lab, rack: r1}   # optional
        gpus:
          - uuid: GPU-3b1a9f6e-0c7d-4f2a-9a51-0d0e8c1f0001
            index: 0
            model: NVIDIA GeForce RTX 3090
            memory_mib: 24576
            compute_capability: "8.6"
            topology_group: pcie0       # optional: GPUs sharing a PCIe switch / NVLink
            # optional live values, settable at run time by the node agent:
            # utilization_pct, memory_used_mib, temperature_c, healthy, process_containers,
            # processes: [{pid: 4242, container: <64 hex or "">, memory_mib: 3100,
            #              utilization_pct: 35}]  (the agent's wire shape, wire/agent.py)

Every error names the file, the entry and the field, and says what is expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from jupyterhub_gpu.core.inventory import (
    GPU,
    NodeInventory,
    parse_compute_capability,
    parse_version,
)
from jupyterhub_gpu.errors import InventoryError
from jupyterhub_gpu.wire.agent import parse_processes

_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]{4,64}$")
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_GPU_FIELDS = {
    "uuid",
    "index",
    "model",
    "memory_mib",
    "compute_capability",
    "topology_group",
    "utilization_pct",
    "memory_used_mib",
    "temperature_c",
    "healthy",
    "process_containers",
    "processes",
}
_NODE_FIELDS = {"name", "driver_version", "cuda_driver_version", "labels", "gpus"}


def _fail(where: str, message: str) -> InventoryError:
    return InventoryError(f"{where}: {message}")


def _int(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(where, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _parse_gpu(raw: Any, where: str) -> GPU:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"must be a mapping of GPU fields, got {type(raw).__name__}")
    unknown = set(raw) - _GPU_FIELDS
    if unknown:
        raise _fail(where, f"unknown field(s) {sorted(unknown)}; allowed: {sorted(_GPU_FIELDS)}")
    for key in ("uuid", "index", "model", "memory_mib", "compute_capability"):
        if key not in raw:
            raise _fail(f"{where}.{key}", "is required")
    uuid = str(raw["uuid"])
    if not _UUID_RE.match(uuid):
        raise _fail(f"{where}.uuid", f"must look like 'GPU-<uuid>' or 'MIG-<uuid>', got {uuid!r}")
    model = raw["model"]
    if not isinstance(model, str) or not model.strip():
        raise _fail(f"{where}.model", "must be a non-empty string such as 'NVIDIA A100-SXM4-80GB'")
    try:
        cc = parse_compute_capability(raw["compute_capability"])
    except (ValueError, TypeError) as e:
        raise _fail(f"{where}.compute_capability", str(e)) from None
    healthy = raw.get("healthy", True)
    if healthy is not None and not isinstance(healthy, bool):
        raise _fail(f"{where}.healthy", f"must be true, false or null, got {healthy!r}")
    util = raw.get("utilization_pct", 0.0)
    if isinstance(util, bool) or not isinstance(util, int | float) or not 0 <= util <= 100:
        raise _fail(f"{where}.utilization_pct", f"must be a number 0-100, got {util!r}")
    procs = raw.get("process_containers", ())
    if isinstance(procs, str) or not isinstance(procs, Sequence):
        raise _fail(f"{where}.process_containers", "must be a list of container ids")
    try:
        processes = parse_processes(raw.get("processes"), "processes")
    except ValueError as e:
        raise _fail(where, str(e)) from None
    if processes is not None and "process_containers" not in raw:
        procs = sorted({p.container for p in processes})
    temp = raw.get("temperature_c")
    group = raw.get("topology_group")
    memory = _int(raw["memory_mib"], f"{where}.memory_mib", minimum=1)
    return GPU(
        uuid=uuid,
        index=_int(raw["index"], f"{where}.index"),
        model=model.strip(),
        memory_mib=memory,
        compute_capability=cc,
        utilization_pct=float(util),
        memory_used_mib=_int(raw.get("memory_used_mib", 0), f"{where}.memory_used_mib"),
        temperature_c=None if temp is None else float(temp),
        healthy=healthy,
        process_containers=tuple(str(p) for p in procs),
        topology_group=None if group is None else str(group),
        processes=processes,
    )


def _parse_node(raw: Any, where: str) -> NodeInventory:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"must be a mapping of node fields, got {type(raw).__name__}")
    unknown = set(raw) - _NODE_FIELDS
    if unknown:
        raise _fail(where, f"unknown field(s) {sorted(unknown)}; allowed: {sorted(_NODE_FIELDS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NODE_NAME_RE.match(name):
        raise _fail(f"{where}.name", f"must be letters, digits, '.', '_' or '-', got {name!r}")
    where = f"{where} ({name})"
    driver = raw.get("driver_version")
    try:
        parse_version(str(driver))
    except ValueError:
        raise _fail(
            f"{where}.driver_version", f"must look like '550.54.15', got {driver!r}"
        ) from None
    cuda = raw.get("cuda_driver_version")
    if cuda is not None:
        try:
            parse_version(str(cuda))
        except ValueError:
            raise _fail(
                f"{where}.cuda_driver_version", f"must look like '12.4', got {cuda!r}"
            ) from None
    labels = raw.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise _fail(f"{where}.labels", "must be a mapping of strings")
    gpus_raw = raw.get("gpus") or []
    if not isinstance(gpus_raw, Sequence) or isinstance(gpus_raw, str):
        raise _fail(f"{where}.gpus", "must be a list of GPUs")
    gpus = tuple(_parse_gpu(g, f"{where}.gpus[{i}]") for i, g in enumerate(gpus_raw))
    indices = [g.index for g in gpus]
    if len(set(indices)) != len(indices):
        raise _fail(f"{where}.gpus", f"GPU indices must be unique on a node, got {indices}")
    return NodeInventory(
        name=name,
        driver_version=str(driver),
        cuda_driver_version=None if cuda is None else str(cuda),
        gpus=gpus,
        labels={str(k): str(v) for k, v in labels.items()},
    )


def parse_inventory(data: Any, source: str = "inventory") -> list[NodeInventory]:
    """Validate a loaded YAML document and return its nodes."""
    if not isinstance(data, Mapping) or "nodes" not in data:
        raise _fail(source, "must be a mapping with a 'nodes' list")
    nodes_raw = data["nodes"]
    if not isinstance(nodes_raw, Sequence) or isinstance(nodes_raw, str):
        raise _fail(f"{source}: nodes", "must be a list")
    nodes = [_parse_node(n, f"{source}: nodes[{i}]") for i, n in enumerate(nodes_raw)]
    seen_nodes: set[str] = set()
    seen_uuids: dict[str, str] = {}
    for node in nodes:
        if node.name in seen_nodes:
            raise _fail(source, f"node name {node.name!r} appears twice")
        seen_nodes.add(node.name)
        for gpu in node.gpus:
            if gpu.uuid in seen_uuids:
                raise _fail(
                    source,
                    f"GPU uuid {gpu.uuid} appears on {seen_uuids[gpu.uuid]!r} and {node.name!r}",
                )
            seen_uuids[gpu.uuid] = node.name
    return nodes


def dump_inventory(nodes: Sequence[NodeInventory]) -> dict[str, Any]:
    """The inverse of :func:`parse_inventory` (static fields only), for tools and tests."""
    return {
        "nodes": [
            {
                "name": n.name,
                "driver_version": n.driver_version,
                **({"cuda_driver_version": n.cuda_driver_version} if n.cuda_driver_version else {}),
                **({"labels": dict(n.labels)} if n.labels else {}),
                "gpus": [
                    {
                        "uuid": g.uuid,
                        "index": g.index,
                        "model": g.model,
                        "memory_mib": g.memory_mib,
                        "compute_capability": "{}.{}".format(*g.compute_capability),
                        **({"topology_group": g.topology_group} if g.topology_group else {}),
                    }
                    for g in n.gpus
                ],
            }
            for n in nodes
        ]
    }
