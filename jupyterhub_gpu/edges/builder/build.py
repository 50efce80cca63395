"""Building a saved image on a node's engine and pushing it to the registry (an edge).

Blocking calls on a docker-py ``APIClient`` (the hub runs them in the node's thread pool
with :meth:`Cluster.run`): the build gets the tar context as is, no network (everything
it installs is in the context), no cache, no proxy settings, the image's labels through
the API, removes its containers whatever happens (``rm``, ``forcerm``), and bounds its
RUN steps (:func:`build_query`): memory without swap, CPU (``cpuquota``), no GPU (the
Dockerfile's build arguments, :func:`~jupyterhub_gpu.core.saving.recipe.build_args`),
an optional cgroup parent, and processes (:class:`~.watch.BuildWatch`). The query goes
to ``POST /build`` directly: docker-py's ``build()`` refuses ``cpuquota``/``cpuperiod``
(its ``container_limits`` takes memory, memswap, cpushares and cpusetcpus only).
Progress goes to ``report`` (called on the worker thread:
the hub hands it to its loop with ``call_soon_threadsafe``). A failure inside the build
or push stream, or an engine's error answer, is a :class:`BuildFailed` that says which
package failed; before it is raised, what the save made on the node is removed (the
tagged image, and the install stage's images and containers by their build-id label), so
a failed save leaves nothing; a save that succeeds leaves nothing either: its image is
in the registry, and the build node's copy is removed after the push (a node that runs
it pulls it by digest, like any other; the hub's sweep removes pulled copies whose record
is gone, hub/saves.py), so saves and deletes can't fill a node's disk. A node that
can't be reached raises what docker-py raises (the caller's ``Cluster.run`` marks the
node down).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import IO, Any

from docker.errors import APIError, NotFound, create_api_error_from_http_exception
from docker.utils.json_stream import json_stream
from requests.exceptions import ConnectionError, HTTPError, ReadTimeout
from urllib3.exceptions import ReadTimeoutError

from jupyterhub_gpu.core.saving.data import BuildFailed, PipRequirement, Progress
from jupyterhub_gpu.core.saving.recipe import BUILD_ID_LABEL, build_args
from jupyterhub_gpu.core.saving.stream import (
    BUILDING,
    UPLOADING,
    BuildLog,
    PushLog,
    clean,
    parse_message,
)
from jupyterhub_gpu.edges.builder.watch import BuildWatch, api_url

log = logging.getLogger(__name__)
Report = Callable[[Progress], None]


@dataclass(frozen=True)
class BuildSettings:
    """Limits of one save on a node. ``idle_timeout_s``: how long the engine may stay
    silent (e.g. pip installing a large wheel); ``build_timeout_s``/``push_timeout_s``: the
    whole build and push. ``memory_bytes``: the memory of the build's RUN steps (no
    swap beyond it); ``cpus``: their CPU time, in CPUs; ``max_processes``: the processes
    one RUN step may have (:class:`~.watch.BuildWatch`); ``cgroup_parent``: the node's
    cgroup the RUN steps run under (empty: the engine's own); ``None``: no limit.
    ``auth_config``: registry credentials for the push (never logged or shown)."""

    build_timeout_s: float = 1800.0
    idle_timeout_s: float = 900.0
    push_timeout_s: float = 1800.0
    memory_bytes: int | None = None
    cpus: float | None = 2.0
    max_processes: int | None = 256
    cgroup_parent: str = ""
    auth_config: Mapping[str, str] | None = None


CPU_PERIOD_US = 100_000  #: the CFS period the CPU bound is a share of (the engine's default)


def build_query(
    reference: str, labels: Mapping[str, str], build_id: str, settings: BuildSettings
) -> dict[str, Any]:
    """The query of ``POST /build`` for one save (moby's ``build_routes.go`` reads it)."""
    query: dict[str, Any] = {
        "t": reference,
        "rm": "1",
        "forcerm": "1",
        "nocache": "1",
        "pull": "0",
        "networkmode": "none",
        "labels": json.dumps(dict(labels)),
        "buildargs": json.dumps(build_args(build_id)),
    }
    if settings.memory_bytes:
        query["memory"] = query["memswap"] = settings.memory_bytes
    if settings.cpus:
        query["cpuperiod"] = CPU_PERIOD_US
        query["cpuquota"] = max(1000, round(settings.cpus * CPU_PERIOD_US))
    if settings.cgroup_parent:
        query["cgroupparent"] = settings.cgroup_parent
    return query


def post_build(
    client: Any, context: IO[bytes], query: Mapping[str, Any], timeout: float
) -> Iterator[Any]:
    """``POST /build`` with ``query`` and the tar ``context``; the engine's messages."""
    response = client.post(
        api_url(client, "/build"),
        params=dict(query),
        data=context,
        headers={"Content-Type": "application/x-tar"},
        stream=True,
        timeout=timeout,
    )
    try:
        response.raise_for_status()
    except HTTPError as e:
        response.close()
        raise create_api_error_from_http_exception(e) from None
    return _messages(response)


def _messages(response: Any) -> Iterator[Any]:
    """The engine's JSON messages; closing it (or its end) closes the connection, and a
    build whose connection closes is cancelled by the engine."""
    try:
        yield from json_stream(response.iter_content(chunk_size=None))
    finally:
        response.close()


def split_reference(reference: str) -> tuple[str, str]:
    """``registry/repo:tag`` -> (``registry/repo``, ``tag``)."""
    repo, _, tag = reference.rpartition(":")
    if not repo or "/" in tag:
        raise ValueError(f"reference must end with a tag, got {reference!r}")
    return repo, tag


def _follow(stream: Iterable[Any], fold: Callable[[Any], None], deadline: float, what: str) -> None:
    for raw in stream:
        fold(raw)
        if time.monotonic() > deadline:
            raise BuildFailed(
                f"The {what} took too long and was stopped; try again later, "
                "or save fewer packages. Nothing was saved."
            )


def build_image(
    client: Any,
    context: IO[bytes],
    reference: str,
    labels: Mapping[str, str],
    requirements: Sequence[PipRequirement],
    report: Report,
    settings: BuildSettings,
    build_id: str,
) -> str:
    """Build the context into ``reference``; the image ID, or :class:`BuildFailed`."""
    build = BuildLog(requirements)
    failed: list[str] = []

    def fold(raw: Any) -> None:
        message = parse_message(raw)
        if message.error:
            failed.append(message.error)
        shown = build.add(message)
        if shown is not None:
            report(shown)

    query = build_query(reference, labels, build_id, settings)
    report(Progress("build", BUILDING, 0))
    with BuildWatch(client, build_id, settings.max_processes) as watch:
        try:
            stream = post_build(client, context, query, settings.idle_timeout_s)
            try:
                _follow(stream, fold, time.monotonic() + settings.build_timeout_s, "build")
            finally:
                getattr(stream, "close", lambda: None)()
        except APIError as e:
            failed.append(str(e.explanation or e))
        except (ReadTimeout, ConnectionError) as e:
            if not isinstance(e, ReadTimeout) and not _timed_out(e):
                raise  # the node can't be reached: the caller marks it down
            failed.append(f"the node's engine said nothing for {settings.idle_timeout_s:.0f} s")
    if watch.reason:
        raise BuildFailed(watch.reason)
    if failed:
        raise BuildFailed(build.failure(failed[0]))
    if not build.image_id:
        raise BuildFailed("The build ended without an image; nothing was saved. Tell your admin.")
    return build.image_id


def _timed_out(error: ConnectionError) -> bool:
    """Whether requests' ``ConnectionError`` is a read timeout of a streamed body."""
    return any(isinstance(arg, ReadTimeoutError) for arg in error.args)


def push_image(client: Any, reference: str, report: Report, settings: BuildSettings) -> str:
    """Push ``reference`` to its registry; the manifest's digest, or :class:`BuildFailed`."""
    repo, tag = split_reference(reference)
    push = PushLog()
    failed: list[str] = []

    def fold(raw: Any) -> None:
        message = parse_message(raw)
        if message.error:
            failed.append(message.error)
        shown = push.add(message)
        if shown is not None:
            report(shown)

    report(Progress("push", UPLOADING, 0))
    try:
        auth = dict(settings.auth_config) if settings.auth_config else None
        stream = client.push(repo, tag=tag, stream=True, decode=True, auth_config=auth)
        _follow(stream, fold, time.monotonic() + settings.push_timeout_s, "push")
    except APIError as e:
        failed.append(str(e.explanation or e))
    if failed:
        raise BuildFailed(
            f"The image was built but the registry refused it: "
            f"{clean(failed[0])}. Nothing was saved; tell your admin."
        )
    if not push.digest:
        raise BuildFailed(
            "The registry did not confirm the image (no digest); nothing was "
            "saved. Tell your admin."
        )
    return push.digest


def added_bytes(client: Any, image: str, base: str) -> int:
    """How much ``image`` adds to ``base`` (the engine's uncompressed sizes)."""
    size = int(client.inspect_image(image).get("Size") or 0)
    return max(0, size - int(client.inspect_image(base).get("Size") or 0))


def remove_stage(client: Any, build_id: str) -> None:
    """Remove the install stage of build ``build_id`` from the node: its containers (left
    only when a build was cut off) and its images, found by their build-id label.

    Not with the engine's image prune: an engine runs one prune at a time and answers
    any other with 409 "a prune operation is already running" (another save finishing on
    the same node, an admin's prune), which would leave the stage behind. Removing the
    stage's last image removes its untagged parents with it, so only leaves are removed."""
    label = {"label": f"{BUILD_ID_LABEL}={build_id}"}
    for container in client.containers(all=True, filters=label):
        with suppress(NotFound):
            client.remove_container(container["Id"], force=True)
    images = client.images(all=True, filters=label)
    parents = {image.get("ParentId") for image in images}
    for image in images:
        if image["Id"] in parents:
            continue
        with suppress(NotFound):  # gone with another leaf's parents
            client.remove_image(image["Id"], force=True)


def discard(client: Any, reference: str | None, build_id: str, after: str = "a failed") -> None:
    """Remove what a save made on the node: the image (when given; its tag, and with
    it the repo digest the push added) and the install stage (:func:`remove_stage`).
    Best effort: logs failures (the hub's sweep removes a pushed image left behind)."""
    if reference:
        try:
            client.remove_image(reference, force=True)
        except APIError as e:
            if getattr(e, "status_code", None) != 404:
                log.warning("Could not remove %s after %s save: %s", reference, after, e)
        except Exception as e:  # the node went away; the hub's clean-up is not this
            log.warning("Could not remove %s after %s save: %s", reference, after, e)
    try:
        remove_stage(client, build_id)
    except Exception as e:
        log.warning("Could not remove the install stage of build %s: %s", build_id, e)


def build_and_push(
    client: Any,
    context: IO[bytes],
    reference: str,
    base: str,
    labels: Mapping[str, str],
    requirements: Sequence[PipRequirement],
    build_id: str,
    report: Report,
    settings: BuildSettings,
    check_size: Callable[[int], None] = lambda added: None,
) -> tuple[str, int]:
    """Build, check the size (``check_size(added_bytes)`` may raise, e.g. the user's
    limit), push; ``(digest, added_bytes)``. Whatever the outcome, the image is removed
    from the node (after a success it is in the registry); on a failure (a cut-off
    thread's ``BaseException`` too) the install stage is removed with it."""
    try:
        build_image(client, context, reference, labels, requirements, report, settings, build_id)
        added = added_bytes(client, reference, base)
        check_size(added)
        digest = push_image(client, reference, report, settings)
    except BaseException:
        discard(client, reference, build_id)  # tagged even when the build said it failed
        raise
    discard(client, reference, build_id, after="a successful")
    report(Progress("done", "Saved", 100))
    return digest, added
