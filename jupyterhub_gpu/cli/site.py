"""``jupyterhub-gpu site init`` and ``site add-node``: a site's configuration laid out.

``site init`` writes, under ``--etc`` (default ``/etc/jupyterhub-gpu``):
``jupyterhub_config.py`` (every path in it absolute, into ``--etc`` and ``--state``),
``catalog.yaml`` (a copy of the shipped catalog), ``nodes.yaml`` (the one list of GPU
nodes), and ``secrets/`` (0700) with the node agents' site secret, the cookie secret and
``hub.env`` (JUPYTERHUB_CRYPT_KEY), each 0600, and an empty ``tls/`` (0700) for
``certs``. The hub serves its users over HTTPS: with ``tls/public-cert.pem`` (``certs
public`` makes it from the site's CA, for ``--hub-ip`` and each ``--public-name``), or
the admin's own certificate (``--tls-cert``/``--tls-key``: checked first, nothing
written when it would not serve those names), or plain HTTP behind the site's own TLS
proxy (``--no-tls``, on 127.0.0.1 by default). ``--state`` (default
``/var/lib/jupyterhub-gpu``, 0700) is created for what the hub writes. Every mode is
set, none left to the caller's umask. A new site is built in a temporary folder beside
``--etc`` and renamed into place: it appears whole or not at all. An existing site is
refused without ``--force``; with it, the configuration, catalog and nodes file are
rewritten and the secrets kept (a new cookie secret would log everyone out and void the
running containers' seals; a new site secret every node token).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from jupyterhub_gpu.cli.layout import (
    SECRET_MODE,
    Site,
    add_site_args,
    package_file,
    private_dir,
    render,
    site_from_args,
    write_all,
    write_atomic,
)
from jupyterhub_gpu.edges.adminfiles import load_nodes_file
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.catalog_file import default_catalog_path
from jupyterhub_gpu.wire.ldap_server import TLS_STRATEGIES, parse_ldap_server
from jupyterhub_gpu.wire.nodes_file import parse_node

AGENT_PORT = 9450
DOCKER_TLS_PORT = 2376
NODES_HEADER = """\
# The GPU nodes of this site: the one list (the hub re-reads it when it changes).
# Add one with `jupyterhub-gpu site add-node NAME --address ADDR`, then make its
# certificate with `jupyterhub-gpu certs node NAME --address ADDR` (docs/install.md).
# Fields: docs/nodes.md. `drain: true` stops new servers on a node.
"""


def node_entry(site: Site, name: str, address: str) -> dict[str, Any]:
    """A node reached over TCP+TLS (Docker) and HTTPS (its agent), with this site's
    certificates; checked by the same parser as the hub's."""
    host = f"[{address}]" if _is_ipv6(address) else address
    entry: dict[str, Any] = {
        "name": name,
        "docker_url": f"tcp://{host}:{DOCKER_TLS_PORT}",
        "address": address,
        "tls": {
            "ca_cert": str(site.ca_cert),
            "client_cert": str(site.hub_cert),
            "client_key": str(site.hub_key),
        },
        "agent_url": f"https://{host}:{AGENT_PORT}",
    }
    parse_node(entry, f"node {name}")
    return entry


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


def nodes_yaml(entries: list[dict[str, Any]]) -> str:
    return NODES_HEADER + yaml.safe_dump({"nodes": entries}, sort_keys=False)


def ldap_users(args: argparse.Namespace) -> str:
    """How the hub finds a user's entry: a search (by a search account, under a search
    base) when one is given, else the DN template under ``--ldap-base``."""
    if not args.ldap_search_base:
        if args.ldap_search_dn:
            raise ConfigError("--ldap-search-dn needs --ldap-search-base (where users are).")
        return f'ldap.bind_dn_template = ["uid={{username}},ou=people,{args.ldap_base}"]'
    lines = [
        "ldap.bind_dn_template = []  # the search below finds each user's DN",
        "ldap.lookup_dn = True",
        f"ldap.user_search_base = {args.ldap_search_base!r}",
        'ldap.user_attribute = "uid"',
    ]
    if args.ldap_search_dn:  # its password: LDAP_SEARCH_PASSWORD in secrets/hub.env
        lines.append(f"ldap.lookup_dn_search_user = {args.ldap_search_dn!r}")
    return "\n".join(lines)


def public_names(args: argparse.Namespace) -> list[str]:
    """The names users open the hub at: ``--public-name`` values, else ``--hub-ip``."""
    return list(dict.fromkeys(args.public_names or [args.hub_ip]))


#: what --bind-url may be: a scheme, an optional address, a port (JupyterHub's own form)
BIND_URL_RE = re.compile(r"https?://(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9.-]{0,253})(:[0-9]{1,5})?/?")


def public_tls(args: argparse.Namespace) -> str:
    """The configuration's lines for the hub's public address: HTTPS with the site CA's
    certificate (``certs public``), or the admin's own (``--tls-cert``/``--tls-key``,
    checked here: nothing is written when it would not serve), or plain HTTP behind the
    site's own TLS proxy (``--no-tls``). ConfigError: one sentence."""
    own = args.tls_cert or args.tls_key
    if own and not (args.tls_cert and args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together: give the certificate and its "
                          "key; nothing was written.")  # fmt: skip
    if own and args.no_tls:
        raise ConfigError("--no-tls serves plain HTTP: leave out --tls-cert and --tls-key, or "
                          "--no-tls; nothing was written.")  # fmt: skip
    if args.bind_url and not BIND_URL_RE.fullmatch(args.bind_url):
        raise ConfigError(
            f"--bind-url {args.bind_url[:80]!r} is not a URL such as https://:8000 or "
            "https://10.0.0.1:443; nothing was written."
        )
    if args.no_tls:
        bind = args.bind_url or "http://127.0.0.1:8000"
        if not bind.startswith("http://"):
            raise ConfigError(f"--bind-url {bind}: with --no-tls the hub serves http://, its "
                              "TLS proxy https://; nothing was written.")  # fmt: skip
        return (
            f"c.JupyterHub.bind_url = {bind!r}\n"
            "# no TLS here (--no-tls): the site's own TLS proxy in front of the hub serves\n"
            "# https:// to the users. check-config wants this address on loopback (the proxy\n"
            '# on this machine), or c.JupyterHub.public_url = "https://..." (the proxy\'s).'
        )
    bind = args.bind_url or "https://:8000"
    if not bind.startswith("https://"):
        raise ConfigError(f"--bind-url {bind}: the hub serves logins over HTTPS, give "
                          "https://...; or --no-tls behind your own TLS proxy; nothing was "
                          "written.")  # fmt: skip
    if own:
        from jupyterhub_gpu.cli.certs import own_certificate_problem

        cert, key = Path(args.tls_cert).absolute(), Path(args.tls_key).absolute()
        problem = own_certificate_problem(cert, key, public_names(args))
        if problem:
            raise ConfigError(problem)
        return (
            f"c.JupyterHub.bind_url = {bind!r}\n"
            "# logins over HTTPS with the site's own certificate (site init --tls-cert):\n"
            "# renew it where it came from, then restart the hub\n"
            f"c.JupyterHub.ssl_cert = {str(cert)!r}\n"
            f"c.JupyterHub.ssl_key = {str(key)!r}"
        )
    return (
        f"c.JupyterHub.bind_url = {bind!r}\n"
        "# logins over HTTPS with a certificate of the site's CA for the hub's address\n"
        "# (jupyterhub-gpu certs public; certs renew public): browsers trust it once the\n"
        "# users import tls/ca.pem (docs/install.md); or site init --tls-cert/--tls-key\n"
        'c.JupyterHub.ssl_cert = str(ETC / "tls" / "public-cert.pem")\n'
        'c.JupyterHub.ssl_key = str(ETC / "tls" / "public-key.pem")'
    )


def config_text(site: Site, args: argparse.Namespace) -> str:
    from jupyterhub_gpu.core.join import registry_address

    server = parse_ldap_server(args.ldap_server, args.ldap_tls)
    for option, dn in (("--ldap-search-dn", args.ldap_search_dn),
                       ("--ldap-search-base", args.ldap_search_base)):  # fmt: skip
        if dn and ("=" not in dn or len(dn) > 500 or any(c in dn for c in '"\n\r\0')):
            raise ConfigError(f"{option} {dn[:80]!r}: a DN such as ou=people,dc=lab,dc=edu.")
    return render(
        package_file("site", "jupyterhub_config.py.in").read_text(),
        {
            "ETC": str(site.etc),
            "STATE": str(site.state),
            "PUBLIC_TLS": public_tls(args),
            "HUB_IP": args.hub_ip,
            "REGISTRY": registry_address(args.hub_ip),
            "LDAP_HOST": server.host,
            "LDAP_PORT": str(server.port),
            "LDAP_TLS": server.tls,
            "LDAP_USERS": ldap_users(args),
            "LDAP_BASE": args.ldap_base,
            "USERS_GROUP": args.users_group,
            "ADMINS_GROUP": args.admins_group,
            "HOME_TEMPLATE": args.home_template,
        },
    )


def secret_files(site: Site) -> dict[Path, bytes]:
    """Fresh secrets: the site secret (agents' tokens), the cookie secret (hex, as
    JupyterHub reads it), the crypt key for auth_state."""
    return {
        site.site_secret: (secrets.token_urlsafe(48) + "\n").encode(),
        site.cookie_secret: (secrets.token_hex(32) + "\n").encode(),
        site.hub_env: (
            "# the hub's environment (systemd EnvironmentFile=); mode 0600\n"
            f"JUPYTERHUB_CRYPT_KEY={secrets.token_hex(32)}\n"
            "# LDAP_SEARCH_PASSWORD=\n"
        ).encode(),
    }


def site_files(site: Site, args: argparse.Namespace) -> dict[Path, tuple[bytes, int]]:
    """The configuration files (not the secrets), with their modes."""
    entries = [node_entry(site, name, address) for name, address in args.nodes]
    names = [e["name"] for e in entries]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"--node: each node once, repeated: {repeated}")
    catalog = Path(args.catalog) if args.catalog else default_catalog_path()
    try:
        catalog_bytes = catalog.read_bytes()
    except OSError as e:
        raise ConfigError(f"{catalog}: cannot read the image catalog ({e.strerror})") from None
    return {
        site.config: (config_text(site, args).encode(), 0o640),
        site.catalog: (catalog_bytes, 0o644),
        site.nodes_file: (nodes_yaml(entries).encode(), 0o644),
    }


def init(site: Site, args: argparse.Namespace) -> list[str]:
    """Lay out the site; returns what was written, one line each."""
    files = site_files(site, args)
    exists = site.etc.exists() and any(site.etc.iterdir())
    if exists and not args.force:
        held = ", ".join(sorted(p.name for p in site.etc.iterdir()))
        raise ConfigError(
            f"{site.etc} already holds a site ({held});"
            " nothing was changed. Run with --force to rewrite its configuration, catalog and"
            " nodes file (its secrets and certificates are kept)."
        )
    private_dir(site.state)
    if exists:
        fresh = {p: (data, SECRET_MODE) for p, data in secret_files(site).items() if not p.exists()}
        private_dir(site.secrets)
        private_dir(site.tls)
        write_all({**files, **fresh})
        return [f"rewrote {p}" for p in files] + [f"made the missing secret {p}" for p in fresh]
    # a new site: built whole in a temporary folder, then renamed into place
    site.etc.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=site.etc.parent, prefix=f".{site.etc.name}."))
    try:
        staging = Site(etc=tmp, state=site.state)
        private_dir(staging.secrets)
        private_dir(staging.tls)
        for path, (data, mode) in files.items():
            write_atomic(tmp / path.relative_to(site.etc), data, mode)
        for path, data in secret_files(site).items():
            write_atomic(tmp / path.relative_to(site.etc), data, SECRET_MODE)
        os.chmod(tmp, 0o755)
        os.rename(tmp, site.etc)  # onto nothing, or onto an empty folder
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [f"wrote {p}" for p in (*files, *secret_files(site))] + [f"made {site.state}"]


def add_node(site: Site, name: str, address: str) -> dict[str, Any]:
    """Append a node to the site's nodes file (rewritten whole); refuses a name that is
    already there."""
    entries = load_nodes_file(str(site.nodes_file))
    if any(e.get("name") == name for e in entries):
        raise ConfigError(
            f"{site.nodes_file} already has a node named {name!r}; nothing was changed "
            "(edit the file to change it)"
        )
    entry = node_entry(site, name, address)
    write_atomic(site.nodes_file, nodes_yaml([*entries, entry]), 0o644)
    return entry


def configured_hub_ip(site: Site) -> str:
    """The hub's address for the nodes: ``hub_connect_ip`` of the site's configuration."""
    import re

    try:
        text = site.config.read_text()
    except OSError:
        text = ""
    m = re.search(r'^c\.JupyterHub\.hub_connect_ip\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        raise ConfigError(f"{site.config} sets no c.JupyterHub.hub_connect_ip: give the hub's "
                          "address (--hub or --hub-ip)")  # fmt: skip
    return m[1]


def _node_arg(value: str) -> tuple[str, str]:
    name, sep, address = value.partition("=")
    if not sep or not name or not address:
        raise argparse.ArgumentTypeError(f"--node wants NAME=ADDRESS, got {value!r}")
    return name, address


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu site", description="Lay out a site's configuration and secrets."
    )
    sub = p.add_subparsers(dest="action", required=True)
    i = sub.add_parser("init", help="write a new site (configuration, catalog, nodes, secrets)")
    add_site_args(i)
    i.add_argument("--force", action="store_true", help="rewrite an existing site's config")
    i.add_argument(
        "--node",
        dest="nodes",
        type=_node_arg,
        action="append",
        default=[],
        metavar="NAME=ADDRESS",
        help="a GPU node (repeat); more later with `site add-node`",
    )
    i.add_argument("--hub-ip", default="127.0.0.1", help="the hub's address the nodes reach")
    i.add_argument("--bind-url", default="", help="where the hub serves its users (default "
                   "https://:8000; http://127.0.0.1:8000 with --no-tls)")  # fmt: skip
    i.add_argument("--public-name", dest="public_names", action="append", default=[],
                   metavar="NAME", help="a name (or address) users open the hub at, for its "
                   "HTTPS certificate (repeat; default: --hub-ip)")  # fmt: skip
    i.add_argument("--tls-cert", metavar="FILE", help="the hub's own HTTPS certificate (PEM, its "
                   "chain after it) instead of one from the site's CA")  # fmt: skip
    i.add_argument("--tls-key", metavar="FILE", help="its key (PEM, no password)")
    i.add_argument("--no-tls", action="store_true", help="plain HTTP, for a hub behind the "
                   "site's own TLS proxy (on this machine: the hub binds 127.0.0.1)")  # fmt: skip
    i.add_argument(
        "--ldap-server",
        default="ldap.example.org:636",
        metavar="URL",
        help="ldaps://HOST[:PORT] (LDAPS), ldap://HOST[:PORT] (StartTLS) or HOST[:PORT]",
    )
    i.add_argument(
        "--ldap-tls",
        default=None,
        choices=TLS_STRATEGIES,
        help="on_connect (LDAPS), before_bind (StartTLS) or insecure; default: the URL's",
    )
    i.add_argument("--ldap-base", default="dc=example,dc=org", metavar="DN")
    i.add_argument(
        "--ldap-search-base",
        metavar="DN",
        help="find users by a search under this DN (uid=USER), not by ou=people,BASE",
    )
    i.add_argument(
        "--ldap-search-dn",
        metavar="DN",
        help="the account that searches (its password: LDAP_SEARCH_PASSWORD in "
        "secrets/hub.env); default: an anonymous search",
    )
    i.add_argument("--users-group", default="gpu-users", help="the LDAP group that may log in")
    i.add_argument("--admins-group", default="hub-admins", help="the LDAP group of admins")
    i.add_argument("--home-template", default="/mnt/shared/home/{username}")
    i.add_argument("--catalog", help="the catalog to copy (default: the shipped one)")
    a = sub.add_parser("add-node", help="add a GPU node to the site's nodes file")
    add_site_args(a)
    a.add_argument("name")
    a.add_argument("--address", required=True, help="the IP or host name the hub reaches")
    args = p.parse_args(argv)
    site = site_from_args(args)
    try:
        if args.action == "add-node":
            entry = add_node(site, args.name, args.address)
            print(
                f"added {entry['name']} to {site.nodes_file}; its certificate: "
                f"jupyterhub-gpu certs node {entry['name']} --address {entry['address']}"
            )
            return 0
        for line in init(site, args):
            print(line)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{e.filename}: {e.strerror}; nothing was changed", file=sys.stderr)
        return 1
    public = "" if args.tls_cert or args.no_tls else (
        f", certs public --address {args.hub_ip}"
        + "".join(f" --dns {n}" for n in public_names(args) if n != args.hub_ip)
    )  # fmt: skip
    print(
        f"next: jupyterhub-gpu certs ca --etc {site.etc}, then certs hub{public} and certs node "
        f"NAME; jupyterhub-gpu check-config --etc {site.etc} --state {site.state}"
    )
    return 0
