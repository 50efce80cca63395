"""The DNS resolvers a node's containers use, read from the node's files, for the node
firewall (``jupyterhub-gpu firewall``): user containers resolve names through Docker's
embedded DNS, which forwards from the container's network namespace, across the user
bridge; a resolver on a private address would otherwise be cut by the firewall.

Docker's rule: the daemon's ``dns`` setting (daemon.json) when set, else the host's
``/etc/resolv.conf``; when that names only loopback resolvers (systemd-resolved's stub,
127.0.0.53), the real ones in ``/run/systemd/resolve/resolv.conf``. Loopback resolvers are
left out (Docker reaches those from the host), and so is IPv6 (the user network has none).
"""

from __future__ import annotations

import ipaddress
import json

MAX_RESOLVERS = 8  # resolv.conf's own limit is 3; a few more for daemon.json


def nameservers(resolv_conf: str) -> list[str]:
    """The ``nameserver`` addresses of a resolv.conf, in order."""
    found = []
    for line in resolv_conf.splitlines()[:1000]:
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] == "nameserver":
            found.append(words[1].split("%", 1)[0])
    return found


def docker_dns(daemon_json: str) -> list[str]:
    """daemon.json's ``dns`` list; [] when unset or unreadable (Docker would refuse it)."""
    try:
        loaded = json.loads(daemon_json or "{}")
    except ValueError:
        return []
    dns = loaded.get("dns") if isinstance(loaded, dict) else None
    return [str(d) for d in dns] if isinstance(dns, list) else []


def _ipv4(address: str) -> ipaddress.IPv4Address | None:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    return ip if isinstance(ip, ipaddress.IPv4Address) else None


def container_resolvers(etc_resolv: str, systemd_resolv: str, daemon_json: str) -> list[str]:
    """The IPv4 resolvers the node's containers reach across the user bridge."""
    chosen = docker_dns(daemon_json)
    if not chosen:
        chosen = nameservers(etc_resolv)
        if all((ip := _ipv4(a)) is not None and ip.is_loopback for a in chosen):
            chosen = nameservers(systemd_resolv) or chosen
    found: list[str] = []
    for address in chosen:
        ip = _ipv4(address)
        if ip is not None and not ip.is_loopback and str(ip) not in found:
            found.append(str(ip))
    return found[:MAX_RESOLVERS]
