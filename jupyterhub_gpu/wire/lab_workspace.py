"""JupyterLab's workspace file, read for one thing: the notebooks that were open.

JupyterLab keeps each workspace as JSON in the user's home
(``~/.jupyter/lab/workspaces/*.jupyterlab-workspace``): ``{"data": {"notebook:a.ipynb":
{"data": {"path": "a.ipynb", "factory": "Notebook"}}, ...}, "metadata": {"id": ...}}``.
After a cull the spawn form lists them (JupyterLab reopens them at the next start; their
kernels' variables are gone). The file is the user's: read bounded by
:mod:`jupyterhub_gpu.edges.workspaces`, decoded here with every name bounded, nothing
else taken from it. Bad text decodes as no notebooks.
"""

from __future__ import annotations

import json
from typing import Any

MAX_FILE = 256 << 10  # bytes of a workspace file read at most
MAX_NOTEBOOKS = 20
MAX_PATH = 200  # characters of one notebook's path shown


def decode_open_notebooks(text: str | bytes) -> tuple[str, ...]:
    """The paths of the notebooks open in a workspace, in the file's order, at most
    :data:`MAX_NOTEBOOKS`, each at most :data:`MAX_PATH` characters (longer ones cut with
    an ellipsis), control characters dropped."""
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError):
        return ()
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        return ()
    found: list[str] = []
    for key, value in entries.items():
        if not (isinstance(key, str) and key.startswith("notebook:")):
            continue
        inner = value.get("data") if isinstance(value, dict) else None
        path = inner.get("path") if isinstance(inner, dict) else None
        if not isinstance(path, str):
            path = key[len("notebook:") :]
        path = "".join(c for c in path if c.isprintable()).strip()
        if not path or path in found:
            continue
        found.append(path if len(path) <= MAX_PATH else path[: MAX_PATH - 1] + "…")
        if len(found) >= MAX_NOTEBOOKS:
            break
    return tuple(found)
