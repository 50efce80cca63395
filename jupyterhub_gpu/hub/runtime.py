"""The hub process's GPU parts, built once and reached through tornado's settings.

JupyterHub makes one spawner per server and one handler per request; the GPU parts they
share live here, one :class:`HubRuntime` per hub process: the cluster-wide settings
(``c.GPUCluster``: :class:`~.cluster_settings.GPUCluster`), the
:class:`~.cluster.Cluster` (nodes, Docker clients, agents, the ledger, the accounting
recorder), the :class:`~.queue.SpawnQueue` of spawns waiting for GPUs, the saved images
(:class:`~.saves.MyImages`), the pre-puller, the start slots
(``GPUCluster.concurrent_start_limit``), the image catalog as last read, the batch job
runner (``jobs``, hub/jobs.py) and the Prometheus collector's view of them. Every part
gets it the way JupyterHub's own handlers get the hub's state:

- the hub API handlers read ``self.settings[SETTINGS_KEY]`` (:func:`runtime_of`); the
  site's ``configure_*`` calls put the runtime in ``c.JupyterHub.tornado_settings``
  (:func:`jupyterhub_gpu.hub.extensions.register`), which JupyterHub shares with every
  handler and every user object;
- the spawner reads the same dict through ``self.user.settings``.

It is started (:meth:`HubRuntime.start`) by the first spawner or spawn form, or by
whoever needs it first with the hub's settings at hand (:meth:`HubRuntime.start_from`,
from tornado's settings: the hub's config, cookie secret and API URL). Outside a hub (a
unit test, a benchmark), with no settings at hand, one process-wide runtime stands in; a
settings dict without one is given that same runtime, so a hub whose configuration calls
no ``configure_*`` still has exactly one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from traitlets import TraitError
from traitlets.config import Config

from jupyterhub_gpu.core.allocation import seal_key
from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.core.scheduling import queue_settings
from jupyterhub_gpu.core.ssh.census import SSHReport
from jupyterhub_gpu.edges.adminfiles import load_catalog
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.cluster import Cluster
from jupyterhub_gpu.hub.cluster_settings import ClusterSettings, GPUCluster, gpu_cluster
from jupyterhub_gpu.hub.metrics import COLLECTOR, ClusterCollector
from jupyterhub_gpu.hub.node_checks import hub_check_settings
from jupyterhub_gpu.hub.prepull import PrePullRunner, catalog_reader, prepuller
from jupyterhub_gpu.hub.queue import SpawnQueue
from jupyterhub_gpu.hub.saves import MyImages, my_images
from jupyterhub_gpu.hub.sharing import GPUSharing
from jupyterhub_gpu.wire.catalog_file import default_catalog_path

SETTINGS_KEY = "jupyterhub_gpu"


class HubRuntime:
    """The GPU parts of one hub process (``cluster`` and ``queue`` are ``None`` until it
    is started)."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.queue: SpawnQueue | None = None
        self.site: GPUCluster | None = None  # c.GPUCluster, as the runtime was started with
        self.config: Any = None  # the hub's configuration (c.SavedImages, c.PrePuller)
        self.collector: ClusterCollector = COLLECTOR
        self.warned: set[str] = set()  # moved keys already warned about (cluster_settings)
        self._saves: MyImages | None = None
        self._prepuller: PrePullRunner | None = None
        self._start_slots: asyncio.Semaphore | None = None
        self._catalogs: dict[str, tuple[float, Catalog]] = {}
        #: the batch job runner (hub/jobs.py's JobRunner), made with its first use
        self.jobs: Any = None
        #: the active jobs read at the cluster's creation (hub/jobs.py's protect)
        self.found_jobs: list[Any] | None = None
        #: called with the cluster right after it is made, before anything awaits
        #: (hub/jobs.py marks the placed jobs live there: configure_jobs)
        self.cluster_hooks: list[Callable[[Cluster], None]] = []
        self.ssh = SSHReport()  # the SSH gateway's last list of open sessions
        #: the sweep of expired checkpoints (hub/suspend_sweep.py), once started
        self.suspend_sweep: asyncio.Future[None] | None = None
        #: the dashboard's cache of the cluster's snapshot (hub/api/cluster.py's
        #: SnapshotCache), which the JupyterLab readouts share; None without a dashboard
        self.snapshots: Any = None
        #: node -> bytes of the checkpoints being taken there now (their node's budget)
        self.suspending_bytes: dict[str, int] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> HubRuntime:
        # traitlets deep-copies configuration values; the hub must keep this very object
        return self

    @classmethod
    def of(cls, cluster: Cluster) -> HubRuntime:
        """A runtime around an existing cluster (tests and benchmarks)."""
        runtime = cls()
        runtime._adopt(cluster)
        return runtime

    def start(
        self,
        settings: ClusterSettings,
        log: logging.Logger,
        *,
        deadlines_file: str = "",
        queue_policy: Mapping[str, Any] | None = None,
        site: GPUCluster | None = None,
        config: Any = None,
    ) -> Cluster:
        """The cluster, built from ``settings`` the first time (later calls return it)."""
        if self.cluster is None:
            cluster = Cluster(settings, log)
            self.site, self.config = site, config
            self._adopt(cluster)
            assert self.queue is not None
            self.queue.deadlines_file = deadlines_file
            self.queue.settings, self.queue.policies = queue_settings(queue_policy or {})
        assert self.cluster is not None
        return self.cluster

    def start_from(self, settings: Mapping[str, Any], log: logging.Logger) -> Cluster:
        """The cluster, built the first time from the hub's tornado ``settings`` alone (its
        ``config``: ``c.GPUCluster``, ``c.GPUSharing``, the spawner's ``queue_policy``,
        ``image`` and ``gpu_device_driver``; its cookie secret, API URL and proxy), for
        whoever needs the runtime before any spawner does (a handler, the hub's start)."""
        if self.cluster is not None:
            return self.cluster
        config = settings.get("config") or Config()
        site = self.configure(config, log)
        spawner = _spawner_section(config)
        hub, proxy = settings.get("hub"), settings.get("proxy")
        node_checks = hub_check_settings(
            site,
            lambda: self.catalog(site.catalog_file, log),
            api_url=str(getattr(hub, "api_url", "") or ""),
            proxy_api_url=str(getattr(proxy, "api_url", "") or ""),
            image=str(spawner.get("image") or ""),
            gpu_device_driver=str(spawner.get("gpu_device_driver") or "nvidia"),
        )
        return self.start(
            site.cluster_settings(
                seal_key=seal_key_of(settings, log),
                node_checks=node_checks,
                sharing=GPUSharing(config=config, log=log).policy,
            ),
            log,
            deadlines_file=site.cull_deadlines_file,
            queue_policy=spawner.get("queue_policy") or {},
            site=site,
            config=config,
        )

    def _adopt(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.queue = SpawnQueue(cluster, cluster.log)  # spawns waiting for GPUs
        self.collector.attach(cluster)  # the hub's /hub/metrics reads this cluster
        for hook in list(self.cluster_hooks):
            hook(cluster)

    def configure(
        self, config: Any, log: logging.Logger, given: Mapping[str, Any] | None = None
    ) -> GPUCluster:
        """``c.GPUCluster`` of ``config`` (old spawner keys ``given`` or in the config
        still count, with one warning each per process)."""
        return gpu_cluster(config, log, given, self.warned)

    # ------------------------------------------------------------------ its other parts
    def saved_images(self, log: logging.Logger, config: Any = None) -> MyImages:
        """The hub's one "My images" service (``c.SavedImages``), with the cluster."""
        if self.cluster is None:
            raise RuntimeError("the hub's GPU runtime is not started")
        if self._saves is None or self._saves.cluster is not self.cluster:
            self._saves = my_images(self.cluster, config or self.config, log)
        return self._saves

    @property
    def prepuller(self) -> PrePullRunner | None:
        """The hub's pre-puller once made (the API and the dashboard read its state)."""
        return self._prepuller

    def start_prepuller(self, log: logging.Logger, catalog_file: str) -> None:
        """Make the hub's pre-puller (``c.PrePuller``, reading the catalog at
        ``catalog_file``, "" the shipped one) if not made yet, and start its rounds if it is
        on; a bad ``c.PrePuller`` setting is logged (with its sentence) and never stops a
        spawn."""
        if self.cluster is None:
            raise RuntimeError("the hub's GPU runtime is not started")
        try:
            if self._prepuller is None or self._prepuller.cluster is not self.cluster:
                saves = self.saved_images(log)
                path = str(catalog_file or default_catalog_path())
                catalog = catalog_reader(path, log)
                self._prepuller = prepuller(
                    self.cluster, self.config, log, catalog, saves, catalog_path=path
                )
            self._prepuller.start()
        except (TraitError, ValueError) as e:
            log.error("Pre-puller not started: %s", e)

    def start_slot(self, limit: int) -> contextlib.AbstractAsyncContextManager[Any]:
        """One of ``limit`` slots to create a server in (0: no limit), shared by the hub's
        spawners."""
        if limit <= 0:
            return contextlib.nullcontext()
        if self._start_slots is None:
            self._start_slots = asyncio.Semaphore(limit)
        return self._start_slots

    def catalog(self, path: str, log: logging.Logger) -> Catalog:
        """The image catalog at ``path`` (the shipped one for ""), re-read when the file
        changes; a bad edit keeps the previous one (logged)."""
        path = str(path or default_catalog_path())
        mtime = Path(path).stat().st_mtime
        cached = self._catalogs.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            catalog = load_catalog(path)
        except ConfigError:
            if cached is None:
                raise
            log.exception("Image catalog %s is invalid; keeping the previous one", path)
            return cached[1]
        self._catalogs[path] = (mtime, catalog)
        return catalog


def _spawner_section(config: Any) -> dict[str, Any]:
    """The spawner's settings as the config sets them (the more specific section wins)."""
    merged: dict[str, Any] = {}
    for section in ("Spawner", "DockerSpawner", "GPUDockerSpawner"):
        if section in config:
            merged.update(dict(config[section]))
    return merged


def seal_key_of(settings: Mapping[str, Any], log: logging.Logger) -> bytes | None:
    """The key of the containers' seals, derived from JupyterHub's cookie secret (the
    hub's tornado ``settings``, which every user object shares): stable across restarts
    as long as the cookie secret is (``cookie_secret_file``), never sent anywhere. None
    outside a hub: containers then carry no seal and are never removed as interrupted
    spawns."""
    key = seal_key(settings.get("cookie_secret"))
    if key is None:
        log.warning("No cookie secret: containers get no seal (allocation.py)")
    return key


_PROCESS = HubRuntime()


def runtime_of(settings: MutableMapping[str, Any] | None) -> HubRuntime:
    """The runtime in tornado ``settings`` (a handler's ``self.settings``, a user's
    ``settings``); the process-wide one when there are none, stored into ``settings``
    when they have none yet."""
    if settings is None:
        return _PROCESS
    found = settings.get(SETTINGS_KEY)
    if not isinstance(found, HubRuntime):
        found = settings[SETTINGS_KEY] = _PROCESS
    return found


__all__ = ["SETTINGS_KEY", "HubRuntime", "runtime_of", "seal_key_of"]


async def start_prepuller_at_hub_start(log: logging.Logger) -> None:
    """Once the hub runs, its runtime and pre-puller (``configure_prepuller``): a hub with
    no server yet (a new site, its nodes just joined) pulls ahead all the same, rather
    than from its first spawn form, start or poll."""
    from jupyterhub.app import JupyterHub

    app = JupyterHub.instance()
    while not (getattr(app, "tornado_application", None) and getattr(app, "http_server", None)):
        await asyncio.sleep(0.5)
    try:
        settings = app.tornado_application.settings
        runtime = runtime_of(settings)
        runtime.start_from(settings, log)
        runtime.start_prepuller(log, runtime.site.catalog_file if runtime.site else "")
    except Exception:
        log.exception("Pre-puller: not started with the hub; the first spawn starts it")
