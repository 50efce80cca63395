"""The admins' node drains, kept in a small JSON file so that they survive a hub restart.

    {"version": 1, "drains": {"gpu-b": "new power supply today", "gpu-c": ""}}

A drain made on the dashboard (``POST /hub/api/gpu/nodes/{node}/drain``) is written here
at once, atomically (a temporary file in the same folder, then a rename, mode 0600), and
read back when the hub builds its cluster, both by :mod:`jupyterhub_gpu.edges.files`
(this module only encodes and decodes). The nodes file's own ``drain: true`` is separate
and stays where it is. The file is the hub's: a malformed or oversized one stops
the hub at start with a sentence that names it, rather than silently undraining nodes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from jupyterhub_gpu.errors import ConfigError

VERSION = 1
MAX_BYTES = 1 << 20  # 1 MiB: a site has dozens of nodes, notes of at most 500 characters
MAX_NOTE = 500
_FIX = "fix or remove the file (the drains in it are then lost) and start the hub again"


def decode_drains(data: str | bytes, where: str = "the drains file") -> dict[str, str]:
    """The drains in ``data``: node name -> note. ConfigError naming ``where`` if it is
    malformed or (bytes, as read from the file) over :data:`MAX_BYTES`; bytes are UTF-8,
    an undecodable one read as U+FFFD."""
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            raise ConfigError(f"{where} is over {MAX_BYTES} bytes; {_FIX}.")
        text = data.decode("utf-8", "replace")
    else:
        text = data
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


__all__ = ["MAX_BYTES", "decode_drains", "encode_drains"]
