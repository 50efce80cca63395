"""The hub's view of its GPU nodes (an edge: all the I/O placement needs).

One :class:`Cluster` per hub process, shared by every spawner:

- node specs from configuration plus a watched nodes file (add, drain, remove without a
  restart); a removed node's running servers can still be polled and stopped;
- one Docker client and one thread pool per node, every call bounded by a timeout, so a
  slow or dead node never holds up the others;
- engine health (a cached ``ping``) and GPU inventories (node agents, read concurrently,
  or a local probe) assembled into a :class:`ClusterSnapshot` for the pure placement,
  with the images each engine holds (its listing, read at most every
  ``image_refresh_interval`` s per node in the background, and added to at once after
  the hub's own pull there), so placement can prefer a node that needs no pull;
- the ledger, rebuilt and reconciled from the labels of the containers on every node
  (:class:`~.reconciliation.Reconciler`, over the pure diff of
  :mod:`jupyterhub_gpu.core.reconciliation`), and the accounting that records it
  (:class:`~.accounting.Accounting`);
- the node checks (``check_nodes``, :class:`~.node_checks.NodeChecks`): a node that fails
  takes no new servers until a check passes.

Every Docker call to a node goes through :meth:`Cluster.run`, which raises our own
exceptions (``NodeUnreachable``, ``NodeRefused``: :mod:`jupyterhub_gpu.edges.node_errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import docker
import yaml

from jupyterhub_gpu.core import nodecheck as rules
from jupyterhub_gpu.core.allocation import (
    LABEL,
)
from jupyterhub_gpu.core.inventory import NodeInventory, NodeState
from jupyterhub_gpu.core.placement import locality
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.usernet import network_options, network_problem
from jupyterhub_gpu.edges.adminfiles import load_nodes_file
from jupyterhub_gpu.edges.agents import AgentEndpoint, Unreachable, agent_client
from jupyterhub_gpu.edges.docker_nodes import node_client, tls_config
from jupyterhub_gpu.edges.files import load_drains, save_drains
from jupyterhub_gpu.edges.node_errors import engine_unreachable, node_error
from jupyterhub_gpu.edges.probe import Probe, make_probe
from jupyterhub_gpu.errors import ConfigError, GPUHubError, NodeRefused, NotOnNode
from jupyterhub_gpu.hub.accounting import Accounting
from jupyterhub_gpu.hub.cluster_settings import ClusterSettings
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.node_checks import NodeChecks
from jupyterhub_gpu.hub.reconciliation import Reconciler
from jupyterhub_gpu.hub.recorder import Recorder
from jupyterhub_gpu.wire.nodes_file import NodeSpec, parse_nodes

T = TypeVar("T")


def _endpoint(spec: NodeSpec) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a node's Docker client is made from."""
    return spec.docker_url, tuple(sorted(spec.tls.items()))


class Cluster:
    def __init__(self, settings: ClusterSettings, log: logging.Logger) -> None:
        self.settings = settings
        self.log = log
        self.ledger = GPULedger()
        self.agents = agent_client(  # c.AgentClient.* win over these per-cluster defaults
            settings.agent_config,
            log,
            timeout=settings.ping_timeout,
            max_age=settings.health_ttl / 2,
        )
        self._clients: dict[str, docker.APIClient] = {}
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._probes: dict[str, Probe] = {}
        self._health: dict[str, tuple[float, bool]] = {}
        self._last_inventory: dict[str, NodeInventory] = {}
        # images each engine holds (locality identities), when each was last listed (or
        # tried), and the listings under way
        self._images: dict[str, frozenset[str]] = {}
        self._image_sizes: dict[str, int] = {}  # identity -> size on disk, as last listed
        self._images_at: dict[str, float] = {}
        self._image_reads: dict[str, asyncio.Future[None]] = {}
        self._pulls_seen: dict[str, int] = {}  # per node: pulls noted (see image_pulled)
        self._nodes: tuple[NodeState, ...] = ()  # the last snapshot's, reused while equal
        self._specs: dict[str, NodeSpec] = {}
        self._retired: dict[str, NodeSpec] = {}
        self._networks: dict[str, tuple[str, str]] = {}  # node -> user network checked there
        self._network_locks: dict[str, asyncio.Lock] = {}
        self._file_mtime: float | None = None
        self.reconciler = Reconciler(self)
        self.checks = NodeChecks(self)
        self.accounting: Accounting | None = None
        self.recorder: Recorder | None = None
        # nodes an admin drained at run time (node -> note), beside the nodes file's drain;
        # kept in drains_file so that a restart keeps them (edges/files.py)
        self.admin_drains: dict[str, str] = (
            load_drains(settings.drains_file) if settings.drains_file else {}
        )
        self.specs()  # fail at start-up on a bad configuration
        if settings.accounting_url:
            self.accounting = Accounting(settings.accounting_url, settings.hub_id, self.ledger, log)
            self.recorder = self.accounting.recorder

    # ------------------------------------------------------------------ specs
    def drain(self, node: str, note: str) -> None:
        """An admin drains ``node``: no new servers there. Kept in ``drains_file``; OSError
        (nothing changed) when it can't be written."""
        self._set_drains({**self.admin_drains, node: note})

    def undrain(self, node: str) -> str | None:
        """The admin's drain of ``node`` ends; its note, None if it had none."""
        drains = dict(self.admin_drains)
        was = drains.pop(node, None)
        if was is not None:
            self._set_drains(drains)
        return was

    def _set_drains(self, drains: dict[str, str]) -> None:
        if self.settings.drains_file:
            save_drains(self.settings.drains_file, drains)  # first: on failure nothing changes
        self.admin_drains = drains

    def specs(self) -> list[NodeSpec]:
        """The configured nodes now (configuration + nodes file, re-read when it changes)."""
        path = self.settings.nodes_file
        mtime = Path(path).stat().st_mtime if path and Path(path).exists() else None
        if self._specs and mtime == self._file_mtime:
            return list(self._specs.values())
        try:
            specs = self._read_specs(path, mtime)
        except (ConfigError, yaml.YAMLError, OSError) as e:
            if not self._specs:
                raise  # at start-up: refuse to run on a bad configuration
            self.log.error("Nodes file %s not applied, the nodes stay as they were: %s", path, e)
            self._file_mtime = mtime  # not read (nor logged) again until it changes
            return list(self._specs.values())
        for name in set(self._specs) - set(specs):
            self.log.info("Node %s removed: no new servers; running ones stay reachable", name)
            self._retired[name] = self._specs[name]
        for name in specs:
            self._retired.pop(name, None)
            old = self._specs.get(name)
            if specs[name].insecure_plaintext_docker_api and old != specs[name]:
                self.log.warning(
                    "Node %s: Docker API %s is plain TCP without TLS "
                    "(insecure_plaintext_docker_api): whoever reaches that port is root on the "
                    "node. Only for throw-away test set-ups.",
                    name,
                    specs[name].docker_url,
                )
            if old is not None and _endpoint(old) != _endpoint(specs[name]):
                self._forget_engine(name)
        self._specs, self._file_mtime = specs, mtime
        return list(specs.values())

    def _forget_engine(self, node: str) -> None:
        """The node's Docker endpoint changed: the next call opens a client to the new one."""
        client = self._clients.pop(node, None)
        if client is not None:
            client.close()
        self._health.pop(node, None)
        self._networks.pop(node, None)
        self.log.info("Node %s: Docker endpoint changed, reconnecting", node)

    def _read_specs(self, path: str, mtime: float | None) -> dict[str, NodeSpec]:
        raw = list(self.settings.nodes) + load_nodes_file(path)
        return {s.name: s for s in parse_nodes(raw, allow_empty=bool(path))}

    def retired_names(self) -> list[str]:
        """Nodes removed from the configuration whose servers may still run."""
        return list(self._retired)

    def spec(self, name: str) -> NodeSpec:
        self.specs()
        spec = self._specs.get(name) or self._retired.get(name)
        if spec is None:
            raise ConfigError(f"node {name!r} is not configured")
        return spec

    # ------------------------------------------------------------------ docker
    def client(self, node: str) -> docker.APIClient:
        client = self._clients.get(node)
        if client is None:
            client = self.new_client(node, self.settings.docker_timeout)
            self._clients[node] = client
        return client

    def new_client(self, node: str, timeout: float) -> docker.APIClient:
        """A Docker client of its own for ``node`` (a long build or push must not hold
        the node's shared client or its threads); the caller closes it."""
        spec = self.spec(node)
        return node_client(spec, timeout, tls_config(spec))

    def executor(self, node: str) -> ThreadPoolExecutor:
        pool = self._executors.get(node)
        if pool is None:
            pool = ThreadPoolExecutor(
                self.settings.threads_per_node, thread_name_prefix=f"docker-{node}"
            )
            self._executors[node] = pool
        return pool

    async def run(
        self,
        node: str,
        fn: Callable[[], T],
        timeout: float | None = None,
        *,
        executor: Executor | None = None,
    ) -> T:
        """Run a blocking call in the node's pool (or ``executor``: a pull has a thread of
        its own), abandoning it after ``timeout`` seconds.

        What it raises is ours (:func:`~jupyterhub_gpu.edges.node_errors.node_error`):
        :class:`NodeUnreachable` (:class:`NodeTimedOut`), :class:`NodeRefused`
        (:class:`NotOnNode`), the library's exception as its cause. A call that could not
        reach the engine marks the node down at once (as a failed ping would), so
        placement skips it from the next spawn on, not after ``health_ttl``.
        """
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(executor or self.executor(node), fn)
        try:
            return await asyncio.wait_for(future, timeout or self.settings.docker_timeout + 1)
        except Exception as e:
            if engine_unreachable(e, timed_out_counts=timeout is None):
                self._mark_down(node, e)
            mapped = node_error(node, e)
            if mapped is e:
                raise
            raise mapped from e

    def _mark_down(self, node: str, error: BaseException) -> None:
        last = self._health.get(node)
        if last is None or last[1]:  # it answered before: check it again once it answers
            self.checks.again_when_up(node)
        if not self.known_down(node):
            self.log.warning(
                "Docker engine of node %s unreachable: %s", node, error or type(error).__name__
            )
        self._health[node] = (time.monotonic(), False)
        self._clients.pop(node, None)  # reconnect next time (version negotiation)
        self._networks.pop(node, None)  # a node that comes back is checked again

    async def engine_ok(self, node: str) -> bool:
        """Whether the node's engine answered a ping recently (cached ``health_ttl``)."""
        cached = self._health.get(node)
        if cached and time.monotonic() - cached[0] < self.settings.health_ttl:
            return cached[1]
        try:
            await self.run(node, lambda: self.client(node).ping(), self.settings.ping_timeout)
        except Exception as e:
            self._mark_down(node, e)
            return False
        self._health[node] = (time.monotonic(), True)
        return True

    def known_down(self, node: str) -> bool:
        cached = self._health.get(node)
        return bool(
            cached and not cached[1] and time.monotonic() - cached[0] < self.settings.health_ttl
        )

    async def ensure_user_network(self, node: str, name: str, bridge: str) -> None:
        """The node's user bridge network exists and is fit (ICC off, no IPv6, on
        ``bridge``): created when missing, checked once per node (again after the node was
        unreachable). Raises :class:`ConfigError` naming the node and what to do when an
        existing one (or one the engine made otherwise than asked) is unfit."""
        if self._networks.get(node) == (name, bridge):
            return
        async with self._network_locks.setdefault(node, asyncio.Lock()):
            if self._networks.get(node) == (name, bridge):
                return
            client = self.client(node)
            try:
                info = await self.run(node, lambda: client.inspect_network(name))
            except NotOnNode:
                self.log.info("Node %s: creating user network %s (bridge %s)", node, name, bridge)
                with contextlib.suppress(NodeRefused):  # 409: created meanwhile
                    await self.run(
                        node,
                        lambda: client.create_network(
                            name,
                            driver="bridge",
                            # ICC off, IPv6 explicitly off (docker-py sends no
                            # EnableIPv6 for False: the option says it to the engine)
                            options=network_options(bridge),
                            enable_ipv6=False,
                            labels={f"{LABEL}.network": "users"},
                        ),
                    )
                info = await self.run(node, lambda: client.inspect_network(name))
            problem = network_problem(info, name, bridge)
            if problem:
                raise ConfigError(f"Node {node}: {problem}")
            self._networks[node] = (name, bridge)

    # ------------------------------------------------------------------ inventory
    async def _inventory(self, spec: NodeSpec) -> NodeInventory | None:
        if spec.agent_url:
            reading = await self.agents.read(
                AgentEndpoint.for_node(spec.name, spec.agent_url, self.settings.agent_token)
            )
            if isinstance(reading, Unreachable):
                return None
            return reading
        probe = self._probes.get(spec.name)
        if probe is None:
            probe = make_probe(
                self.settings.probe_mode, self.settings.inventory_file or None, spec.name
            )
            self._probes[spec.name] = probe
        try:
            return await self.run(spec.name, probe.read, self.settings.ping_timeout)
        except GPUHubError as e:  # NodeError included (Cluster.run)
            self.log.warning("GPU inventory of node %s unreadable: %s", spec.name, e)
            return None

    async def _node_state(self, spec: NodeSpec) -> NodeState:
        engine, inventory, images = await asyncio.gather(
            self.engine_ok(spec.name), self._inventory(spec), self.images_on(spec.name)
        )
        if inventory is not None:
            self._last_inventory[spec.name] = inventory
        known = inventory or self._last_inventory.get(spec.name) or NodeInventory(spec.name, "0")
        return NodeState(
            known,
            schedulable=not spec.drain
            and spec.name not in self.admin_drains
            and self.checks.schedulable(spec.name),
            reachable=engine and inventory is not None,
            images=images,
        )

    # ------------------------------------------------------------------ images
    async def images_on(self, node: str) -> frozenset[str]:
        """The images ``node``'s engine holds, as last listed (locality identities; empty
        when unknown). A listing older than ``image_refresh_interval`` is renewed in the
        background; only a node never listed yet is waited for, at most ``ping_timeout``
        s (alongside its inventory), so placement never waits on a slow engine."""
        now = time.monotonic()
        due = now >= self._images_at.get(node, -1e18) + self.settings.image_refresh_interval
        if due and node not in self._image_reads:
            self._images_at[node] = now
            read = asyncio.ensure_future(self._read_images(node))
            self._image_reads[node] = read
            read.add_done_callback(lambda _: self._image_reads.pop(node, None))
        pending = self._image_reads.get(node)
        if node not in self._images and pending is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(pending), self.settings.ping_timeout)
            self._images.setdefault(node, frozenset())  # waited once: never again
        return self._images.get(node, frozenset())

    async def _read_images(self, node: str) -> None:
        """List ``node``'s images on its thread pool (bounded by ``docker_timeout``); a
        listing that fails keeps the last known set (or none)."""
        pulls = self._pulls_seen.get(node, 0)
        try:
            if self.known_down(node):
                raise OSError("its engine did not answer lately")
            listing = await self.run(
                node, lambda: self.client(node).images(), self.settings.docker_timeout
            )
        except Exception as e:  # best effort: placement goes on without it
            self.log.debug("Images of node %s not listed, kept as they were: %s", node, e)
            self._images.setdefault(node, frozenset())
            return
        found = locality.held(listing if isinstance(listing, list) else [])
        self._image_sizes.update(locality.sizes(listing if isinstance(listing, list) else []))
        if self._pulls_seen.get(node, 0) != pulls:  # a pull ended while it was listed
            found |= self._images.get(node, frozenset())
        self._images[node] = found

    def image_sizes(self) -> dict[str, int]:
        """identity -> size in bytes (on disk) of every image some node's engine listed."""
        return dict(self._image_sizes)

    def image_pulled(self, node: str, image: str) -> None:
        """The hub pulled ``image`` on ``node``: it holds it from the next snapshot on, and
        the next snapshot lists the node again (for the image's digest and ID)."""
        self._images[node] = self._images.get(node, frozenset()) | locality.wanted(image)
        self._pulls_seen[node] = self._pulls_seen.get(node, 0) + 1
        self._images_at.pop(node, None)

    async def snapshot(self) -> ClusterSnapshot:
        """Every node's state now, with the ledger's allocations (reconciled once at first).

        While no node's state changed, ``nodes`` is the very tuple of the previous snapshot:
        placement caches its index by that tuple's identity, so a burst of spawns between
        two agent readings decides "warm" (see docs/placement.md).
        """
        await self.reconciler.ensure_reconciled()
        self.checks.start()
        states = tuple(await asyncio.gather(*(self._node_state(s) for s in self.specs())))
        if states != self._nodes:
            self._nodes = states
        return ClusterSnapshot(
            nodes=self._nodes,
            allocations=self.ledger.allocations(),
            our_containers=frozenset(self.reconciler.our_containers),
            shares=self.ledger.share_use(),
            sharing=self.settings.sharing,
        )

    def last_nodes(self) -> tuple[NodeState, ...]:
        """The node states of the last snapshot (for metrics; no I/O)."""
        return self._nodes

    # ------------------------------------------------------------------ the parts
    def verdict(self, node: str) -> rules.NodeVerdict | None:
        """The last verdict of ``node``'s checks (None: not checked yet, or checks off)."""
        return self.checks.verdicts.get(node)

    def check_failures(self) -> dict[str, str]:
        """The nodes whose checks keep servers off them: node -> why and what to do."""
        return self.checks.failures()

    @property
    def check_changes(self) -> int:
        """Verdicts that changed whether a node takes servers (a cached payload is old)."""
        return self.checks.changes

    def start_checking(self) -> None:
        self.checks.start()

    @property
    def pending(self) -> set[str]:
        """The holders whose spawn is in progress (reconciliation leaves them alone)."""
        return self.reconciler.pending

    async def reconcile(self) -> None:
        """One reconciliation round now (:mod:`.reconciliation`)."""
        await self.reconciler.reconcile()

    def start_reconciling(self) -> None:
        """Start the periodic reconciliation and the node checks if they aren't running
        (needs the event loop). Spawners call it from ``poll``, so a restarted hub
        reconciles (and removes what interrupted spawns left) even if nobody spawns."""
        self.reconciler.start()
        self.checks.start()

    async def recorded(self, timeout: float = 10.0) -> bool:
        """Wait until what was announced so far is in the accounting database (True
        without one): :meth:`.accounting.Accounting.recorded`."""
        return True if self.accounting is None else await self.accounting.recorded(timeout)
