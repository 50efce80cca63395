"""Which node agents there are: the hub's one list of nodes, told to the services that read
the agents (the idle culler), so that a node's name and agent URL are written in one place.

    GET /hub/api/gpu/agents   (scope custom:gpu-agents:read)
    {"loaded": true, "agents": {"gpu-a": "https://10.0.0.11:9450", "gpu-b": ...}}

``loaded`` is false until the hub has read its nodes (its first spawn form, spawn or
server poll after a start): the list is then empty, and a reader keeps what it had. The
URLs are not secrets; each agent's token is derived from the site secret by whoever holds
it (:mod:`jupyterhub_gpu.core.tokens`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from jupyterhub_gpu.errors import ProbeError

MAX_AGENTS = 10_000
MAX_NAME = 253
MAX_URL = 2048


def encode_agent_list(nodes: Iterable[tuple[str, str | None]], loaded: bool) -> dict[str, Any]:
    """The answer for ``(name, agent_url)`` pairs; nodes without an agent are left out."""
    return {"loaded": loaded, "agents": {name: url for name, url in nodes if url}}


def decode_agent_list(raw: object) -> tuple[bool, dict[str, str]]:
    """``(loaded, {node: agent URL})`` from the hub's answer; ProbeError naming the field
    when it is not one."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("loaded"), bool):
        raise ProbeError("the hub's agent list is not an object with a boolean 'loaded'")
    agents = raw.get("agents")
    if not isinstance(agents, Mapping) or len(agents) > MAX_AGENTS:
        raise ProbeError("the hub's agent list: 'agents' must be an object of node -> URL")
    out: dict[str, str] = {}
    for name, url in agents.items():
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise ProbeError(f"the hub's agent list: {str(name)[:60]!r} is not a node name")
        if not isinstance(url, str) or len(url) > MAX_URL or not _http(url):
            raise ProbeError(f"the hub's agent list: the URL of node {name!r} is not http(s)")
        out[name] = url
    return bool(raw["loaded"]), out


def _http(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


__all__ = ["decode_agent_list", "encode_agent_list"]
