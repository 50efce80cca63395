"""The gateway's calls to the hub API: where a login lands (:mod:`~jupyterhub_gpu.wire.ssh_target`)
and whose a token is. One ``httpx.AsyncClient``, an explicit timeout on every call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import httpx

from jupyterhub_gpu.core.ssh.census import OpenChannel
from jupyterhub_gpu.core.ssh.logins import Login
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.wire.ssh_sessions import encode_sessions
from jupyterhub_gpu.wire.ssh_target import SSHTarget, decode_target


@dataclass(frozen=True)
class TokenOwner:
    """Who a token belongs to, and what it may do (the hub's ``/hub/api/user``)."""

    user: str
    scopes: tuple[str, ...]


class HubClient:
    def __init__(self, api_url: str, token: str, timeout: float = 10.0) -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token
        self._http = httpx.AsyncClient(timeout=timeout, trust_env=False)

    async def target(self, login: Login, keys: bool = False) -> SSHTarget | None:
        """Where ``login`` lands (``keys``: with her keys from LDAP, at login); None when
        the hub has no such user. httpx.HTTPError or ProbeError when the hub can't say."""
        params = {"server": login.server, **({"login": "1"} if keys else {})}
        r = await self._http.get(
            f"{self.api_url}/gpu/ssh/targets/{quote(login.user, safe='')}",
            params=params,
            headers={"Authorization": f"token {self._token}"},
        )
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return decode_target(r.json())

    async def token_owner(self, token: str) -> TokenOwner | None:
        """The user ``token`` belongs to (None: not a valid user token, or a service's)."""
        if not token or len(token) > 4096 or not token.isprintable():
            return None
        r = await self._http.get(
            f"{self.api_url}/user", headers={"Authorization": f"token {token}"}
        )
        if r.status_code in (401, 403, 404):
            return None
        r.raise_for_status()
        model = r.json()
        if not isinstance(model, dict) or model.get("kind") != "user":
            return None
        name, scopes = model.get("name"), model.get("scopes", [])
        if not isinstance(name, str) or not isinstance(scopes, list):
            raise ProbeError("the hub's /user answer has no name or scopes")
        return TokenOwner(user=name, scopes=tuple(str(s) for s in scopes))

    async def activity(self, user: str, server: str, at: datetime) -> None:
        """Tell the hub that ``user``'s server ``server`` was used at ``at`` (the scope
        ``users:activity``; the hub keeps the later of its own time and this one)."""
        stamp = at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
        r = await self._http.post(
            f"{self.api_url}/users/{quote(user, safe='')}/activity",
            json={"last_activity": stamp, "servers": {server: {"last_activity": stamp}}},
            headers={"Authorization": f"token {self._token}"},
        )
        r.raise_for_status()

    async def sessions(self, channels: list[OpenChannel], interval: float) -> None:
        """The gateway's open sessions and forwards, all of them (scope
        ``custom:gpu-ssh:sessions``), for the dashboard and the metrics."""
        r = await self._http.put(
            f"{self.api_url}/gpu/ssh/sessions",
            json=encode_sessions(channels, interval),
            headers={"Authorization": f"token {self._token}"},
        )
        r.raise_for_status()

    async def start(self, user: str, options: Mapping[str, Any]) -> str | None:
        """Start ``user``'s default server with ``options`` (scope ``servers``): None when
        the hub took it (201/202), else the hub's message (bounded)."""
        r = await self._http.post(
            f"{self.api_url}/users/{quote(user, safe='')}/server",
            json=dict(options),
            headers={"Authorization": f"token {self._token}"},
        )
        if r.status_code in (201, 202):
            return None
        try:
            message = str(r.json().get("message") or "")
        except ValueError:
            message = ""
        return message[:300] or f"the hub answered {r.status_code}"

    async def progress(self, user: str) -> AsyncIterator[dict[str, Any]]:
        """The default server's start, event by event (scope ``read:servers``): dicts with
        ``progress``, ``message``, and ``ready`` or ``failed`` at the end."""
        async with self._http.stream(
            "GET",
            f"{self.api_url}/users/{quote(user, safe='')}/server/progress",
            headers={"Authorization": f"token {self._token}"},
            timeout=httpx.Timeout(10.0, read=None),
        ) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if not line.startswith("data:") or len(line) > 64 * 1024:
                    continue
                try:
                    event = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(event, dict):
                    yield event

    async def aclose(self) -> None:
        await self._http.aclose()


__all__ = ["HubClient", "TokenOwner"]
