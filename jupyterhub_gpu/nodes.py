"""GPU nodes as an admin declares them: a name, a Docker endpoint, an address.

Pure parsing and validation; the spawner turns a :class:`NodeSpec` into a Docker client.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .adminfiles import read_yaml
from .errors import ConfigError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_FIELDS = {"name", "docker_url", "address", "tls", "agent_url", "labels", "drain"}
_TLS_FIELDS = {"ca_cert", "client_cert", "client_key"}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    docker_url: str  # unix:///var/run/docker.sock or tcp://host:2376
    address: str  # where the hub reaches servers on this node (host networking)
    tls: Mapping[str, str] = field(default_factory=dict)  # ca_cert, client_cert, client_key
    agent_url: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    drain: bool = False  # no new servers; running ones untouched


def default_node() -> dict[str, Any]:
    """The local engine (``DOCKER_HOST`` or the default socket) as the only node."""
    return {
        "name": "local",
        "docker_url": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
        "address": "127.0.0.1",
    }


def parse_node(raw: Mapping[str, Any], where: str) -> NodeSpec:
    unknown = set(raw) - _FIELDS
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_FIELDS)}"
        )
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"{where}.name: must be letters, digits, '.', '_' or '-', got {name!r}")
    url = raw.get("docker_url")
    if not isinstance(url, str) or not url.startswith(("unix://", "tcp://", "ssh://")):
        raise ConfigError(
            f"{where} ({name}).docker_url: must be 'unix:///path' or 'tcp://host:port', got {url!r}"
        )
    address = raw.get("address")
    if not isinstance(address, str) or not address:
        raise ConfigError(f"{where} ({name}).address: the IP or hostname the hub reaches it at")
    tls = raw.get("tls") or {}
    if not isinstance(tls, Mapping) or set(tls) - _TLS_FIELDS:
        raise ConfigError(f"{where} ({name}).tls: a mapping with {sorted(_TLS_FIELDS)}")
    if url.startswith("tcp://") and not tls and not _is_loopback(url):
        raise ConfigError(
            f"{where} ({name}): a tcp:// engine on another host needs tls "
            "(ca_cert, client_cert, client_key); an unauthenticated Docker API is root for anyone"
        )
    labels = raw.get("labels") or {}
    agent = raw.get("agent_url")
    drain = raw.get("drain", False)
    if not isinstance(drain, bool):
        raise ConfigError(f"{where} ({name}).drain: must be true or false, got {drain!r}")
    return NodeSpec(
        name=name,
        docker_url=url,
        address=address,
        tls={k: str(v) for k, v in tls.items()},
        agent_url=None if agent is None else str(agent),
        labels={str(k): str(v) for k, v in labels.items()},
        drain=drain,
    )


def load_nodes_file(path: str) -> list[dict[str, Any]]:
    """The raw node entries of a nodes file (``nodes: [...]``); [] when there is no file."""
    if not path or not Path(path).exists():
        return []
    loaded = read_yaml(path, "nodes file") or {}
    if not isinstance(loaded, Mapping) or not isinstance(loaded.get("nodes", []), list):
        raise ConfigError(f"{path}: must be a mapping with a 'nodes' list")
    return list(loaded.get("nodes", []))


def parse_nodes(raw: Sequence[Mapping[str, Any]]) -> list[NodeSpec]:
    if not raw:
        raise ConfigError("nodes: declare at least one node")
    nodes = [parse_node(n, f"nodes[{i}]") for i, n in enumerate(raw)]
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"nodes: names must be unique, repeated: {dupes}")
    return nodes


def _is_loopback(url: str) -> bool:
    host = url.split("://", 1)[1].split(":", 1)[0]
    return host == "localhost" or host.startswith("127.")
