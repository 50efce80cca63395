"""What a :class:`~.cluster.Cluster` is made from (:class:`ClusterSettings`), and what its
parts (reconciliation, node checks) may ask of it (:class:`NodeAccess`), so that they
need not import the cluster that owns them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import docker

from jupyterhub_gpu.core.sharing.policy import NO_SHARING, SharingPolicy
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.nodecheck import CheckSettings
from jupyterhub_gpu.hub.accounting import Accounting
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.wire.nodes_file import NodeSpec

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


__all__ = ["ClusterSettings", "NodeAccess"]
