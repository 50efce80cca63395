"""Where a node's third-party exceptions become ours: once, at the boundary.

docker-py raises ``APIError`` (the engine answered, with an error; ``NotFound`` for a
404) and ``DockerException``; requests raises ``ConnectionError``/``Timeout`` and their
kin; the OS raises ``OSError``; a call abandoned after its time raises ``TimeoutError``.
:func:`node_error` maps each to one class of :mod:`jupyterhub_gpu.errors` (httpx's
``_exceptions.py`` is the model)::

    docker.errors.NotFound                       -> NotOnNode         (a NodeRefused)
    docker.errors.APIError, requests.HTTPError   -> NodeRefused       (status_code)
    TimeoutError (asyncio's too)                 -> NodeTimedOut      (a NodeUnreachable)
    requests.RequestException, DockerException,
    OSError                                      -> NodeUnreachable

so that the hub's callers catch ``NodeUnreachable`` / ``NodeRefused`` / ``NotOnNode``,
never a library's classes. Our own exceptions and anything else (a bug) pass unchanged.
:meth:`jupyterhub_gpu.hub.cluster.Cluster.run` maps every call to a node this way; the
spawner maps what DockerSpawner's own code lets through the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import docker
import requests

from jupyterhub_gpu.core.words import one_line
from jupyterhub_gpu.errors import (
    GPUHubError,
    NodeRefused,
    NodeTimedOut,
    NodeUnreachable,
    NotOnNode,
)


def node_error(node: str, error: BaseException) -> BaseException:
    """``error``, raised by a call to ``node``'s engine, as one of ours (:class:`NodeError`);
    ours and unknown exceptions are returned as they are. The caller raises the result
    ``from error``."""
    if isinstance(error, GPUHubError):
        return error
    if isinstance(error, docker.errors.APIError):
        why = str(error.explanation or error)
        cls = NotOnNode if isinstance(error, docker.errors.NotFound) else NodeRefused
        return cls(node, f"node {node}: {one_line(why)}", error.status_code, why)
    if isinstance(error, requests.exceptions.HTTPError):
        status = getattr(error.response, "status_code", None)
        why = str(error)
        cls = NotOnNode if status == 404 else NodeRefused
        return cls(node, f"node {node}: {one_line(why)}", status, why)
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return NodeTimedOut(node, f"node {node} did not answer in time")
    if isinstance(error, requests.exceptions.RequestException | docker.errors.DockerException):
        return NodeUnreachable(node, f"node {node} unreachable: {one_line(str(error))}")
    if isinstance(error, OSError):
        return NodeUnreachable(node, f"node {node} unreachable: {one_line(str(error))}")
    return error


@contextmanager
def node_calls(node: str) -> Iterator[None]:
    """Map what the block raises with :func:`node_error` (for calls that did not go
    through ``Cluster.run``: DockerSpawner's own ``start``/``poll``/``stop``)."""
    try:
        yield
    except Exception as e:
        mapped = node_error(node, e)
        if mapped is e:
            raise
        raise mapped from e


def engine_unreachable(error: BaseException, timed_out_counts: bool) -> bool:
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


__all__ = ["engine_unreachable", "node_calls", "node_error"]
