"""Reading the YAML files an admin edits: the image catalog, a declared inventory, the
nodes file.

One place for the reading and its messages: an error names the file and says what is
wrong, raised as the caller's error class (``ConfigError`` or a subclass of it). The
formats are :mod:`jupyterhub_gpu.wire`'s: :mod:`~jupyterhub_gpu.wire.adminfiles` (the
YAML), :mod:`~jupyterhub_gpu.wire.catalog_file`,
:mod:`~jupyterhub_gpu.wire.declared_inventory`, :mod:`~jupyterhub_gpu.wire.nodes_file`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.catalog.entries import Catalog
from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.errors import ConfigError, InventoryError
from jupyterhub_gpu.wire.adminfiles import decode_yaml
from jupyterhub_gpu.wire.catalog_file import parse_catalog
from jupyterhub_gpu.wire.declared_inventory import parse_inventory
from jupyterhub_gpu.wire.nodes_file import decode_nodes_file


def read_yaml(path: str | Path, what: str, error: type[ConfigError] = ConfigError) -> Any:
    """The parsed YAML document at ``path``; ``what`` names the file in messages."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise error(f"{p}: cannot read the {what} ({e.strerror})") from None
    return decode_yaml(text, str(p), error)


def load_catalog(path: str | Path) -> Catalog:
    """Read and validate a catalog file; raises ``ConfigError`` naming file, entry, field."""
    return parse_catalog(read_yaml(path, "image catalog"), str(path))


def load_inventory_file(path: str | Path) -> list[NodeInventory]:
    """Read and validate a declared inventory file."""
    data = read_yaml(path, "declared inventory", InventoryError)
    return parse_inventory(data, str(path))


def load_nodes_file(path: str) -> list[dict[str, Any]]:
    """The raw node entries of a nodes file (``nodes: [...]``); [] when no file is set.
    A path that names no file is an error (a mistyped path must not load no nodes)."""
    if not path:
        return []
    if not Path(path).exists():
        raise ConfigError(
            f"The nodes file {path!r} (GPUCluster.nodes_file) does not exist: check the "
            "path, or create it with a 'nodes:' list (docs/nodes.md)."
        )
    return decode_nodes_file(read_yaml(path, "nodes file"), path)
