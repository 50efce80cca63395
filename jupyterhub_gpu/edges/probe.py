"""GPU probes: where a node's inventory comes from.

``Probe.read()`` returns the node's :class:`NodeInventory` now. Two real modes:

- ``nvml``: the NVIDIA driver's management library on this host (``nvidia-ml-py``);
- ``declared``: a declared inventory file (see :mod:`.declared`), for demos, tests and
  sites that pin their inventory.

``auto`` picks NVML when a driver answers, otherwise the declared file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.errors import ConfigError, ProbeError


class Probe(Protocol):
    def read(self) -> NodeInventory: ...


class DeclaredProbe:
    """Serves one node of a declared inventory file (re-read when the file changes)."""

    def __init__(self, path: str | Path, node_name: str | None = None) -> None:
        self.path = Path(path)
        self.node_name = node_name
        self._mtime: float | None = None
        self._cached: NodeInventory | None = None

    def read(self) -> NodeInventory:
        try:
            mtime = self.path.stat().st_mtime
        except OSError as e:
            raise ProbeError(
                f"{self.path}: cannot read the declared inventory ({e.strerror})"
            ) from None
        if self._cached is not None and mtime == self._mtime:
            return self._cached
        nodes = load_inventory_file(self.path)
        if self.node_name is None:
            if len(nodes) != 1:
                raise ConfigError(
                    f"{self.path}: lists {len(nodes)} nodes; name the node to read "
                    f"(one of {[n.name for n in nodes]})"
                )
            node = nodes[0]
        else:
            matches = [n for n in nodes if n.name == self.node_name]
            if not matches:
                raise ConfigError(
                    f"{self.path}: has no node named {self.node_name!r} "
                    f"(it lists {[n.name for n in nodes]})"
                )
            node = matches[0]
        self._cached, self._mtime = node, mtime
        return node


def make_probe(mode: str, declared_path: str | None, node_name: str | None = None) -> Probe:
    """Build the probe an admin configured (``auto``, ``nvml`` or ``declared``)."""
    if mode not in {"auto", "nvml", "declared"}:
        raise ConfigError(f"probe mode must be 'auto', 'nvml' or 'declared', got {mode!r}")
    if mode in {"auto", "nvml"}:
        try:
            from jupyterhub_gpu.edges.nvml import NVMLProbe
        except ImportError:
            NVMLProbe = None  # type: ignore[assignment,misc]
        if NVMLProbe is not None:
            try:
                return NVMLProbe(node_name=node_name)
            except ProbeError:
                if mode == "nvml":
                    raise
    if declared_path:
        return DeclaredProbe(declared_path, node_name)
    raise ConfigError(
        "no GPU probe: NVML found no NVIDIA driver and no declared inventory file is set"
    )
