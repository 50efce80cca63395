"""``c.GPUCluster``: the hub's cluster-wide settings (:class:`GPUCluster`, as ``c.PrePuller``
and ``c.GPUSharing`` are), what a :class:`~.cluster.Cluster` is made from
(:class:`ClusterSettings`), and what its parts (reconciliation, node checks) may ask of
it (:class:`NodeAccess`), so that they need not import the cluster that owns them.

The settings were the spawner's until this release: ``c.GPUDockerSpawner.<key>`` of each
key of :data:`MOVED` still works, with a warning naming ``c.GPUCluster.<key>``
(:func:`moved_keys`, :func:`gpu_cluster`); ``check_config`` says the same.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import docker
from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.core.sharing.policy import NO_SHARING, SharingPolicy
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.tokens import site_secret_from
from jupyterhub_gpu.core.usernet import bridge_name_problem
from jupyterhub_gpu.edges.nodecheck import CheckSettings
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.accounting import Accounting
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.wire.nodes_file import NodeSpec, default_node, parse_nodes

T = TypeVar("T")


@dataclass
class ClusterSettings:
    nodes: list[dict[str, Any]]
    nodes_file: str = ""
    probe_mode: str = "auto"
    inventory_file: str = ""
    agent_token: str = field(default="", repr=False)  # the site secret (inventory/tokens.py)
    agent_config: Any = field(default=None, repr=False)  # the hub's config: c.AgentClient.*
    hub_id: str = "default"
    seal_key: bytes | None = field(default=None, repr=False)  # allocation.seal_key
    accounting_url: str = field(default="", repr=False)  # "" records nothing
    docker_timeout: float = 10.0
    ping_timeout: float = 2.0
    health_ttl: float = 5.0
    threads_per_node: int = 4
    reconcile_interval: float = 30.0
    reconcile_grace: float = 0.0  # extra seconds a hold must be old before it can be freed
    drains_file: str = ""  # where admins' drains are kept across restarts ("" = memory only)
    #: the node checks' settings (GPUDockerSpawner.check_nodes; None: no checks); their
    #: ``only`` is replaced by the hub's checks (core.nodecheck.HUB_CHECKS)
    node_checks: CheckSettings | None = None
    node_check_interval: float = 300.0  # seconds between checks of a node
    image_refresh_interval: float = 45.0  # seconds between two image listings of a node
    sharing: SharingPolicy = NO_SHARING  # which GPUs may be shared (c.GPUSharing, issue 26)


class GPUCluster(LoggingConfigurable):
    """The hub's GPU nodes and what every server of the hub shares: one per hub process
    (the :class:`~.runtime.HubRuntime` holds it)."""

    nodes = List(
        Dict(),
        config=True,
        help="""GPU nodes: a list of {name, docker_url, address[, tls, agent_url, labels, drain]}.

        ``docker_url`` is ``unix:///var/run/docker.sock``, ``ssh://host`` or
        ``tcp://host:2376`` with ``tls: {ca_cert, client_cert, client_key}``; plain
        ``tcp://`` without TLS is refused, loopback included (a node may opt in with
        ``insecure_plaintext_docker_api: true``, for throw-away test set-ups only).
        ``address`` is the node's IP (or hostname) where the engine publishes each server's
        port and the hub reaches it; servers run on ``user_network``, never on the node's
        network. Default: the local engine (``DOCKER_HOST``) as one node named ``local``.
        """,
    )
    nodes_file = Unicode(
        "",
        config=True,
        help="""A YAML file with more nodes (``nodes: [...]``, same fields as ``nodes`` plus
        ``drain: true``), re-read when it changes: add, drain or remove nodes without
        restarting the hub. A removed node gets no new servers; running ones stay managed.
        A node whose ``docker_url`` or ``tls`` changes is reached at the new endpoint.
        """,
    )
    agent_token = Unicode(
        config=True,
        help="""The node agents' site secret (default: $JUPYTERHUB_GPU_SITE_SECRET, or the
        older $JUPYTERHUB_GPU_AGENT_TOKEN), at least 16 characters. Each node's agent gets
        its own token derived from it, HMAC-SHA256(secret, node name): ``python -m
        jupyterhub_gpu.services.agent --print-token --node NAME --site-secret-file FILE``
        (docs/agent.md); the secret stays on the hub.""",
    )
    probe_mode = Unicode(
        "auto",
        config=True,
        help="For nodes without an agent: 'nvml', 'declared' (inventory_file) or 'auto'.",
    )
    inventory_file = Unicode(
        "", config=True, help="Declared GPU inventory (YAML); one entry per node name."
    )
    reconcile_interval = Float(
        30.0,
        config=True,
        help="""Seconds between reconciliations of the ledger with the nodes (each round
        also samples the GPUs' utilisation for accounting).""",
    )
    accounting_url = Unicode(
        "sqlite:///jupyterhub-gpu-accounting.sqlite",
        config=True,
        help="""The accounting database (SQLAlchemy URL): every allocation, its end and
        its usage are recorded there (docs/accounting.md). Default: a SQLite file in the
        hub's working directory; in production e.g.
        ``postgresql+psycopg://jhgpu@db.example.org/jhgpu`` (the password in
        ``~/.pgpass`` or the URL). The schema is created and migrated by the hub. "" records
        nothing.""",
    )
    concurrent_start_limit = Int(
        0,
        config=True,
        help="""How many servers the hub creates at once after their GPUs are assigned (0:
        no limit); the others wait their turn, not counted as queued for GPUs.
        ``check_config`` moves JupyterHub's own ``concurrent_spawn_limit`` here when the
        GPU queue is on, because JupyterHub counts every pending spawn, a spawn waiting in
        the GPU queue included, and would refuse new ones while GPUs are simply busy.""",
    )
    catalog_file = Unicode(
        "", config=True, help="The image catalog (YAML). Default: the catalog shipped in images/."
    )
    docker_threads_per_node = Int(
        4, config=True, help="Threads for Docker calls, per node (a slow node blocks only its own)."
    )
    docker_timeout = Float(
        10.0, config=True, help="Seconds before a Docker call to a node is abandoned."
    )
    user_network = Unicode(
        "jupyterhub-gpu-users",
        config=True,
        help="""The Docker network of user servers on every node, created by the hub when
        missing (a bridge with inter-container traffic off, on ``user_bridge``) and checked
        when it exists: a network that lets containers reach each other is refused. Each
        server's port is published on the node's address to a port the engine chooses.
        Default ``jupyterhub-gpu-users``.""",
    )
    user_bridge = Unicode(
        "jhgpu-users",
        config=True,
        help="""The Linux bridge interface of ``user_network`` on each node: the name the
        node firewall guards (``scripts/node-firewall.sh --bridge``, docs/nodes.md).
        1-15 characters. Default ``jhgpu-users``.""",
    )
    hub_id = Unicode(
        "default", config=True, help="Label value that tells this hub's containers from others'."
    )
    cull_notes_file = Unicode(
        "",
        config=True,
        help="""The idle culler's notes file (``GPUIdleCuller.notes_file``, readable by the
        hub): the spawn form tells the user why the culler stopped their server, and
        accounting records such a stop as ``culled`` (with the idle GPU-hours it reclaimed)
        rather than ``stopped``. '' = off.""",
    )
    drains_file = Unicode(
        "jupyterhub-gpu-drains.json",
        config=True,
        help="""Where the nodes that admins drain on the dashboard are kept (JSON, written
        atomically, mode 0600), so that a hub restart keeps them drained. A relative path
        is relative to the hub's working directory; a site keeps it with the hub's other
        state, e.g. ``/var/lib/jupyterhub-gpu/drains.json``. '' = drains last until the hub
        stops.""",
    )
    check_nodes = Bool(
        True,
        config=True,
        help="""Check every node the hub sees (those of ``nodes`` and ``nodes_file``, one
        added while the hub runs included): its engine, its user network (inter-container
        traffic off) and, from a probe container on the user bridge (a non-root uid, no
        capabilities), the node firewall, as ``jupyterhub-gpu check-node --only
        user-network,firewall`` does (docs/nodes.md). A node whose firewall or user
        network check fails gets no new servers until a check passes; the hub's log says
        why and what to do, once per change, and the dashboard shows it drained by
        "check". The checks run in the background: no spawn waits for them, and a node
        not checked yet takes servers as before. The probe runs the catalog's CPU image,
        else ``image``, where the node has it, and is removed when the check ends.
        False: no checks (servers go to every node that is up).""",
    )
    node_check_interval = Float(
        300.0,
        config=True,
        help="""Seconds between two checks of a node (``check_nodes``). A check that could
        not judge (no probe image, the probe failed) runs again within 30 s; a node whose
        entry in the nodes file changes, or whose engine answers again after it did not,
        is checked at once.""",
    )
    cull_deadlines_file = Unicode(
        "",
        config=True,
        help="""The idle culler's deadlines file (``GPUIdleCuller.deadlines_file``): when it
        would stop each server at the earliest. The GPU queue estimates from it when GPUs
        may free up, and the dashboard shows it. '' = no estimates from the culler.""",
    )
    cull_warnings_file = Unicode(
        "",
        config=True,
        help="""The idle culler's warnings file (``GPUIdleCuller.warnings_file``): the
        servers it will stop soon if they stay idle. Their users see it on every hub page,
        with "I'm still here" (``/hub/api/gpu/users/{user}[/servers/{name}]/keep``, once per
        server start). ``configure_culler`` sets it. '' = not shown.""",
    )
    cull_policy_file = Unicode(
        "",
        config=True,
        help="""The idle culler's policy file (``GPUIdleCuller.policy_file``): the terms it
        runs with, which the spawn form tells each user ("Idle servers stop after 30 min
        with a GPU, 2 h without. You are warned 10 min before. ..."), hers by her groups.
        ``configure_culler`` sets both sides. '' = the form says nothing of the culler.""",
    )
    lab_notices_interval = Float(
        30.0,
        config=True,
        help="""Seconds between two reads of a user's notices (the culler's warning with
        "I'm still here", a share over its memory, a reservation ahead) by her open
        JupyterLab tabs, when the server's image has the ``jupyterhub-gpu-lab`` extension
        (images/lab; ``/hub/gpu/lab-notices``). Reads go to the hub, not the server: they
        are no activity of the server. Bounded to 5 to 600 s. Default 30.""",
    )
    share_notices_file = Unicode(
        "",
        config=True,
        help="""The idle culler's share notices file (``GPUIdleCuller.share_notices_file``):
        the GPU shares whose own processes hold more memory than their share. Their users
        see it on every hub page (``/hub/api/gpu/users/{user}/notices``). '' = not shown.""",
    )
    suspend = Bool(
        False,
        config=True,
        help="""Suspend instead of stop (docs/culler.md): when the idle culler reclaims a
        server, the hub checkpoints its container on its node (Docker's checkpoints, CRIU;
        the node's dockerd runs with ``--experimental``) and frees its GPUs and its
        allocation as a stop does; the user's next start resumes it on the same node (and
        the same GPUs, if they are free), with its kernels and their variables, or starts
        a new server when it cannot, saying why. A node whose engine cannot checkpoint, a
        server over ``suspend_max_gib`` or a checkpoint that fails: the culler stops the
        server as before. A CUDA process cannot be checkpointed yet (NVIDIA's
        cuda-checkpoint is not wired in): such a server is stopped. While it is on,
        servers' containers are made without Docker's auto-remove (it would remove a
        checkpointed container with its checkpoint): the hub removes them when they stop.
        ``configure_culler`` turns the culler's side on with it.""",
    )
    suspend_max_gib = Float(
        32.0,
        config=True,
        help="""GiB: a server whose container holds more memory than this is stopped, not
        suspended (its checkpoint would take about as much of its node's disk). 0: no
        limit.""",
    )
    suspend_node_gib = Float(
        64.0,
        config=True,
        help="""GiB of one node's disk its suspended servers' checkpoints may hold together
        (each counted as its container's memory when suspended, about what its checkpoint
        takes): a suspend that would pass it stops the server instead, so checkpoints
        never fill a node's disk under the servers that run there. 0: no limit.""",
    )
    suspend_keep_days = Float(
        7.0,
        config=True,
        help="""Days a suspended server's checkpoint is resumed: a start after that is a
        fresh one (and removes the checkpoint). 0: until the next start.""",
    )
    suspend_sweep_interval = Float(
        3600.0,
        config=True,
        help="""Seconds between the hub's sweeps of suspended servers whose checkpoint is
        older than ``suspend_keep_days``: their container and checkpoint are removed from
        their node (its disk) and their server token revoked, as a start after that
        would; their files are kept. 0: no sweep (a checkpoint then stays until its
        server's next start).""",
    )
    suspend_timeout = Float(
        300.0,
        config=True,
        help="""Seconds a checkpoint (or a restore) may take before the hub gives up on it
        (the server then keeps running, or starts afresh).""",
    )
    pull_timeout = Float(
        1800.0,
        config=True,
        help="""Seconds before a spawn's image pull is abandoned, however it goes. The pull
        does not count against ``start_timeout`` (which bounds the container's start
        after it): JupyterHub's bound on the whole start is raised by this much.""",
    )
    pull_stall_timeout = Float(
        120.0,
        config=True,
        help="""Seconds a spawn's image pull may go without progress (no new byte
        downloaded or unpacked) before it fails with a sentence: a large image that keeps
        coming may take up to ``pull_timeout``, a stuck registry, network or disk does not
        hold the user that long.""",
    )
    gpu_device_driver = Enum(
        ["nvidia", "cdi"],
        "nvidia",
        config=True,
        help="""How GPUs are requested from Docker. ``nvidia`` (default): a DeviceRequest of
        driver ``nvidia`` with the GPU UUIDs (Docker >= 19.03 with the NVIDIA Container
        Toolkit's hook). ``cdi``: a DeviceRequest of driver ``cdi`` for
        ``nvidia.com/gpu=<UUID>`` (Docker >= 25 with CDI enabled and a CDI spec made by
        ``nvidia-ctk cdi generate``), which does not depend on NVIDIA_VISIBLE_DEVICES.
        Either way the spawner also sets NVIDIA_VISIBLE_DEVICES to the assigned UUIDs
        (``void`` without GPUs), so an image's own ENV can never widen it.""",
    )

    @default("nodes")
    def _default_nodes(self) -> list[dict[str, Any]]:
        return [default_node()]

    @default("agent_token")
    def _default_agent_token(self) -> str:
        return site_secret_from(os.environ)

    @validate("nodes")
    def _validate_nodes(self, proposal: Any) -> list[dict[str, Any]]:
        if proposal.value:  # [] when nodes_file lists them all (the cluster checks both)
            parse_nodes(proposal.value)  # raises ConfigError naming the entry and field
        return list(proposal.value)

    @validate("node_check_interval")
    def _positive_interval(self, proposal: Any) -> float:
        if proposal.value <= 0:
            raise ConfigError(
                "GPUCluster.node_check_interval must be more than 0 seconds "
                "(check_nodes = False turns the node checks off)"
            )
        return float(proposal.value)

    @validate("user_bridge")
    def _valid_bridge(self, proposal: Any) -> str:
        problem = bridge_name_problem(proposal.value)
        if problem:
            raise ConfigError(f"GPUCluster.user_bridge: {problem}")
        return str(proposal.value)

    def cluster_settings(
        self,
        *,
        seal_key: bytes | None,
        node_checks: CheckSettings | None,
        sharing: SharingPolicy,
    ) -> ClusterSettings:
        """What the hub's :class:`~.cluster.Cluster` is made from."""
        return ClusterSettings(
            nodes=list(self.nodes),
            nodes_file=self.nodes_file,
            probe_mode=self.probe_mode,
            inventory_file=self.inventory_file,
            agent_token=self.agent_token,
            agent_config=self.config,  # so c.AgentClient.* take effect
            hub_id=self.hub_id,
            seal_key=seal_key,
            docker_timeout=self.docker_timeout,
            threads_per_node=self.docker_threads_per_node,
            reconcile_interval=self.reconcile_interval,
            accounting_url=self.accounting_url,
            drains_file=self.drains_file,
            node_checks=node_checks if self.check_nodes else None,
            node_check_interval=self.node_check_interval,
            sharing=sharing,
        )


#: the keys that moved from ``c.GPUDockerSpawner`` to ``c.GPUCluster`` in this release
#: keys added to ``c.GPUCluster`` after the move: never the spawner's, not accepted there
NEVER_THE_SPAWNERS = frozenset(
    {
        "suspend",
        "suspend_max_gib",
        "suspend_keep_days",
        "suspend_node_gib",
        "suspend_sweep_interval",
        "suspend_timeout",
        "cull_policy_file",
    }
)
MOVED: frozenset[str] = frozenset(GPUCluster.class_traits(config=True)) - NEVER_THE_SPAWNERS
#: the sections a moved key may still be found in (the spawner's, the more specific last)
OLD_SECTIONS = ("Spawner", "DockerSpawner", "GPUDockerSpawner")


def moved_keys(config: Any, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The moved keys set the old way (``c.GPUDockerSpawner.<key>``, or a spawner's own
    keyword arguments ``given``) and not under ``c.GPUCluster``: key -> value."""
    found: dict[str, Any] = {}
    for section in OLD_SECTIONS:
        if section in config:
            found.update({k: v for k, v in dict(config[section]).items() if k in MOVED})
    found.update({k: v for k, v in (given or {}).items() if k in MOVED})
    new = config.get("GPUCluster", {})
    return {k: v for k, v in found.items() if k not in new}


def old_keys() -> dict[str, Any]:
    """The spawner's traits for the keys of :data:`MOVED` (``c.GPUDockerSpawner.<key>``,
    accepted for one release; their values are read through :func:`moved_keys`)."""
    moved = GPUCluster.class_traits(config=True)
    help = "Moved to c.GPUCluster (same name): set it there; accepted here for one release."

    def like(t: Any) -> Any:  # the same kind of trait, its value never read
        if isinstance(t, Enum):
            return Enum(t.values, t.default_value, config=True, help=help)
        return type(t)(config=True, help=help)

    return {k: like(t) for k, t in sorted(moved.items()) if k in MOVED}


def deprecation(key: str) -> str:
    """The sentence for a moved key set the old way."""
    return (
        f"c.GPUDockerSpawner.{key} is deprecated: set c.GPUCluster.{key} instead (the old "
        "key still works in this release)"
    )


def gpu_cluster(
    config: Any,
    log: logging.Logger,
    given: Mapping[str, Any] | None = None,
    warned: set[str] | None = None,
) -> GPUCluster:
    """``c.GPUCluster`` of ``config``, with the moved keys set the old way; a warning for
    each, once (``warned``: the keys already warned about, the runtime's)."""
    old = moved_keys(config, given)
    for key in sorted(old):
        if warned is None or key not in warned:
            log.warning("%s", deprecation(key))
        if warned is not None:
            warned.add(key)
    return GPUCluster(config=config, log=log, **old)


class NodeAccess(Protocol):
    """The cluster as its parts see it: its settings, ledger and log, its nodes, and a
    Docker call on one of them (raising ours: ``NodeUnreachable``, ``NodeRefused``)."""

    settings: ClusterSettings
    ledger: GPULedger
    log: logging.Logger
    accounting: Accounting | None

    def specs(self) -> list[NodeSpec]: ...
    def retired_names(self) -> list[str]: ...
    def client(self, node: str) -> docker.APIClient: ...
    def known_down(self, node: str) -> bool: ...
    async def engine_ok(self, node: str) -> bool: ...
    async def snapshot(self) -> ClusterSnapshot: ...
    async def ensure_user_network(self, node: str, name: str, bridge: str) -> None: ...
    async def run(
        self,
        node: str,
        fn: Callable[[], T],
        timeout: float | None = None,
        *,
        executor: Executor | None = None,
    ) -> T: ...


__all__ = [
    "MOVED",
    "ClusterSettings",
    "GPUCluster",
    "NodeAccess",
    "deprecation",
    "gpu_cluster",
    "moved_keys",
    "old_keys",
]
