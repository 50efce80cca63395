"""Building a saved image on a node's engine and pushing it to the registry (an edge).

Blocking calls on a docker-py ``APIClient`` (the hub runs them in the node's thread pool
with :meth:`Cluster.run`): the build gets the tar context as is (``custom_context``),
``network_mode="none"`` (everything it installs is in the context), no cache, no proxy
settings, the image's labels through the API, and removes its containers whatever
happens (``rm``, ``forcerm``). Progress goes to ``report`` (called on the worker thread:
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

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import IO, Any

from docker.errors import APIError, NotFound
from requests.exceptions import ReadTimeout

from jupyterhub_gpu.core.saving.data import BuildFailed, PipRequirement, Progress
from jupyterhub_gpu.core.saving.recipe import BUILD_ID_LABEL
from jupyterhub_gpu.core.saving.stream import BuildLog, PushLog, clean, parse_message

log = logging.getLogger(__name__)
Report = Callable[[Progress], None]


@dataclass(frozen=True)
class BuildSettings:
    """Limits of one save on a node. ``idle_timeout_s``: how long the engine may stay
    silent (e.g. pip installing a large wheel); ``build_timeout_s``/``push_timeout_s``: the
    whole build and push. ``memory_bytes``: the memory of the build's RUN steps.
    ``auth_config``: registry credentials for the push (never logged or shown)."""

    build_timeout_s: float = 1800.0
    idle_timeout_s: float = 900.0
    push_timeout_s: float = 1800.0
    memory_bytes: int | None = None
    auth_config: Mapping[str, str] | None = None


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

    limits = {"memory": settings.memory_bytes} if settings.memory_bytes else None
    report(Progress("build", "Building the image", 0))
    try:
        stream = client.build(
            fileobj=context,
            custom_context=True,
            tag=reference,
            labels=dict(labels),
            network_mode="none",
            rm=True,
            forcerm=True,
            nocache=True,
            pull=False,
            decode=True,
            use_config_proxy=False,
            timeout=settings.idle_timeout_s,
            container_limits=limits,
        )
        _follow(stream, fold, time.monotonic() + settings.build_timeout_s, "build")
    except APIError as e:
        failed.append(str(e.explanation or e))
    except ReadTimeout:
        failed.append(f"the node's engine said nothing for {settings.idle_timeout_s:.0f} s")
    if failed:
        raise BuildFailed(build.failure(failed[0]))
    if not build.image_id:
        raise BuildFailed("The build ended without an image; nothing was saved. Tell your admin.")
    return build.image_id


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

    report(Progress("push", f"Pushing to {repo.split('/', 1)[0]}", 0))
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
    from the node (after a success it is in the registry)."""
    made: str | None = None
    try:
        build_image(client, context, reference, labels, requirements, report, settings)
        made = reference
        added = added_bytes(client, reference, base)
        check_size(added)
        digest = push_image(client, reference, report, settings)
    except BaseException:
        discard(client, made, build_id)
        raise
    discard(client, reference, build_id, after="a successful")
    report(Progress("done", "Saved", 100))
    return digest, added
