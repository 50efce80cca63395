"""Start-up checks of an admin's configuration, so a typo stops the hub, not a user's spawn.

Call it at the end of ``jupyterhub_config.py``::

    from jupyterhub_gpu.hub.config import check_config
    check_config(c)

It validates what ``GPUDockerSpawner`` will read: the nodes (and the nodes file), the
declared inventory, the image catalog, the resource bounds and the home template. It
refuses keys that no class reads in the sections of our classes (and of the classes they
extend: ``DockerSpawner``, ``LDAPAuthenticator``), naming the closest known key. The
first problem raises :class:`~jupyterhub_gpu.errors.ConfigError`, whose message names
the file or setting, the entry and the field; JupyterHub then refuses to start.

It logs a warning (and starts) for settings the spawner sets itself for every server
(:data:`OVERRIDDEN_TRAITS`, :data:`OVERRIDDEN_HOST_CONFIG`,
:data:`OVERRIDDEN_CREATE_KWARGS`), and for named servers without
``JupyterHub.named_server_limit_per_user``.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Mapping
from typing import Any

from traitlets.config import LazyConfigValue

from jupyterhub_gpu.core.form import policy_from_config
from jupyterhub_gpu.core.homes import template_root
from jupyterhub_gpu.core.mounts import parse_group_mounts
from jupyterhub_gpu.core.scheduling import queue_settings
from jupyterhub_gpu.core.sharing import parse_policy
from jupyterhub_gpu.core.sharing.mps import DEFAULT_PIPE_DIRECTORY, DEFAULT_SHM_DIRECTORY, mps_paths
from jupyterhub_gpu.core.workload import FORBIDDEN_HOST_KEYS, OWNED_CREATE_KEYS, OWNED_HOST_KEYS
from jupyterhub_gpu.edges.adminfiles import load_catalog, load_inventory_file, load_nodes_file
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.cluster_settings import deprecation, moved_keys
from jupyterhub_gpu.wire.catalog_file import default_catalog_path
from jupyterhub_gpu.wire.nodes_file import default_node, parse_nodes

log = logging.getLogger("JupyterHub")

#: Config sections whose keys are checked, and the class (``module:Class``) that reads
#: each. A class reads the sections of its bases too (traitlets), so ``c.DockerSpawner``
#: keys are those of GPUDockerSpawner: ``c.DockerSpawner.default_uid`` does take effect.
CHECKED_SECTIONS: dict[str, str] = {
    "GPUDockerSpawner": "jupyterhub_gpu.hub.spawner:GPUDockerSpawner",
    "DockerSpawner": "jupyterhub_gpu.hub.spawner:GPUDockerSpawner",
    "GPULDAPAuthenticator": "jupyterhub_gpu.hub.auth.ldap:GPULDAPAuthenticator",
    "LDAPAuthenticator": "jupyterhub_gpu.hub.auth.ldap:GPULDAPAuthenticator",
    "AgentClient": "jupyterhub_gpu.edges.agents:AgentClient",
    "GPUIdleCuller": "jupyterhub_gpu.services.culler.app:GPUIdleCuller",
    "GPUAgent": "jupyterhub_gpu.services.agent.app:GPUAgent",
    "SavedImages": "jupyterhub_gpu.hub.saved_images:SavedImages",
    "GPUSharing": "jupyterhub_gpu.hub.sharing:GPUSharing",
    "GPUCluster": "jupyterhub_gpu.hub.cluster_settings:GPUCluster",
    "GPUJobs": "jupyterhub_gpu.hub.jobs:GPUJobs",
}

#: Traits of DockerSpawner/Spawner that GPUDockerSpawner sets itself: a site's value is
#: ignored (or replaced) for every server. Kept in step with spawner.py by a unit test.
OVERRIDDEN_TRAITS: dict[str, str] = {
    "image": "each server's image comes from the catalog (catalog_file) and the user's choice",
    "allowed_images": "images are allowed per group by resource_defaults/group_bounds "
    "allowed_images, over catalog names",
    "cpu_limit": "set per server from the user's choice, bounded by resource_defaults/"
    "group_bounds max_cpu",
    "mem_limit": "set per server from the user's choice, bounded by resource_defaults/"
    "group_bounds max_mem_gib",
    "host_ip": "servers are published on each node's publish address (nodes[].publish_ip)",
    "network_name": "servers join GPUCluster.user_network on every node",
    "use_internal_ip": "the hub reaches servers at the port published on the node",
    # create_object submits core/workload.py's description: DockerSpawner's own mounts
    # and links are not part of it (homes: home_template; datasets: group_mounts)
    "volumes": "homes are mounted by home_template and datasets by group_mounts",
    "read_only_volumes": "datasets are mounted read-only by group_mounts",
    "mounts": "homes are mounted by home_template and datasets by group_mounts",
    "links": "servers never reach other containers (the user network)",
}
#: ``extra_host_config`` keys the spawner replaces for every server (the workload's own:
#: core/workload.py), and those no user container gets at all.
OVERRIDDEN_HOST_CONFIG: frozenset[str] = OWNED_HOST_KEYS
FORBIDDEN_HOST_CONFIG: frozenset[str] = FORBIDDEN_HOST_KEYS
#: ``extra_create_kwargs`` keys the spawner replaces for every server.
OVERRIDDEN_CREATE_KWARGS: frozenset[str] = OWNED_CREATE_KEYS

_SPAWNER_SECTIONS = ("Spawner", "DockerSpawner", "GPUDockerSpawner")


def _section(config: Any, name: str) -> dict[str, Any]:
    """The spawner's settings with the cluster's (``c.GPUCluster``, where the keys that
    moved there are read; the old spawner keys still count) over them."""
    merged: dict[str, Any] = {}
    for cls in ("Spawner", "DockerSpawner", name, "GPUCluster"):  # more specific ones win
        if cls in config:
            merged.update(dict(config[cls]))
    return merged


def _is_section_key(key: str) -> bool:
    """traitlets' rule: a capitalised key is a nested section, not a setting."""
    return bool(key) and key[0].isupper() and not key.startswith("_")


def _reader(section: str) -> str:
    return CHECKED_SECTIONS[section].rpartition(":")[2]


def known_keys(section: str) -> frozenset[str]:
    """The settings the class reading ``section`` has: its traits with ``config=True``."""
    module, _, name = CHECKED_SECTIONS[section].partition(":")
    cls = getattr(importlib.import_module(module), name)
    return frozenset(cls.class_traits(config=True))


def unknown_key_problem(
    section: str, keys: Mapping[str, Any], known: frozenset[str], reader: str = ""
) -> str:
    """The message for the first unknown key of ``section``, or '' when all are known."""
    for key in sorted(k for k in keys if not _is_section_key(k)):
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {section}.{close[0]}?" if close else ""
            return f"c.{section}.{key} is not a setting of {reader or section}{hint}"
    return ""


def check_keys(config: Any) -> None:
    """Refuse a key no class reads in one of :data:`CHECKED_SECTIONS`."""
    for section in CHECKED_SECTIONS:
        if section in config:
            keys = config[section]
            problem = unknown_key_problem(section, keys, known_keys(section), _reader(section))
            if problem:
                raise ConfigError(problem)


def override_warnings(config: Any) -> list[str]:
    """One sentence per setting the spawner replaces for every server."""
    found: list[str] = []
    for section in _SPAWNER_SECTIONS:
        if section not in config:
            continue
        keys = config[section]
        for key, why in OVERRIDDEN_TRAITS.items():
            if key in keys:
                found.append(f"c.{section}.{key} is ignored: {why}")
        for trait, replaced in (
            ("extra_host_config", OVERRIDDEN_HOST_CONFIG),
            ("extra_create_kwargs", OVERRIDDEN_CREATE_KWARGS),
        ):
            value = keys.get(trait)
            if isinstance(value, LazyConfigValue):  # c.X.extra_host_config.update({...})
                value = value.get_value({})
            for key in sorted(set(value or {}) & replaced):
                found.append(
                    f"c.{section}.{trait}[{key!r}] is ignored: GPUDockerSpawner sets it "
                    "for every server"
                )
            if trait == "extra_host_config":
                for key in sorted(set(value or {}) & FORBIDDEN_HOST_CONFIG):
                    found.append(
                        f"c.{section}.{trait}[{key!r}] is ignored: no user's container gets "
                        "it (it would undo the container's isolation)"
                    )
    hub = config.get("JupyterHub", {})
    if hub.get("allow_named_servers") and not hub.get("named_server_limit_per_user"):
        found.append(
            "c.JupyterHub.allow_named_servers is on without named_server_limit_per_user: "
            "a user may create any number of servers; set it (e.g. 3) and "
            "GPUDockerSpawner.resource_defaults max_gpus_per_user"
        )
    return found


DEFAULT_NAMED_SERVER_LIMIT = 3  # per user, when named servers are on and no limit is set


JUPYTERHUB_SPAWN_LIMIT = 100  # JupyterHub's default concurrent_spawn_limit
QUEUE_WAIT = 3600.0  # GPUDockerSpawner.max_queue_wait's default


def _move_spawn_limit(config: Any, section: str, logger: logging.Logger) -> None:
    """With the GPU queue on, JupyterHub's ``concurrent_spawn_limit`` would count spawns
    that merely wait for GPUs (and refuse others while GPUs are busy): the limit moves to
    ``GPUCluster.concurrent_start_limit``, which counts servers being created. The
    queue is on when ``max_queue_wait`` or any group's (``queue_policy``) is above 0."""
    hub, s = config.get("JupyterHub", {}), _section(config, section)
    _, policies = queue_settings(s.get("queue_policy"), f"{section}.queue_policy")
    waits = [g.max_queue_wait_s for g in (policies.default, *policies.groups.values())]
    if float(s.get("max_queue_wait", QUEUE_WAIT)) <= 0 and not any(w for w in waits if w):
        return
    limit = int(hub.get("concurrent_spawn_limit", JUPYTERHUB_SPAWN_LIMIT))
    if limit <= 0:
        return
    config.JupyterHub.concurrent_spawn_limit = 0
    if "concurrent_start_limit" not in s:
        config.GPUCluster.concurrent_start_limit = limit
    logger.info(
        "GPU queue on: JupyterHub's concurrent_spawn_limit (%d) now bounds servers being "
        "created (GPUCluster.concurrent_start_limit), not spawns waiting for GPUs",
        limit,
    )


def check_config(
    config: Any, section: str = "GPUDockerSpawner", logger: logging.Logger | None = None
) -> None:
    """Validate the GPUDockerSpawner settings in ``config`` (a traitlets Config); with
    named servers allowed and no ``named_server_limit_per_user`` set, set it to
    :data:`DEFAULT_NAMED_SERVER_LIMIT` (JupyterHub's own default, 0, is unlimited)."""
    check_keys(config)
    hub = config.get("JupyterHub", {})
    if hub.get("allow_named_servers") and "named_server_limit_per_user" not in hub:
        config.JupyterHub.named_server_limit_per_user = DEFAULT_NAMED_SERVER_LIMIT
        (logger or log).warning(
            "c.JupyterHub.named_server_limit_per_user is not set: %d named servers per user "
            "(set it to change this; 0 is unlimited)",
            DEFAULT_NAMED_SERVER_LIMIT,
        )
    for key in sorted(moved_keys(config)):  # the hub warns too, once, when it reads them
        (logger or log).warning("%s", deprecation(key))
    _move_spawn_limit(config, section, logger or log)
    for warning in override_warnings(config):
        (logger or log).warning("%s", warning)
    s = _section(config, section)
    # nodes = [] with a nodes_file: the file lists them all (the default is the local engine)
    nodes = list(s["nodes"]) if "nodes" in s else [default_node()]
    # an empty nodes file is a site whose nodes have not joined yet (`node join`)
    parse_nodes(nodes + load_nodes_file(s.get("nodes_file") or ""), bool(s.get("nodes_file")))
    inventory = s.get("inventory_file") or ""
    if inventory:
        load_inventory_file(inventory)
    elif s.get("probe_mode") == "declared":
        raise ConfigError(f"{section}.probe_mode is 'declared' but inventory_file is not set")
    load_catalog(s.get("catalog_file") or default_catalog_path())
    policy_from_config(s.get("resource_defaults"), s.get("group_bounds"), section)
    queue_settings(s.get("queue_policy"), f"{section}.queue_policy")
    parse_group_mounts(s.get("group_mounts") or {}, f"{section}.group_mounts")
    sharing = config.get("GPUSharing", {})
    parse_policy(sharing.get("models") or {}, sharing.get("nodes") or {})  # issue 26
    mps_paths(
        sharing.get("mps_pipe_directory", DEFAULT_PIPE_DIRECTORY),
        sharing.get("mps_shm_directory", DEFAULT_SHM_DIRECTORY),
    )
    if s.get("home_template"):
        template_root(s["home_template"])
    for key in ("default_uid", "default_gid"):
        if s.get(key) == 0:
            raise ConfigError(f"{section}.{key} must not be 0: containers never run as root")
