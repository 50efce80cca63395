"""Pulling a missing image on a node, with progress for the spawn page (an edge: Docker I/O).

The percentage (downloading and unpacking, see :class:`~.progress.PullProgress`) is
reported once per 5% step, from the Docker worker thread through ``call_soon_threadsafe``.
A registry error (in the HTTP answer or inside the event stream) or a pull over its time
limit is an :class:`ImageUnavailable` whose message is for the user; an engine that can't
be reached raises what :meth:`Cluster.run` raises, so the caller reports a dead node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from docker.errors import APIError

from jupyterhub_gpu.core.progress import PullProgress, pull_error
from jupyterhub_gpu.errors import ImageUnavailable, _StreamError
from jupyterhub_gpu.hub.cluster import Cluster

STEP = 5  # percent between two progress messages


async def pull(
    cluster: Cluster,
    node: str,
    image: str,
    timeout: float,
    report: Callable[[int, str], None],
    log: logging.Logger,
    auth_config: Mapping[str, str] | None = None,
) -> None:
    """Pull ``image`` on ``node``; ``report(percent, message)`` runs on the event loop.

    docker-py splits ``image`` into repository and tag (``latest`` when there is none)."""
    loop, progress = asyncio.get_running_loop(), PullProgress()
    shown = -1

    def work() -> None:  # in the node's thread pool
        nonlocal shown
        stream = cluster.client(node).pull(
            image, stream=True, decode=True, auth_config=dict(auth_config or {}) or None
        )
        for event in stream:
            error = pull_error(event)
            if error:
                raise _StreamError(error)
            pct = progress.add(event)
            if pct is not None and pct - pct % STEP > shown:
                shown = pct - pct % STEP
                message = progress.message(image, node, shown)
                loop.call_soon_threadsafe(report, shown, message)

    report(0, f"Pulling {image} on node {node} (not there yet)")
    try:
        await cluster.run(node, work, timeout)
        cluster.image_pulled(node, image)  # placement prefers this node for it from now on
    except (asyncio.TimeoutError, TimeoutError):
        raise ImageUnavailable(
            f"Pulling {image} on node {node} took more than {timeout:.0f} s; try again "
            "later, or ask an admin to pull it on that node beforehand."
        ) from None
    except (APIError, _StreamError) as e:
        why = e.explanation if isinstance(e, APIError) and e.explanation else str(e)
        log.warning("Pull of %s on node %s failed: %s", image, node, why)
        raise ImageUnavailable(
            f"Could not pull {image} on node {node}: {why}. "
            "Ask an admin to check this image's catalog entry and its registry."
        ) from None
