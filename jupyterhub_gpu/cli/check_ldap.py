"""``jupyterhub-gpu check-ldap USER``: does the hub's LDAP configuration find this user?

It loads the site's configuration as the hub does (``LDAP_SEARCH_PASSWORD`` from
``secrets/hub.env`` when the environment has none), makes the hub's authenticator from
it, binds as the hub would before a login (the search account, or anonymously), finds the
user's entry (the search under ``user_search_base``, or each ``bind_dn_template``), reads
its POSIX identity and groups, and says in one line what it found or what is wrong:
the server unreachable, the TLS handshake refused, the search account refused, no such
entry, no ``uidNumber``, not in an allowed group. Without a search account, where the
server hides entries from anonymous searches, ``--password-stdin`` binds as the user
(the login's own bind). Exit status 0 when the user may log in, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from jupyterhub_gpu.cli.layout import DEFAULT_ETC, Site
from jupyterhub_gpu.wire.ldap_server import LDAPServer

#: the hub's authenticator (loaded by name: the cli layer does not import the hub's code)
AUTHENTICATOR = "jupyterhub_gpu.hub.auth.ldap:GPULDAPAuthenticator"
MAX_USER = 256


def _search_password(site: Site) -> None:
    """LDAP_SEARCH_PASSWORD from the hub's environment file, as the hub's unit sets it."""
    if os.environ.get("LDAP_SEARCH_PASSWORD") or not site.hub_env.is_file():
        return
    for line in site.hub_env.read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name == "LDAP_SEARCH_PASSWORD" and value:
            os.environ["LDAP_SEARCH_PASSWORD"] = value


def authenticator(config_path: Path) -> Any:
    """The hub's LDAP authenticator, configured from the site's file."""
    from traitlets.config.loader import PyFileConfigLoader

    loader = PyFileConfigLoader(config_path.name, str(config_path.parent))
    config = loader.load_config()
    module, _, name = AUTHENTICATOR.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(config=config)


def _server(auth: Any) -> str:
    tls = getattr(auth.tls_strategy, "name", str(auth.tls_strategy))
    return LDAPServer(host=auth.server_address, port=auth.server_port, tls=tls).url


def _connect(auth: Any, server: str) -> tuple[Any, str]:
    """(a bound connection, '') or (None, what is wrong)."""
    from ldap3.core.exceptions import LDAPException

    who = auth.lookup_dn_search_user or ""
    try:
        conn = auth.get_connection(who, auth.lookup_dn_search_password or "")
    except LDAPException as e:
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        if any(w in reason.lower() for w in ("ssl", "tls", "certificate", "handshake")):
            return None, (
                f"the TLS handshake with {server} failed ({reason}): install the CA that "
                "signed the LDAP server's certificate on the hub (update-ca-certificates) and "
                "check that the server's name is on that certificate."
            )
        return None, (
            f"cannot reach the LDAP server at {server} ({reason}): check its name and port "
            "(site init --ldap-server) and that the hub may reach it."
        )
    if conn is None and who:
        return None, (
            f"{server} refused the search account {who}: check LDAP_SEARCH_PASSWORD in the "
            "hub's environment (secrets/hub.env)."
        )
    if conn is None:
        return None, (
            f"{server} refuses anonymous searches: set a search account (site init "
            "--ldap-search-dn DN, its password as LDAP_SEARCH_PASSWORD in secrets/hub.env)."
        )
    return conn, ""


def _bind_as_user(auth: Any, username: str, password: str, server: str) -> tuple[Any, str, str]:
    """(a connection bound as the user, their DN, '') or (None, '', what is wrong): the
    login's own bind, for a site without a search account."""
    from ldap3.core.exceptions import LDAPException

    tried = []
    for template in auth.bind_dn_template:
        dn = template.format(username=username)
        try:
            conn = auth.get_connection(dn, password)
        except LDAPException as e:
            reason = " ".join(str(e).split())[:200] or type(e).__name__
            return None, "", f"cannot reach the LDAP server at {server} ({reason}): check "
            "its name and port (site init --ldap-server) and that the hub may reach it."
        if conn is not None:
            return conn, dn, ""
        tried.append(dn)
    return (
        None,
        "",
        (
            f"{server} refused {' and '.join(tried)} with that password: check the password, "
            "the user name and the base (site init --ldap-base)."
        ),
    )


def _find(auth: Any, conn: Any, username: str, server: str) -> tuple[str, str]:
    """(the user's DN, '') or ('', what is wrong)."""
    import ldap3
    from ldap3.utils.conv import escape_filter_chars

    if auth.lookup_dn:
        search = auth.lookup_dn_search_filter.format(
            login_attr=auth.user_attribute, login=escape_filter_chars(username)
        )
        conn.search(auth.user_search_base, search, ldap3.SUBTREE, attributes=[])
        if len(conn.entries) == 1:
            return str(conn.entries[0].entry_dn), ""
        if len(conn.entries) > 1:
            return "", (
                f"{len(conn.entries)} entries under {auth.user_search_base} match {search} "
                f"on {server}: set GPULDAPAuthenticator.user_attribute to a unique one."
            )
        return "", (
            f"no entry under {auth.user_search_base} matches {search} on {server}: check "
            "the user name, the search base (site init --ldap-search-base) and "
            "GPULDAPAuthenticator.user_attribute."
        )
    tried = []
    for template in auth.bind_dn_template:
        dn = template.format(username=username)
        conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=[])
        if len(conn.entries) == 1:
            return dn, ""
        tried.append(dn)
    if not auth.lookup_dn_search_user:
        return "", (
            f"no entry {' or '.join(tried)} that an anonymous search sees on {server}: give "
            "the user's password (--password-stdin) to bind as the login does, or set a "
            "search account (site init --ldap-search-dn)."
        )
    return "", (
        f"no entry {' or '.join(tried)} on {server}: check the user name and the base "
        "(site init --ldap-base), or find users by a search (--ldap-search-base)."
    )


def check_user(auth: Any, username: str, password: str = "") -> tuple[bool, str]:
    """(may this user log in, the one line that says what was found or what is wrong);
    with ``password`` (and no search account), bind as the user, as a login does."""
    refusal = auth.username_refusal(username)
    if refusal:
        return False, f"{username[:64]!r}: {refusal}"
    server = _server(auth)
    if password and not auth.lookup_dn:
        conn, dn, problem = _bind_as_user(auth, username, password, server)
    else:
        conn, problem = _connect(auth, server)
        dn = ""
    if conn is None:
        return False, f"{username}: {problem}"
    try:
        if not dn:
            dn, problem = _find(auth, conn, username, server)
        if not dn:
            return False, f"{username}: {problem}"
        found = auth._read_identity(conn, dn)
    finally:
        conn.unbind()
    groups = [name for name, _, _ in found.groups]
    said = (
        f"{username}: {dn} on {server}, uid {found.uid_number}, gid {found.gid_number}, "
        f"groups: {', '.join(groups) or 'none'}"
    )
    if found.uid_number is None and auth.fallback_uid is None:
        return False, (
            f"{said}; the entry has no uidNumber, so the login is refused: give it one, "
            "or set GPULDAPAuthenticator.fallback_uid."
        )
    allowed = list(auth.allowed_groups or [])
    mine = {g.lower() for g in groups} | {d.lower() for _, d, _ in found.groups}
    if allowed and not any(g.lower() in mine for g in allowed):
        return False, (
            f"{said}; not in an allowed group ({', '.join(allowed)}), so the login is "
            "refused: add the user to one."
        )
    return True, f"{said}; this user may log in."


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu check-ldap",
        description="Bind as the hub does and look one user up in LDAP: one line says "
        "what was found or what is wrong (no password is asked).",
    )
    p.add_argument("user", help="the login name to look up")
    p.add_argument("--etc", type=Path, default=DEFAULT_ETC, help=f"default {DEFAULT_ETC}")
    p.add_argument("--config", type=Path, help="default: ETC/jupyterhub_config.py")
    p.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the user's password from the first line of stdin and bind as the user "
        "(for a site without a search account)",
    )
    args = p.parse_args(argv)
    password = sys.stdin.readline(1024).rstrip("\r\n") if args.password_stdin else ""
    if len(args.user) > MAX_USER:
        print(f"the user name is longer than {MAX_USER} characters.", file=sys.stderr)
        return 2
    site = Site(etc=args.etc.absolute(), state=Path("/nonexistent"))
    config = (args.config or site.config).absolute()
    if not config.is_file():
        print(f"{config} does not exist: give the site's --etc or --config.", file=sys.stderr)
        return 2
    _search_password(site)
    try:
        auth = authenticator(config)
    except Exception as e:  # the admin's file: say what it raised, in one line
        said = " ".join(str(e).split())[:300] or type(e).__name__
        print(f"{config}: {said}; run jupyterhub-gpu check-config.", file=sys.stderr)
        return 2
    ok, line = check_user(auth, args.user, password)
    print(line, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1
