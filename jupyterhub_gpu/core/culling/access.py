"""How the culler reaches one single-user server, and with which credential (pure, no I/O).

A single-user server is its user's process: every header it receives, its user can record
(a ``jupyter_server_config.py`` in her home is enough). So the culler sends a server only
a credential that server already holds: its own API token, which JupyterHub gives it as
``$JUPYTERHUB_API_TOKEN`` (``Spawner.api_token``, role ``server``: ``access:servers`` on
that one server and ``users:activity`` of its owner) and which the spawner records in its
state under :data:`SERVER_TOKEN_KEY`. The culler's own hub token (``delete:servers``,
``admin:server_state``, ...) never leaves for a server. A server whose state holds no
token is not read at all: its kernels are unknown, and unknown keeps a server (up to
``max_age``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The spawner state key holding the server's own API token (GPUDockerSpawner.get_state).
SERVER_TOKEN_KEY = "server_token"


@dataclass(frozen=True)
class ServerAccess:
    """Where the culler reads one server's ``/api/kernels`` and ``/api/status``, and the
    only token it may send there (kept out of ``repr``, hence out of logs)."""

    url: str
    token: str = field(repr=False)


def server_url(server: Mapping[str, Any], proxy_url: str) -> str:
    """The server's own URL from its spawner state (``server_url``, bypassing the proxy),
    else its ``url`` path behind ``proxy_url``."""
    state = server.get("state")
    if isinstance(state, Mapping) and isinstance(state.get("server_url"), str):
        return str(state["server_url"])
    return proxy_url.rstrip("/") + str(server.get("url") or "/")


def server_token(server: Mapping[str, Any]) -> str | None:
    """The server's own API token from its spawner state, or None if it has none."""
    state = server.get("state")
    if not isinstance(state, Mapping):
        return None
    token = state.get(SERVER_TOKEN_KEY)
    return token if isinstance(token, str) and token.strip() else None


def server_access(server: Mapping[str, Any], proxy_url: str) -> ServerAccess | None:
    """How to read this server (a hub server model with ``state``): its URL and its own
    token; None when its state holds no token, and then it must not be read."""
    token = server_token(server)
    if token is None:
        return None
    return ServerAccess(server_url(server, proxy_url), token)
