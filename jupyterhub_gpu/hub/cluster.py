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
- the ledger, rebuilt and reconciled from the labels of the containers on every node;
- the node checks (``check_nodes``): engine, user network and firewall of every node the
  hub sees, in the background, each on a thread of its own with a Docker client of its
  own (never a spawn's); a node that fails takes no new servers until a check passes
  (decided by :func:`jupyterhub_gpu.core.nodecheck.hub_verdict`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import docker
import requests
import yaml

from jupyterhub_gpu.core import nodecheck as rules
from jupyterhub_gpu.core.accounting.records import EndReason, utcnow
from jupyterhub_gpu.core.accounting.usage import GPUSample, Usage, fold
from jupyterhub_gpu.core.allocation import (
    LABEL,
    LabelledContainer,
    containers_from_docker,
    interrupted,
)
from jupyterhub_gpu.core.inventory import NodeInventory, NodeState
from jupyterhub_gpu.core.placement import locality
from jupyterhub_gpu.core.sharing.policy import NO_SHARING, SharingPolicy
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.usernet import network_options, network_problem
from jupyterhub_gpu.edges.accounting.store import AccountingStore, AccountingUnavailable, safe_url
from jupyterhub_gpu.edges.adminfiles import load_nodes_file
from jupyterhub_gpu.edges.agents import AgentEndpoint, Unreachable, agent_client
from jupyterhub_gpu.edges.docker_nodes import node_client, tls_config
from jupyterhub_gpu.edges.files import load_drains, save_drains
from jupyterhub_gpu.edges.nodecheck import CheckSettings, check_node
from jupyterhub_gpu.edges.probe import Probe, make_probe
from jupyterhub_gpu.errors import ConfigError, GPUHubError
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.metrics import RECONCILIATION
from jupyterhub_gpu.hub.recorder import Recorder, close_missed
from jupyterhub_gpu.wire.nodes_file import NodeSpec, parse_nodes

T = TypeVar("T")

#: What a call to a node raises when the node did not answer (or not as it must): the
#: spawner's node calls catch these and never read them as "the server is gone".
NODE_ERRORS = (
    requests.exceptions.RequestException,
    docker.errors.DockerException,
    OSError,
    asyncio.TimeoutError,
)


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


def _unreachable(error: BaseException, timed_out_counts: bool) -> bool:
    """Whether ``error`` (or what caused it) says the engine could not be reached at all,
    rather than that it refused a request; a call abandoned after the usual Docker timeout
    counts when ``timed_out_counts``."""
    seen: BaseException | None = error
    for _ in range(10):  # the chain of causes is short; never loop on a cycle
        if seen is None:
            break
        if isinstance(seen, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            return True
        if timed_out_counts and isinstance(seen, asyncio.TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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
        self._our_containers: set[str] = set()
        self._label_problems: set[str] = set()  # containers whose bad labels were logged
        self.pending: set[str] = set()  # holders whose spawn is in progress
        self._ids_on: dict[str, set[str]] = {}
        self._specs: dict[str, NodeSpec] = {}
        self._retired: dict[str, NodeSpec] = {}
        self._networks: dict[str, tuple[str, str]] = {}  # node -> user network checked there
        self._network_locks: dict[str, asyncio.Lock] = {}
        self._file_mtime: float | None = None
        self._reconciled = False
        self.reconcile_rounds = 0  # finished rounds; each logs one DEBUG line
        self._reconcile_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # node checks: each node's verdict, its last check (when, of which entry, next in),
        # the checks running now, and the loop that starts them
        self._verdicts: dict[str, rules.NodeVerdict] = {}
        self._checked: dict[str, tuple[float, NodeSpec, float]] = {}
        self._checking: dict[str, asyncio.Future[None]] = {}
        self._check_task: asyncio.Task[None] | None = None
        self._check_pool: ThreadPoolExecutor | None = None
        self.check_changes = 0  # verdicts that changed whether a node takes servers
        self.recorder: Recorder | None = None
        self._usage: dict[str, Usage] = {}  # open allocation -> its usage so far
        self._unconfirmed: dict[str, str] | None = None  # open in the store at start: id -> node
        # nodes an admin drained at run time (node -> note), beside the nodes file's drain;
        # kept in drains_file so that a restart keeps them (edges/files.py)
        self.admin_drains: dict[str, str] = (
            load_drains(settings.drains_file) if settings.drains_file else {}
        )
        self.specs()  # fail at start-up on a bad configuration
        if settings.accounting_url:
            self.recorder = Recorder(AccountingStore(settings.accounting_url), log)
            self.recorder.submit(lambda store: store.upgrade())
            self.recorder.submit(self._load_unconfirmed)
            self.ledger.subscribe(self.recorder)
            self.ledger.subscribe(self._forget_usage)
            log.info("GPU accounting records to %s", safe_url(settings.accounting_url))

    def _load_unconfirmed(self, store: AccountingStore) -> None:
        """(worker thread) What the store has open when the hub starts: each is confirmed
        by a server or container, or closed as MISSED by reconciliation."""
        self._unconfirmed = store.open_allocations(hub=self.settings.hub_id)

    def _forget_usage(self, event: Any) -> None:
        if event.reason is not None:
            self._usage.pop(event.allocation, None)

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

        A call that could not reach the engine marks the node down at once (as a failed
        ping would), so placement skips it from the next spawn on, not after ``health_ttl``.
        """
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(executor or self.executor(node), fn)
        try:
            return await asyncio.wait_for(future, timeout or self.settings.docker_timeout + 1)
        except Exception as e:
            if _unreachable(e, timed_out_counts=timeout is None):
                self._mark_down(node, e)
            raise

    def _mark_down(self, node: str, error: BaseException) -> None:
        last = self._health.get(node)
        if last is None or last[1]:  # it answered before: check it again once it answers
            self._checked.pop(node, None)  # (a reboot may have lost its firewall)
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
            except docker.errors.NotFound:
                self.log.info("Node %s: creating user network %s (bridge %s)", node, name, bridge)
                with contextlib.suppress(docker.errors.APIError):  # 409: created meanwhile
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
        except (GPUHubError, OSError, asyncio.TimeoutError) as e:
            self.log.warning("GPU inventory of node %s unreadable: %s", spec.name, e)
            return None

    async def _node_state(self, spec: NodeSpec) -> NodeState:
        engine, inventory, images = await asyncio.gather(
            self.engine_ok(spec.name), self._inventory(spec), self.images_on(spec.name)
        )
        if inventory is not None:
            self._last_inventory[spec.name] = inventory
        known = inventory or self._last_inventory.get(spec.name) or NodeInventory(spec.name, "0")
        verdict = self._verdicts.get(spec.name)
        return NodeState(
            known,
            schedulable=not spec.drain
            and spec.name not in self.admin_drains
            and (verdict is None or verdict.schedulable),
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
        await self.ensure_reconciled()
        self.start_checking()
        states = tuple(await asyncio.gather(*(self._node_state(s) for s in self.specs())))
        if states != self._nodes:
            self._nodes = states
        return ClusterSnapshot(
            nodes=self._nodes,
            allocations=self.ledger.allocations(),
            our_containers=frozenset(self._our_containers),
            shares=self.ledger.share_use(),
            sharing=self.settings.sharing,
        )

    def last_nodes(self) -> tuple[NodeState, ...]:
        """The node states of the last snapshot (for metrics; no I/O)."""
        return self._nodes

    # ------------------------------------------------------------------ node checks
    def verdict(self, node: str) -> rules.NodeVerdict | None:
        """The last verdict of ``node``'s checks (None: not checked yet, or checks off)."""
        return self._verdicts.get(node)

    def check_failures(self) -> dict[str, str]:
        """The nodes whose checks keep servers off them: node -> why and what to do."""
        return {n: v.note for n, v in self._verdicts.items() if not v.schedulable}

    def start_checking(self) -> None:
        """Start the node checks' loop if they are on and it isn't running (needs the event
        loop; the cluster's first snapshot and the spawners' polls call it)."""
        if self.settings.node_checks is not None and self._check_task is None:
            self._check_task = asyncio.ensure_future(self._check_forever())

    async def _check_forever(self) -> None:
        """Start each node's check when it is due: a node not checked yet (a new one in the
        nodes file included), one whose entry changed, one whose engine answers again
        after it did not, and every ``node_check_interval`` s (sooner after a check that
        could not judge). The nodes file is looked at every few seconds."""
        pause = max(0.5, min(5.0, self.settings.node_check_interval, rules.RETRY_S))
        while True:
            try:
                self._start_due_checks()
            except Exception:
                self.log.exception("Node checks: could not start them; will retry")
            await asyncio.sleep(pause)

    def _start_due_checks(self) -> None:
        now = time.monotonic()
        for spec in self.specs():
            name = spec.name
            if name in self._checking or self.known_down(name):
                continue  # a node that does not answer is checked once it does
            last = self._checked.get(name)
            if last is None or last[1] != spec or now >= last[0] + last[2]:
                self._checking[name] = asyncio.ensure_future(self._check_node(spec))

    async def _check_node(self, spec: NodeSpec) -> None:
        """One node's checks, on the checks' own threads; its verdict decides whether
        servers go there, and a change is logged."""
        settings = self.settings.node_checks
        assert settings is not None
        name = spec.name
        try:
            # the hub's user network exists before its firewall is probed from it (as the
            # first server placed there would make it); an unfit one is the check's to say
            with contextlib.suppress(ConfigError, *NODE_ERRORS):
                await self.ensure_user_network(name, settings.user_network, settings.user_bridge)
            if self._check_pool is None:
                self._check_pool = ThreadPoolExecutor(2, thread_name_prefix="node-check")
            run = f"hub-{secrets.token_hex(4)}"
            hub_settings = replace(settings, only=rules.HUB_CHECKS)
            try:
                report = await asyncio.get_running_loop().run_in_executor(
                    self._check_pool, check_node, spec, hub_settings, run
                )
                checks = report.checks
            except Exception as e:  # whatever it was, it judged nothing
                checks = [rules.not_run(name, "firewall", f"the check raised {e!r}")]
            self._judge(spec, checks)
        except Exception:
            self.log.exception("Node %s: its checks failed; will retry", name)
        finally:
            self._checking.pop(name, None)

    def _judge(self, spec: NodeSpec, checks: list[rules.Check]) -> None:
        name = spec.name
        previous = self._verdicts.get(name)
        verdict = rules.hub_verdict(name, checks, previous)
        next_in = rules.next_check_in(verdict, self.settings.node_check_interval)
        self._verdicts[name] = verdict
        self._checked[name] = (time.monotonic(), spec, next_in)
        if previous is None or previous.schedulable != verdict.schedulable:
            self.check_changes += 1  # a snapshot cached before it is out of date
        line = rules.verdict_log(previous, verdict, next_in)
        self.log.debug("Node %s checked: %s%s", name, verdict.state, " (kept)" * verdict.kept)
        if line is not None:
            level, message = line
            self.log.log(logging.WARNING if level == "warning" else logging.INFO, message)

    # ------------------------------------------------------------------ reconciliation
    async def ensure_reconciled(self) -> None:
        if not self._reconciled:
            await self.reconcile()
        self.start_reconciling()

    def start_reconciling(self) -> None:
        """Start the periodic reconciliation if it isn't running (needs the event loop).
        Spawners call it from ``poll``, so a restarted hub reconciles (and removes what
        interrupted spawns left) even if nobody spawns."""
        if self._task is None and self.settings.reconcile_interval > 0:
            self._task = asyncio.ensure_future(self._reconcile_forever())
        self.start_checking()

    async def _reconcile_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reconcile_interval)
            try:
                await self.reconcile()
            except Exception:
                self.log.exception("GPU ledger reconciliation failed; will retry")
            try:  # fresh node states for metrics, and usage for accounting
                snapshot = await self.snapshot()
                if self.recorder is not None:
                    await self.sample_usage(snapshot)
            except Exception:
                self.log.exception("Reading the nodes for metrics and usage failed; will retry")

    async def sample_usage(self, snapshot: ClusterSnapshot) -> None:
        """Fold the snapshot's GPU readings into each open allocation's usage and save it
        (nodes that did not answer count nothing: their readings are old). An allocation
        this process has not sampled yet (re-joined after a restart) continues from what
        the store has; until the store has answered for it, it is not sampled at all, so
        a restart never overwrites its usage with a fresh start."""
        assert self.recorder is not None
        open_now = {a: v for a, v in self.ledger.open_allocations().items() if v[1]}
        unknown = [a for a in open_now if a not in self._usage]
        if unknown:
            try:
                stored = await asyncio.wrap_future(self.recorder.call(lambda s: s.usages(unknown)))
            except AccountingUnavailable:
                open_now = {a: v for a, v in open_now.items() if a not in unknown}
            else:
                for allocation in unknown:
                    self._usage.setdefault(allocation, stored.get(allocation, Usage()))
        inventories = {n.name: n.inventory for n in snapshot.nodes if n.reachable}
        at, changed = utcnow(), {}
        for allocation, (node, uuids) in open_now.items():
            inventory = inventories.get(node)
            if inventory is None:
                continue
            samples = [
                GPUSample(g.utilization_pct, g.memory_used_mib)
                for g in (inventory.gpu(u) for u in uuids)
                if g is not None
            ]
            usage = fold(self._usage.get(allocation, Usage()), at, samples)
            self._usage[allocation] = changed[allocation] = usage
        self.recorder.save_usage(changed)

    async def _list(self, node: str) -> list[LabelledContainer] | None:
        if not await self.engine_ok(node):
            return None
        hub = f"{LABEL}.hub={self.settings.hub_id}"
        try:
            listing = await self.run(
                node, lambda: self.client(node).containers(filters={"label": hub})
            )
        except Exception as e:
            self.log.warning("Listing containers on node %s failed: %s", node, e)
            return None
        return containers_from_docker(node, listing)

    async def reconcile(self) -> None:
        """Bring the ledger in line with the labelled containers on every reachable node."""
        async with self._reconcile_lock:
            # What the listings can't have seen is left alone: holds taken after they began
            # and spawns in progress then (their container may be created after the listing).
            # Likewise a server the hub ran or was starting then (or now) keeps its container.
            began, pending = time.monotonic(), set(self.pending)
            live = self.ledger.live_allocations()
            nodes = [s.name for s in self.specs()] + list(self._retired)
            listings = await asyncio.gather(*(self._list(n) for n in nodes))
            doomed: list[LabelledContainer] = []
            for node, found in zip(nodes, listings, strict=True):
                if found is not None:
                    live_now = live | self.ledger.live_allocations()
                    doomed += self._apply(node, found, began, pending | self.pending, live_now)
            await asyncio.gather(*(self._remove_interrupted(c) for c in doomed))
            self._close_missed(nodes, listings, live | self.ledger.live_allocations())
            self._reconciled = True
            self.reconcile_rounds += 1
            RECONCILIATION.labels("round").inc()
            self.log.debug(
                "Reconciliation round %d done: %d of %d node(s) listed",
                self.reconcile_rounds,
                sum(found is not None for found in listings),
                len(nodes),
            )

    def _apply(
        self,
        node: str,
        found: list[LabelledContainer],
        began: float,
        pending: set[str],
        live: AbstractSet[str] = frozenset(),
    ) -> list[LabelledContainer]:
        """Adopt what the listing of ``node`` shows, free what it no longer shows; returns
        the containers of interrupted spawns (:func:`allocation.interrupted`), whose GPUs
        stay held (as orphans) until :meth:`_remove_interrupted` has removed them."""
        running = [c for c in found if c.running]
        doomed = interrupted(
            running,
            hub_id=self.settings.hub_id,
            key=self.settings.seal_key,
            live=live,
            pending=pending,
        )
        kept = [c for c in running if c not in doomed]
        self._our_containers.difference_update(
            {c.id for c in found if not c.running} | self._ids_on.get(node, set())
        )
        self._ids_on[node] = {c.id for c in running}
        self._our_containers.update(self._ids_on[node])
        self._label_problems &= self._our_containers  # logged once while they run, no more
        for c in running:
            if c.label_problem and c.id not in self._label_problems:
                self._label_problems.add(c.id)
                self.log.warning(
                    "Container %s of %s on %s: its labels do not parse (%s); its GPUs are "
                    "held whole while it runs",
                    c.id[:12],
                    c.holder,
                    node,
                    c.label_problem,
                )
            orphaned = c in doomed
            conflicts = [u for u in self._adopt(c, node, orphaned) if not self._own_orphan(u, c)]
            if conflicts:
                RECONCILIATION.labels("conflict").inc()
                self.log.error(
                    "Container %s on %s holds GPUs also held by others: %s",
                    c.id[:12],
                    node,
                    conflicts,
                )
        # a running server holds exactly the GPUs its container's labels list
        latest = min(time.monotonic() - self.settings.reconcile_grace, began)
        for c in kept:
            if c.holder in pending:
                continue
            extra = sorted(set(self.ledger.held_on(c.holder, node, latest)) - set(c.gpus))
            if extra and self.ledger.release(c.holder, extra):
                RECONCILIATION.labels("extra").inc()
                self.log.info(
                    "Reconciliation: container %s of %s on %s does not use %s; freed",
                    c.id[:12],
                    c.holder,
                    node,
                    ", ".join(extra),
                )
        self._free_stale(node, began, pending, kept, running)
        return doomed

    def _adopt(self, c: LabelledContainer, node: str, orphaned: bool) -> list[str]:
        """Hold what ``c``'s labels list (a share as a share: issue 26); the conflicts."""
        share = c.shares
        # whole GPUs: no share, a malformed share label, or a share label on a container
        # this hub sealed as whole (an image's forged LABEL, before every key was ours)
        if share is None or c.held_whole(self.settings.hub_id, self.settings.seal_key):
            return self.ledger.adopt(c.holder, node, c.gpus, c.allocation, orphaned)
        (uuid,) = c.gpus
        if self.ledger.adopt_share(c.holder, node, uuid, share, c.allocation, orphaned):
            return []
        return [uuid]

    def _own_orphan(self, uuid: str, c: LabelledContainer) -> bool:
        """Is ``uuid`` held by an orphan of ``c``'s server (not a conflict: the same GPU)?"""
        hold = self.ledger.hold_of(uuid)
        if hold is None:
            held = self.ledger.shares_on(uuid)
            return any(h.orphaned and h.holder == c.holder for h in held)
        return hold.orphaned and hold.holder == c.holder

    def _free_stale(
        self,
        node: str,
        began: float,
        pending: set[str],
        kept: list[LabelledContainer],
        running: list[LabelledContainer],
    ) -> None:
        """Free the holds on ``node`` that no running container backs any more: a live
        server's (its spawner's poll ends its allocation) and an orphan's (a stop that
        could not reach the node: its allocation ends here, as NODE_LOST)."""
        grace = self.settings.reconcile_grace
        holders = {c.holder for c in kept}
        for holder in self.ledger.holders_on(node, older_than=grace, taken_before=began):
            if holder not in holders and holder not in pending:
                freed = self.ledger.release(holder)
                self.ledger.release_server(holder)
                self._log_freed(holder, node, freed)
        present = {c.allocation or c.holder for c in running}
        for key, hold in self.ledger.orphans_on(node, grace, taken_before=began).items():
            if key not in present:
                freed = self.ledger.release_orphan(key)
                self.ledger.end_allocation(hold.allocation, EndReason.NODE_LOST)
                self._log_freed(f"{hold.holder} (orphaned)", node, freed)

    def _log_freed(self, holder: str, node: str, freed: list[str]) -> None:
        if freed:
            RECONCILIATION.labels("freed").inc()
            self.log.info(
                "Reconciliation: no container of %s on %s; freed %s",
                holder,
                node,
                ", ".join(freed),
            )

    def _close_missed(
        self,
        nodes: list[str],
        listings: list[list[LabelledContainer] | None],
        live: AbstractSet[str],
    ) -> None:
        """Close, as MISSED, what the store had open at start and nothing here confirms:
        no live server, no spawn in progress, no running container with its id on a node
        that answered (a node that did not answer decides nothing)."""
        if not self._unconfirmed:
            return
        seen = set(live) | set(self.ledger.open_allocations())
        answered = {n for n, found in zip(nodes, listings, strict=True) if found is not None}
        known = set(nodes)
        answered |= {node for node in self._unconfirmed.values() if node not in known}
        for found in listings:
            seen |= {c.allocation for c in found or () if c.running and c.allocation}
        confirmed = {a for a in self._unconfirmed if a in seen}
        missed = close_missed(self._unconfirmed, seen, answered)
        for allocation in missed:
            self.log.info(
                "Accounting: allocation %s on node %s ended while the hub was down; closed "
                "now, marked missed",
                allocation,
                self._unconfirmed[allocation],
            )
            self.ledger.end_allocation(allocation, EndReason.MISSED)
            RECONCILIATION.labels("closed_missed").inc()
        for allocation in confirmed | set(missed):
            del self._unconfirmed[allocation]

    async def recorded(self, timeout: float = 10.0) -> bool:
        """Wait until what was announced so far is in the accounting database (a spawn
        calls it between reserving and creating its container, so a hub killed in between
        leaves a record for reconciliation to close). False, with one warning, when the
        database did not take it in ``timeout`` s: the spawn goes on, the record waits."""
        if self.recorder is None:
            return True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(self.recorder.flush()), timeout)
        if self.recorder.backlog:
            self.log.warning(
                "Accounting: %d records not yet written (database slow or down); spawning "
                "anyway, they are written when it answers",
                self.recorder.backlog,
            )
            return False
        return True

    async def _remove_interrupted(self, c: LabelledContainer) -> None:
        """Remove a container of an interrupted spawn (or stop) and free its GPUs."""
        if c.holder in self.pending:
            return  # a new spawn of that server began meanwhile: next round decides
        try:
            await self.run(c.node, lambda: self.client(c.node).remove_container(c.id, force=True))
        except docker.errors.NotFound:  # removed meanwhile (a failed start's clean-up)
            self.ledger.release_orphan(c.allocation or c.holder)
            self.ledger.end_allocation(c.allocation, EndReason.INTERRUPTED)
            return
        except Exception as e:
            self.log.warning(
                "Reconciliation: could not remove container %s of an interrupted spawn of %s "
                "on %s: %s; its GPUs stay held, next round retries",
                c.id[:12],
                c.holder,
                c.node,
                e,
            )
            return
        self.ledger.release_orphan(c.allocation or c.holder)  # a spawn or stop cut short
        self.ledger.end_allocation(c.allocation, EndReason.INTERRUPTED)
        RECONCILIATION.labels("removed_interrupted").inc()
        self.log.info(
            "Reconciliation: removed container %s of user %s, server %r on node %s, GPUs %s: "
            "the hub has no such server (a spawn or stop interrupted by a hub crash or a "
            "failed clean-up); GPUs freed",
            c.id[:12],
            c.owner,
            c.server,
            c.node,
            ", ".join(c.gpus) or "none",
        )
