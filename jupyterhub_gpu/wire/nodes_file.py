"""GPU nodes as an admin declares them: a name, a Docker endpoint, an address.

Pure parsing and validation; the spawner turns a :class:`NodeSpec` into a Docker client.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from jupyterhub_gpu.errors import ConfigError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
#: the loudly named opt-in for an unauthenticated Docker API (throw-away test set-ups only)
INSECURE_TCP = "insecure_plaintext_docker_api"
_FIELDS = {"name", "docker_url", "address", "tls", "agent_url", "labels", "drain", INSECURE_TCP}
_TLS_FIELDS = {"ca_cert", "client_cert", "client_key"}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    docker_url: str  # unix:///var/run/docker.sock or tcp://host:2376
    address: str  # where the hub reaches servers on this node (their published ports)
    tls: Mapping[str, str] = field(default_factory=dict)  # ca_cert, client_cert, client_key
    agent_url: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    drain: bool = False  # no new servers; running ones untouched
    insecure_plaintext_docker_api: bool = False  # tcp:// without TLS, explicitly accepted

    @property
    def publish_ip(self) -> str:
        """The address servers' ports are published on: ``address`` when it is an IP,
        else every address of the node (the node firewall keeps user containers out)."""
        return self.address if _ip(self.address) is not None else "0.0.0.0"


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
    insecure = raw.get(INSECURE_TCP, False)
    if not isinstance(insecure, bool):
        raise ConfigError(f"{where} ({name}).{INSECURE_TCP}: must be true or false")
    url = raw.get("docker_url")
    tls = raw.get("tls") or {}
    _check_docker_url(url, tls, insecure, f"{where} ({name})")
    address = raw.get("address")
    if not isinstance(address, str) or not (_ip(address) or _HOST_RE.match(address)):
        raise ConfigError(
            f"{where} ({name}).address: the IP or hostname the hub reaches the node at, "
            f"got {address!r}"
        )
    labels = raw.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ConfigError(
            f"{where} ({name}).labels: a mapping of names to values (e.g. rack: b2), got {labels!r}"
        )
    agent = raw.get("agent_url")
    if agent is not None and not (
        isinstance(agent, str) and agent.startswith(("http://", "https://")) and _has_host(agent)
    ):
        raise ConfigError(
            f"{where} ({name}).agent_url: the node agent's URL, https://HOST:9450, got {agent!r}"
        )
    drain = raw.get("drain", False)
    if not isinstance(drain, bool):
        raise ConfigError(f"{where} ({name}).drain: must be true or false, got {drain!r}")
    assert isinstance(url, str)  # checked by _check_docker_url
    return NodeSpec(
        name=name,
        docker_url=url,
        address=address,
        tls={k: str(v) for k, v in tls.items()},
        agent_url=None if agent is None else str(agent),
        labels={str(k): str(v) for k, v in labels.items()},
        drain=drain,
        insecure_plaintext_docker_api=insecure,
    )


def decode_nodes_file(loaded: Any, where: str) -> list[dict[str, Any]]:
    """The raw node entries of a nodes file's YAML document (``nodes: [...]``; an empty
    document has none); ConfigError naming ``where`` if it is not of that shape."""
    loaded = loaded or {}
    if not isinstance(loaded, Mapping) or not isinstance(loaded.get("nodes", []), list):
        raise ConfigError(f"{where}: must be a mapping with a 'nodes' list")
    return list(loaded.get("nodes", []))


def parse_nodes(raw: Sequence[Mapping[str, Any]], allow_empty: bool = False) -> list[NodeSpec]:
    """The nodes, checked. None is an error unless ``allow_empty`` (a site whose nodes
    file is still empty: its nodes join later, ``jupyterhub-gpu node join``)."""
    if not raw and not allow_empty:
        raise ConfigError("nodes: declare at least one node")
    nodes = [parse_node(n, f"nodes[{i}]") for i, n in enumerate(raw)]
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"nodes: names must be unique, repeated: {dupes}")
    return nodes


def _has_host(url: str) -> bool:
    try:
        return bool(urlsplit(url).hostname)
    except ValueError:
        return False


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _check_docker_url(url: object, tls: object, insecure: bool, where: str) -> None:
    """A Docker endpoint the hub may use: a unix socket, ssh, or tcp:// with TLS client
    certificates. Plain tcp:// is root on the node for anyone who can reach the port, on
    loopback too (any process of the host, any container sharing its network), so it is
    refused unless the node says ``insecure_plaintext_docker_api: true``."""
    if not isinstance(url, str) or not url.startswith(("unix://", "tcp://", "ssh://")):
        raise ConfigError(
            f"{where}.docker_url: must be 'unix:///path', 'ssh://host' or 'tcp://host:port' "
            f"(with tls), got {url!r}"
        )
    if not isinstance(tls, Mapping) or (tls and set(tls) != _TLS_FIELDS):
        raise ConfigError(f"{where}.tls: a mapping with all of {sorted(_TLS_FIELDS)}")
    if not url.startswith("tcp://"):
        if tls:
            raise ConfigError(f"{where}.tls: only a tcp:// docker_url uses TLS, not {url!r}")
        return
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise ConfigError(f"{where}.docker_url: {url!r} is not a valid URL ({e})") from None
    if not host or port is None:
        raise ConfigError(f"{where}.docker_url: tcp:// needs a host and a port, got {url!r}")
    if not (_ip(host) or _HOST_RE.match(host)):
        raise ConfigError(f"{where}.docker_url: {host!r} is neither an IP nor a hostname")
    if not tls and not insecure:
        raise ConfigError(
            f"{where}: a tcp:// Docker engine needs tls (ca_cert, client_cert, client_key); an "
            "unauthenticated Docker API is root on the node for anyone who reaches its port, "
            "loopback included. Use the unix socket, ssh://, or TLS (docs/nodes.md)."
        )
