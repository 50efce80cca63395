"""What ``check-config`` finds in a loaded configuration's sections and values, beyond
what ``check_config(c)`` refuses at the hub's start.

- :func:`section_problems`: a section (``c.GPUDockerSpawnr``) that no class the hub runs
  reads, and a key of a known class's section that neither it nor a class extending it
  has (``c.Spawner.cpu_limitt``: traitlets gives a parent's section to its subclasses, so
  ``c.Spawner.image`` is DockerSpawner's ``image``). The classes are JupyterHub's (with
  every installed spawner and authenticator), ours, and their bases.
- :func:`plain_http_problems`: the hub serving its logins over plain HTTP on an address
  other machines reach (no ``ssl_cert``, no TLS proxy named by an https ``public_url``).
- :func:`placeholder_problems`: values left as the examples' placeholders: an LDAP
  server or a host under ``example.org``/``.com``/``.net``, ``.example`` or ``.invalid``
  (RFC 2606), and a loopback hub address that remote GPU nodes cannot reach.

Each problem is one sentence with the line of the file when it can be found, and what to
put instead.
"""

from __future__ import annotations

import difflib
import importlib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: our classes whose sections a site's configuration may set (besides JupyterHub's)
OUR_CLASSES = (
    "jupyterhub_gpu.hub.spawner:GPUDockerSpawner",
    "jupyterhub_gpu.hub.cluster_settings:GPUCluster",
    "jupyterhub_gpu.hub.jobs:GPUJobs",
    "jupyterhub_gpu.hub.prepull:PrePuller",
    "jupyterhub_gpu.hub.auth.ldap:GPULDAPAuthenticator",
    "jupyterhub_gpu.edges.agents:AgentClient",
    "jupyterhub_gpu.services.culler.app:GPUIdleCuller",
    "jupyterhub_gpu.services.agent.app:GPUAgent",
    "jupyterhub_gpu.hub.saved_images:SavedImages",
    "jupyterhub_gpu.hub.sharing:GPUSharing",
)
#: RFC 2606 names: examples, never a lab's server
PLACEHOLDER_DOMAINS = ("example.org", "example.com", "example.net")
PLACEHOLDER_TLDS = ("example", "invalid")
LDAP_SECTIONS = ("GPULDAPAuthenticator", "LDAPAuthenticator")


def known_classes() -> dict[str, type]:
    """Every configurable class the hub may run, by name: JupyterHub's own list (it holds
    the installed spawners and authenticators), ours, and all their bases."""
    from jupyterhub.app import JupyterHub
    from traitlets.config import Configurable

    classes: list[type] = list(JupyterHub().classes)
    for where in OUR_CLASSES:
        module, _, name = where.partition(":")
        classes.append(getattr(importlib.import_module(module), name))
    found: dict[str, type] = {}
    for cls in classes:
        for base in cls.__mro__:
            if isinstance(base, type) and issubclass(base, Configurable):
                found.setdefault(base.__name__, base)
    return found


def _keys_read(cls: type, classes: Iterable[type]) -> set[str]:
    """The keys a section named for ``cls`` may hold: its settings, and those of every
    class extending it (they read its section too)."""
    keys: set[str] = set()
    for other in classes:
        if issubclass(other, cls):
            keys.update(other.class_traits(config=True))  # type: ignore[attr-defined]
    return keys


def line_of(text: str, needle: str, *, last: bool = True) -> str:
    """``, line N`` for the last (the one in effect) or first line of ``text`` holding
    ``needle`` as a whole name, else ''."""
    pattern = re.compile(re.escape(needle) + r"(?![\w])")
    lines = [n for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    return f", line {lines[-1] if last else lines[0]}" if lines else ""


def section_problems(config: Any, config_path: Path, text: str, said: str) -> list[str]:
    """Unknown sections and unknown keys of known ones; ``said`` (the problems already
    found) keeps a key that ``check_config`` refused from being named twice."""
    classes = known_classes()
    found: list[str] = []
    for section in sorted(config):
        if not section[:1].isupper():
            continue
        cls = classes.get(section)
        if cls is None:
            close = difflib.get_close_matches(section, sorted(classes), n=1)
            hint = f"did you mean c.{close[0]}? " if close else ""
            at = line_of(text, f"c.{section}", last=False)
            found.append(
                f"{config_path}{at}: c.{section} is not a class "
                f"the hub runs, so none of its settings is read: {hint}fix the name, or "
                "remove its lines."
            )
            continue
        known = _keys_read(cls, classes.values())
        for key in sorted(config[section]):
            if key[:1].isupper() or key in known or f"c.{section}.{key} is not" in said:
                continue
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"did you mean c.{section}.{close[0]}? " if close else ""
            found.append(
                f"{config_path}{line_of(text, f'{section}.{key}')}: c.{section}.{key} is not "
                f"a setting of {section}: {hint}fix the key, or remove the line."
            )
    return found


def placeholder_host(host: str) -> bool:
    """An example name (RFC 2606), never a real server."""
    host = host.lower().rstrip(".")
    return host.rpartition(".")[2] in PLACEHOLDER_TLDS or any(
        host == d or host.endswith("." + d) for d in PLACEHOLDER_DOMAINS
    )


def loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host(value: str) -> str:
    if "://" in value:
        return urlsplit(value).hostname or ""
    return value


def _hub_address(hub: Mapping[str, Any]) -> tuple[str, str]:
    """(the address the nodes' servers call the hub's API at, the setting it comes from)."""
    if hub.get("hub_connect_url"):
        return _host(str(hub["hub_connect_url"])), "c.JupyterHub.hub_connect_url"
    if hub.get("hub_connect_ip"):
        return str(hub["hub_connect_ip"]), "c.JupyterHub.hub_connect_ip"
    if hub.get("hub_bind_url"):
        host = _host(str(hub["hub_bind_url"]))
        if host not in ("", "0.0.0.0", "::"):
            return host, "c.JupyterHub.hub_bind_url"
        return "", ""
    return str(hub.get("hub_ip") or "127.0.0.1"), "c.JupyterHub.hub_ip (its default)"


def placeholder_problems(
    config: Any,
    config_path: Path,
    text: str,
    nodes: Iterable[tuple[str, Mapping[str, Any]]],
) -> list[str]:
    """Example hosts and a loopback hub address with remote nodes, one sentence each."""
    found: list[str] = []
    for section in LDAP_SECTIONS:
        ldap = config[section] if section in config else {}  # noqa: SIM401 (get adds it)
        address = str(ldap.get("server_address", ""))
        if address and placeholder_host(_host(address)):
            found.append(
                f"{config_path}{line_of(text, 'server_address')}: c.{section}.server_address "
                f"is {address!r}, an example name: set your LDAP server's host name (e.g. "
                "jupyterhub-gpu site init --force --ldap-server ldaps://ldap.your.lab), then "
                "check it with jupyterhub-gpu check-ldap USER."
            )
    remote: list[str] = []
    for where, node in nodes:
        address = str(node.get("address") or "")
        if placeholder_host(address):
            found.append(
                f"{where}: node {node.get('name')!r} has the example address {address!r}: "
                "put the IP or host name the hub reaches that node at."
            )
        elif address and not loopback(address):
            remote.append(str(node.get("name")))
    hub = config["JupyterHub"] if "JupyterHub" in config else {}  # noqa: SIM401
    host, setting = _hub_address(hub)
    if remote and host and loopback(host):
        found.append(
            f"{config_path}{line_of(text, setting.split()[0][2:])}: {setting} is {host}, "
            f"which the GPU nodes ({', '.join(remote)}) cannot reach: set "
            "c.JupyterHub.hub_connect_ip to the hub's address on the nodes' network (the "
            "source address that `ip route get NODE_ADDRESS` shows on the hub)."
        )
    elif host and placeholder_host(host):
        found.append(
            f"{config_path}{line_of(text, setting.split()[0][2:])}: {setting} is {host!r}, "
            "an example name: set the hub's address on the nodes' network."
        )
    return found


def plain_http_problems(config: Any, config_path: Path, text: str, etc: Path) -> list[str]:
    """The hub's logins on plain HTTP at an address that is not loopback: passwords and
    cookies cross the network readable. Fine behind a TLS proxy: on this machine (bind to
    loopback), or elsewhere when ``public_url`` names its https:// address."""
    hub = config["JupyterHub"] if "JupyterHub" in config else {}  # noqa: SIM401
    if hub.get("ssl_cert"):
        return []
    bind = str(hub.get("bind_url") or "http://:8000")
    scheme, host = urlsplit(bind).scheme, urlsplit(bind).hostname or ""
    if scheme not in ("http", "https") or loopback(host):
        return []  # http+unix://: a socket of this machine
    if str(hub.get("public_url") or "").startswith("https://"):
        return []
    where = host or "every address of this machine"
    at = line_of(text, "JupyterHub.bind_url")
    return [
        f"{config_path}{at}: the hub serves its logins over plain HTTP "
        f"on {where} ({bind}), so passwords cross the network readable: serve HTTPS "
        f"(jupyterhub-gpu certs public --address HUB_IP --etc {etc}, then set "
        "c.JupyterHub.ssl_cert and ssl_key to its tls/public-cert.pem and public-key.pem), or, "
        "behind your own TLS proxy, bind to 127.0.0.1 or set c.JupyterHub.public_url = "
        '"https://..." (the proxy\'s address).'
    ]
