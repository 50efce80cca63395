"""The hub process's GPU parts, built once and reached through tornado's settings.

JupyterHub makes one spawner per server and one handler per request; the GPU parts they
share live here, one :class:`HubRuntime` per hub process: the :class:`~.cluster.Cluster`
(nodes, Docker clients, agents, the ledger, the accounting recorder), the
:class:`~.queue.SpawnQueue` of spawns waiting for GPUs, and the Prometheus collector's
view of them. It is built from the first spawner's configuration (the spawner's traits
are the reference for every setting of the cluster), and every part gets it the way
JupyterHub's own handlers get the hub's state:

- the hub API handlers read ``self.settings[SETTINGS_KEY]`` (:func:`runtime_of`); the
  site's ``configure_*`` calls put the runtime in ``c.JupyterHub.tornado_settings``
  (:func:`jupyterhub_gpu.hub.extensions.register`), which JupyterHub shares with every
  handler and every user object;
- the spawner reads the same dict through ``self.user.settings``.

Outside a hub (a unit test, a benchmark), with no settings at hand, one process-wide
runtime stands in; a settings dict without one is given that same runtime, so a hub whose
configuration calls no ``configure_*`` still has exactly one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from jupyterhub_gpu.core.scheduling import queue_settings
from jupyterhub_gpu.core.ssh.census import SSHReport
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.hub.metrics import COLLECTOR
from jupyterhub_gpu.hub.queue import SpawnQueue

SETTINGS_KEY = "jupyterhub_gpu"


class HubRuntime:
    """The cluster and the queue of one hub process (both ``None`` until the first spawner
    or spawn form needs them)."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.queue: SpawnQueue | None = None
        #: the batch job runner (hub/jobs.py's JobRunner), made with its first use
        self.jobs: Any = None
        #: the active jobs read at the cluster's creation (hub/jobs.py's protect)
        self.found_jobs: list[Any] | None = None
        #: called with the cluster right after it is made, before anything awaits
        #: (hub/jobs.py marks the placed jobs live there: configure_jobs)
        self.cluster_hooks: list[Callable[[Cluster], None]] = []
        self.ssh = SSHReport()  # the SSH gateway's last list of open sessions

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
    ) -> Cluster:
        """The cluster, built from ``settings`` the first time (later calls return it)."""
        if self.cluster is None:
            cluster = Cluster(settings, log)
            self._adopt(cluster)
            assert self.queue is not None
            self.queue.deadlines_file = deadlines_file
            self.queue.settings, self.queue.policies = queue_settings(queue_policy or {})
        assert self.cluster is not None
        return self.cluster

    def _adopt(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.queue = SpawnQueue(cluster, cluster.log)  # spawns waiting for GPUs
        COLLECTOR.attach(cluster)  # the hub's /hub/metrics reads this cluster
        for hook in list(self.cluster_hooks):
            hook(cluster)


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


__all__ = ["SETTINGS_KEY", "HubRuntime", "runtime_of"]
