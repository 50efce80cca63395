"""Pulling a missing image on a node, with progress for the spawn page (an edge: Docker I/O).

The percentage (downloading and unpacking, see :class:`~.progress.PullProgress`) is
reported once per 5% step, from the Docker worker thread through ``call_soon_threadsafe``.
Each message has the bytes the layers weigh and, at the pace so far, about how long is
left. A registry error (in the HTTP answer or inside the event stream), a pull over its
time limit, or one that made no progress (no new byte downloaded or unpacked) for its
stall limit is an :class:`ImageUnavailable` whose message is for the user and is logged
as a warning; its ``cause`` says which (:func:`~jupyterhub_gpu.core.progress.pull_failure`:
the registry lacks the image, the registry did not answer, the node's disk is full). An
engine that can't be reached raises what :meth:`Cluster.run` raises, so the caller reports
a dead node. A pull that keeps making progress may take its time: the spawner bounds it by
``pull_timeout`` and ``pull_stall_timeout``, not by ``start_timeout``.

Each pull has a Docker client and a thread of its own, never the node's pool: a pull given
up while the engine still streams (stalled, over its time) has its connection shut down,
which ends the read in its thread at once and the engine's download with it. The engine
registers an image only once all its layers are in, and the hub counts an image as on a
node (:meth:`Cluster.image_pulled`) only after a pull that ended well: a failed or cut
pull leaves nothing that counts as present.

Spawns come first: every pull is counted in the cluster's :class:`NodePulls`. A
``background`` pull (the pre-puller's, :mod:`.prepull`) does not start while a spawn's
pull runs on its node, and stops (closing its own connection to the engine, which ends the
engine's download unless a spawn waits for the same image) as soon as one starts there:
it raises :class:`PullYielded` and is tried again at a later round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import requests

from jupyterhub_gpu.core.progress import PullProgress, pull_error, pull_failure
from jupyterhub_gpu.errors import ImageUnavailable, NodeRefused, PullYielded, _StreamError
from jupyterhub_gpu.hub.cluster import Cluster

STEP = 5  # percent between two progress messages
STALL_TIMEOUT = 120.0  # seconds without progress before a pull fails (pull_stall_timeout)


class NodePulls:
    """The pulls running on each node now: the spawns' and the background ones'."""

    def __init__(self) -> None:
        self.spawns: Counter[str] = Counter()  # node -> spawn pulls running there
        self.background: dict[str, str] = {}  # node -> the image a background pull pulls

    def spawning(self, node: str) -> bool:
        return self.spawns[node] > 0

    @contextmanager
    def spawn(self, node: str) -> Iterator[None]:
        self.spawns[node] += 1
        try:
            yield
        finally:
            self.spawns[node] -= 1

    @contextmanager
    def in_background(self, node: str, image: str) -> Iterator[None]:
        if self.spawning(node):
            raise PullYielded(f"a spawn is pulling on node {node}")
        if node in self.background:
            raise PullYielded(f"node {node} is pulling {self.background[node]} already")
        self.background[node] = image
        try:
            yield
        finally:
            del self.background[node]


_PULLS: weakref.WeakKeyDictionary[Cluster, NodePulls] = weakref.WeakKeyDictionary()


def pulls_on(cluster: Cluster) -> NodePulls:
    """The cluster's :class:`NodePulls` (one per cluster)."""
    found = _PULLS.get(cluster)
    if found is None:
        found = _PULLS[cluster] = NodePulls()
    return found


async def pull(
    cluster: Cluster,
    node: str,
    image: str,
    timeout: float,
    report: Callable[[int, str], None],
    log: logging.Logger,
    auth_config: Mapping[str, str] | None = None,
    *,
    background: bool = False,
    stall_timeout: float = STALL_TIMEOUT,
) -> None:
    """Pull ``image`` on ``node``; ``report(percent, message)`` runs on the event loop.

    ``timeout`` bounds the whole pull; ``stall_timeout`` the time without progress (no
    new bytes downloaded or unpacked): a large image that keeps coming may take its
    time, a stalled one fails after ``stall_timeout`` s, with a sentence. docker-py
    splits ``image`` into repository and tag (``latest`` when there is none).
    ``background``: the pre-puller's pull, which yields to spawns (:class:`NodePulls`)."""
    pulls = pulls_on(cluster)
    args = (cluster, node, image, timeout, stall_timeout, report, log, auth_config)
    if background:
        with pulls.in_background(node, image):
            await _pull(*args, pulls)
    else:
        with pulls.spawn(node):
            await _pull(*args, None)


class _Stream:
    """The engine's answer to one pull, kept once its headers came (a ``requests``
    response hook on the pull's own client). :meth:`cut` shuts its socket down, which
    ends a read blocked in the pull's thread at once (closing the client closes only its
    idle connections, never the one a thread reads), and the engine drops the download
    that no one waits for any more."""

    def __init__(self) -> None:
        self.response: requests.Response | None = None

    def hook(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        self.response = response

    def cut(self) -> None:
        response = self.response
        connection = getattr(getattr(response, "raw", None), "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(Exception):  # already closed; a transport without it
                sock.shutdown(socket.SHUT_RDWR)
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


async def _pull(
    cluster: Cluster,
    node: str,
    image: str,
    timeout: float,
    stall_timeout: float,
    report: Callable[[int, str], None],
    log: logging.Logger,
    auth_config: Mapping[str, str] | None,
    yield_to: NodePulls | None,
) -> None:
    loop, progress = asyncio.get_running_loop(), PullProgress()
    shown = -1
    started = last_progress = time.monotonic()
    # a client and a thread of its own: the node's pool is never held by a pull, and a
    # pull given up (stalled, over its time, yielding) is cut off at its connection
    client = cluster.new_client(node, timeout)
    stream = _Stream()
    with contextlib.suppress(AttributeError):  # a test's stand-in client has no hooks
        client.hooks["response"].append(stream.hook)
    thread = ThreadPoolExecutor(1, thread_name_prefix=f"pull-{node}")

    def work() -> None:  # in the pull's own thread
        nonlocal shown, last_progress
        events = client.pull(
            image, stream=True, decode=True, auth_config=dict(auth_config or {}) or None
        )
        done = 0
        for event in events:
            if yield_to is not None and yield_to.spawning(node):
                raise PullYielded(f"a spawn started pulling on node {node}")
            error = pull_error(event)
            if error:
                raise _StreamError(error)
            pct = progress.add(event)
            if progress.done_bytes > done:
                done, last_progress = progress.done_bytes, time.monotonic()
            if pct is not None and pct - pct % STEP > shown:
                shown = pct - pct % STEP
                message = progress.message(image, node, shown, time.monotonic() - started)
                loop.call_soon_threadsafe(report, shown, message)

    def stalled() -> str:
        return (
            f"Pulling {image} on node {node} made no progress for {stall_timeout:g} s "
            f"(at {progress.percent or 0}%): its registry or the node's network or disk may be "
            "stuck. Try again later; if it keeps happening, ask an admin to check the "
            "registry and the node."
        )

    report(0, f"Pulling {image} on node {node} (not there yet)")
    running = asyncio.ensure_future(cluster.run(node, work, timeout, executor=thread))
    try:
        while True:
            done, _ = await asyncio.wait({running}, timeout=min(stall_timeout / 4, 5.0))
            if done:
                break
            if time.monotonic() - last_progress > stall_timeout:
                message = stalled()
                log.warning("Pull failed (stalled): %s", message)
                raise ImageUnavailable(message, cause="stalled")
        running.result()
        cluster.image_pulled(node, image)  # placement prefers this node for it from now on
    except (asyncio.TimeoutError, TimeoutError):
        message = (
            f"Pulling {image} on node {node} took more than {timeout:.0f} s; try again "
            "later, or ask an admin to pull it on that node beforehand."
        )
        log.warning("Pull failed (over its time): %s", message)
        raise ImageUnavailable(message, cause="timeout") from None
    except (NodeRefused, _StreamError) as e:
        why = e.explanation if isinstance(e, NodeRefused) else str(e)
        cause, message = pull_failure(image, node, str(why))
        log.warning("Pull failed (%s): %s", cause, message)
        raise ImageUnavailable(message, cause=cause) from None
    finally:
        stream.cut()  # a read blocked in the pull's thread ends now (a yield's too)
        if not running.done():
            running.cancel()
        client.close()
        thread.shutdown(wait=False)
