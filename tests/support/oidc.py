"""A small but real OpenID Connect provider for tests (no external calls).

:class:`OIDCProvider` serves, on a loopback port from a thread of its own (tornado on its
own event loop), what a hub's ``GenericOAuthenticator`` talks to:

- ``GET /.well-known/openid-configuration`` (discovery) and ``GET /jwks`` (the public key);
- ``GET /authorize``: checks ``client_id``, the exact ``redirect_uri``, ``response_type=code``,
  the ``openid`` scope and PKCE's ``code_challenge_method``; then shows a login form (or
  approves :attr:`OIDCProvider.auto_login` at once). ``POST /authorize`` checks the password
  and redirects to the client with a single-use code (60 s) and the client's ``state``;
- ``POST /token``: ``authorization_code`` only; the client authenticates with HTTP Basic or
  form fields (secret compared in constant time); the code must match its client and
  redirect URI, and the PKCE verifier its challenge. A code used twice is refused and the
  tokens it gave are revoked (RFC 6749 4.1.2). Answers an opaque ``access_token`` and an
  ``id_token`` signed RS256 (``kid`` in /jwks);
- ``GET /userinfo`` (``Authorization: Bearer``): ``sub`` always; ``preferred_username`` and
  ``name`` with scope ``profile``, ``email`` with ``email``, ``groups`` with ``groups``; the
  user's custom claims (``uidNumber``, ``gidNumber``, ``homeDirectory``...) always, like a
  Keycloak "User Attribute" mapper.

Users and clients live in plain dicts (:attr:`users`, :attr:`clients`) that tests may change
while the provider runs (under :attr:`lock`); :attr:`events` records each endpoint's outcome.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlencode

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from tornado import netutil, web
from tornado.httpserver import HTTPServer

CODE_LIFETIME = 60.0
PENDING_LIFETIME = 600.0


@dataclass
class OIDCUser:
    """A provider account. ``claims`` are custom claims given to every client."""

    username: str
    password: str
    email: str = ""
    groups: list[str] = field(default_factory=list)
    claims: dict[str, Any] = field(default_factory=dict)
    sub: str = field(default_factory=lambda: secrets.token_hex(8))


@dataclass
class OIDCClient:
    client_id: str
    client_secret: str
    redirect_uris: list[str] = field(default_factory=list)


@dataclass
class _Grant:
    """What a code or an access token stands for."""

    username: str
    client_id: str
    scope: list[str]
    redirect_uri: str
    expires: float
    nonce: str | None = None
    code_challenge: str | None = None
    tokens: list[str] = field(default_factory=list)  # access tokens given for this code


class OIDCProvider:
    """An in-process OpenID Connect provider on ``http://127.0.0.1:<port>``.

    Use as a context manager, or :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        users: list[OIDCUser] | None = None,
        clients: list[OIDCClient] | None = None,
        *,
        host: str = "127.0.0.1",
        token_lifetime: int = 3600,
    ) -> None:
        self.host = host
        self.users: dict[str, OIDCUser] = {u.username: u for u in users or []}
        self.clients: dict[str, OIDCClient] = {c.client_id: c for c in clients or []}
        self.token_lifetime = token_lifetime
        #: when set, GET /authorize approves this user without showing the form
        self.auto_login: str | None = None
        self.lock = threading.RLock()
        #: (endpoint, outcome, details) for each request, in order
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = secrets.token_hex(4)
        self._codes: dict[str, _Grant] = {}
        self._used_codes: dict[str, _Grant] = {}
        self._tokens: dict[str, _Grant] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self._sockets = netutil.bind_sockets(0, address=host)
        self.port = int(self._sockets[0].getsockname()[1])
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()

    # ------------------------------------------------------------------ lifecycle
    @property
    def issuer(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> OIDCProvider:
        self._thread = threading.Thread(target=self._run, name="oidc-provider", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the OIDC provider did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = self._loop = None

    def __enter__(self) -> OIDCProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        server = HTTPServer(self._app())
        server.add_sockets(self._sockets)
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.stop()
            loop.run_until_complete(server.close_all_connections())
            loop.close()

    def _app(self) -> web.Application:
        kw = {"provider": self}
        return web.Application(
            [
                (r"/\.well-known/openid-configuration", _Discovery, kw),
                (r"/jwks", _JWKS, kw),
                (r"/authorize", _Authorize, kw),
                (r"/token", _Token, kw),
                (r"/userinfo", _UserInfo, kw),
            ]
        )

    # ------------------------------------------------------------------ for tests
    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "profile", "email", "groups"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["sub", "preferred_username", "name", "email", "groups"],
        }

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid=self.kid, use="sig", alg="RS256")
        return {"keys": [jwk]}

    def verify_id_token(self, token: str, audience: str) -> dict[str, Any]:
        """Decode an id_token of this provider, checking signature, issuer and audience."""
        return dict(
            jwt.decode(
                token,
                self.key.public_key(),
                algorithms=["RS256"],
                audience=audience,
                issuer=self.issuer,
            )
        )

    def revoke_tokens(self, username: str | None = None) -> int:
        """Invalidate the access tokens of ``username`` (all when None); how many."""
        with self.lock:
            gone = [t for t, g in self._tokens.items() if username in (None, g.username)]
            for t in gone:
                del self._tokens[t]
        return len(gone)

    def count(self, endpoint: str, outcome: str | None = None) -> int:
        with self.lock:
            return sum(1 for e, o, _ in self.events if e == endpoint and outcome in (None, o))

    @contextmanager
    def editing(self) -> Iterator[OIDCProvider]:
        """``with provider.editing(): provider.users["alice"].groups.remove(...)``."""
        with self.lock:
            yield self

    # ------------------------------------------------------------------ internals
    def record(self, endpoint: str, outcome: str, **details: Any) -> None:
        with self.lock:
            self.events.append((endpoint, outcome, details))

    def claims(self, user: OIDCUser, scope: list[str]) -> dict[str, Any]:
        claims: dict[str, Any] = dict(user.claims)
        if "profile" in scope:
            claims.update(preferred_username=user.username, name=user.username.title())
        if "email" in scope and user.email:
            claims.update(email=user.email, email_verified=True)
        if "groups" in scope:
            claims["groups"] = list(user.groups)
        claims["sub"] = user.sub
        return claims

    def id_token(self, grant: _Grant) -> str:
        user = self.users[grant.username]
        now = int(time.time())
        payload = {
            **self.claims(user, grant.scope),
            "iss": self.issuer,
            "aud": grant.client_id,
            "iat": now,
            "auth_time": now,
            "exp": now + self.token_lifetime,
        }
        if grant.nonce:
            payload["nonce"] = grant.nonce
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})

    def issue_code(self, username: str, request: dict[str, Any]) -> str:
        code = secrets.token_urlsafe(24)
        with self.lock:
            self._codes[code] = _Grant(
                username=username,
                client_id=request["client_id"],
                scope=request["scope"],
                redirect_uri=request["redirect_uri"],
                expires=time.monotonic() + CODE_LIFETIME,
                nonce=request.get("nonce"),
                code_challenge=request.get("code_challenge"),
            )
        return code

    def exchange_code(
        self, code: str, client_id: str, redirect_uri: str, verifier: str | None
    ) -> tuple[str, _Grant] | str:
        """(access_token, grant), or the reason the code is refused."""
        with self.lock:
            grant = self._codes.pop(code, None)
            if grant is None:
                used = self._used_codes.get(code)
                if used is not None:  # replayed: revoke what the code gave
                    for t in used.tokens:
                        self._tokens.pop(t, None)
                    return "code already used"
                return "unknown code"
            self._used_codes[code] = grant
            if grant.expires < time.monotonic():
                return "code expired"
            if grant.client_id != client_id:
                return "code issued to another client"
            if grant.redirect_uri != redirect_uri:
                return "redirect_uri differs from the authorization request"
            if grant.code_challenge is not None:
                if not verifier:
                    return "code_verifier missing"
                digest = hashlib.sha256(verifier.encode()).digest()
                expected = base64.urlsafe_b64encode(digest).decode().rstrip("=")
                if not hmac.compare_digest(expected, grant.code_challenge):
                    return "code_verifier does not match"
            token = secrets.token_urlsafe(32)
            grant.tokens.append(token)
            self._tokens[token] = _Grant(
                username=grant.username,
                client_id=grant.client_id,
                scope=grant.scope,
                redirect_uri=grant.redirect_uri,
                expires=time.monotonic() + self.token_lifetime,
            )
            return token, grant

    def token_grant(self, token: str) -> _Grant | None:
        with self.lock:
            grant = self._tokens.get(token)
            if grant is None or grant.expires < time.monotonic():
                return None
            return grant

    def add_pending(self, request: dict[str, Any]) -> str:
        request_id = secrets.token_urlsafe(16)
        with self.lock:
            now = time.monotonic()
            for k in [k for k, v in self._pending.items() if v["expires"] < now]:
                del self._pending[k]
            self._pending[request_id] = {**request, "expires": now + PENDING_LIFETIME}
        return request_id

    def pending(self, request_id: str) -> dict[str, Any] | None:
        with self.lock:
            request = self._pending.get(request_id)
            if request is None or request["expires"] < time.monotonic():
                return None
            return request

    def drop_pending(self, request_id: str) -> None:
        with self.lock:
            self._pending.pop(request_id, None)


class _Handler(web.RequestHandler):
    provider: OIDCProvider

    def initialize(self, provider: OIDCProvider) -> None:
        self.provider = provider

    def check_xsrf_cookie(self) -> None:
        pass  # the login form carries a server-side request id instead

    def json(self, data: dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def oauth_error(self, status: int, error: str, description: str) -> None:
        self.json({"error": error, "error_description": description}, status)


class _Discovery(_Handler):
    def get(self) -> None:
        self.json(self.provider.discovery())


class _JWKS(_Handler):
    def get(self) -> None:
        self.json(self.provider.jwks())


_FORM = """<!doctype html><html><head><title>Test IdP sign-in</title></head><body>
<h1>Sign in to the test identity provider</h1>
<p>{client} asks for: {scope}</p>
{error}
<form method="post" action="/authorize">
<input type="hidden" name="request_id" value="{request_id}">
<label>Username <input name="username"></label>
<label>Password <input name="password" type="password"></label>
<button type="submit">Sign in</button>
</form></body></html>"""


class _Authorize(_Handler):
    def get(self) -> None:
        p = self.provider
        client_id = self.get_argument("client_id", "")
        redirect_uri = self.get_argument("redirect_uri", "")
        with p.lock:
            client = p.clients.get(client_id)
            registered = client is not None and redirect_uri in client.redirect_uris
        if client is None or not registered:
            # never redirect to an unverified URI (open redirect); tell the person instead
            p.record("authorize", "bad_client", client_id=client_id, redirect_uri=redirect_uri)
            self.set_status(400)
            self.finish("<p>Unknown client or unregistered redirect_uri.</p>")
            return
        state = self.get_argument("state", None)
        scope = self.get_argument("scope", "").split()
        error = None
        if self.get_argument("response_type", "") != "code":
            error = ("unsupported_response_type", "only response_type=code is supported")
        elif "openid" not in scope:
            error = ("invalid_scope", "the openid scope is required")
        elif self.get_argument("code_challenge", None) and (
            self.get_argument("code_challenge_method", "plain") != "S256"
        ):
            error = ("invalid_request", "only the S256 code_challenge_method is supported")
        if error:
            p.record("authorize", error[0], client_id=client_id)
            self.redirect_back(redirect_uri, state, error=error[0], error_description=error[1])
            return
        request = {
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": state,
            "nonce": self.get_argument("nonce", None),
            "code_challenge": self.get_argument("code_challenge", None),
        }
        if p.auto_login:
            p.record("authorize", "auto_approved", username=p.auto_login)
            code = p.issue_code(p.auto_login, request)
            self.redirect_back(redirect_uri, state, code=code)
            return
        p.record("authorize", "form", client_id=client_id)
        self.form(p.add_pending(request), request)

    def post(self) -> None:
        p = self.provider
        request_id = self.get_argument("request_id", "")
        request = p.pending(request_id)
        if request is None:
            p.record("authorize", "unknown_request")
            self.set_status(400)
            self.finish("<p>This sign-in request has expired; start again from the hub.</p>")
            return
        username = self.get_argument("username", "")
        password = self.get_argument("password", "")
        with p.lock:
            user = p.users.get(username)
            ok = user is not None and hmac.compare_digest(user.password.encode(), password.encode())
        if not ok:
            p.record("authorize", "bad_password", username=username)
            self.set_status(401)
            self.form(request_id, request, "<p class='error'>Invalid username or password.</p>")
            return
        p.drop_pending(request_id)
        p.record("authorize", "approved", username=username)
        code = p.issue_code(username, request)
        self.redirect_back(request["redirect_uri"], request["state"], code=code)

    def form(self, request_id: str, request: dict[str, Any], error: str = "") -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(
            _FORM.format(
                client=html.escape(request["client_id"]),
                scope=html.escape(" ".join(request["scope"])),
                request_id=html.escape(request_id),
                error=error,
            )
        )

    def redirect_back(self, redirect_uri: str, state: str | None, **params: str) -> None:
        if state is not None:
            params["state"] = state
        sep = "&" if "?" in redirect_uri else "?"
        self.redirect(redirect_uri + sep + urlencode(params))


class _Token(_Handler):
    def post(self) -> None:
        p = self.provider
        client_id, secret = self.client_credentials()
        with p.lock:
            client = p.clients.get(client_id or "")
            good = client is not None and hmac.compare_digest(
                client.client_secret.encode(), (secret or "").encode()
            )
        if not good:
            p.record("token", "invalid_client", client_id=client_id)
            self.set_header("WWW-Authenticate", 'Basic realm="token"')
            self.oauth_error(401, "invalid_client", "client authentication failed")
            return
        assert client_id is not None
        grant_type = self.get_argument("grant_type", "")
        if grant_type != "authorization_code":
            p.record("token", "unsupported_grant_type", grant_type=grant_type)
            self.oauth_error(400, "unsupported_grant_type", "only authorization_code")
            return
        result = p.exchange_code(
            self.get_argument("code", ""),
            client_id,
            self.get_argument("redirect_uri", ""),
            self.get_argument("code_verifier", None),
        )
        if isinstance(result, str):
            p.record("token", "invalid_grant", reason=result)
            self.oauth_error(400, "invalid_grant", result)
            return
        token, grant = result
        p.record("token", "issued", username=grant.username, pkce=grant.code_challenge is not None)
        self.json(
            {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": p.token_lifetime,
                "scope": " ".join(grant.scope),
                "id_token": p.id_token(grant),
            }
        )

    def client_credentials(self) -> tuple[str | None, str | None]:
        header = self.request.headers.get("Authorization", "")
        if header.lower().startswith("basic "):
            try:
                raw = base64.b64decode(header[6:].strip(), validate=True).decode()
            except ValueError:
                return None, None
            user, _, secret = raw.partition(":")
            return unquote(user), unquote(secret)
        return self.get_argument("client_id", None), self.get_argument("client_secret", None)


class _UserInfo(_Handler):
    def get(self) -> None:
        p = self.provider
        header = self.request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        grant = p.token_grant(token.strip()) if scheme.lower() == "bearer" else None
        if grant is None:
            p.record("userinfo", "invalid_token")
            self.set_header("WWW-Authenticate", 'Bearer error="invalid_token"')
            self.oauth_error(401, "invalid_token", "the access token is invalid or expired")
            return
        with p.lock:
            user = p.users.get(grant.username)
            claims = p.claims(user, grant.scope) if user else None
        if claims is None:
            p.record("userinfo", "unknown_user")
            self.oauth_error(401, "invalid_token", "the account no longer exists")
            return
        p.record("userinfo", "ok", username=grant.username)
        self.json(claims)
