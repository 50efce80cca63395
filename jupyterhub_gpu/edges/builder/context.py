"""The build context of a saved image: a tar of the Dockerfile and the wheelhouse (an edge).

It is written to a spooled temporary file (memory up to :data:`SPOOL_BYTES`, then disk)
and handed to the engine as is (``custom_context=True``). Entries are owned by root,
mode 0644, with a fixed time, and named by us: ``Dockerfile`` and
``wheelhouse/<wheel file name>`` (a name pip's wheel rules accept, nothing else).
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from jupyterhub_gpu.core.saving.data import FetchFailed
from jupyterhub_gpu.core.saving.limits import size_text
from jupyterhub_gpu.core.saving.recipe import CONTEXT_WHEELS

SPOOL_BYTES = 64 * 1024 * 1024  #: context kept in memory up to this size
MTIME = 946684800  #: 2000-01-01: entries carry no time of the save


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _folder(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, MTIME
    return info


def wheel_name(path: Path) -> str:
    """``path``'s file name when it is a wheel's, else :class:`FetchFailed`."""
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        raise FetchFailed(
            f"The wheelhouse holds {path.name[:80]!r}, which is not a wheel; ask your admin "
            "to check the site's package index."
        ) from None
    return path.name


def build_context(dockerfile: str, wheels: Iterable[Path], limit: int | None = None) -> IO[bytes]:
    """A readable tar of ``dockerfile`` and ``wheels``, positioned at its start.

    ``limit``: the most bytes of wheels it may hold (:class:`FetchFailed` above it)."""
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
    total = 0
    try:
        with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
            data = dockerfile.encode("utf-8")
            tar.addfile(_info("Dockerfile", len(data)), io.BytesIO(data))
            tar.addfile(_folder(CONTEXT_WHEELS))
            for path in sorted(wheels):
                name = wheel_name(path)
                size = path.stat().st_size
                total += size
                if limit is not None and total > limit:
                    raise FetchFailed(
                        f"Your packages take more than {size_text(limit)} as wheels, more "
                        "than a saved image may add; remove some and save again. Nothing "
                        "was saved."
                    )
                with path.open("rb") as f:
                    tar.addfile(_info(f"{CONTEXT_WHEELS}/{name}", size), f)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool
