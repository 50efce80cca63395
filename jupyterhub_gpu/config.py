"""Start-up checks of an admin's configuration, so a typo stops the hub, not a user's spawn.

Call it at the end of ``jupyterhub_config.py``::

    from jupyterhub_gpu.config import check_config
    check_config(c)

It validates what ``GPUDockerSpawner`` will read: the nodes (and the nodes file), the
declared inventory, the image catalog, the resource bounds and the home template. The
first problem raises :class:`~jupyterhub_gpu.errors.ConfigError`, whose message names
the file or setting, the entry and the field; JupyterHub then refuses to start.
"""

from __future__ import annotations

from typing import Any

from .catalog import default_catalog_path, load_catalog
from .errors import ConfigError
from .form import policy_from_config
from .homes import template_root
from .inventory.declared import load_inventory_file
from .mounts import parse_group_mounts
from .nodes import default_node, load_nodes_file, parse_nodes


def _section(config: Any, name: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for cls in ("Spawner", "DockerSpawner", name):  # more specific sections win
        if cls in config:
            merged.update(dict(config[cls]))
    return merged


def check_config(config: Any, section: str = "GPUDockerSpawner") -> None:
    """Validate the GPUDockerSpawner settings in ``config`` (a traitlets Config)."""
    s = _section(config, section)
    nodes = list(s.get("nodes") or [default_node()])
    parse_nodes(nodes + load_nodes_file(s.get("nodes_file") or ""))
    inventory = s.get("inventory_file") or ""
    if inventory:
        load_inventory_file(inventory)
    elif s.get("probe_mode") == "declared":
        raise ConfigError(f"{section}.probe_mode is 'declared' but inventory_file is not set")
    load_catalog(s.get("catalog_file") or default_catalog_path())
    policy_from_config(s.get("resource_defaults"), s.get("group_bounds"), section)
    parse_group_mounts(s.get("group_mounts") or {}, f"{section}.group_mounts")
    if s.get("home_template"):
        template_root(s["home_template"])
    for key in ("default_uid", "default_gid"):
        if s.get(key) == 0:
            raise ConfigError(f"{section}.{key} must not be 0: containers never run as root")
