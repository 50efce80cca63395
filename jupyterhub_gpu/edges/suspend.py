"""Suspend a container to disk and resume it, on the same node or another one (issue 35).

Docker's checkpoint and restore (CRIU underneath; the engine needs ``--experimental``)
write a container's whole process tree, memory included, to a folder and start a new
container from it: a JupyterLab server resumed this way has the same kernels with the
same variables. This module is the I/O of it, over docker-py's client:

- :func:`checkpoint` dumps a running container into ``directory/NAME`` (shared storage,
  so another node can read it) and stops it (the container is left, exited, for the
  caller to remove);
- :func:`restore` starts a *created* container (the same description, on any node whose
  engine has the image) from such a folder. Docker 20.10 refuses a checkpoint folder of
  the caller's choice at start, so the folder is first copied where that engine looks
  (``DATA_ROOT/containers/ID/checkpoints/NAME``): whoever calls this runs on the node
  (its agent, or the test cluster on one machine).

The product's path (hub/suspend.py, docs/culler.md "Suspend instead of stop") is the
same node and the same container, through the node's Docker API alone, so the hub needs
no access to the node's disk:

- :func:`checkpoint_in_place` dumps a running container into the engine's own folder of
  that container and stops it (the exited container keeps the checkpoint);
- :func:`start_from_checkpoint` starts that container again from it, and
  :func:`remove_checkpoint` drops it once the server runs again;
- :func:`can_checkpoint` and :func:`memory_in_use`: what the hub asks before it tries.

Moving a checkpoint to another node (:func:`checkpoint` and :func:`restore` above, the
spike's ``benchmarks/suspend.py``) and GPU servers (NVIDIA's ``cuda-checkpoint``) are not
in the product yet.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from jupyterhub_gpu.errors import SuspendFailed

#: a checkpoint's name: Docker's rule for it, and a path component of ours
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@dataclass(frozen=True)
class Checkpoint:
    name: str
    path: Path  # the folder CRIU wrote
    size_bytes: int
    seconds: float  # how long the dump took (the container was frozen meanwhile)


def _check_name(name: str) -> None:
    if not name or len(name) > 64 or not set(name) <= _NAME_CHARS or name[0] in ".-":
        raise SuspendFailed(
            f"{name[:64]!r} cannot name a checkpoint: use up to 64 letters, digits, '_', "
            "'.' or '-', not starting with '.' or '-'."
        )


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def checkpoint(
    client: docker.DockerClient, container_id: str, directory: Path, name: str
) -> Checkpoint:
    """Dump ``container_id`` into ``directory/name`` and stop it.

    Raises :class:`SuspendFailed` with the engine's reason (no ``--experimental``, no
    CRIU, a process CRIU cannot dump); the container then keeps running.
    """
    _check_name(name)
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / name).exists():
        raise SuspendFailed(f"A checkpoint named {name} already exists in {directory}.")
    api = client.api
    started = time.monotonic()
    try:
        answer = api._post_json(  # docker-py has no checkpoint call; the API has
            api._url("/containers/{0}/checkpoints", container_id),
            data={"CheckpointID": name, "CheckpointDir": str(directory), "Exit": True},
        )
        api._raise_for_status(answer)
    except docker.errors.APIError as err:
        shutil.rmtree(directory / name, ignore_errors=True)
        raise SuspendFailed(
            f"The engine could not checkpoint the container: {err.explanation or err}"
        ) from err
    seconds = time.monotonic() - started
    folder = directory / name
    return Checkpoint(name=name, path=folder, size_bytes=_size(folder), seconds=seconds)


def restore(
    client: docker.DockerClient, container_id: str, saved: Checkpoint, data_root: Path
) -> float:
    """Start the created container ``container_id`` from ``saved``; the seconds it took.

    ``data_root`` is that engine's ``--data-root``. Raises :class:`SuspendFailed` (the
    copy is removed again; the container stays created, not running).
    """
    _check_name(saved.name)
    target = data_root / "containers" / container_id / "checkpoints" / saved.name
    if not target.parent.parent.is_dir():
        raise SuspendFailed(
            f"Container {container_id[:12]} is not in the engine's data folder {data_root}: "
            "restore runs on the node whose engine created it."
        )
    api = client.api
    started = time.monotonic()
    try:
        shutil.copytree(saved.path, target, symlinks=True)
        os.sync()
        answer = api._post(
            api._url("/containers/{0}/start", container_id), params={"checkpoint": saved.name}
        )
        api._raise_for_status(answer)
    except (OSError, docker.errors.APIError) as err:
        shutil.rmtree(target, ignore_errors=True)
        reason = err.explanation if isinstance(err, docker.errors.APIError) else err
        raise SuspendFailed(f"The engine could not restore the container: {reason}") from err
    return time.monotonic() - started


def _engine_failure(what: str, err: docker.errors.APIError) -> SuspendFailed:
    return SuspendFailed(f"The engine could not {what}: {err.explanation or err}")


def can_checkpoint(api: docker.APIClient) -> bool:
    """Whether the engine offers checkpoints (Docker hides them behind ``--experimental``;
    CRIU itself is only found out by trying)."""
    return bool(api.info().get("ExperimentalBuild"))


def memory_in_use(api: docker.APIClient, container_id: str) -> int | None:
    """The container's memory in bytes as ``docker stats`` shows it (its cgroup's usage
    less the inactive page cache: about what a checkpoint of it writes), None when the
    engine does not say."""
    stats = api.stats(container_id, stream=False, one_shot=True) or {}
    memory = stats.get("memory_stats") or {}
    usage, found = memory.get("usage"), memory.get("stats") or {}
    if not isinstance(usage, int) or isinstance(usage, bool) or usage < 0:
        return None
    cache = found.get("inactive_file", found.get("total_inactive_file", 0))
    cache = cache if isinstance(cache, int) and not isinstance(cache, bool) else 0
    return max(usage - cache, 0)


def checkpoint_in_place(api: docker.APIClient, container_id: str, name: str) -> float:
    """Dump the running ``container_id`` into its engine's checkpoint ``name`` (kept with
    the container) and stop it; the seconds it took (it was frozen meanwhile). Raises
    :class:`SuspendFailed` with the engine's reason: the container then keeps running."""
    _check_name(name)
    started = time.monotonic()
    try:
        answer = api._post_json(
            api._url("/containers/{0}/checkpoints", container_id),
            data={"CheckpointID": name, "Exit": True},
        )
        api._raise_for_status(answer)
    except docker.errors.APIError as err:
        raise _engine_failure("checkpoint the container", err) from err
    return time.monotonic() - started


def start_from_checkpoint(api: docker.APIClient, container_id: str, name: str) -> float:
    """Start the exited ``container_id`` from its checkpoint ``name``; the seconds it took.
    Raises :class:`SuspendFailed` with the engine's reason."""
    _check_name(name)
    started = time.monotonic()
    try:
        answer = api._post(
            api._url("/containers/{0}/start", container_id), params={"checkpoint": name}
        )
        api._raise_for_status(answer)
    except docker.errors.APIError as err:
        raise _engine_failure("restore the container", err) from err
    return time.monotonic() - started


def remove_checkpoint(api: docker.APIClient, container_id: str, name: str) -> None:
    """Drop ``container_id``'s checkpoint ``name`` (gone already: nothing to do)."""
    _check_name(name)
    try:
        answer = api._delete(api._url("/containers/{0}/checkpoints/{1}", container_id, name))
        api._raise_for_status(answer)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as err:
        raise _engine_failure("remove the checkpoint", err) from err
