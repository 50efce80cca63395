"""LDAP login that never blocks the hub, with the user's POSIX identity in ``auth_state``.

``ldapauthenticator`` 2.0 calls ldap3 synchronously inside ``authenticate``, so one slow
or frozen LDAP server freezes every page of the hub (its issue #124: 90-120 s).
:class:`GPULDAPAuthenticator` keeps all of ldapauthenticator's behaviour (bind templates,
``lookup_dn``, ``search_filter``, ``allowed_groups``, escaping) but:

- runs the whole LDAP conversation in a thread pool (``executor_threads``), as
  JupyterHub's ``PAMAuthenticator`` does, so the event loop keeps serving other users;
- bounds it by ``ldap_timeout``: ldap3's connect and receive timeouts free the thread,
  and an overall ``asyncio.wait_for`` answers the user; a timeout or an unreachable server
  is logged as a warning and the login page says the sign-in service is not answering;
- refuses hostile usernames (LDAP filter/DN metacharacters, NUL, control characters)
  before any LDAP call, on top of ldapauthenticator's escaping;
- reads ``uidNumber``, ``gidNumber``, ``homeDirectory`` and every group the user belongs
  to (under ``group_search_base``) into ``auth_state`` (keys documented in
  :mod:`jupyterhub_gpu.core.identity`), refusing an account without a usable uid unless
  the admin set ``fallback_uid``;
- adds ``admin_groups`` (group names or DNs) and, with ``manage_groups``, mirrors the
  LDAP groups into JupyterHub groups;
- validates the server's certificate and host name over TLS by default
  (``validate=ssl.CERT_REQUIRED``; ldap3's own default, which ldapauthenticator passes on,
  is ``CERT_NONE``: any man in the middle would get the passwords). An admin may still set
  ``validate`` in ``tls_kwargs``.

Passwords (the user's and ``lookup_dn_search_password``) are never logged.

With ``ssh_public_key_attribute`` set (``sshPublicKey``, the openssh-lpk schema),
:meth:`GPULDAPAuthenticator.ssh_public_keys` reads a user's SSH keys for the SSH gateway
(docs/ssh.md), bound as the search account (``lookup_dn_search_user``), or anonymously
without one: never with a user's password.
"""

from __future__ import annotations

import asyncio
import math
import re
import ssl
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import ldap3
from ldap3.core.exceptions import (
    LDAPBindError,
    LDAPCertificateError,
    LDAPException,
    LDAPSocketOpenError,
    LDAPStartTLSError,
)
from ldap3.core.tls import Tls
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn, parse_dn
from ldapauthenticator import LDAPAuthenticator
from ldapauthenticator.ldapauthenticator import TlsStrategy
from tornado import web
from traitlets import Any as AnyTrait
from traitlets import Float, Integer, Set, TraitError, Unicode, default, validate

from jupyterhub_gpu.core.identity import IdentityError, identity_from_auth_state
from jupyterhub_gpu.core.ssh.keys import MAX_LDAP_KEY_BYTES, MAX_LDAP_KEYS, bounded_key_values

__all__ = ["UNAVAILABLE_MESSAGE", "GPULDAPAuthenticator", "not_allowed_message"]

#: Shown on the login page when LDAP times out or cannot be reached. The same for every
#: user, so it reveals nothing about accounts.
UNAVAILABLE_MESSAGE = (
    "The sign-in service is not answering right now, so you could not be logged in. "
    "Please try again in a minute; if this keeps happening, tell your administrator."
)


def not_allowed_message(allowed_groups: list[str] | None) -> str:
    """The login page's sentence for a user whose password LDAP accepted but who may not
    use this hub: the groups that would let them in, by name (a DN's first value: never
    the DN). Only someone with the right password reads it; a wrong password or an unknown
    user still reads JupyterHub's "Invalid username or password"."""
    names = [_group_name(g) for g in allowed_groups or ()]
    if not names:
        why = ""
    elif len(names) == 1:
        why = f" (not in the group {names[0]})"
    else:
        why = f" (not in any of the groups {', '.join(names)})"
    return f"Your account is not allowed on this hub{why}; ask your admin."


def _group_name(dn: str) -> str:
    """``gpu-users`` for ``cn=gpu-users,ou=groups,dc=example,dc=org`` (a plain name as is)."""
    try:
        parts = parse_dn(dn)
    except LDAPException:
        parts = []
    return str(parts[0][1]) if parts else dn


#: Longest username sent to LDAP (POSIX login names are at most 32 on most systems).
MAX_USERNAME_LENGTH = 64

_SECRET_ATTRIBUTES = frozenset(
    {
        "userpassword",
        "authpassword",
        "unicodepwd",
        "sambantpassword",
        "sambalmpassword",
        "krbprincipalkey",
    }
)

# Per-thread state of one login running in the executor (see _login_blocking).
_local = threading.local()


@dataclass
class _Findings:
    """What one login read from LDAP about the user (strings as the server sent them)."""

    user_dn: str
    login: str
    uid_number: int | None = None
    gid_number: int | None = None
    home_directory: str | None = None
    groups: list[tuple[str, str, int | None]] = field(default_factory=list)  # name, DN, gid


def _shown(username: str) -> str:
    """A username as it may appear in logs: repr (escapes NUL, newlines), truncated."""
    text = repr(username)
    return text if len(text) <= 40 else f"{text[:32]}...({len(username)} chars)"


def _first(values: Any) -> Any:
    if isinstance(values, list | tuple):
        return values[0] if values else None
    return values


def _as_int(value: Any) -> int | None:
    value = _first(value)
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdecimal():
        return int(value.strip())
    return None


def _norm_dn(dn: str) -> str:
    return ",".join(part.strip() for part in dn.lower().split(","))


def _is_tls_failure(e: LDAPException) -> bool:
    text = str(e).lower()
    return isinstance(e, LDAPCertificateError | LDAPStartTLSError) or any(
        word in text for word in ("handshake", "ssl", "certificate", "tls")
    )


def _tls_reason(e: LDAPException) -> str:
    """The useful part of ldap3's nested message, e.g. "certificate verify failed: unable
    to get local issuer certificate" or "certificate ... doesn't match any name"."""
    text = str(e)
    found = re.search(r"\[SSL: [A-Z_]+\] ([^(\]'\"]+)", text)
    if found:
        return found.group(1).strip()
    if isinstance(e, LDAPCertificateError):
        return "the certificate does not name this server"
    return text[:200]


class GPULDAPAuthenticator(LDAPAuthenticator):
    """ldapauthenticator, run off the event loop, with POSIX identity and groups."""

    executor_threads = Integer(
        4,
        config=True,
        help="""Number of threads that talk to LDAP.

        Each login holds one thread for at most `ldap_timeout` seconds. Logins beyond this
        number wait for a free thread (their wait counts towards `ldap_timeout`).
        Default 4, as JupyterHub's PAMAuthenticator.
        """,
    )

    @validate("executor_threads")
    def _validate_executor_threads(self, proposal: Any) -> int:
        if proposal.value < 1:
            raise TraitError("GPULDAPAuthenticator.executor_threads must be 1 or more.")
        return int(proposal.value)

    executor = AnyTrait(
        help="""The concurrent.futures.Executor that runs LDAP calls.

        Defaults to a ThreadPoolExecutor with `executor_threads` threads.
        """,
    )

    @default("executor")
    def _default_executor(self) -> Executor:
        return ThreadPoolExecutor(self.executor_threads, thread_name_prefix="ldap-auth")

    ldap_timeout = Float(
        5.0,
        config=True,
        help="""Seconds a login may spend on LDAP before it is refused (default 5).

        Used as ldap3's connect and receive timeouts (which free the thread) and as the
        overall limit of one login's LDAP work, waiting for a thread included. On timeout
        the hub logs a warning naming the server, and the login page says the sign-in
        service is not answering (HTTP 503); other users' requests are never held up.
        """,
    )

    @validate("ldap_timeout")
    def _validate_ldap_timeout(self, proposal: Any) -> float:
        if not 0 < proposal.value <= 300:
            raise TraitError("GPULDAPAuthenticator.ldap_timeout must be between 0 and 300 s.")
        return float(proposal.value)

    group_search_base = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""Where to search for the user's groups, e.g. `ou=groups,dc=example,dc=org`.

        Every group under it that matches `group_search_filter` (by default: `member` or
        `uniqueMember` is the user's DN, or `memberUid` is the username) is put in
        auth_state `groups` (by `group_name_attribute`), with its `gidNumber` in
        `group_gids`. These names drive `admin_groups`, per-group GPU policies and, with
        `manage_groups`, JupyterHub groups. None (default): no group lookup; only
        ldapauthenticator's `allowed_groups` check (by DN) runs.
        """,
    )

    group_name_attribute = Unicode(
        "cn",
        config=True,
        help="Attribute holding a group's name (default `cn`).",
    )

    admin_groups = Set(
        Unicode(),
        config=True,
        help="""Members of these LDAP groups are JupyterHub admins (and may log in).

        Entries are group names (`hub-admins`, needs `group_search_base`) or group DNs
        (`cn=hub-admins,ou=groups,dc=example,dc=org`). Authoritative, like
        PAMAuthenticator's: a user who leaves every admin group loses admin rights at the
        next login, unless listed in `admin_users`.
        """,
    ).tag(allow_config=True)

    uid_number_attribute = Unicode(
        "uidNumber", config=True, help="Attribute with the POSIX uid (default `uidNumber`)."
    )
    gid_number_attribute = Unicode(
        "gidNumber", config=True, help="Attribute with the primary gid (default `gidNumber`)."
    )
    home_directory_attribute = Unicode(
        "homeDirectory",
        config=True,
        help="Attribute with the home path (default `homeDirectory`); mapped under the "
        "shared storage root by the spawner.",
    )

    fallback_uid = Integer(
        None,
        allow_none=True,
        config=True,
        help="""uid for accounts that have no `uidNumber` (default None: refuse them).

        Everyone without a uidNumber then shares this uid, and so can read and change
        each other's files: use only for small trusted sites, and prefer fixing LDAP.
        """,
    )
    fallback_gid = Integer(
        None,
        allow_none=True,
        config=True,
        help="gid for accounts that have no `gidNumber` (default None: refuse them).",
    )
    min_uid = Integer(
        1000,
        config=True,
        help="Smallest uid allowed to log in (default 1000). uid 0 is always refused.",
    )
    min_gid = Integer(
        100,
        config=True,
        help="Smallest primary gid allowed to log in (default 100). gid 0 is always refused.",
    )

    ssh_public_key_attribute = Unicode(
        "",
        config=True,
        help="""The attribute holding users' SSH public keys, for the SSH gateway
        (docs/ssh.md): `sshPublicKey` with the openssh-lpk schema. Empty (default): keys
        come only from `~/.ssh/authorized_keys`.

        Read at each SSH login (a key removed from LDAP stops working at the next one),
        bound as `lookup_dn_search_user` with `lookup_dn_search_password` (anonymously
        when they are unset; never with a user's password), from the DN her last hub
        login found (auth_state `user_dn`), else `lookup_dn`'s search, else the first
        `bind_dn_template`. At most `ssh_public_keys_max` values of at most
        `ssh_public_key_max_bytes` each; a value that is not a public key is logged by
        the gateway and skipped.
        """,
    )
    ssh_public_keys_max = Integer(
        MAX_LDAP_KEYS,
        config=True,
        help=f"At most this many SSH keys per user are read from LDAP (default {MAX_LDAP_KEYS}).",
    )
    ssh_public_key_max_bytes = Integer(
        MAX_LDAP_KEY_BYTES,
        config=True,
        help=f"A longer SSH key value in LDAP is skipped (default {MAX_LDAP_KEY_BYTES} bytes).",
    )

    @validate("ssh_public_keys_max", "ssh_public_key_max_bytes")
    def _validate_ssh_bounds(self, proposal: Any) -> int:
        top = MAX_LDAP_KEYS if proposal.trait.name == "ssh_public_keys_max" else MAX_LDAP_KEY_BYTES
        if not 0 < proposal.value <= top:
            raise TraitError(f"GPULDAPAuthenticator.{proposal.trait.name} must be 1 to {top}.")
        return int(proposal.value)

    @default("enable_auth_state")
    def _default_enable_auth_state(self) -> bool:
        # the spawner needs uid/gid/home; JupyterHub refuses to start without
        # JUPYTERHUB_CRYPT_KEY when this is on, which is what we want.
        return True

    @validate("auth_state_attributes")
    def _validate_auth_state_attributes(self, proposal: Any) -> list[str]:
        secret = [a for a in proposal.value if str(a).lower() in _SECRET_ATTRIBUTES]
        if secret:
            raise TraitError(
                f"auth_state_attributes must not include password attributes: {secret}."
            )
        return list(proposal.value)

    # ------------------------------------------------------------------ login

    def username_refusal(self, username: str) -> str | None:
        """Why ``username`` must not reach LDAP, or None if it may."""
        if not username:
            return "is empty"
        if len(username) > MAX_USERNAME_LENGTH:
            return f"is longer than {MAX_USERNAME_LENGTH} characters"
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in username):
            return "contains a control character (such as NUL)"
        if not re.fullmatch(self.valid_username_regex, username):
            return f"does not match valid_username_regex {self.valid_username_regex!r}"
        return None

    async def authenticate(self, handler: Any, data: dict[str, Any]) -> dict[str, Any] | None:
        """Check the login form against LDAP in a worker thread, within ``ldap_timeout``."""
        username = str(data.get("username") or "").lower()
        password = data.get("password")
        refusal = self.username_refusal(username)
        if refusal:
            self.log.warning(
                "Login refused before any LDAP call: username %s %s", _shown(username), refusal
            )
            return None
        if not isinstance(password, str) or not password.strip():
            self.log.warning("Login refused for %s: empty password", _shown(username))
            return None

        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self.executor, self._login_blocking, username, password)
        try:
            result = await asyncio.wait_for(work, timeout=self.ldap_timeout)
        except (asyncio.TimeoutError, TimeoutError):
            self.log.warning(
                "LDAP server %s:%s did not answer within %.1f s while %s logged in; "
                "login refused (GPULDAPAuthenticator.ldap_timeout). Check the LDAP server.",
                self.server_address,
                self.server_port,
                self.ldap_timeout,
                _shown(username),
            )
            raise web.HTTPError(503, UNAVAILABLE_MESSAGE) from None
        except (LDAPException, OSError) as e:
            self.log.warning(
                "LDAP server %s:%s failed while %s logged in; login refused: %s: %s",
                self.server_address,
                self.server_port,
                _shown(username),
                type(e).__name__,
                e,
            )
            raise web.HTTPError(503, UNAVAILABLE_MESSAGE) from None
        if result is None:
            return None
        model, found = result
        model["auth_state"] = self._auth_state(model, found)
        if self.manage_groups:
            model["groups"] = list(model["auth_state"]["groups"])
        return model

    def _login_blocking(
        self, username: str, password: str
    ) -> tuple[dict[str, Any], _Findings] | None:
        """ldapauthenticator's whole login, in a worker thread on a private event loop."""
        _local.connections = []
        _local.findings = None
        _local.login = username
        try:
            model = asyncio.run(
                LDAPAuthenticator.authenticate(
                    self, None, {"username": username, "password": password}
                )
            )
            found: _Findings | None = _local.findings
        finally:
            for conn in _local.connections:
                with suppress(Exception):
                    conn.unbind()
            _local.connections = []
            _local.findings = None
        if model is None:
            return None
        if found is None:  # ldapauthenticator changed how it reads attributes
            self.log.error("LDAP login of %s returned no identity; refusing", _shown(username))
            return None
        return model, found

    def _auth_state(self, model: dict[str, Any], found: _Findings) -> dict[str, Any]:
        """auth_state for a user LDAP accepted; raises HTTPError(403) without an identity."""
        uid, gid, source = found.uid_number, found.gid_number, "ldap"
        if uid is None and self.fallback_uid is not None:
            uid, source = self.fallback_uid, "fallback"
        if gid is None and self.fallback_gid is not None:
            gid = self.fallback_gid
        inherited = model.get("auth_state") or {}
        state: dict[str, Any] = {
            "ldap_groups": list(inherited.get("ldap_groups", [])),
            "user_attributes": dict(inherited.get("user_attributes", {})),
            "user_dn": found.user_dn,
            "uid": uid,
            "gid": gid,
            "uid_source": source,
            "home_directory": found.home_directory,
            "groups": [name for name, _dn, _gid in found.groups],
            "group_dns": [dn for _name, dn, _gid in found.groups],
            "group_gids": {name: g for name, _dn, g in found.groups if g is not None},
        }
        try:
            identity_from_auth_state(
                model["name"], state, min_uid=self.min_uid, min_gid=self.min_gid
            )
        except IdentityError as e:
            self.log.warning(
                "LDAP user %s (%s) has no usable POSIX identity (%s=%s, %s=%s); login "
                "refused. Fix the entry, or set GPULDAPAuthenticator.fallback_uid/fallback_gid.",
                _shown(model["name"]),
                found.user_dn,
                self.uid_number_attribute,
                found.uid_number,
                self.gid_number_attribute,
                found.gid_number,
            )
            raise web.HTTPError(e.status_code, str(e)) from None
        if source == "fallback":
            self.log.info(
                "LDAP user %s has no uid; using fallback_uid %s", _shown(model["name"]), uid
            )
        return state

    # ------------------------------------------------------- ldapauthenticator hooks
    # These run in the worker thread, inside ldapauthenticator's authenticate().

    def get_connection(self, userdn: str, password: str) -> ldap3.Connection | None:
        """ldapauthenticator's bind, with connect/receive timeouts; None if bind fails."""
        if self.tls_strategy == TlsStrategy.on_connect:
            use_ssl, auto_bind = True, ldap3.AUTO_BIND_NO_TLS
        elif self.tls_strategy == TlsStrategy.before_bind:
            use_ssl, auto_bind = False, ldap3.AUTO_BIND_TLS_BEFORE_BIND
        else:
            use_ssl, auto_bind = False, ldap3.AUTO_BIND_NO_TLS
        server = ldap3.Server(
            self.server_address,
            port=self.server_port,
            use_ssl=use_ssl,
            tls=Tls(**{"validate": ssl.CERT_REQUIRED, **self.tls_kwargs}),
            connect_timeout=self.ldap_timeout,
            get_info=ldap3.NONE,
        )
        try:
            self.log.debug("Attempting to bind %s", userdn)
            conn = ldap3.Connection(
                server,
                user=userdn,
                password=password,
                auto_bind=auto_bind,
                # ldap3 packs this into SO_RCVTIMEO as whole seconds; a second past the
                # login's own deadline, so that a directory that stops answering is always
                # the 503 of that deadline, never a failed bind ("invalid password") that a
                # busy event loop let finish first
                receive_timeout=math.ceil(self.ldap_timeout) + 1,
                read_only=True,
            )
        except (LDAPSocketOpenError, LDAPStartTLSError, LDAPCertificateError) as e:
            if _is_tls_failure(e):
                self.log.error(
                    "TLS handshake with LDAP server %s:%s failed, no password was sent: %s. "
                    "Check tls_strategy (before_bind: StartTLS on 389, on_connect: LDAPS on "
                    "636), tls_kwargs['ca_certs_file'] (the CA that signed the server's "
                    "certificate) and that server_address is a name on that certificate.",
                    self.server_address,
                    self.server_port,
                    _tls_reason(e),
                )
            raise
        except LDAPBindError as e:
            self.log.debug("Failed to bind %s: %s", userdn, type(e).__name__)
            return None
        if isinstance(getattr(_local, "connections", None), list):
            _local.connections.append(conn)
        return conn

    def get_user_attributes(self, conn: ldap3.Connection, userdn: str) -> dict[str, Any]:
        """ldapauthenticator's ``auth_state_attributes``, plus our identity and groups."""
        attributes: dict[str, Any] = super().get_user_attributes(conn, userdn)
        _local.findings = self._read_identity(conn, userdn)
        return attributes

    def _read_identity(self, conn: ldap3.Connection, userdn: str) -> _Findings:
        login_attr = self.user_attribute or "uid"
        wanted = [
            self.uid_number_attribute,
            self.gid_number_attribute,
            self.home_directory_attribute,
            login_attr,
        ]
        conn.search(
            search_base=userdn,
            search_filter="(objectClass=*)",
            search_scope=ldap3.BASE,
            attributes=wanted,
        )
        found = _Findings(user_dn=userdn, login=getattr(_local, "login", ""))
        if len(conn.entries) != 1:
            self.log.warning("Could not read the LDAP entry %s of a logged-in user", userdn)
            return found
        values = {k.lower(): v for k, v in conn.entries[0].entry_attributes_as_dict.items()}
        found.user_dn = conn.entries[0].entry_dn or userdn
        found.uid_number = _as_int(values.get(self.uid_number_attribute.lower()))
        found.gid_number = _as_int(values.get(self.gid_number_attribute.lower()))
        home = _first(values.get(self.home_directory_attribute.lower()))
        found.home_directory = str(home) if home else None
        login = _first(values.get(login_attr.lower()))
        found.groups = self._read_groups(conn, userdn, str(login) if login else found.login)
        return found

    def _read_groups(
        self, conn: ldap3.Connection, userdn: str, login: str
    ) -> list[tuple[str, str, int | None]]:
        if not self.group_search_base:
            return []
        search_filter = self.group_search_filter.format(
            userdn=escape_filter_chars(userdn), uid=escape_filter_chars(login)
        )
        conn.search(
            search_base=self.group_search_base,
            search_filter=search_filter,
            search_scope=ldap3.SUBTREE,
            attributes=[self.group_name_attribute, "gidNumber"],
        )
        groups = []
        for entry in conn.entries:
            values = {k.lower(): v for k, v in entry.entry_attributes_as_dict.items()}
            name = _first(values.get(self.group_name_attribute.lower()))
            if name:
                groups.append((str(name), entry.entry_dn, _as_int(values.get("gidnumber"))))
        return sorted(groups)

    # ------------------------------------------------------------------ SSH keys

    async def ssh_public_keys(self, username: str, user_dn: str | None = None) -> list[str]:
        """``username``'s SSH public keys from ``ssh_public_key_attribute`` (bounded
        text, not yet parsed); [] when the setting is off, the user has none, or LDAP
        fails (logged: the gateway still reads ``authorized_keys``)."""
        if not self.ssh_public_key_attribute or self.username_refusal(username):
            return []
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self.executor, self._ssh_keys_blocking, username, user_dn)
        try:
            values = await asyncio.wait_for(work, timeout=self.ldap_timeout)
        except (asyncio.TimeoutError, TimeoutError):
            self.log.warning(
                "LDAP server %s:%s did not answer within %.1f s for the SSH keys of %s",
                self.server_address,
                self.server_port,
                self.ldap_timeout,
                _shown(username),
            )
            return []
        except (LDAPException, OSError) as e:
            self.log.warning(
                "Reading the SSH keys of %s from LDAP failed: %s: %s",
                _shown(username),
                type(e).__name__,
                str(e)[:200],
            )
            return []
        kept, skipped = bounded_key_values(
            values, self.ssh_public_keys_max, self.ssh_public_key_max_bytes
        )
        for why in skipped:
            self.log.warning("SSH key of %s in LDAP skipped: %s", _shown(username), why)
        return kept

    def _ssh_keys_blocking(self, username: str, user_dn: str | None) -> list[object]:
        """The attribute's raw values (a worker thread; the search account's bind)."""
        _local.connections = []
        try:
            conn = self.get_connection(
                self.lookup_dn_search_user or None,  # type: ignore[arg-type]
                self.lookup_dn_search_password or None,  # type: ignore[arg-type]
            )
            if conn is None:
                raise LDAPBindError("the search account could not bind")
            dn = user_dn or self._ssh_user_dn(conn, username)
            if not dn:
                return []
            attr = self.ssh_public_key_attribute
            conn.search(
                search_base=dn,
                search_filter="(objectClass=*)",
                search_scope=ldap3.BASE,
                attributes=[attr],
                size_limit=1,
            )
            if len(conn.response or []) != 1:
                return []
            raw = conn.response[0].get("raw_attributes") or {}
            values: list[object] = next(
                (list(v) for k, v in raw.items() if k.lower() == attr.lower()), []
            )
            # a bound on what is even looked at (the pure bound then says why)
            return list(values)[: self.ssh_public_keys_max * 4]
        finally:
            for conn in _local.connections:
                with suppress(Exception):
                    conn.unbind()
            _local.connections = []

    def _ssh_user_dn(self, conn: ldap3.Connection, username: str) -> str | None:
        """The user's DN as a hub login would find it (without her password)."""
        if self.lookup_dn and self.user_search_base:
            conn.search(
                search_base=self.user_search_base,
                search_filter=f"({self.user_attribute}={escape_filter_chars(username)})",
                search_scope=ldap3.SUBTREE,
                attributes=[],
                size_limit=2,
            )
            found = [r for r in conn.response or [] if r.get("type") == "searchResEntry"]
            return str(found[0]["dn"]) if len(found) == 1 else None
        templates = self.bind_dn_template or []
        return templates[0].format(username=escape_rdn(username)) if templates else None

    # ------------------------------------------------------------- allow / admin

    def _in_admin_groups(self, auth_model: dict[str, Any]) -> bool:
        state = auth_model.get("auth_state") or {}
        mine = set(state.get("groups") or ()) | {
            _norm_dn(dn) for dn in state.get("group_dns") or ()
        }
        return any(g in mine or _norm_dn(g) in mine for g in self.admin_groups)

    async def check_allowed(self, username: str, auth_model: dict[str, Any]) -> bool:
        """ldapauthenticator's rules (allowed_users, allowed_groups), or an admin group.

        JupyterHub asks only after :meth:`authenticate` accepted the password, so a refusal
        here is told to the user (HTTP 403 with :func:`not_allowed_message`, which the
        login page shows) instead of "Invalid username or password", which would send
        them to reset a password that is right."""
        if await super().check_allowed(username, auth_model):
            return True
        if self.admin_groups and self._in_admin_groups(auth_model):
            self.log.debug("Allowing %s as member of an admin group", username)
            return True
        self.log.warning(
            "LDAP user %s logged in with the right password but is not allowed "
            "(allowed_users, allowed_groups); told so",
            _shown(username),
        )
        raise web.HTTPError(403, not_allowed_message(self.allowed_groups))

    def is_admin(self, handler: Any, authentication: dict[str, Any]) -> bool | None:
        """Admin if in ``admin_users`` or (authoritatively) in ``admin_groups``."""
        if super().is_admin(handler, authentication):
            return True
        if not self.admin_groups:
            return None
        return self._in_admin_groups(authentication)
