"""The admins' node drains, kept in a small JSON file so that they survive a hub restart.

    {"version": 1, "drains": {"gpu-b": "new power supply today", "gpu-c": ""}}

A drain made on the dashboard (``POST /hub/api/gpu/nodes/{node}/drain``) is written here
at once, atomically (a temporary file in the same folder, then a rename, mode 0600), and
read back when the hub builds its cluster. The nodes file's own ``drain: true`` is
separate and stays where it is. The file is the hub's: a malformed or oversized one stops
the hub at start with a sentence that names it, rather than silently undraining nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from jupyterhub_gpu.errors import ConfigError

VERSION = 1
MAX_BYTES = 1 << 20  # 1 MiB: a site has dozens of nodes, notes of at most 500 characters
MAX_NOTE = 500
_FIX = "fix or remove the file (the drains in it are then lost) and start the hub again"


def decode_drains(text: str, where: str = "the drains file") -> dict[str, str]:
    """The drains in ``text``: node name -> note. ConfigError naming ``where`` if malformed."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{where} is not JSON ({e}); {_FIX}.") from None
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        raise ConfigError(f"{where} is not a drains file of version {VERSION}; {_FIX}.")
    drains = raw.get("drains")
    if not isinstance(drains, dict):
        raise ConfigError(f"{where}: 'drains' must be an object of node -> note; {_FIX}.")
    out: dict[str, str] = {}
    for node, note in drains.items():
        if not isinstance(node, str) or not node or len(node) > 253:
            raise ConfigError(f"{where}: {str(node)[:60]!r} is not a node name; {_FIX}.")
        if not isinstance(note, str) or len(note) > MAX_NOTE:
            raise ConfigError(f"{where}: the note of node {node!r} is not a short text; {_FIX}.")
        out[node] = note
    return out


def encode_drains(drains: Mapping[str, str]) -> str:
    return json.dumps({"version": VERSION, "drains": dict(sorted(drains.items()))}, indent=1)


def load_drains(path: str | os.PathLike[str]) -> dict[str, str]:
    """The drains kept in ``path``; none when the file does not exist yet."""
    file = Path(path)
    try:
        with file.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(
            f"The drains file {str(file)!r} cannot be read ({e.strerror}); give the hub's "
            "user read and write access to it, or set GPUDockerSpawner.drains_file."
        ) from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"The drains file {str(file)!r} is over {MAX_BYTES} bytes; {_FIX}.")
    return decode_drains(data.decode("utf-8", "replace"), f"The drains file {str(file)!r}")


def save_drains(path: str | os.PathLike[str], drains: Mapping[str, str]) -> None:
    """Write ``drains`` to ``path`` atomically (mode 0600); OSError if it can't be written
    (the file is then as it was)."""
    file = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(encode_drains(drains))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, file)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["decode_drains", "encode_drains", "load_drains", "save_drains"]
