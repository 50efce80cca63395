"""A process bound on a build's RUN containers (an edge): the build's watch.

The engine's build API has no process limit for the containers of ``RUN`` steps (its
query takes memory, CPU, cgroup parent and ulimits; moby's ``build_routes.go``), and an
``nproc`` ulimit does not bind them: ``RLIMIT_NPROC`` counts the processes of a uid on
the whole node, and the kernel never applies it to uid 0 of the node's user namespace,
which a build's root is. So while a build runs, :class:`BuildWatch` looks at the node's
running containers every ``interval_s``; each one of this build (its environment has
``JUPYTERHUB_GPU_BUILD=<build id>``, a build argument of both stages) gets the engine's
process limit (``POST /containers/{id}/update`` with ``PidsLimit``: the pids cgroup, from
then on a fork over the limit fails), and one that reaches the limit is killed: its
``RUN`` fails, the build ends, and :attr:`BuildWatch.reason` says why. Between a
container's start and the watch's first look (``interval_s`` and an engine call) its
processes are bounded by the build's memory only; a node's admin closes that gap with
``SavedImages.build_cgroup_parent`` (a cgroup with its own process limit).

Runs on a thread of its own, beside the thread that reads the build's stream, with the
same docker-py ``APIClient`` (a requests session: its connection pool serves both).
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any

from docker.errors import APIError, NotFound
from requests.exceptions import RequestException

from jupyterhub_gpu.core.saving.recipe import BUILD_ARG

log = logging.getLogger(__name__)
CALL_TIMEOUT_S = 30.0  #: the watch's own call to the engine (the client's may be minutes)


def api_url(client: Any, path: str) -> str:
    """The engine's URL for ``path`` at the client's API version (docker-py's own form)."""
    return f"{client.base_url}/v{client.api_version}{path}"


def set_pids_limit(client: Any, container: str, limit: int) -> None:
    """The engine's process limit on a running container (API 1.40+; docker-py's
    ``update_container`` has no ``pids_limit``)."""
    response = client.post(
        api_url(client, f"/containers/{container}/update"),
        json={"PidsLimit": limit},
        timeout=CALL_TIMEOUT_S,
    )
    if response.status_code == 404:
        raise NotFound(f"no container {container}")
    response.raise_for_status()


def process_count(client: Any, container: str) -> int:
    """The processes in ``container`` now (its pids cgroup, as the engine reports it)."""
    stats = client.stats(container, stream=False, one_shot=True)
    return int((stats.get("pids_stats") or {}).get("current") or 0)


class BuildWatch:
    """Watches build ``build_id``'s RUN containers on ``client``'s node while it is
    entered (see the module's docstring). ``max_processes``: the limit (``None``: no
    watch)."""

    def __init__(
        self, client: Any, build_id: str, max_processes: int | None, interval_s: float = 0.2
    ) -> None:
        self.client = client
        self.marker = f"{BUILD_ARG}={build_id}"
        self.max_processes = max_processes
        self.interval_s = interval_s
        self.reason: str | None = None
        self.seen: dict[str, bool] = {}  # container -> whether it is this build's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jhgpu-build-watch", daemon=True)
        self._since = time.time() - 5  # the node's clock may be a little behind ours

    def __enter__(self) -> BuildWatch:
        if self.max_processes:
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.look()
                failures = 0
            except (APIError, RequestException) as e:  # the next round tries again
                failures += 1
                if failures == 1:
                    log.warning("The build's watch could not look at the node: %s", e)
            self._stop.wait(self.interval_s)

    def _is_ours(self, container: dict[str, Any]) -> bool:
        cid = container["Id"]
        if cid not in self.seen:
            if int(container.get("Created") or 0) < self._since:
                self.seen[cid] = False
            else:
                env = (self.client.inspect_container(cid).get("Config") or {}).get("Env") or []
                self.seen[cid] = self.marker in env
                if self.seen[cid]:
                    assert self.max_processes is not None
                    set_pids_limit(self.client, cid, self.max_processes)
        return self.seen[cid]

    def look(self) -> None:
        """One round: limit this build's new containers, kill one at the limit."""
        assert self.max_processes is not None
        for container in self.client.containers(filters={"status": "running"}):
            try:
                if not self._is_ours(container):
                    continue
                count = process_count(self.client, container["Id"])
                if count >= self.max_processes:
                    self.reason = (
                        f"A package started more than {self.max_processes} processes "
                        "while it was installed, so the build was stopped. Nothing was "
                        "saved; remove that package from your environment, or tell your "
                        "admin."
                    )
                    log.warning("Build container %s had %d processes: killed",
                                container["Id"][:12], count)  # fmt: skip
                    self.client.kill(container["Id"])
            except NotFound:  # it ended meanwhile
                continue
