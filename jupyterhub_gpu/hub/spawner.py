"""GPUDockerSpawner: DockerSpawner that places each server on a node and GPUs.

Thin by design: the decisions live in pure modules (``placement``, ``form``,
``catalog``, ``auth.identity``, ``homes``); the I/O of the nodes lives in ``cluster``;
whether a spawn gets GPUs now, waits in the GPU queue or is refused (quotas, charge
groups, reservations) lives in ``admission`` (:class:`QueueingSpawnerMixin`). This class
keeps the container's life cycle and wires them into DockerSpawner's hooks:

- ``options_form``: the form with the catalog and what is free now;
- ``start``: identity, strict validation, the home, then placement and reservation (no
  ``await`` between reading the ledger and writing it), then the container with a Docker
  ``DeviceRequest`` listing the GPU UUIDs, labels, limits and a non-root user; any failure
  releases the GPUs and removes what was created;
- ``progress``: the steps of ``start`` for the hub's spawn page;
- ``poll``/``stop``/``clear_state``: free the GPUs when the server stops, dies or fails;
- ``get_state``/``load_state``: persist node, GPUs, port and allocation id so a restarted
  hub re-adopts them (and reconciliation removes the sealed containers it does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar, cast
from urllib.parse import urlsplit

import docker
from docker.errors import APIError
from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException
from jupyterhub.utils import fmt_ip_url
from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Unicode, default, validate

from jupyterhub_gpu.core import homes
from jupyterhub_gpu.core import nodecheck as node_rules
from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason, stop_reason
from jupyterhub_gpu.core.allocation import (
    Allocation,
    new_allocation_id,
    seal_key,
)
from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.core.containers import (
    ServerContainer,
    published_port,
    reserved_label_refusal,
    server_env,
    server_labels,
    share_from_state,
)
from jupyterhub_gpu.core.culling.warning import (
    POSTPONED_KEY,
    after_cull_words,
    freed_words,
    stopped_words,
)
from jupyterhub_gpu.core.form import (
    ResourcePolicy,
    SpawnOptions,
    gpu_model_availability,
    options_from_form,
    placement_request,
    policy_from_config,
    resolve_bounds,
    resolve_entry,
    resource_limits,
    spawn_form_html,
    validate_options,
)
from jupyterhub_gpu.core.form.user_quota import holdings_of
from jupyterhub_gpu.core.form.validation import finite_number
from jupyterhub_gpu.core.identity import (
    Identity,
    identity_required,
    map_home,
    resolve_identity,
)
from jupyterhub_gpu.core.mounts import dataset_binds, parse_group_mounts
from jupyterhub_gpu.core.names import CONTAINER_NAME, PATH, check_name_lengths
from jupyterhub_gpu.core.placement import availability
from jupyterhub_gpu.core.placement.request import Placement, PlacementRequest
from jupyterhub_gpu.core.progress import describe_gpus
from jupyterhub_gpu.core.saving.entries import (
    PREFIX,
    Unlisted,
    is_saved_slug,
    saved_entries,
    with_saved,
)
from jupyterhub_gpu.core.saving.identity import NodeImage, in_registry, start_refusal
from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.core.sharing.mps import MpsPaths
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.tokens import site_secret_from
from jupyterhub_gpu.core.usernet import bridge_name_problem
from jupyterhub_gpu.core.words import one_line
from jupyterhub_gpu.core.workload import Workload, make_container
from jupyterhub_gpu.edges.adminfiles import load_catalog
from jupyterhub_gpu.edges.files import load_notes
from jupyterhub_gpu.edges.home_dirs import ensure_home
from jupyterhub_gpu.edges.nodecheck import CheckSettings
from jupyterhub_gpu.edges.workspaces import open_notebooks
from jupyterhub_gpu.errors import (
    ConfigError,
    InvalidRequest,
    NodeFailure,
    UnsafePath,
    UserFacingError,
)
from jupyterhub_gpu.hub.admission import QueueingSpawnerMixin
from jupyterhub_gpu.hub.answer import first_answer, log_tail
from jupyterhub_gpu.hub.cluster import NODE_ERRORS, Cluster, ClusterSettings
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.hub.metrics import SPAWN_DECISIONS
from jupyterhub_gpu.hub.prepull import PrePullRunner, catalog_reader, prepuller
from jupyterhub_gpu.hub.pull import ImageUnavailable, pull
from jupyterhub_gpu.hub.queue import MustQueue, SpawnQueue
from jupyterhub_gpu.hub.refusal import spawn_error, spawn_refusal
from jupyterhub_gpu.hub.runtime import HubRuntime, runtime_of
from jupyterhub_gpu.hub.saves import my_images
from jupyterhub_gpu.hub.sharing import GPUSharing
from jupyterhub_gpu.wire.catalog_file import default_catalog_path
from jupyterhub_gpu.wire.cull_notes import CullNote, notes_for
from jupyterhub_gpu.wire.nodes_file import NodeSpec, default_node, parse_nodes

# the environment variables whose values never reach the hub's log (an exited
# server's output that prints its environment)
_SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)


class GPUDockerSpawner(QueueingSpawnerMixin, DockerSpawner):
    """A DockerSpawner that gives each server exactly the GPUs it was placed on."""

    _start_slots: ClassVar[asyncio.Semaphore | None] = None
    _catalogs: ClassVar[dict[str, tuple[float, Catalog]]] = {}

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
    # max_queue_wait and queue_policy: QueueingSpawnerMixin's (admission.py)
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
    resource_defaults = Dict(
        config=True,
        help="""Site defaults and bounds: max_gpus (per server), max_gpus_per_user (held
        at once over all of a user's servers; default None, no cap), allowed_models,
        allowed_images, max_cpu, max_mem_gib, min_cpu, min_mem_gib, default_gpu_count,
        default_cpu, default_mem_gib, shm_size_gib, pids_limit (see docs/spawn-form.md).""",
    )
    group_bounds = Dict(
        config=True,
        help="""Per-group bounds: {group: {max_gpus, max_gpus_per_user, allowed_models,
        allowed_images, max_cpu, max_mem_gib}}; a user gets the most generous of their groups
        that set a key, else the site's (resource_defaults).""",
    )
    group_mounts = Dict(
        config=True,
        help="""Read-only dataset mounts per group:
        ``{"vision-lab": [{"source": "/mnt/datasets/imagenet", "target": "/data/imagenet"}]}``.
        Members get every mount of their groups, always read-only.""",
    )
    home_template = Unicode(
        "",
        config=True,
        help="""Host path of each user's home on the shared filesystem, mounted at the
        container's home, e.g. ``/mnt/cephfs/home/{username}``. The folder before
        ``{username}`` is the shared root no home may leave. Empty: no home mount.
        """,
    )
    home_from_directory = Bool(
        True,
        config=True,
        help="Map the directory's homeDirectory (e.g. /home/alice) under the shared root.",
    )
    home_directory_prefix = Unicode(
        "/home", config=True, help="The prefix of homeDirectory values that maps to the root."
    )
    home_container_path = Unicode(
        "/home/{username}", config=True, help="Where the home is mounted in the container."
    )
    require_identity = Bool(
        None,
        allow_none=True,
        config=True,
        help="""Refuse users whose auth_state has no uid/gid, with a message saying what to do.

        None (default): refuse them whenever the authenticator keeps auth_state
        (``Authenticator.enable_auth_state``), so no server silently runs as the fallback
        uid; without auth_state everyone runs as ``default_uid:default_gid``. True/False
        decide explicitly (False: users without a uid run as ``default_uid:default_gid``,
        logged at info level).""",
    )
    supplementary_groups = List(
        Unicode(), config=True, help="Groups whose gid is added to the container ('*': all)."
    )
    default_uid = Int(1000, config=True, help="uid for users without one (never 0).")
    default_gid = Int(100, config=True, help="gid for users without one (never 0).")
    docker_threads_per_node = Int(
        4, config=True, help="Threads for Docker calls, per node (a slow node blocks only its own)."
    )
    docker_timeout = Float(
        10.0, config=True, help="Seconds before a Docker call to a node is abandoned."
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
    answer_check_timeout = Float(
        20.0,
        config=True,
        help="""Seconds for which ``start`` itself checks a new server every 0.1 s for its
        first HTTP answer (JupyterHub's rule: any answer under 500), and its container
        every second. JupyterHub's own check backs off with random waits of up to 5 s, so
        a server that answers after 3 s is otherwise seen up to seconds later. A container
        that exits meanwhile fails the start at once, with its exit code (its last log
        lines go to the hub's log). After this time, or ``http_timeout`` if shorter,
        JupyterHub's wait goes on as usual. 0 = off.""",
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
    share_notices_file = Unicode(
        "",
        config=True,
        help="""The idle culler's share notices file (``GPUIdleCuller.share_notices_file``):
        the GPU shares whose own processes hold more memory than their share. Their users
        see it on every hub page (``/hub/api/gpu/users/{user}/notices``). '' = not shown.""",
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
                "GPUDockerSpawner.node_check_interval must be more than 0 seconds "
                "(check_nodes = False turns the node checks off)"
            )
        return float(proposal.value)

    @validate("default_uid", "default_gid")
    def _no_root(self, proposal: Any) -> int:
        if proposal.value == 0:
            raise ConfigError(f"{proposal.trait.name} must not be 0: containers never run as root")
        return int(proposal.value)

    @validate("user_bridge")
    def _valid_bridge(self, proposal: Any) -> str:
        problem = bridge_name_problem(proposal.value)
        if problem:
            raise ConfigError(f"GPUDockerSpawner.user_bridge: {problem}")
        return str(proposal.value)

    @default("network_name")
    def _default_network(self) -> str:
        return self.user_network

    @default("use_internal_ip")
    def _default_use_internal_ip(self) -> bool:
        return False  # the hub reaches servers through the port published on the node

    @default("remove")
    def _default_remove(self) -> bool:
        return True

    @default("options_from_form")
    def _default_options_from_form(self) -> Any:
        return options_from_form

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        return _options_applied_in_start

    @default("options_form")
    def _default_options_form(self) -> Any:
        return GPUDockerSpawner._render_options_form

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._events: list[dict[str, Any]] = []
        self._events_changed = asyncio.Event()
        self._start_done = True
        self._start_began: float | None = None  # the event loop's time when start began
        self._new_named = False  # a named server this spawn made (run_auth_state_hook)
        self._container: ServerContainer | None = None  # decided by _prepare
        self._from_state = False  # placed by load_state and not polled since
        self._cuda = ""  # the chosen catalog entry's CUDA version
        self._charge_group = ""  # the allocation's, kept in state for metrics after restarts
        self._gpu_model = ""
        # why the hub itself ended the last server (a reservation took its GPUs), for the
        # spawn form until the next start; kept in state across the stop and hub restarts
        self._ended_note = ""
        # what a culled server gave back ("1 GPU (RTX 3090), 2 CPUs and 8 GiB of memory"),
        # for the spawn form until the next start; kept in state like _ended_note
        self._freed = ""
        self._saved_choice: tuple[str, str] | None = None  # (owner, name) of a saved: slug
        # (reference, the engine's inspect) of the image this start pulled and checked
        self._image_checked: tuple[str, dict[str, Any]] | None = None

    # ------------------------------------------------------------------ state
    node_name = Unicode("")
    gpu_uuids = List(Unicode())
    host_port = Int(0)  # the port the engine published the server on, on the node's address
    allocation_id = Unicode("")  # made with the reservation, sealed into the labels
    # when its user pressed "I'm still here" (ISO, UTC; once per start): the culler reads it
    cull_postponed_at = Unicode("")
    share: Share | None = None  # the share of its one GPU it holds (issue 26); None: whole

    @property
    def holder(self) -> str:
        return f"{self.user.name}/{self.name}"

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.node_name:
            state.update(node=self.node_name, gpu_uuids=list(self.gpu_uuids))
            if self.share is not None:
                share = self.share
                state["share"] = [share.count, share.of, share.memory_mib, share.mode]
            if self.allocation_id:
                state["allocation"] = self.allocation_id
                state["charge_group"], state["gpu_model"] = self._charge_group, self._gpu_model
            if self.host_port:
                state["host_port"] = self.host_port
            if self.server is not None and self.host_port:  # the culler reads it directly
                address = self._node(self.node_name).address
                state["server_url"] = f"http://{address}:{self.host_port}{self.server.base_url}"
        if self.api_token:  # the only token the culler may send this server (culler/access.py)
            state["server_token"] = self.api_token
        if self._ended_note:
            state["ended_note"] = self._ended_note
        if self._freed:
            state["freed"] = self._freed
        if self.cull_postponed_at:
            state[POSTPONED_KEY] = self.cull_postponed_at
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        # a restarted hub forgets api_token: restored, state keeps it, and stop revokes it
        if isinstance(state.get("server_token"), str) and state["server_token"]:
            self.api_token = state["server_token"]
        self._ended_note = str(state.get("ended_note") or "")
        self._freed = str(state.get("freed") or "")[:200]
        self.cull_postponed_at = str(state.get(POSTPONED_KEY) or "")
        self.node_name = state.get("node", "")
        self.gpu_uuids = list(state.get("gpu_uuids", []))
        self.host_port = int(state.get("host_port") or 0)
        self.allocation_id = str(state.get("allocation") or "")
        self._charge_group = str(state.get("charge_group") or "")
        self._gpu_model = str(state.get("gpu_model") or "")
        self.share = share_from_state(state.get("share"))
        if self.node_name:
            conflicts = self._adopt_state()
            self.ledger.place_server(self.holder, self.node_name, self.allocation_id)
            self.ledger.rejoin_allocation(
                AllocationRecord(
                    id=self.allocation_id,
                    user=self.user.name,
                    server=self.name,
                    group=self._charge_group,
                    node=self.node_name,
                    gpu_uuids=tuple(self.gpu_uuids),
                    gpu_model=self._gpu_model,
                    image="",
                    cuda="",
                    hub=self.hub_id,
                )
            )
            self._from_state = True
            if conflicts:
                self.log.warning(
                    "%s: GPUs %s also claimed by another server", self.holder, conflicts
                )

    def _adopt_state(self) -> list[str]:
        """Hold again what the state says this server holds (a share as a share)."""
        share = self.share
        if share is None or len(self.gpu_uuids) != 1:
            return self.ledger.adopt(
                self.holder, self.node_name, self.gpu_uuids, self.allocation_id
            )
        (uuid,) = self.gpu_uuids
        held = (share.count, share.of)
        if self.ledger.adopt_share(self.holder, self.node_name, uuid, held, self.allocation_id):
            return []
        return [uuid]

    def clear_state(self) -> None:
        super().clear_state()
        self.cull_postponed_at = ""  # once per start
        self._forget_placement()

    def _forget_placement(self, ended: EndReason | None = None) -> None:
        """Free what this server holds; with ``ended``, its allocation ends for that reason."""
        if ended is not None:
            self.ledger.end_allocation(self.allocation_id, ended)
        freed = self.ledger.release(self.holder, self.gpu_uuids)
        self.ledger.release_server(self.holder)
        if freed:
            self.log.info("%s: released GPUs %s", self.holder, ", ".join(freed))
        self.node_name = ""
        self.gpu_uuids = []
        self.host_port = 0
        self.allocation_id = ""
        self.share = None

    # ------------------------------------------------------------------ config
    @property
    def runtime(self) -> HubRuntime:
        """The hub process's GPU parts (:mod:`.runtime`), through the hub's tornado
        settings, which every user object shares."""
        return runtime_of(getattr(getattr(self, "user", None), "settings", None))

    @property
    def cluster(self) -> Cluster:
        """The hub's one :class:`Cluster`, built from the first spawner's configuration."""
        runtime = self.runtime
        if runtime.cluster is not None:
            return runtime.cluster
        return runtime.start(
            ClusterSettings(
                nodes=list(self.nodes),
                nodes_file=self.nodes_file,
                probe_mode=self.probe_mode,
                inventory_file=self.inventory_file,
                agent_token=self.agent_token,
                agent_config=self.config,  # so c.AgentClient.* take effect
                hub_id=self.hub_id,
                seal_key=self._seal_key(),
                docker_timeout=self.docker_timeout,
                threads_per_node=self.docker_threads_per_node,
                reconcile_interval=self.reconcile_interval,
                accounting_url=self.accounting_url,
                drains_file=self.drains_file,
                node_checks=self._node_check_settings(),
                node_check_interval=self.node_check_interval,
                sharing=GPUSharing(config=self.config, parent=self).policy,
            ),
            self.log,
            deadlines_file=self.cull_deadlines_file,
            queue_policy=self.queue_policy,
        )

    def _node_check_settings(self) -> CheckSettings | None:
        """What the hub's node checks need (``check_nodes``), None when they are off."""
        if not self.check_nodes:
            return None
        hub = getattr(self, "hub", None)
        api_url = self.hub_connect_url or str(getattr(hub, "api_url", "") or "")
        hub_api = node_rules.hub_api_target(api_url) if api_url else None
        private: tuple[tuple[str, int, str], ...] = ()
        proxy = (getattr(getattr(self, "user", None), "settings", None) or {}).get("proxy")
        try:  # the proxy's API port, tried on the hub's address (the command does the same)
            proxy_port = urlsplit(str(getattr(proxy, "api_url", "") or "")).port
        except ValueError:
            proxy_port = None
        if hub_api is not None and proxy_port:
            private = ((hub_api[0], proxy_port, "the proxy's API on the hub's machine"),)
        try:
            catalog = tuple(self.catalog)
        except (ConfigError, OSError):
            catalog = ()  # the spawns will say what is wrong with it
        return CheckSettings(
            user_network=self.user_network,
            user_bridge=self.user_bridge,
            gpu_device_driver=self.gpu_device_driver,
            catalog=catalog,
            hub_api=hub_api,
            hub_private=private,
            images=(self.image,) if self.image else (),
            timeout=self.docker_timeout,
            only=node_rules.HUB_CHECKS,
            owner=self.hub_id,
        )

    @property
    def queue(self) -> SpawnQueue:
        """The hub's spawn queue (built with the cluster)."""
        self.cluster  # noqa: B018 - builds the runtime's parts on first use
        queue = self.runtime.queue
        assert queue is not None
        return queue

    def _seal_key(self) -> bytes | None:
        """The key of the containers' seals, derived from JupyterHub's cookie secret (the
        hub's tornado settings, which every user object shares): stable across restarts
        as long as the cookie secret is (``cookie_secret_file``), never sent anywhere.
        None outside a hub: containers then carry no seal and are never removed as
        interrupted spawns."""
        settings = getattr(getattr(self, "user", None), "settings", None) or {}
        key = seal_key(settings.get("cookie_secret"))
        if key is None:
            self.log.warning("No cookie secret: containers get no seal (allocation.py)")
        return key

    @property
    def ledger(self) -> GPULedger:
        return self.cluster.ledger

    @property
    def catalog(self) -> Catalog:
        """The image catalog, re-read when its file changes (a bad edit keeps the old one)."""
        path = str(self.catalog_file or default_catalog_path())
        mtime = Path(path).stat().st_mtime
        cached = self._catalogs.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            catalog = load_catalog(path)
        except ConfigError:
            if cached is None:
                raise
            self.log.exception("Image catalog %s is invalid; keeping the previous one", path)
            return cached[1]
        self._catalogs[path] = (mtime, catalog)
        return catalog

    @property
    def policy(self) -> ResourcePolicy:
        return policy_from_config(self.resource_defaults, self.group_bounds)

    def _node(self, name: str) -> NodeSpec:
        return self.cluster.spec(name)

    # ------------------------------------------------------------------ docker, per node
    @property
    def client(self) -> docker.APIClient:
        """The Docker client of this server's node (DockerSpawner has one for everything)."""
        return self.cluster.client(self.node_name or self.cluster.specs()[0].name)

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The thread pool of this server's node, so a slow node never blocks the others."""
        return self.cluster.executor(self.node_name or self.cluster.specs()[0].name)

    def docker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """DockerSpawner's call, bounded by ``docker_timeout`` on this server's node."""
        node = self.node_name or self.cluster.specs()[0].name
        return self.cluster.run(node, lambda: self._docker(method, *args, **kwargs))

    # ------------------------------------------------------------------ who, what
    async def identity(self) -> Identity:
        """The uid/gid/groups/home of the user, from the authenticator's auth_state."""
        auth_state = await self.user.get_auth_state()
        enabled = bool(getattr(self.authenticator, "enable_auth_state", False))
        ident = resolve_identity(
            self.user.name,
            auth_state,
            required=identity_required(self.require_identity, enabled),
            fallback=(self.default_uid, self.default_gid),
            hub_groups=[g.name for g in self.user.groups],
            supplementary_groups=self.supplementary_groups,
        )
        if not (auth_state and "uid" in auth_state):
            self.log.info("%s has no uid in auth_state: runs as %s", self.user.name, ident.uid)
        return ident

    def _cull_note(self) -> CullNote | None:
        """Why the culler stopped this server, if it did and the server has not run since.

        The hub sets ``last_activity`` when a server starts and when it stops; the stop
        that follows a cull comes within seconds of the culler's note, a later start after."""
        if not self.cull_notes_file:
            return None
        last = self.orm_spawner.last_activity if self.orm_spawner else None
        since = last - timedelta(minutes=10) if last else None  # naive UTC, as notes_for takes
        notes = notes_for(load_notes(self.cull_notes_file), self.user.name, since=since)
        mine = [n for n in notes if n.server == self.name]
        return mine[-1] if mine else None

    def _freed_now(self) -> str:
        """What this server gives back when it stops (for the note after a cull)."""
        options = (self.orm_spawner.user_options if self.orm_spawner else None) or {}
        cpu, mem = finite_number(options.get("cpu")), finite_number(options.get("mem_gib"))
        return freed_words(len(self.gpu_uuids), self._gpu_model, cpu or 0.0, mem or 0.0)

    def _after_cull(self, ident: Identity) -> str:
        """What the form adds to a cull's note: what it freed, the notebooks open then
        (JupyterLab's workspace in the user's home, read bounded, links not followed)."""
        notebooks: tuple[str, ...] = ()
        with contextlib.suppress(UnsafePath):
            home = self._home_path(ident)
            if home is not None:
                notebooks = open_notebooks(home)
        return after_cull_words(self._freed, notebooks)

    def _culled_just_now(self) -> bool:
        """Whether the culler noted this server in the last two minutes (it writes its
        note before it asks the hub to stop the server)."""
        if not self.cull_notes_file:
            return False
        since = datetime.now(timezone.utc) - timedelta(minutes=2)
        started = self.orm_spawner.started if self.orm_spawner else None
        if started is not None:  # a note from before this server started is another's
            since = max(since, started.replace(tzinfo=timezone.utc))
        notes = notes_for(load_notes(self.cull_notes_file), self.user.name, since=since)
        return any(n.server == self.name for n in notes)

    async def _user_catalog(
        self, ident: Identity, wanted: Any = None
    ) -> tuple[Catalog, tuple[Unlisted, ...]]:
        """The catalog with the saved images ``ident`` may start ("My images",
        myimages/), and those they see but can't start. Without the database the catalog
        alone, unless ``wanted`` (the spawn's image option) is a saved image: then the
        user is told why it can't start now."""
        catalog = self.catalog
        if self.cluster.recorder is None:
            return catalog, ()
        try:
            images = await my_images(self.cluster, self.config, self.log).images()
        except UserFacingError:
            if is_saved_slug(wanted):
                raise
            return catalog, ()
        entries, unlisted = saved_entries(catalog, images, ident.username, ident.groups)
        return with_saved(catalog, entries), unlisted

    async def _not_a_saved_image(self, reference: str) -> None:
        """A saved image is started by its name (``saved:owner/name``), which checks who
        may: never by its registry reference through an admin's image patterns. This
        refuses a reference under the registry before placing (any spelling of its host
        the hub knows); :meth:`_check_saved` then asks the node what the image is."""
        service = my_images(self.cluster, self.config, self.log)
        if service.settings.enabled and in_registry(reference, await service.registry()):
            raise InvalidRequest(
                f"The image {reference!r} is a saved image; start it by its name under My "
                "images (image 'saved:OWNER/NAME'), if its owner shares it with you."
            )

    def _check_labels(self, image: str, info: dict[str, Any]) -> None:
        """Refuse an image that carries a label the hub writes on containers (issue 30:
        :func:`~jupyterhub_gpu.core.containers.reserved_label_refusal`)."""
        refusal = reserved_label_refusal(image, (info.get("Config") or {}).get("Labels"))
        if refusal is not None:
            self.log.warning("%s: image %s refused: %s", self.holder, image[:200], refusal)
            raise InvalidRequest(refusal)

    async def _check_saved(self, image: str, info: dict[str, Any], pulled: bool) -> None:
        """Refuse to start a saved image (what ``image`` is on the node: ``info``, the
        engine's inspect) unless the user chose it by its slug (core.saving.identity);
        an image this spawn pulled for nothing is untagged again."""
        service = my_images(self.cluster, self.config, self.log)
        if not service.settings.enabled:
            return
        found = NodeImage.from_engine(info)
        refusal = start_refusal(image, found, await service.registry(), self._saved_choice)
        if refusal is None:
            return
        self.log.warning("%s asked for saved image %s as %r: refused", self.holder,
                         found.id[:19], image)  # fmt: skip
        if pulled:
            with contextlib.suppress(*NODE_ERRORS):
                await self.docker("remove_image", image)
        raise InvalidRequest(refusal)

    async def _render_options_form(self) -> str:
        snapshot = await self.cluster.snapshot()
        free = {a.model: a.free for a in availability(snapshot)}
        previous = self.orm_spawner.user_options if self.orm_spawner else None
        ident = await self.identity()
        bounds = resolve_bounds(self.policy, ident.groups)
        catalog, unlisted = await self._user_catalog(ident)
        note, notice_time = self._cull_note(), None
        notes = [self._ended_note] if self._ended_note else []
        if note is not None and not notes:  # the newest is shown: a cull, then its start
            words = stopped_words(note.server, note.at, note.reason, datetime.now(timezone.utc))
            notes = [f"{words.text} {self._after_cull(ident)}".strip()]
            notice_time = (words.said, note.at.isoformat())
        charge_groups = self._charge_groups(ident)
        with contextlib.suppress(Exception):  # the reservations, if not read yet
            await self.queue.refresh()
        reserved = self.queue.reserved_for_others(charge_groups, snapshot.nodes)
        group = charge_groups[0] if charge_groups else ""
        waits = self._max_wait(group) > 0  # a group that never waits is refused instead
        return spawn_form_html(
            catalog,
            snapshot,
            bounds,
            previous,
            free,
            notes=notes,
            unlisted=unlisted,
            charge_groups=charge_groups,
            reserved=reserved,
            image_sizes=self.cluster.image_sizes(),
            sharing=snapshot.sharing,
            held=holdings_of(self.ledger.charged(), self.user.name, exclude=self.holder),
            notice_time=notice_time,
            wait_view=self.queue.wait_view(snapshot) if waits else None,
            user=self.user.name,
            tz=self.queue.settings.timezone,
        )

    # ------------------------------------------------------------------ placement
    def _reserve(self, decision: Placement) -> Placement:
        """Write what admission decided into the ledger and this spawner's state, with no
        ``await``: called right after the decision (``_decide_and_reserve``, ``_take``)."""
        allocation = new_allocation_id()
        share = decision.share
        if share is None:
            self.ledger.reserve(self.holder, decision.node, decision.gpu_uuids, allocation)
        else:  # KeyError when another spawn took the last share first
            (uuid,) = decision.gpu_uuids
            held = (share.count, share.of)
            self.ledger.reserve_share(self.holder, decision.node, uuid, held, allocation)
        self.share = share
        self.cluster.pending.add(self.holder)
        self.node_name = decision.node
        self.gpu_uuids = list(decision.gpu_uuids)
        self.allocation_id = allocation
        self.ledger.place_server(self.holder, decision.node, self.allocation_id)
        return decision

    # ------------------------------------------------------------------ container
    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        if self.home_template:
            env["HOME"] = self._container_home()
        # last: nothing else decides the GPUs, the share's limits or where MPS is
        env.update(server_env(self.gpu_uuids, self.share, self._mps_paths()))
        return env

    def _mps_paths(self) -> MpsPaths | None:
        """The node's MPS directories for a share of an ``mps`` GPU (c.GPUSharing), else None."""
        if self.share is None or self.share.mode != "mps":
            return None
        return GPUSharing(config=self.config, parent=self).mps

    def _container_home(self) -> str:
        return self.home_container_path.format(username=homes.safe_path_component(self.user.name))

    def _labels(self) -> dict[str, str]:
        claim = Allocation(
            self.hub_id,
            self.allocation_id,
            self.user.name,
            self.name,
            self.node_name,
            tuple(self.gpu_uuids),
            self.share.label if self.share else "",
            self.share.memory_mib if self.share else 0,
        )
        now = datetime.now(timezone.utc)
        return server_labels(claim, str(self.image), now, self.cluster.settings.seal_key)

    def home_host_path(self, ident: Identity) -> Path | None:
        """The user's home on the hub's shared filesystem (None without ``home_template``):
        where the SSH gateway reads her ``~/.ssh/authorized_keys`` (hub/api/ssh.py)."""
        return self._home_path(ident)

    def _home_path(self, ident: Identity) -> Path | None:
        """The user's home on the shared filesystem (refuses anything leaving the root)."""
        if not self.home_template:
            return None
        root = homes.template_root(self.home_template)
        if self.home_from_directory and ident.home_directory:
            return map_home(
                ident.home_directory, ident.username, root, home_prefix=self.home_directory_prefix
            )
        return Path(homes.home_host_path(self.home_template, ident.username))

    async def _prepare(self, ident: Identity, options: SpawnOptions) -> None:
        """Create the home and set everything create_object needs (no Docker calls)."""
        home = None
        path = self._home_path(ident)
        if path is not None:
            root = homes.template_root(self.home_template)
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: ensure_home(path, ident.uid, ident.gid, shared_root=root)
            )
            home = (str(path), self._container_home())
        limits = resource_limits(options.cpu, options.mem_gib, self.policy)
        # JupyterHub's get_env tells the server its limits (CPU_LIMIT, MEM_LIMIT), and
        # DockerSpawner's port lookups read host_ip; the container's own come from limits
        self.cpu_limit = limits.cpu
        self.mem_limit = limits.mem_bytes
        self.host_ip = self._node(self.node_name).publish_ip
        self._container = ServerContainer(
            uid=ident.uid,
            gid=ident.gid,
            supplementary_gids=ident.supplementary_gids,
            labels=self._labels(),
            gpu_uuids=self.gpu_uuids,
            network=self.user_network,
            limits=limits,
            home=home,
            binds=dataset_binds(parse_group_mounts(self.group_mounts), ident.groups),
            device_driver=self.gpu_device_driver,
            mps=self._mps_paths(),
        )

    async def _site_extras(self, trait: str) -> dict[str, Any]:
        """The site's ``extra_create_kwargs`` / ``extra_host_config`` (a dict, or a
        callable returning one), its templates rendered: laid *under* the workload's own
        keys by :func:`~jupyterhub_gpu.core.workload.make_container`."""
        value = self._eval_if_callable(getattr(self, trait))
        if inspect.isawaitable(value):
            value = await value
        return dict(self._render_templates(value or {}))

    async def workload(self) -> Workload:
        """This server as a :class:`~jupyterhub_gpu.core.workload.Workload` (what
        :meth:`_prepare` decided, the image's command, JupyterHub's environment)."""
        if self._container is None:
            raise RuntimeError("the server's container was not prepared")
        return Workload(
            name=self.container_name,
            image=str(self.image),
            command=await self.get_command(),
            env=self.get_env(),
            container=self._container,
            share=self.share,
            port=self.port,
            publish_ip=str(self.host_ip),
            remove_on_exit=self.remove,
            site_create=await self._site_extras("extra_create_kwargs"),
            site_host=await self._site_extras("extra_host_config"),
        )

    async def create_object(self) -> dict[str, Any]:
        """Create the container :func:`~jupyterhub_gpu.core.workload.make_container`
        describes, exactly (DockerSpawner's own ``create_object`` is not called: nothing
        is added to the description afterwards)."""
        request = make_container(await self.workload())
        await self.cluster.ensure_user_network(self.node_name, self.user_network, self.user_bridge)
        self._event(70, "Starting the container")
        host_config = self.client.create_host_config(**request.host)
        created = await self.docker("create_container", **request.create, host_config=host_config)
        return dict(created)

    def _prepuller(self) -> PrePullRunner:
        """The hub's pre-puller (:mod:`.prepull`), reading the catalog this spawner reads."""
        path = str(self.catalog_file or default_catalog_path())
        return prepuller(self.cluster, self.config, self.log, catalog_reader(path, self.log))

    def _start_prepuller(self) -> None:
        """Start the pre-puller's rounds if it is on; a bad ``c.PrePuller`` setting is
        logged (with its sentence) and never stops a spawn."""
        try:
            self._prepuller().start()
        except (TraitError, ValueError) as e:
            self.log.error("Pre-puller not started: %s", e)

    async def check_allowed(self, image: str) -> str:
        """The image was resolved from the catalog by ``start``; DockerSpawner asks again."""
        return str(self.image)

    def _pull_allowance(self) -> float:
        return self.pull_timeout

    async def pull_image(self, image: str) -> None:
        """Pull a missing image on the chosen node, reporting the percentage; then check
        what it is (:meth:`_check_saved`). Once per start: ``_create`` calls it before the
        start's time limit counts, and DockerSpawner's ``start`` calls it again for the same
        image, answered from the first call (no second inspect, no second check)."""
        if self._image_checked is not None and self._image_checked[0] == image:
            return
        try:
            info = await self.docker("inspect_image", image)
            self._check_labels(image, info)
            await self._check_saved(image, info, pulled=False)
            self._image_checked = (image, info)
            return
        except docker.errors.NotFound:
            if self.pull_policy.lower() == "never":
                raise ImageUnavailable(
                    f"The image {image} is not on node {self.node_name} and pulling is disabled; "
                    "ask an admin to load it there."
                ) from None
        await pull(
            self.cluster,
            self.node_name,
            image,
            self.pull_timeout,
            lambda pct, message: self._event(40 + pct // 4, message),
            self.log,
            my_images(self.cluster, self.config, self.log).settings.auth_config(image),
            stall_timeout=self.pull_stall_timeout,
        )
        info = await self.docker("inspect_image", image)
        self._check_labels(image, info)
        await self._check_saved(image, info, pulled=True)
        self._image_checked = (image, info)

    async def get_command(self) -> list[str]:
        """DockerSpawner's (``cmd``, else the image's CMD); an image without a CMD runs
        ``jupyterhub-singleuser``, JupyterHub's own default, instead of failing with a
        TypeError deep in DockerSpawner."""
        command = self.cmd
        if not command:
            checked = self._image_checked
            if checked is not None and checked[0] == self.image:
                info = checked[1]  # inspected by this start's pull_image
            else:
                info = await self.docker("inspect_image", self.image)
            command = (info.get("Config") or {}).get("Cmd") or ["jupyterhub-singleuser"]
        return [*command, *self.get_args()]

    async def get_ip_and_port(self) -> tuple[str, int]:
        """The node's address and the port its engine published the server on."""
        bindings = await self.docker("port", self.container_id, self.port)
        try:
            self.host_port = published_port(bindings)
        except NodeFailure:
            code = await self._exit_code()  # an image whose command fails at once
            if code is not None:
                raise await self._exited(code) from None
            raise
        return self._node(self.node_name).address, self.host_port

    # ------------------------------------------------------------------ progress
    def _event(self, progress: int, message: str, **extra: Any) -> None:
        """One line of the spawn page's event log (``extra``: more keys of the event, such
        as ``html_message``); a line the same as the last one is not added again."""
        event = {"progress": progress, "message": message, **extra}
        if self._events and self._events[-1] == event:
            return
        self._events.append(event)
        self._events_changed.set()

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        sent = 0
        while True:
            while sent < len(self._events):
                yield self._events[sent]
                sent += 1
            if self._start_done:
                return
            self._events_changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._events_changed.wait(), 1.0)

    # ------------------------------------------------------------------ lifecycle
    async def _validated(
        self, snapshot: ClusterSnapshot
    ) -> tuple[Identity, SpawnOptions, PlacementRequest]:
        try:
            ident = await self.identity()
            bounds = resolve_bounds(self.policy, ident.groups)
            models = gpu_model_availability(snapshot)
            catalog, _ = await self._user_catalog(ident, (self.user_options or {}).get("image"))
            options = validate_options(
                self.user_options,
                catalog=catalog,
                bounds=bounds,
                models=models,
                charge_groups=self._charge_groups(ident),
                sharing=snapshot.sharing,
            )
            entry = resolve_entry(catalog, options)
            if entry.custom:
                await self._not_a_saved_image(entry.image)
            chosen = options.image[len(PREFIX) :] if entry.saved_from else ""
            owner, _, name = chosen.rpartition("/")
            self._saved_choice = (owner, name) if chosen else None
            names = {g.model for n in snapshot.nodes for g in n.inventory.gpus}
            request = placement_request(options, entry, bounds, names)
        except UserFacingError as e:
            raise spawn_error(e) from None
        self.image = entry.image
        self._cuda = entry.cuda_version or ""
        return ident, options, request

    def _derived_names(self, username: str, server: str) -> list[tuple[str, str]]:
        """The container name and home paths this spawner makes from these names."""
        escaped = self.escape(username)
        ns = {
            **self.template_namespace(),
            **{"username": escaped, "safe_username": escaped, "raw_username": username},
            **{"servername": self.escape(server.lower()), "raw_servername": server},
        }
        names = [(CONTAINER_NAME, str(self._render_templates(self.name_template, ns)))]
        if self.home_template:
            names.append((PATH, str(homes.home_host_path(self.home_template, username))))
        safe = homes.safe_path_component(username)
        return [*names, (PATH, self.home_container_path.format(username=safe))]

    async def run_auth_state_hook(self, auth_state: Any) -> Any:
        """The hub runs this just before it stamps the start on the server (``User.spawn``):
        a named server with no activity yet is one this very spawn made (the form's "Add
        New Server", or a URL naming a new one)."""
        orm = self.orm_spawner
        self._new_named = bool(self.name) and orm is not None and orm.last_activity is None
        return await super().run_auth_state_hook(auth_state)

    async def start(self) -> tuple[str, int]:
        try:
            return await self._start()
        except BaseException:
            if self._new_named:
                self._new_named = False
                asyncio.get_running_loop().create_task(self._remove_failed_new_server())
            raise

    async def _remove_failed_new_server(self) -> None:
        """A named server whose very first start failed is removed once the hub has
        finished with the failure, as JupyterHub removes a named server on ``DELETE
        .../servers/{name}`` with ``{"remove": true}`` (``apihandlers/users.py``): left,
        its row on the home page offers to start or delete a server that never was. The
        failure's sentence has been shown on the spawn's page by then."""
        for _ in range(1200):  # the hub's clean-up of the failure (User.spawn's stop)
            if not (self._spawn_pending or self._stop_pending or self.pending):
                break
            await asyncio.sleep(0.1)
        user, orm = self.user, self.orm_spawner
        if self.active or orm is None or orm.server is not None or orm.last_activity is None:
            return
        if getattr(user, "spawners", {}).get(self.name) is not self:
            return  # the hub has another spawner for it now: not ours to remove
        try:
            await user._delete_spawner(self)
            user.db.delete(orm)
            user.spawners.pop(self.name, None)
            user.db.commit()
            # the home page lists the user's loaded spawners; the session keeps objects
            # after a commit (JupyterHub's expire_on_commit=False): read them again
            user.db.expire(user.orm_user, ["_orm_spawners"])
        except Exception:
            self.log.exception("Could not remove %s after its first start failed", self.holder)
            return
        self.log.info("Removed the named server %s: its first start failed", self.holder)

    async def _start(self) -> tuple[str, int]:
        self._events = []
        self._events_changed = asyncio.Event()
        self._start_done = False
        self._start_began = asyncio.get_running_loop().time()
        self._forget_placement()  # the hub cleared the state; be sure nothing is left held
        self._ended_note = ""  # the form showed why the last server ended; it starts again
        self._freed = ""
        self._image_checked = None  # each start checks its image on its node afresh
        self._start_prepuller()
        try:
            check_name_lengths(self._derived_names, self.user.name, self.name, self.escape)
            with contextlib.suppress(Exception):  # reservations known before placing
                await self.queue.refresh()
            self._event(10, f"Choosing a node among {len(self.cluster.specs())}")
            snapshot = await self.cluster.snapshot()
            ident, options, request = await self._validated(snapshot)
            quota = resolve_bounds(self.policy, ident.groups).quota
            try:
                try:
                    group = self._group_of(ident, options.charge_group)
                    decision = self._decide_and_reserve(snapshot, request, quota, group)
                except MustQueue as e:
                    decision = await self._wait_in_line(request, quota, e.reason, group)
            except (UserFacingError, SpawnException) as e:
                SPAWN_DECISIONS.labels("refused", getattr(e, "reason", None) or "other").inc()
                raise
            SPAWN_DECISIONS.labels("placed", "").inc()
            self.ledger.open_allocation(self._record(snapshot, decision, ident, options))
            await self.cluster.recorded()  # the record exists before the container does
            self._event(30, self._describe(snapshot, decision))
            self.log.info("%s: %s", self.holder, self._describe(snapshot, decision))
            self._warn_of_reservations(snapshot)
            ip_port = await self._create(ident, options)
            self.ledger.allocation_started(self.allocation_id)
            self._event(90, "Waiting for the server to answer")
            await self._first_answer(*ip_port)
            return ip_port
        except UserFacingError as e:
            await self._undo()
            raise spawn_error(e) from None
        except APIError as e:  # the engine answered, with an error: not a dead node
            node, why = self.node_name, one_line(str(e.explanation or e))  # on one line
            self.log.warning("Node %s refused %s's server: %s", node, self.holder, why)
            await self._undo()
            raise spawn_refusal(
                f"Node {node} could not start your server: {why}. Try again; if it keeps "
                f"failing, tell an admin (node {node}).",
                reason="node_error",
                status_code=503,
            ) from None
        except NODE_ERRORS as e:
            node = self.node_name
            await self._undo()
            raise spawn_refusal(
                f"Node {node} stopped answering while your server was being created; "
                "start again (it will go to another node).",
                reason="node_unreachable",
                status_code=503,
            ) from e
        except BaseException:
            await self._undo()
            raise
        finally:
            self.cluster.pending.discard(self.holder)
            self._start_done = True
            self._events_changed.set()

    async def _create(self, ident: Identity, options: SpawnOptions) -> tuple[str, int]:
        """Pull the image if the node lacks it (bounded by ``pull_timeout`` and
        ``pull_stall_timeout``: a pull making progress may take its time), then create and
        start the container within the configured ``start_timeout``."""
        await self.pull_image(str(self.image))
        budget = self._start_budget or float(cast(Any, self).start_timeout)
        try:
            async with self._start_slot():
                return await asyncio.wait_for(self._prepare_and_start(ident, options), budget)
        except asyncio.TimeoutError:
            raise spawn_refusal(
                f"Your server did not start within {budget:.0f} s of getting its GPUs "
                "(start_timeout); try again, or tell an admin if it keeps happening.",
                reason="start_timeout",
                status_code=503,
            ) from None

    async def _first_answer(self, ip: str, port: int) -> None:
        """Wait (``answer_check_timeout``) for the server's first answer, so that
        JupyterHub's first check succeeds at once; fail at once if its container exits."""
        hub = cast(Any, self)  # http_timeout, start_timeout, internal_ssl: JupyterHub's
        began = self._start_began or asyncio.get_running_loop().time()
        left = began + float(hub.start_timeout) - asyncio.get_running_loop().time() - 1.0
        seconds = min(self.answer_check_timeout, float(hub.http_timeout), left)
        if seconds <= 0 or hub.internal_ssl or self.server is None:
            return
        url = f"http://{fmt_ip_url(ip)}:{port}{self.server.base_url}"
        answer = await first_answer(url, seconds, self._exit_code)
        if answer.exit_code is not None:
            raise await self._exited(answer.exit_code)

    async def _exited(self, code: int) -> SpawnException:
        """What a user is told when their container exits while starting; its last lines
        (when the node still has them) go to the hub's log for the admin."""
        await self._log_tail()
        how = f"exit code {code}" if code >= 0 else "its container exited and is gone"
        return spawn_refusal(
            f"Your server stopped while starting ({how}): its image's start command "
            f"failed on node {self.node_name}. Start again; if it happens again, choose "
            "another image or tell an admin (the hub's log has the server's last lines "
            "when the node kept them).",
            reason="server_exited",
            status_code=500,
        )

    async def _exit_code(self) -> int | None:
        """None while the container runs (or the node can't say); else its exit code."""
        try:
            info = await self.docker("inspect_container", self.container_id)
        except docker.errors.NotFound:
            return -1
        except (APIError, *NODE_ERRORS):
            return None
        state = info.get("State") or {}
        if state.get("Running") or state.get("Status") in ("created", "restarting"):
            return None
        return int(state.get("ExitCode", -1))

    async def _log_tail(self) -> None:
        """The exited server's last lines, bounded, its credentials hidden, in the hub's
        log for the admin (:func:`~jupyterhub_gpu.hub.answer.log_tail`)."""
        try:
            raw = await self.docker("logs", self.container_id, tail=20)
        except (APIError, *NODE_ERRORS):
            return
        secrets = [str(v) for k, v in self.get_env().items() if _SECRET_ENV.search(k)]
        self.log.warning(
            "%s: server exited while starting on node %s; its last lines:\n%s",
            self.holder,
            self.node_name,
            log_tail(bytes(raw or b""), [*secrets, str(self.api_token or "")]),
        )

    def _start_slot(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """One of ``concurrent_start_limit`` slots (shared by the hub's spawners)."""
        if self.concurrent_start_limit <= 0:
            return contextlib.nullcontext()
        cls = GPUDockerSpawner
        if cls._start_slots is None:
            cls._start_slots = asyncio.Semaphore(self.concurrent_start_limit)
        return cls._start_slots

    async def _prepare_and_start(self, ident: Identity, options: SpawnOptions) -> tuple[str, int]:
        await self._prepare(ident, options)
        return await super().start()

    def _describe(self, snapshot: ClusterSnapshot, decision: Placement) -> str:
        node = next(n for n in snapshot.nodes if n.name == decision.node)
        gpus = [node.inventory.gpu(u) for u in decision.gpu_uuids]
        return describe_gpus(decision.node, [(g.index, g.model, g.memory_mib) for g in gpus if g])

    def _record(
        self,
        snapshot: ClusterSnapshot,
        decision: Placement,
        ident: Identity,
        options: SpawnOptions,
    ) -> AllocationRecord:
        node = next(n for n in snapshot.nodes if n.name == decision.node)
        models = [g.model for g in map(node.inventory.gpu, decision.gpu_uuids) if g]
        self._gpu_model = models[0] if models else ""
        self._charge_group = self._group_of(ident, options.charge_group)
        return AllocationRecord(
            id=self.allocation_id,
            user=self.user.name,
            server=self.name,
            group=self._charge_group,
            node=decision.node,
            gpu_uuids=tuple(decision.gpu_uuids),
            gpu_model=self._gpu_model,
            gpu_fraction=decision.share.fraction if decision.share else 1.0,
            image=options.image,
            cuda=self._cuda,
            cpus=options.cpu,
            mem_gib=options.mem_gib,
            hub=self.hub_id,
        )

    async def _undo(self) -> None:
        if self.node_name:
            await self._remove_leftovers()
        self._forget_placement(EndReason.FAILED)

    async def _remove_leftovers(self) -> None:
        try:
            await self.docker("remove_container", self.container_name, force=True)
        except APIError as e:
            if e.status_code != 404:
                self.log.warning("Could not remove container %s: %s", self.container_name, e)
        except NODE_ERRORS as e:
            self.log.warning("Node %s unreachable while cleaning up: %s", self.node_name, e)
        self.object_id = ""

    async def poll(self) -> int | str | None:
        self.cluster.start_reconciling()  # a restarted hub polls its servers first of all
        my_images(self.cluster, self.config, self.log).start_sweeping()
        self._start_prepuller()
        if not self.node_name:
            return 0
        if self.cluster.known_down(self.node_name):
            # an unreachable node says nothing about the server: keep it and its GPUs
            self.log.debug("Poll of %s: node %s is down; kept", self.holder, self.node_name)
            return None
        if self.gpu_uuids and await self._preempted():
            return 0
        try:
            status = await super().poll()
        except NODE_ERRORS as e:
            self.log.warning(
                "Node %s unreachable while polling %s: %s", self.node_name, self.holder, e
            )
            return None
        # a server found dead at its first poll after a restart died while the hub was down
        missed, self._from_state = self._from_state, False
        if status is not None:
            self._forget_placement(EndReason.MISSED if missed else EndReason.DIED)
        return status

    async def stop(self, now: bool = False) -> None:
        if self.object_id and self.node_name:
            allocation = self.allocation_id  # DockerSpawner.stop clears the state
            # JupyterHub stops a server that never answered within http_timeout while
            # this flag (its own, set around User._wait_up) is still up
            never_answered = bool(getattr(self, "_waiting_for_response", False))
            try:
                culled = self._culled_just_now()
                freed = self._freed_now() if culled else ""
                await super().stop(now=now)
                self._freed = freed
                self.ledger.end_allocation(allocation, stop_reason(never_answered, culled))
            except NODE_ERRORS as e:
                # The container may still run: keep its GPUs held (as an orphan) until
                # reconciliation sees the node again and finds the container gone.
                self.log.warning(
                    "Node %s unreachable while stopping %s (%s); its GPUs stay held until the "
                    "node answers again",
                    self.node_name,
                    self.holder,
                    e,
                )
                self.ledger.orphan(self.holder)
        self.clear_state()


def _options_applied_in_start(spawner: Any, user_options: dict[str, Any]) -> None:
    """``start`` validates and applies ``user_options`` strictly; this tells JupyterHub so."""
