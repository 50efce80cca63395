"""The LDAP server an admin names (``site init --ldap-server``), decoded in one place.

    ldaps://HOST[:PORT]   LDAPS: TLS from the first byte; port 636 by default
    ldap://HOST[:PORT]    StartTLS before the bind (``before_bind``); port 389 by default;
                          ``insecure`` (no TLS at all) only when asked for
    HOST[:PORT]           port 636 (LDAPS) by default; port 389 means StartTLS
    [IPv6]:PORT           an IPv6 address in brackets, as in a URL

The result is GPULDAPAuthenticator's ``server_address``, ``server_port`` and
``tls_strategy``. A bad value is one :class:`~jupyterhub_gpu.errors.ConfigError` sentence.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from jupyterhub_gpu.errors import ConfigError

TLS_STRATEGIES = ("on_connect", "before_bind", "insecure")
DEFAULT_PORTS = {"ldaps": 636, "ldap": 389}
_HOST_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$"
)
MAX_LENGTH = 300


@dataclass(frozen=True)
class LDAPServer:
    host: str
    port: int
    tls: str  # one of TLS_STRATEGIES

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'ldaps' if self.tls == 'on_connect' else 'ldap'}://{host}:{self.port}"


def _bad(value: str, why: str) -> ConfigError:
    return ConfigError(
        f"--ldap-server {value[:80]!r}: {why}; give ldaps://HOST[:PORT], ldap://HOST[:PORT] "
        "(StartTLS) or HOST[:PORT]."
    )


def parse_ldap_server(value: str, tls: str | None = None) -> LDAPServer:
    """The server ``value`` names; ``tls`` (a :data:`TLS_STRATEGIES` value) when the admin
    chose one, else what the scheme or the port says."""
    text = value.strip()
    if not text or len(text) > MAX_LENGTH:
        raise _bad(value, f"must be 1 to {MAX_LENGTH} characters")
    if tls is not None and tls not in TLS_STRATEGIES:
        raise ConfigError(f"--ldap-tls {tls!r}: must be one of {', '.join(TLS_STRATEGIES)}.")
    scheme, sep, _ = text.partition("://")
    if sep and scheme.lower() not in DEFAULT_PORTS:
        raise _bad(value, f"the scheme {scheme!r} is not LDAP's")
    try:
        parts = urlsplit(text if sep else f"ldaps://{text}")
        host, port = parts.hostname or "", parts.port
    except ValueError as e:
        raise _bad(value, f"not a server address ({e})") from None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise _bad(value, "only a server goes here (the base DN is --ldap-base)")
    if not host or not (_is_ip(host) or _HOST_RE.match(host)):
        raise _bad(value, "no valid host name or IP address in it")
    scheme = scheme.lower() if sep else ""
    if port is None:
        port = DEFAULT_PORTS[scheme or "ldaps"]
    chosen = tls or _tls_of(scheme, port)
    if scheme == "ldaps" and chosen != "on_connect":
        raise ConfigError(
            f"--ldap-server {value!r} is LDAPS, but --ldap-tls says {chosen}: "
            "use ldap://HOST for StartTLS, or leave --ldap-tls out."
        )
    if scheme == "ldap" and chosen == "on_connect":
        raise ConfigError(
            f"--ldap-server {value!r} is plain LDAP (StartTLS), but --ldap-tls "
            "says on_connect (LDAPS): use ldaps://HOST, or leave --ldap-tls out."
        )
    return LDAPServer(host=host, port=port, tls=chosen)


def _tls_of(scheme: str, port: int) -> str:
    if scheme == "ldaps":
        return "on_connect"
    if scheme == "ldap" or port == DEFAULT_PORTS["ldap"]:
        return "before_bind"
    return "on_connect"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
