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

Not wired into the culler yet: docs/culler.md ("Suspend instead of stop") has the design,
the figures measured with ``benchmarks/suspend.py`` and what is missing (GPU servers need
NVIDIA's ``cuda-checkpoint`` first).
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
