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
import functools
import inspect
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import docker
from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException
from traitlets import (
    Bool,
    Callable,
    Dict,
    Float,
    Int,
    List,
    Unicode,
    Union,
    validate,
)

from jupyterhub_gpu.core import homes
from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason, stop_reason
from jupyterhub_gpu.core.allocation import (
    Allocation,
    new_allocation_id,
)
from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.core.containers import (
    ServerContainer,
    published_port,
    server_env,
    server_labels,
)
from jupyterhub_gpu.core.form import (
    ResourcePolicy,
    SpawnOptions,
    options_from_form,
    policy_from_config,
    resolve_bounds,
    resource_limits,
)
from jupyterhub_gpu.core.home_layout import HomeLayout
from jupyterhub_gpu.core.identity import (
    Identity,
    identity_required,
    resolve_identity,
)
from jupyterhub_gpu.core.mounts import dataset_binds, parse_group_mounts
from jupyterhub_gpu.core.names import CONTAINER_NAME, PATH, check_name_lengths
from jupyterhub_gpu.core.placed import describe_placement, placed_record
from jupyterhub_gpu.core.placement.request import Placement, PlacementRequest
from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.core.sharing.mps import MpsPaths
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.words import one_line
from jupyterhub_gpu.core.workload import Workload, make_container
from jupyterhub_gpu.edges.home_dirs import ensure_home
from jupyterhub_gpu.edges.node_errors import node_calls
from jupyterhub_gpu.edges.nodecheck import CheckSettings
from jupyterhub_gpu.errors import (
    ConfigError,
    NodeError,
    NodeFailure,
    NodeRefused,
    NodeUnreachable,
    NotOnNode,
    UserFacingError,
)
from jupyterhub_gpu.hub.admission import QueueingSpawnerMixin
from jupyterhub_gpu.hub.answer import exit_code, spawner_answer, spawner_exited
from jupyterhub_gpu.hub.cluster import Cluster
from jupyterhub_gpu.hub.cluster_settings import GPUCluster, old_keys
from jupyterhub_gpu.hub.cull_notes import culled_and_freed
from jupyterhub_gpu.hub.image_checks import (
    check_image,
)
from jupyterhub_gpu.hub.metrics import SPAWN_DECISIONS
from jupyterhub_gpu.hub.new_servers import NewNamedServerMixin
from jupyterhub_gpu.hub.node_checks import hub_check_settings
from jupyterhub_gpu.hub.pull import ImageUnavailable, pull
from jupyterhub_gpu.hub.queue import MustQueue, SpawnQueue
from jupyterhub_gpu.hub.refusal import spawn_error, spawn_refusal
from jupyterhub_gpu.hub.runtime import HubRuntime, runtime_of, seal_key_of
from jupyterhub_gpu.hub.saves import MyImages
from jupyterhub_gpu.hub.sharing import GPUSharing
from jupyterhub_gpu.hub.spawn_events import SpawnEvents
from jupyterhub_gpu.hub.spawn_form import spawn_form
from jupyterhub_gpu.hub.spawn_request import spawn_request
from jupyterhub_gpu.hub.suspend import SuspendingSpawnerMixin
from jupyterhub_gpu.wire.server_state import (
    ServerState,
    decode_state,
    encode_state,
    rejoined_record,
)


def _options_applied_in_start(spawner: Any, user_options: dict[str, Any]) -> None:
    """``start`` validates and applies ``user_options`` strictly; this tells JupyterHub so."""


def derived_names(spawner: Any, username: str, server: str) -> list[tuple[str, str]]:
    """The container name and home paths ``spawner`` makes from these names (what
    ``check_name_lengths`` bounds before anything is made)."""
    escaped = spawner.escape(username)
    ns = {
        **spawner.template_namespace(),
        **{"username": escaped, "safe_username": escaped, "raw_username": username},
        **{"servername": spawner.escape(server.lower()), "raw_servername": server},
    }
    names = [(CONTAINER_NAME, str(spawner._render_templates(spawner.name_template, ns)))]
    if spawner.home_template:
        names.append((PATH, str(homes.home_host_path(spawner.home_template, username))))
    safe = homes.safe_path_component(username)
    return [*names, (PATH, spawner.home_container_path.format(username=safe))]


async def rendered(evaluate: Any, render: Any, value: Any) -> dict[str, Any]:
    """A site's ``extra_create_kwargs`` / ``extra_host_config`` (a dict, or a callable
    returning one, maybe awaitable), its templates rendered (DockerSpawner's helpers)."""
    value = evaluate(value)
    if inspect.isawaitable(value):
        value = await value
    return dict(render(value or {}))


def home_layout(spawner: Any) -> HomeLayout:
    """Where ``spawner``'s user's home is (its ``home_*`` settings)."""
    return HomeLayout(
        spawner.home_template,
        spawner.home_from_directory,
        spawner.home_directory_prefix,
        spawner.home_container_path,
    )


class GPUDockerSpawner(
    SuspendingSpawnerMixin, NewNamedServerMixin, QueueingSpawnerMixin, DockerSpawner
):
    """A DockerSpawner that gives each server exactly the GPUs it was placed on."""

    # the cluster-wide keys moved to c.GPUCluster (cluster_settings.MOVED): accepted here
    # for one release with a warning naming the new key; the spawner reads self.site's
    locals().update(old_keys())
    # max_queue_wait and queue_policy: QueueingSpawnerMixin's (admission.py)
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

    @validate("default_uid", "default_gid")
    def _no_root(self, proposal: Any) -> int:
        if proposal.value == 0:
            raise ConfigError(f"{proposal.trait.name} must not be 0: containers never run as root")
        return int(proposal.value)

    # DockerSpawner's and JupyterHub's settings whose defaults this spawner changes
    use_internal_ip = Bool(False, config=True, help=DockerSpawner.use_internal_ip.help)
    remove = Bool(True, config=True, help=DockerSpawner.remove.help)
    options_from_form = Union(
        [Callable(), Unicode()],
        default_value=options_from_form,
        config=True,
        help="Reads the spawn form (core/form/).",
    )
    apply_user_options = Union(
        [Callable(), Dict()],
        default_value=_options_applied_in_start,
        config=True,
        help="``start`` applies the user's options itself, strictly.",
    )
    options_form = Union(
        [Unicode(), Callable()],
        default_value=spawn_form,
        config=True,
        help="The spawn form (hub/spawn_form.py).",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: c.GPUCluster (moved keys given the old way still count, with a warning)
        self.site: GPUCluster = self.runtime.configure(self.config, self.log, kwargs)
        sections = ("Spawner", "DockerSpawner", "GPUDockerSpawner")
        if not any("network_name" in self.config.get(c, {}) for c in sections):
            self.network_name = kwargs.get("network_name") or self.site.user_network
        self.events = SpawnEvents()  # the spawn page's lines; _events: the same list
        self._events = self.events.lines
        self._start_began: float | None = None  # the event loop's time when start began
        self._container: ServerContainer | None = None  # decided by _prepare
        self._from_state = False  # placed by load_state and not polled since
        self._cuda = ""  # the chosen catalog entry's CUDA version
        self._charge_group = ""  # the allocation's, kept in state for metrics after restarts
        self._gpu_model = ""
        self._ended_note = ""  # why the hub ended the last server, for the form (in state)
        self._freed = ""  # what a culled server gave back, for the form (in state)
        self._saved_choice: tuple[str, str] | None = None  # (owner, name) of a saved: slug
        # (reference, the engine's inspect) of the image this start pulled and checked
        self._image_checked: tuple[str, dict[str, Any]] | None = None

    # ------------------------------------------------------------------ state
    node_name = Unicode("")
    gpu_uuids = List(Unicode())
    host_port = Int(0)  # the port the engine published the server on, on the node's address
    allocation_id = Unicode("")  # made with the reservation, sealed into the labels
    share: Share | None = None  # the share of its one GPU it holds (issue 26); None: whole
    cull_postponed_at = Unicode("")  # "I'm still here" (ISO, UTC; once per start): the culler

    @property
    def holder(self) -> str:
        return f"{self.user.name}/{self.name}"

    def get_state(self) -> dict[str, Any]:
        url = ""
        if self.node_name and self.server is not None and self.host_port:
            address = self.cluster.spec(self.node_name).address
            url = f"http://{address}:{self.host_port}{self.server.base_url}"
        placement = ServerState(
            self.node_name,
            tuple(self.gpu_uuids),
            self.share,
            self.allocation_id,
            self._charge_group,
            self._gpu_model,
            self.host_port,
            url,
            str(self.api_token or ""),
            self._ended_note,
            self._freed,
            self.cull_postponed_at,
        )
        return {**super().get_state(), **encode_state(placement)}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        saved = decode_state(state)
        if saved.server_token:  # a restarted hub forgets api_token: stop revokes it
            self.api_token = saved.server_token
        self._ended_note, self._freed = saved.ended_note, saved.freed
        self.cull_postponed_at = saved.cull_postponed_at
        self.node_name, self.gpu_uuids = saved.node, list(saved.gpu_uuids)
        self.host_port, self.allocation_id = saved.host_port, saved.allocation
        self._charge_group, self._gpu_model = saved.charge_group, saved.gpu_model
        self.share = saved.share
        if self.node_name:
            record = rejoined_record(saved, self.user.name, self.name, self.site.hub_id)
            conflicts = self.cluster.ledger.rejoin_server(self.holder, record, self.share)
            self._from_state = True
            if conflicts:
                self.log.warning(
                    "%s: GPUs %s also claimed by another server", self.holder, conflicts
                )

    def clear_state(self) -> None:
        super().clear_state()
        self.cull_postponed_at = ""  # once per start
        self._forget_placement()

    def _forget_placement(self, ended: EndReason | None = None) -> None:
        """Free what this server holds; with ``ended``, its allocation ends for that reason."""
        ledger = self.cluster.ledger
        freed = ledger.release_placement(self.holder, self.gpu_uuids, self.allocation_id, ended)
        if freed:
            self.log.info("%s: released GPUs %s", self.holder, ", ".join(freed))
        self.node_name = ""
        self.gpu_uuids = []
        self.host_port = 0
        self.allocation_id = ""
        self.share = None

    # ------------------------------------------------------------------ the hub's parts
    @property
    def runtime(self) -> HubRuntime:
        """The hub process's GPU parts (:mod:`.runtime`), through the hub's tornado
        settings, which every user object shares."""
        return runtime_of(getattr(getattr(self, "user", None), "settings", None))

    @property
    def cluster(self) -> Cluster:
        """The hub's one :class:`Cluster`, built from ``c.GPUCluster`` when the runtime
        starts (by the first spawner that needs it, unless something started it before)."""
        runtime = self.runtime
        if runtime.cluster is not None:
            return runtime.cluster
        settings = getattr(getattr(self, "user", None), "settings", None) or {}
        return runtime.start(
            self.site.cluster_settings(
                seal_key=seal_key_of(settings, self.log),
                node_checks=self._node_check_settings(),
                sharing=GPUSharing(config=self.config, parent=self).policy,
            ),
            self.log,
            deadlines_file=self.site.cull_deadlines_file,
            queue_policy=self.queue_policy,
            site=self.site,
            config=self.config,
        )

    def _node_check_settings(self) -> CheckSettings | None:
        """What the hub's node checks need (``GPUCluster.check_nodes``), None when off."""
        hub = getattr(self, "hub", None)
        proxy = (getattr(getattr(self, "user", None), "settings", None) or {}).get("proxy")
        return hub_check_settings(
            self.site,
            lambda: self.catalog,
            api_url=self.hub_connect_url or str(getattr(hub, "api_url", "") or ""),
            proxy_api_url=str(getattr(proxy, "api_url", "") or ""),
            image=str(self.image or ""),
            gpu_device_driver=self.site.gpu_device_driver,
        )

    @property
    def queue(self) -> SpawnQueue:
        """The hub's spawn queue (built with the cluster)."""
        self.cluster  # noqa: B018 - builds the runtime's parts on first use
        queue = self.runtime.queue
        assert queue is not None
        return queue

    @property
    def catalog(self) -> Catalog:
        """The image catalog, re-read when its file changes (a bad edit keeps the old one)."""
        return self.runtime.catalog(self.site.catalog_file, self.log)

    @property
    def policy(self) -> ResourcePolicy:
        return policy_from_config(self.resource_defaults, self.group_bounds)

    def saved_images(self) -> MyImages:
        """The hub's "My images" service (the runtime's)."""
        self.cluster  # noqa: B018 - builds the runtime's parts on first use
        return self.runtime.saved_images(self.log, self.config)

    # ------------------------------------------------------------------ docker, per node
    @property
    def client(self) -> docker.APIClient:
        """The Docker client of this server's node (DockerSpawner has one for everything)."""
        return self.cluster.client(self.node_name or self.cluster.specs()[0].name)

    def _on_node(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A Docker call on this server's node, bounded by ``docker_timeout``; it raises
        ours (``NodeUnreachable``, ``NodeRefused``, ``NotOnNode``: ``Cluster.run``)."""
        node = self.node_name or self.cluster.specs()[0].name
        return self.cluster.run(node, lambda: self._docker(method, *args, **kwargs))

    async def docker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """DockerSpawner's own call (:meth:`_on_node`). DockerSpawner's code reads docker-py's
        ``APIError`` (a 404 is "gone"), so an engine's refusal reaches it as docker-py
        raised it; ``start``, ``poll`` and ``stop`` map what comes back out of DockerSpawner
        (:func:`~jupyterhub_gpu.edges.node_errors.node_calls`)."""
        try:
            return await self._on_node(method, *args, **kwargs)
        except NodeRefused as e:
            raise (e.__cause__ or e) from None

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

    # ------------------------------------------------------------------ placement
    def _reserve(self, decision: Placement) -> Placement:
        """Write what admission decided into the ledger and this spawner's state, with no
        ``await``: called right after the decision (``_decide_and_reserve``, ``_take``)."""
        allocation = new_allocation_id()
        self.cluster.ledger.reserve_placement(self.holder, decision, allocation)  # or KeyError
        self.share = decision.share
        self.cluster.pending.add(self.holder)
        self.node_name = decision.node
        self.gpu_uuids = list(decision.gpu_uuids)
        self.allocation_id = allocation
        return decision

    # ------------------------------------------------------------------ container
    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        if self.home_template:
            env["HOME"] = home_layout(self).in_container(self.user.name)
        # last: nothing else decides the GPUs, the share's limits or where MPS is
        env.update(server_env(self.gpu_uuids, self.share, self._mps_paths()))
        return env

    def _mps_paths(self) -> MpsPaths | None:
        """The node's MPS directories for a share of an ``mps`` GPU (c.GPUSharing), else None."""
        if self.share is None or self.share.mode != "mps":
            return None
        return GPUSharing(config=self.config, parent=self).mps

    def home_host_path(self, ident: Identity) -> Path | None:
        """The user's home on the hub's shared filesystem (None without ``home_template``):
        where the SSH gateway reads her ``~/.ssh/authorized_keys`` (hub/api/ssh.py)."""
        return home_layout(self).host(ident)

    def _labels(self) -> dict[str, str]:
        """The container's labels: its allocation, sealed (core/containers.py)."""
        share = self.share
        claim = Allocation(
            self.site.hub_id,
            self.allocation_id,
            self.user.name,
            self.name,
            self.node_name,
            tuple(self.gpu_uuids),
            share.label if share else "",
            share.memory_mib if share else 0,
        )
        now = datetime.now(timezone.utc)
        return server_labels(claim, str(self.image), now, self.cluster.settings.seal_key)

    async def _prepare(self, ident: Identity, options: SpawnOptions) -> None:
        """Create the home and set everything create_object needs (no Docker calls)."""
        home = None
        layout = home_layout(self)
        path = layout.host(ident)
        if path is not None:
            root = homes.template_root(self.home_template)
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: ensure_home(path, ident.uid, ident.gid, shared_root=root)
            )
            home = (str(path), layout.in_container(self.user.name))
        limits = resource_limits(options.cpu, options.mem_gib, self.policy)
        # JupyterHub's get_env tells the server its limits (CPU_LIMIT, MEM_LIMIT), and
        # DockerSpawner's port lookups read host_ip; the container's own come from limits
        self.cpu_limit = limits.cpu
        self.mem_limit = limits.mem_bytes
        self.host_ip = self.cluster.spec(self.node_name).publish_ip
        self._container = ServerContainer(
            uid=ident.uid,
            gid=ident.gid,
            supplementary_gids=ident.supplementary_gids,
            labels=self._labels(),
            gpu_uuids=self.gpu_uuids,
            network=self.site.user_network,
            limits=limits,
            home=home,
            binds=dataset_binds(parse_group_mounts(self.group_mounts), ident.groups),
            device_driver=self.site.gpu_device_driver,
            mps=self._mps_paths(),
        )

    async def workload(self) -> Workload:
        """This server as a :class:`~jupyterhub_gpu.core.workload.Workload` (what
        :meth:`_prepare` decided, the image's command, JupyterHub's environment); the
        site's ``extra_create_kwargs`` / ``extra_host_config`` (a dict, or a callable
        returning one), their templates rendered, go *under* the workload's own keys."""
        if self._container is None:
            raise RuntimeError("the server's container was not prepared")
        site_extras = functools.partial(rendered, self._eval_if_callable, self._render_templates)

        return Workload(
            name=self.container_name,
            image=str(self.image),
            command=await self.get_command(),
            env=self.get_env(),
            container=self._container,
            share=self.share,
            port=self.port,
            publish_ip=str(self.host_ip),
            remove_on_exit=self.remove and not self.site.suspend,  # hub/suspend.py: kept
            site_create=await site_extras(self.extra_create_kwargs),
            site_host=await site_extras(self.extra_host_config),
        )

    async def create_object(self) -> dict[str, Any]:
        """Create the container :func:`~jupyterhub_gpu.core.workload.make_container`
        describes, exactly (DockerSpawner's own ``create_object`` is not called: nothing
        is added to the description afterwards)."""
        request = make_container(await self.workload())
        site = self.site
        await self.cluster.ensure_user_network(self.node_name, site.user_network, site.user_bridge)
        self._event(70, "Starting the container")
        host_config = self.client.create_host_config(**request.host)
        created = await self._on_node("create_container", **request.create, host_config=host_config)
        return dict(created)

    async def check_allowed(self, image: str) -> str:
        """The image was resolved from the catalog by ``start``; DockerSpawner asks again."""
        return str(self.image)

    async def pull_image(self, image: str) -> None:
        """Pull a missing image on the chosen node, reporting the percentage; then check
        what it is (:func:`~.image_checks.check_image`). Once per start: ``_create`` calls it
        before the start's time limit counts, and DockerSpawner's ``start`` calls it again for
        the same image, answered from the first call (no second inspect, no second check)."""
        if self._image_checked is not None and self._image_checked[0] == image:
            return
        saves = self.saved_images()
        try:
            info = await self._on_node("inspect_image", image)
            await check_image(saves, image, info, self._saved_choice, self.log, self.holder)
            self._image_checked = (image, info)
            return
        except NotOnNode:
            if self.pull_policy.lower() == "never":
                raise ImageUnavailable(
                    f"The image {image} is not on node {self.node_name} and pulling is disabled; "
                    "ask an admin to load it there."
                ) from None
        await pull(
            self.cluster,
            self.node_name,
            image,
            self.site.pull_timeout,
            lambda pct, message: self._event(40 + pct // 4, message),
            self.log,
            saves.settings.auth_config(image),
            stall_timeout=self.site.pull_stall_timeout,
        )
        info = await self._on_node("inspect_image", image)
        untag = functools.partial(self._on_node, "remove_image", image)  # pulled for nothing
        choice = self._saved_choice
        await check_image(saves, image, info, choice, self.log, self.holder, untag=untag)
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
                info = await self._on_node("inspect_image", self.image)
            command = (info.get("Config") or {}).get("Cmd") or ["jupyterhub-singleuser"]
        return [*command, *self.get_args()]

    async def get_ip_and_port(self) -> tuple[str, int]:
        """The node's address and the port its engine published the server on."""
        bindings = await self._on_node("port", self.container_id, self.port)
        try:
            self.host_port = published_port(bindings)
        except NodeFailure:
            code = await exit_code(self._on_node, self.container_id)  # a command failing at once
            if code is not None:
                raise await spawner_exited(self, code) from None
            raise
        return self.cluster.spec(self.node_name).address, self.host_port

    # ------------------------------------------------------------------ progress
    def _event(self, progress: int, message: str, **extra: Any) -> None:
        """One line of the spawn page's event log (:class:`~.spawn_events.SpawnEvents`)."""
        self.events.add(progress, message, **extra)

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        async for event in self.events.stream():
            yield event

    # ------------------------------------------------------------------ lifecycle
    async def _validated(
        self, snapshot: ClusterSnapshot
    ) -> tuple[Identity, SpawnOptions, PlacementRequest]:
        try:
            ident = await self.identity()
            found = await spawn_request(
                self.user_options,
                ident,
                catalog=self.catalog,
                saves=self.saved_images(),
                policy=self.policy,
                charge_groups=self._charge_groups(ident),
                snapshot=snapshot,
            )
        except UserFacingError as e:
            raise spawn_error(e) from None
        self._saved_choice = found.saved_choice
        self.image = found.entry.image
        self._cuda = found.entry.cuda_version or ""
        return ident, found.options, found.request

    async def start(self) -> tuple[str, int]:
        try:
            return await self._start()
        except BaseException:
            self.first_start_failed()  # a named server made by this spawn is removed
            raise

    async def _start(self) -> tuple[str, int]:
        self.events.begin()
        self._start_began = asyncio.get_running_loop().time()
        self._forget_placement()  # the hub cleared the state; be sure nothing is left held
        self._ended_note = self._freed = ""  # the form showed why the last one ended
        self._image_checked = None  # each start checks its image on its node afresh
        self.runtime.start_prepuller(self.log, self.site.catalog_file)
        self._start_sweeping()
        try:
            names = functools.partial(derived_names, self)
            check_name_lengths(names, self.user.name, self.name, self.escape)
            with contextlib.suppress(Exception):  # reservations known before placing
                await self.queue.refresh()
            self._event(10, f"Choosing a node among {len(self.cluster.specs())}")
            snapshot = await self.cluster.snapshot()
            ident, options, request = await self._validated(snapshot)
            quota = resolve_bounds(self.policy, ident.groups).quota
            try:
                try:
                    group = self._group_of(ident, options.charge_group)
                    # resumed (hub/suspend.py), its wait's placement, or None: as any start
                    resumed = await self._resumed(snapshot, ident, options, request, group)
                    if isinstance(resumed, tuple):
                        return resumed
                    decision = resumed or self._decide_and_reserve(snapshot, request, quota, group)
                except MustQueue as e:
                    decision = await self._wait_in_line(request, quota, e.reason, group)
            except (UserFacingError, SpawnException) as e:
                SPAWN_DECISIONS.labels("refused", getattr(e, "reason", None) or "other").inc()
                raise
            SPAWN_DECISIONS.labels("placed", "").inc()
            self.cluster.ledger.open_allocation(self._record(snapshot, decision, ident, options))
            await self.cluster.recorded()  # the record exists before the container does
            described = describe_placement(snapshot, decision)
            self._event(30, described)
            self.log.info("%s: %s", self.holder, described)
            self._warn_of_reservations(snapshot)
            return await self._create(ident, options)
        except UserFacingError as e:
            await self._undo()
            raise spawn_error(e) from None
        except NodeRefused as e:  # the engine answered, with an error: not a dead node
            node, why = self.node_name, one_line(e.explanation)  # on one line
            self.log.warning("Node %s refused %s's server: %s", node, self.holder, why)
            await self._undo()
            raise spawn_refusal(
                f"Node {node} could not start your server: {why}. Try again; if it keeps "
                f"failing, tell an admin (node {node}).",
                reason="node_error",
                status_code=503,
            ) from None
        except NodeUnreachable as e:
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
            self.events.end()

    def _record(
        self, snapshot: ClusterSnapshot, decision: Placement, ident: Identity, options: SpawnOptions
    ) -> AllocationRecord:
        """The allocation's record (:func:`~jupyterhub_gpu.core.placed.placed_record`),
        its GPU model and charge group kept in this server's state."""
        record = placed_record(
            snapshot,
            decision,
            allocation=self.allocation_id,
            user=self.user.name,
            server=self.name,
            group=self._group_of(ident, options.charge_group),
            image=options.image,
            cuda=self._cuda,
            cpus=options.cpu,
            mem_gib=options.mem_gib,
            hub=self.site.hub_id,
        )
        self._gpu_model, self._charge_group = record.gpu_model, record.group
        return record

    async def _create(self, ident: Identity, options: SpawnOptions) -> tuple[str, int]:
        """Pull the image if the node lacks it (bounded by ``pull_timeout`` and
        ``pull_stall_timeout``: a pull making progress may take its time), create and start
        the container within the configured ``start_timeout``, then wait a little for its
        first answer (:func:`~.answer.answer_or_exit`; an exited container fails at once)."""
        await self.pull_image(str(self.image))
        budget = self._start_budget or float(cast(Any, self).start_timeout)

        async def prepare_and_start() -> tuple[str, int]:
            await self._prepare(ident, options)
            with node_calls(self.node_name):  # DockerSpawner's code lets docker-py's through
                return await super(GPUDockerSpawner, self).start()

        try:
            async with self.runtime.start_slot(self.site.concurrent_start_limit):
                ip_port = await asyncio.wait_for(prepare_and_start(), budget)
        except asyncio.TimeoutError:
            raise spawn_refusal(
                f"Your server did not start within {budget:.0f} s of getting its GPUs "
                "(start_timeout); try again, or tell an admin if it keeps happening.",
                reason="start_timeout",
                status_code=503,
            ) from None
        self.cluster.ledger.allocation_started(self.allocation_id)
        self._event(90, "Waiting for the server to answer")
        await spawner_answer(self, ip_port)
        return ip_port

    async def _undo(self) -> None:
        """A failed start: its container removed (never a suspended one's), GPUs freed."""
        if self.node_name and self.suspended is None:
            try:
                await self._on_node("remove_container", self.container_name, force=True)
            except NotOnNode:
                pass
            except NodeRefused as e:
                self.log.warning("Could not remove container %s: %s", self.container_name, e)
            except NodeUnreachable as e:
                self.log.warning("Node %s unreachable while cleaning up: %s", self.node_name, e)
            self.object_id = ""
        self._forget_placement(EndReason.FAILED)

    async def poll(self) -> int | str | None:
        self.cluster.start_reconciling()  # a restarted hub polls its servers first of all
        self.saved_images().start_sweeping()
        self.runtime.start_prepuller(self.log, self.site.catalog_file)
        self._start_sweeping()
        if not self.node_name:
            return 0
        if self.suspending:  # frozen for its checkpoint, or its stop is running
            return None
        if self.cluster.known_down(self.node_name):
            # an unreachable node says nothing about the server: keep it and its GPUs
            self.log.debug("Poll of %s: node %s is down; kept", self.holder, self.node_name)
            return None
        if self.gpu_uuids and await self._preempted():
            return 0
        try:
            with node_calls(self.node_name):
                status = await super().poll()
        except NodeError as e:
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
        if self.suspending:  # its container was checkpointed: it stays (hub/suspend.py)
            return self._stop_suspended()
        if self.object_id and self.node_name:
            allocation = self.allocation_id  # DockerSpawner.stop clears the state
            # JupyterHub stops a server that never answered within http_timeout while
            # this flag (its own, set around User._wait_up) is still up
            never_answered = bool(getattr(self, "_waiting_for_response", False))
            try:
                culled, freed = culled_and_freed(self)  # before the stop clears the state
                with node_calls(self.node_name):
                    await super().stop(now=now)
                self._freed = freed
                self.cluster.ledger.end_allocation(allocation, stop_reason(never_answered, culled))
            except NodeError as e:
                # The container may still run: keep its GPUs held (as an orphan) until
                # reconciliation sees the node again and finds the container gone.
                self.log.warning(
                    "Node %s unreachable while stopping %s (%s); its GPUs stay held until the "
                    "node answers again",
                    self.node_name,
                    self.holder,
                    e,
                )
                self.cluster.ledger.orphan(self.holder)
        self.clear_state()
