"""GPUDockerSpawner: DockerSpawner that places each server on a node and GPUs.

Thin by design: the decisions live in pure modules (``placement``, ``homes``,
``options``); this class wires them into DockerSpawner's hooks:

- ``start``: validate options, make the home, place and reserve GPUs (no ``await``
  between reading the ledger and writing it), then create the container with a Docker
  ``DeviceRequest`` listing the GPU UUIDs, labels, the home mount and a non-root user;
  any failure releases the GPUs and removes what was created;
- ``poll``/``stop``/``clear_state``: free the GPUs when the server stops, dies or fails;
- ``get_state``/``load_state``: persist the node and GPUs so a restarted hub re-adopts them.
"""

from __future__ import annotations

import asyncio
import random
import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, ClassVar

import docker
from docker.errors import APIError, DockerException
from docker.types import DeviceRequest
from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException
from requests.exceptions import RequestException
from traitlets import Dict, Float, Int, List, Tuple, Unicode, default, validate

from . import homes
from .errors import ConfigError, UnsafePath, UserFacingError
from .inventory.model import ClusterSnapshot, NodeState
from .inventory.probe import Probe, make_probe
from .ledger import GPULedger
from .nodes import NodeSpec, default_node, parse_nodes
from .options import GPUOptions, parse_gpu_options
from .placement import place
from .placement.model import NoFit, Placement, PlacementRequest

LABEL = "jupyterhub-gpu"
_NODE_ERRORS = (RequestException, DockerException, OSError, asyncio.TimeoutError)


def _spawn_error(e: UserFacingError) -> SpawnException:
    return SpawnException(str(e), reason=e.reason, status_code=e.status_code)


class GPUDockerSpawner(DockerSpawner):
    """A DockerSpawner that gives each server exactly the GPUs it was placed on."""

    ledger: ClassVar[GPULedger] = GPULedger()
    _node_clients: ClassVar[dict[str, docker.APIClient]] = {}
    _node_executors: ClassVar[dict[str, ThreadPoolExecutor]] = {}
    _probes: ClassVar[dict[str, Probe]] = {}

    nodes = List(
        Dict(),
        config=True,
        help="""GPU nodes: a list of {name, docker_url, address[, tls, agent_url, labels]}.

        ``docker_url`` is ``unix:///var/run/docker.sock`` or ``tcp://host:2376`` (with
        ``tls: {ca_cert, client_cert, client_key}``); ``address`` is where the hub
        reaches single-user servers on that node (containers use host networking).
        Default: the local engine (``DOCKER_HOST``) as one node named ``local``.
        """,
    )
    probe_mode = Unicode(
        "auto",
        config=True,
        help="Where GPU inventories come from: 'nvml', 'declared' (inventory_file) or 'auto'.",
    )
    inventory_file = Unicode(
        "",
        config=True,
        help="Declared GPU inventory (YAML, see docs/inventory.md); one entry per node name.",
    )
    home_template = Unicode(
        "",
        config=True,
        help="""Host path of each user's home on the shared filesystem, mounted at the
        container's home, e.g. ``/mnt/cephfs/home/{username}``. The username is escaped
        so the path can never leave the folder before ``{username}``. Empty: no home mount.
        """,
    )
    home_container_path = Unicode(
        "/home/{username}", config=True, help="Where the home is mounted in the container."
    )
    default_uid = Int(1000, config=True, help="uid the container runs as (never 0).")
    default_gid = Int(100, config=True, help="gid the container runs as (never 0).")
    max_gpus_per_server = Int(8, config=True, help="Upper bound on GPUs one server may ask for.")
    default_gpus = Int(1, config=True, help="GPUs a server gets when its options don't say.")
    docker_threads_per_node = Int(
        4, config=True, help="Threads for Docker calls, per node (a slow node blocks only its own)."
    )
    docker_timeout = Float(
        10.0, config=True, help="Seconds before a Docker call to a node is abandoned."
    )
    port_range = Tuple(
        Int(),
        Int(),
        default_value=(40000, 49999),
        config=True,
        help="Ports for single-user servers (host networking: one port per server and node).",
    )
    hub_id = Unicode(
        "default", config=True, help="Label value that tells this hub's containers from others'."
    )

    @default("nodes")
    def _default_nodes(self) -> list[dict[str, Any]]:
        return [default_node()]

    @validate("nodes")
    def _validate_nodes(self, proposal: Any) -> list[dict[str, Any]]:
        parse_nodes(proposal.value)  # raises ConfigError naming the entry and field
        return list(proposal.value)

    @validate("default_uid", "default_gid")
    def _no_root(self, proposal: Any) -> int:
        if proposal.value == 0:
            raise ConfigError(f"{proposal.trait.name} must not be 0: containers never run as root")
        return int(proposal.value)

    @default("network_name")
    def _default_network(self) -> str:
        return "host"

    @default("use_internal_ip")
    def _default_use_internal_ip(self) -> bool:
        return True  # host networking: no port bindings; get_ip_and_port says where

    @default("remove")
    def _default_remove(self) -> bool:
        return True

    # ------------------------------------------------------------------ state
    node_name = Unicode("")
    gpu_uuids = List(Unicode())

    @property
    def holder(self) -> str:
        return f"{self.user.name}/{self.name}"

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.node_name:
            state.update(node=self.node_name, gpu_uuids=list(self.gpu_uuids), port=self.port)
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.node_name = state.get("node", "")
        self.gpu_uuids = list(state.get("gpu_uuids", []))
        if state.get("port"):
            self.port = int(state["port"])
        if self.node_name:
            conflicts = self.ledger.adopt(self.holder, self.node_name, self.gpu_uuids)
            self.ledger.reserve_port(self.holder, self.node_name, self.port)
            if conflicts:
                self.log.warning(
                    "%s: GPUs %s also claimed by another server", self.holder, conflicts
                )

    def clear_state(self) -> None:
        super().clear_state()
        self._forget_placement()

    def _forget_placement(self) -> None:
        self._release()
        self.node_name = ""
        self.gpu_uuids = []

    def _release(self) -> None:
        freed = self.ledger.release(self.holder, self.gpu_uuids)
        self.ledger.release_ports(self.holder)
        if freed:
            self.log.info("%s: released GPUs %s", self.holder, ", ".join(freed))

    # ------------------------------------------------------------------ nodes
    @property
    def node_specs(self) -> list[NodeSpec]:
        return parse_nodes(self.nodes)

    def _node(self, name: str) -> NodeSpec:
        for spec in self.node_specs:
            if spec.name == name:
                return spec
        raise ConfigError(f"node {name!r} is not configured")

    @property
    def client(self) -> docker.APIClient:
        """One Docker client per node (DockerSpawner has one for everything)."""
        spec = self._node(self.node_name) if self.node_name else self.node_specs[0]
        client = self._node_clients.get(spec.name)
        if client is None:
            tls: Any = False
            if spec.tls:
                tls = docker.tls.TLSConfig(
                    client_cert=(spec.tls["client_cert"], spec.tls["client_key"]),
                    ca_cert=spec.tls["ca_cert"],
                    verify=True,
                )
            client = docker.APIClient(
                base_url=spec.docker_url, version="auto", timeout=self.docker_timeout, tls=tls
            )
            self._node_clients[spec.name] = client
        return client

    @property
    def executor(self) -> ThreadPoolExecutor:
        """One thread pool per node, so a slow node never blocks the others."""
        key = self.node_name or self.node_specs[0].name
        pool = self._node_executors.get(key)
        if pool is None:
            pool = ThreadPoolExecutor(
                self.docker_threads_per_node, thread_name_prefix=f"docker-{key}"
            )
            self._node_executors[key] = pool
        return pool

    def _probe(self, spec: NodeSpec) -> Probe:
        probe = self._probes.get(spec.name)
        if probe is None:
            probe = make_probe(self.probe_mode, self.inventory_file or None, spec.name)
            self._probes[spec.name] = probe
        return probe

    def snapshot(self) -> ClusterSnapshot:
        states = []
        for spec in self.node_specs:
            try:
                states.append(NodeState(self._probe(spec).read()))
            except Exception as e:  # a node we can't read is skipped, not fatal
                self.log.warning("GPU inventory of node %s unreadable: %s", spec.name, e)
        return ClusterSnapshot(nodes=tuple(states), allocations=self.ledger.allocations())

    # ------------------------------------------------------------------ placement
    def _choose(self, options: GPUOptions) -> Placement:
        """Decide and reserve, synchronously: no await between reading and taking."""
        snapshot = self.snapshot()
        if options.gpus == 0:
            node = self._least_busy_node(snapshot)
            decision: Placement | NoFit = Placement(node=node, gpu_uuids=())
        else:
            decision = place(snapshot, PlacementRequest(gpu_count=options.gpus))
        if isinstance(decision, NoFit):
            raise SpawnException(decision.reason, reason="no_capacity", status_code=503)
        self.ledger.reserve(self.holder, decision.node, decision.gpu_uuids)
        self.node_name = decision.node
        self.gpu_uuids = list(decision.gpu_uuids)
        self.port = self._reserve_port(decision.node)
        return decision

    def _least_busy_node(self, snapshot: ClusterSnapshot) -> str:
        names = [n.name for n in snapshot.nodes if n.schedulable and n.reachable]
        names = names or [s.name for s in self.node_specs]
        return min(names, key=lambda n: (self.ledger.servers_on(n), n))

    def _reserve_port(self, node: str) -> int:
        low, high = self.port_range
        rng = random.Random()
        for _ in range(200):
            port = rng.randint(low, high)
            if _port_free_locally(self._node(node).address, port) and self.ledger.reserve_port(
                self.holder, node, port
            ):
                return port
        raise SpawnException(
            f"No free port on node {node}; ask an admin to widen port_range.",
            reason="no_port",
            status_code=503,
        )

    # ------------------------------------------------------------------ container
    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.pop("NVIDIA_VISIBLE_DEVICES", None)  # only the engine's DeviceRequest sets it
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
        if not self.gpu_uuids:
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        if self.home_template:
            env["HOME"] = self._container_home()
        return env

    def _container_home(self) -> str:
        return self.home_container_path.format(username=homes.safe_path_component(self.user.name))

    def _labels(self) -> dict[str, str]:
        return {
            f"{LABEL}.hub": self.hub_id,
            f"{LABEL}.owner": self.user.name,
            f"{LABEL}.server": self.name,
            f"{LABEL}.node": self.node_name,
            f"{LABEL}.gpus": ",".join(self.gpu_uuids),
            f"{LABEL}.image": self.image,
            f"{LABEL}.started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def _prepare_home(self) -> dict[str, dict[str, str]]:
        if not self.home_template:
            return {}
        try:
            path = homes.home_host_path(self.home_template, self.user.name)
            homes.ensure_home(path, homes.template_root(self.home_template), *self._uid_gid())
        except UnsafePath as e:
            raise _spawn_error(e) from None
        return {str(path): {"bind": self._container_home(), "mode": "rw"}}

    def _uid_gid(self) -> tuple[int, int]:
        return self.default_uid, self.default_gid

    async def create_object(self) -> dict[str, Any]:
        uid, gid = self._uid_gid()
        binds = self._prepare_home()
        devices = (
            [
                DeviceRequest(
                    driver="nvidia", device_ids=list(self.gpu_uuids), capabilities=[["gpu"]]
                )
            ]
            if self.gpu_uuids
            else []
        )
        create_kwargs: dict[str, Any] = dict(getattr(self, "extra_create_kwargs", {}))
        create_kwargs.update(user=f"{uid}:{gid}", labels=self._labels())
        if binds:
            create_kwargs["working_dir"] = self._container_home()
        self.extra_create_kwargs = create_kwargs
        host_config: dict[str, Any] = dict(getattr(self, "extra_host_config", {}))
        host_config.update(device_requests=devices, binds=binds, network_mode="host")
        self.extra_host_config = host_config
        return await super().create_object()

    def get_args(self) -> list[str]:
        args = super().get_args()
        return [*args, f"--ip={self._node(self.node_name).address}", f"--port={self.port}"]

    async def get_ip_and_port(self) -> tuple[str, int]:
        return self._node(self.node_name).address, self.port

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> tuple[str, int]:
        try:
            options = parse_gpu_options(
                self.user_options, default=self.default_gpus, maximum=self.max_gpus_per_server
            )
        except UserFacingError as e:
            raise _spawn_error(e) from None
        self._forget_placement()  # the hub cleared the state; be sure nothing is left held
        decision = self._choose(options)
        self.log.info(
            "%s: node %s, GPUs %s", self.holder, decision.node, decision.gpu_uuids or "none"
        )
        try:
            return await super().start()
        except BaseException:
            await self._remove_leftovers()
            self._forget_placement()
            raise

    async def _remove_leftovers(self) -> None:
        try:
            await self.docker("remove_container", self.container_name, force=True)
        except APIError as e:
            if e.status_code != 404:
                self.log.warning("Could not remove container %s: %s", self.container_name, e)
        except _NODE_ERRORS as e:
            self.log.warning("Node %s unreachable while cleaning up: %s", self.node_name, e)
        self.object_id = ""

    async def poll(self) -> int | str | None:
        if not self.node_name:
            return 0
        try:
            status = await super().poll()
        except _NODE_ERRORS as e:
            # an unreachable node says nothing about the server: keep it and its GPUs
            self.log.warning(
                "Node %s unreachable while polling %s: %s", self.node_name, self.holder, e
            )
            return None
        if status is not None:
            self._release()
        return status

    async def stop(self, now: bool = False) -> None:
        if self.object_id:
            await super().stop(now=now)
        self.clear_state()


def _port_free_locally(address: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``address`` when that address is this machine's."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, port))
    except OSError as e:
        # EADDRNOTAVAIL: the address is another host's; the ledger alone decides
        return e.errno == 99
    return True
