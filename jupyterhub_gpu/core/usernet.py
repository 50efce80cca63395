"""The user bridge network of a node: single-user servers never share a network namespace
with the node or with each other.

Each node gets one Docker bridge network for user servers (``GPUCluster.user_network``)
with inter-container traffic off, IPv6 off, and a fixed bridge interface name
(``GPUCluster.user_bridge``), so the node firewall (``scripts/node-firewall.sh``) can
name it. A server's port is published on the node's address to a port the engine picks;
the hub reads it back. This module holds the pure rules;
:class:`~jupyterhub_gpu.hub.cluster.Cluster`
creates or checks the network on each node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

ICC = "com.docker.network.bridge.enable_icc"
BRIDGE_NAME = "com.docker.network.bridge.name"
#: IPv6 on the network. docker-py sends no ``EnableIPv6`` when asked for False, so an
#: engine whose ``default-network-opts`` turn IPv6 on would give the network IPv6; this
#: option says off explicitly (Docker 27+ reads it; older engines keep it as an option).
IPV6 = "com.docker.network.enable_ipv6"
_IFACE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # Linux IFNAMSIZ - 1


def bridge_name_problem(bridge: str) -> str | None:
    """Why ``bridge`` can't name a Linux interface, or None."""
    if _IFACE_RE.match(bridge):
        return None
    return f"{bridge!r} is not a Linux interface name (1-15 letters, digits, '_', '.', '-')"


def network_options(bridge: str) -> dict[str, str]:
    """The driver options of a user network: no container-to-container traffic, no IPv6
    (the node firewall filters IPv4 only)."""
    return {ICC: "false", BRIDGE_NAME: bridge, IPV6: "false"}


def network_problem(info: Mapping[str, Any], name: str, bridge: str) -> str | None:
    """Why an existing Docker network (``docker network inspect`` JSON) must not carry user
    servers, or None when it is fit: a bridge with ICC off on the expected interface,
    without IPv6."""
    driver = info.get("Driver")
    if driver != "bridge":
        return f"network {name!r} has driver {driver!r}; user servers need a 'bridge' network"
    options = info.get("Options") or {}
    if options.get(ICC) != "false":
        return (
            f"network {name!r} lets containers reach each other ({ICC} is not 'false'); "
            f"remove it (docker network rm {name}) and the hub creates it as it should be"
        )
    if options.get(BRIDGE_NAME) != bridge:
        return (
            f"network {name!r} is on bridge {options.get(BRIDGE_NAME)!r}, but the node firewall "
            f"guards {bridge!r} (GPUCluster.user_bridge); remove the network or fix the "
            "setting"
        )
    if info.get("EnableIPv6"):
        return (
            f"network {name!r} has IPv6 enabled, and the node firewall filters IPv4 only (a "
            "user's container would reach the node and the site over IPv6); remove it "
            f"(docker network rm {name}) and the hub creates it again without IPv6; if the "
            'engine turns IPv6 on for new networks, set "ipv6": false and drop '
            f'{IPV6} from "default-network-opts" in /etc/docker/daemon.json'
        )
    if info.get("Internal"):
        return f"network {name!r} is internal: servers on it could not reach the hub's API"
    return None
