"""The small files the hub and the culler keep, read and written; the one atomic writer.

:func:`write_atomic` is the only way the package replaces a file: the bytes go to a new
temporary file beside the target (created with ``mode`` before a byte is written, so it is
never more open than that), are flushed to the disk, the file is renamed over the target
and the folder is flushed too. A reader, or a restart after a crash at any point, finds
the old file or the new one whole, never a half-written one; a failure leaves the target
as it was and no temporary file behind. ``cli/layout.py`` writes a site's files with it
(:func:`staged` and :func:`commit` for several files replaced together).

The formats are :mod:`jupyterhub_gpu.wire`'s (pure encoders and decoders); this module
adds only what touches the disk, and each file's rule for a missing or bad one:

- the admins' node drains (:mod:`~jupyterhub_gpu.wire.drains`, the hub's, mode 0600): a
  missing file is no drain; an unreadable, oversized or malformed one stops the hub with a
  sentence that names it;
- the culler's deadlines, notes and share notices (:mod:`~jupyterhub_gpu.wire.deadlines`,
  :mod:`~jupyterhub_gpu.wire.cull_notes`, :mod:`~jupyterhub_gpu.wire.share_notices`,
  mode 0644: the hub may run as another user): a missing, unreadable or (deadlines, notices)
  stale file reads as empty.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.culling.idleness import Deadline
from jupyterhub_gpu.core.culling.warning import CullWarning
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.cull_notes import Notes, decode_notes, encode_notes
from jupyterhub_gpu.wire.cull_policy import CullPolicy, decode_cull_policy, encode_cull_policy
from jupyterhub_gpu.wire.cull_warnings import MAX_FILE as WARNINGS_MAX_FILE
from jupyterhub_gpu.wire.cull_warnings import decode_cull_warnings, encode_cull_warnings
from jupyterhub_gpu.wire.deadlines import decode_deadlines, encode_deadlines
from jupyterhub_gpu.wire.drains import MAX_BYTES, decode_drains, encode_drains
from jupyterhub_gpu.wire.share_notices import (
    MAX_FILE,
    ShareNotice,
    decode_share_notices,
    encode_share_notices,
)

# -- the one atomic writer ---------------------------------------------------------------


def staged(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> Path:
    """``data`` written and flushed to the disk in a new temporary file beside ``path``
    (created with ``mode``), to be moved over it with :func:`commit`. On a failure the
    temporary file is removed and the error raised."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def commit(tmp: Path, path: str | os.PathLike[str]) -> None:
    """Move the :func:`staged` file ``tmp`` over ``path``, then flush their folder so that
    the rename itself survives a crash. If the rename fails, ``tmp`` is removed."""
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(Path(path).parent)


def _fsync_dir(folder: Path) -> None:
    """Flush a folder's entries; a filesystem that cannot (some network ones) is left be:
    the file is in place either way, only its durability across a power cut is less."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """``path`` holds ``data`` with ``mode`` exactly, or is unchanged if anything failed
    (OSError); its folder must exist."""
    commit(staged(path, data, mode), path)


def write_json_atomic(path: str | os.PathLike[str], data: Any, mode: int = 0o600) -> None:
    """``data`` as JSON (indented, keys sorted) in ``path``, atomically; its folder is
    made if missing (the culler's files and its state)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"), mode)


def _write_shared(path: str | os.PathLike[str], data: bytes) -> None:
    """A file the culler writes for the hub (which may run as another user: 0644)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, 0o644)


# -- the admins' node drains (the hub's) ----------------------------------------------------


def load_drains(path: str | os.PathLike[str]) -> dict[str, str]:
    """The drains kept in ``path``; none when the file does not exist yet. ConfigError
    naming the file if it cannot be read, is over :data:`~.drains.MAX_BYTES` or malformed."""
    file = Path(path)
    try:
        with file.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(
            f"The drains file {str(file)!r} cannot be read ({e.strerror}); give the hub's "
            "user read and write access to it, or set GPUCluster.drains_file."
        ) from None
    return decode_drains(data, f"The drains file {str(file)!r}")


def save_drains(path: str | os.PathLike[str], drains: Mapping[str, str]) -> None:
    """Write ``drains`` to ``path`` atomically (mode 0600); OSError if it can't be written
    (the file is then as it was)."""
    write_atomic(path, encode_drains(drains).encode("utf-8"), 0o600)


# -- the culler's files for the hub ----------------------------------------------------------


def _fresh(written: float, now: datetime | None, max_age: float) -> bool:
    when = datetime.fromtimestamp(written, timezone.utc)
    return (now or datetime.now(timezone.utc)) - when <= timedelta(seconds=max_age)


def save_cull_policy(path: str | Path, policy: CullPolicy) -> None:
    _write_shared(path, encode_cull_policy(policy))


def load_cull_policy(
    path: str | Path, now: datetime | None = None, max_age: float = 3600.0
) -> CullPolicy | None:
    """The culler's terms as it last wrote them (``wire/cull_policy.py``), or None when
    the file is missing, unreadable, too large or older than ``max_age`` s (a culler that
    stopped writing: its terms are not known)."""
    text = _read_fresh(path, 16 * 2**20, now, max_age)
    return decode_cull_policy(text) if text is not None else None


def save_deadlines(path: str | Path, deadlines: Mapping[str, Deadline | None]) -> None:
    _write_shared(path, encode_deadlines(deadlines))


def load_deadlines(
    path: str | Path, now: datetime | None = None, max_age: float = 600.0
) -> dict[str, Deadline]:
    """holder -> :class:`Deadline`; ``{}`` when the file is missing, unreadable, or older
    than ``max_age`` s (a culler that stopped writing says nothing); bad entries skipped."""
    file = Path(path)
    try:
        written = file.stat().st_mtime
        text = file.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return {}
    return decode_deadlines(text) if _fresh(written, now, max_age) else {}


def load_notes(path: str | Path) -> Notes:
    """Read the notes file; ``{}`` when it is missing or not valid."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return {}
    return decode_notes(text)


def save_notes(path: str | Path, notes: Notes) -> None:
    """Write the notes file atomically (readable by the hub, which may run as another user)."""
    _write_shared(path, encode_notes(notes))


def save_share_notices(path: str | Path, notices: Mapping[str, ShareNotice]) -> None:
    _write_shared(path, encode_share_notices(notices))


def load_share_notices(
    path: str | Path, now: datetime | None = None, max_age: float = 600.0
) -> dict[str, ShareNotice]:
    """holder -> :class:`ShareNotice`; ``{}`` when the file is missing, unreadable, larger
    than :data:`~.share_notices.MAX_FILE` or older than ``max_age`` s."""
    text = _read_fresh(path, MAX_FILE, now, max_age)
    return decode_share_notices(text) if text is not None else {}


def save_cull_warnings(path: str | Path, warnings: Mapping[str, CullWarning]) -> None:
    _write_shared(path, encode_cull_warnings(warnings))


def load_cull_warnings(
    path: str | Path, now: datetime | None = None, max_age: float = 600.0
) -> dict[str, CullWarning]:
    """holder -> :class:`CullWarning`; ``{}`` when the file is missing, unreadable, larger
    than :data:`~.cull_warnings.MAX_FILE` or older than ``max_age`` s."""
    text = _read_fresh(path, WARNINGS_MAX_FILE, now, max_age)
    return decode_cull_warnings(text) if text is not None else {}


def _read_fresh(path: str | Path, limit: int, now: datetime | None, max_age: float) -> str | None:
    """A small file's text, or None when it is missing, unreadable, larger than ``limit``
    bytes or older than ``max_age`` s (the culler's notices: stale ones are no notice)."""
    file = Path(path)
    try:
        stat = file.stat()
        if stat.st_size > limit:
            return None
        with file.open("rb") as f:
            text = f.read(limit).decode("utf-8")
    except (OSError, ValueError):
        return None
    return text if _fresh(stat.st_mtime, now, max_age) else None


__all__ = [
    "commit",
    "load_cull_warnings",
    "load_deadlines",
    "load_drains",
    "load_notes",
    "load_share_notices",
    "save_cull_warnings",
    "save_deadlines",
    "save_drains",
    "save_notes",
    "save_share_notices",
    "staged",
    "write_atomic",
    "write_json_atomic",
]
