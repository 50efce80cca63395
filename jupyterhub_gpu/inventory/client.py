"""The hub's side of the node agents: read many agents at once, each with a short timeout,
and cache what they said for a little while so a burst of spawns doesn't hammer them.

::

    client = AgentClient(parent=spawner)              # traitlets: timeout, max_age, ...
    readings = await client.read_all([AgentEndpoint("gpu-a", "http://10.0.0.11:9450", token),
                                      AgentEndpoint("gpu-b", "http://10.0.0.12:9450", token)])
    for node, reading in readings.items():
        if isinstance(reading, Unreachable):
            ...   # NodeState(..., reachable=False); reading.error says why
        else:
            ...   # a NodeInventory

Concurrent callers asking for the same agent share one request. Unreachable answers are
cached like good ones (for ``max_age``), so a dead node costs one timeout per ``max_age``,
not one per spawn. The HTTP client is injectable (``http_client``, a tornado
``AsyncHTTPClient``), as OAuthenticator does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse
from tornado.simple_httpclient import HTTPTimeoutError
from traitlets import Float, Instance, Integer, default
from traitlets.config import LoggingConfigurable

from ..errors import ProbeError
from .model import NodeInventory
from .wire import inventory_from_json, snapshot_time


@dataclass(frozen=True)
class AgentEndpoint:
    """Where a node's agent answers, and the token it wants (never shown in reprs)."""

    node: str
    url: str  # base URL, e.g. "http://10.0.0.12:9450"
    token: str = field(repr=False)


@dataclass(frozen=True)
class Unreachable:
    """A node whose agent gave no usable answer in time; ``error`` says what happened."""

    node: str
    url: str
    error: str


AgentReading = NodeInventory | Unreachable


class AgentClient(LoggingConfigurable):
    """Reads node agents concurrently, with a per-agent timeout and a snapshot cache."""

    timeout = Float(
        2.0,
        config=True,
        help="""Seconds to wait for one agent (connect + answer) before reporting the node
        unreachable. Default 2: seconds, never the spawn timeout.""",
    )
    max_age = Float(
        2.0,
        config=True,
        help="""Seconds a reading (or an unreachable verdict) is reused before the agent is
        asked again. Default 2; 0 asks on every call.""",
    )
    max_snapshot_age = Float(
        30.0,
        config=True,
        help="""An agent whose last GPU reading (its ``time``) is older than this many
        seconds is treated as unreachable: its probe is stuck. Default 30; 0 disables.
        Needs the hub's and nodes' clocks in sync (NTP).""",
    )
    concurrency = Integer(
        64, config=True, help="At most this many agent requests in flight at once (default 64)."
    )
    http_client = Instance(
        AsyncHTTPClient,
        help="""The tornado HTTP client used for agents. Default: a client of its own with
        ``max_clients`` = ``concurrency``. Inject another one (e.g. with TLS settings).""",
    )

    @default("http_client")
    def _default_http_client(self) -> AsyncHTTPClient:
        return AsyncHTTPClient(force_instance=True, max_clients=self.concurrency)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cache: dict[tuple[str, str], tuple[float, AgentReading]] = {}
        self._inflight: dict[tuple[str, str], asyncio.Future[AgentReading]] = {}
        self._down: dict[tuple[str, str], str] = {}
        self._semaphore: asyncio.Semaphore | None = None

    async def read_all(
        self, endpoints: Iterable[AgentEndpoint], max_age: float | None = None
    ) -> dict[str, AgentReading]:
        """Read every agent at once; the result maps node name -> reading."""
        eps = list(endpoints)
        names = [ep.node for ep in eps]
        if len(set(names)) != len(names):
            raise ValueError(f"node names must be unique, got {names}")
        readings = await asyncio.gather(*(self.read(ep, max_age) for ep in eps))
        return dict(zip(names, readings, strict=True))

    async def read(self, endpoint: AgentEndpoint, max_age: float | None = None) -> AgentReading:
        """One agent's reading: cached if younger than ``max_age`` (default: the trait)."""
        key = (endpoint.node, endpoint.url)
        limit = self.max_age if max_age is None else max_age
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached[0] <= limit:
            return cached[1]
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(self._refresh(endpoint, key))
            self._inflight[key] = future
            future.add_done_callback(lambda _f: self._inflight.pop(key, None))
        return await asyncio.shield(future)

    def forget(self, node: str | None = None) -> None:
        """Drop cached readings (of one node, or all), e.g. when a node is removed."""
        for key in [k for k in self._cache if node is None or k[0] == node]:
            del self._cache[key]

    async def _refresh(self, endpoint: AgentEndpoint, key: tuple[str, str]) -> AgentReading:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.concurrency)
        async with self._semaphore:
            reading = await self._fetch(endpoint)
        self._cache[key] = (time.monotonic(), reading)
        self._log_transition(key, reading)
        return reading

    async def _fetch(self, endpoint: AgentEndpoint) -> AgentReading:
        request = HTTPRequest(
            endpoint.url.rstrip("/") + "/v1/gpus",
            headers={"Authorization": f"token {endpoint.token}", "Accept": "application/json"},
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            follow_redirects=False,
        )
        try:
            response = await asyncio.wait_for(
                self.http_client.fetch(request, raise_error=False), self.timeout + 0.5
            )
        except (asyncio.TimeoutError, HTTPTimeoutError):
            return self._unreachable(endpoint, f"no answer within {self.timeout:g} s")
        except Exception as e:  # refused, reset, TLS, DNS...: any failure means "unreachable"
            return self._unreachable(endpoint, f"cannot reach it ({type(e).__name__}: {e})")
        try:
            return self._parse(endpoint, response)
        except ProbeError as e:
            return self._unreachable(endpoint, str(e))

    def _parse(self, endpoint: AgentEndpoint, response: HTTPResponse) -> NodeInventory:
        if response.code == 599:
            raise ProbeError(f"cannot reach it ({response.error})")
        if response.code in (401, 403):
            raise ProbeError(
                f"it refused the hub's token (HTTP {response.code}); "
                "check that the hub and the agent use the same agent token"
            )
        if response.code != 200:
            raise ProbeError(f"HTTP {response.code}: {_error_text(response.body)}")
        try:
            data = json.loads(response.body)
        except ValueError:
            raise ProbeError("its answer is not JSON") from None
        inventory = inventory_from_json(data)
        if inventory.name != endpoint.node:
            raise ProbeError(
                f"it serves node {inventory.name!r}, but is configured for {endpoint.node!r}"
            )
        taken = snapshot_time(data)
        age = None if taken is None else time.time() - taken
        if self.max_snapshot_age > 0 and age is not None and age > self.max_snapshot_age:
            raise ProbeError(f"its last GPU reading is {age:.0f} s old: its probe seems stuck")
        return inventory

    @staticmethod
    def _unreachable(endpoint: AgentEndpoint, error: str) -> Unreachable:
        return Unreachable(
            endpoint.node, endpoint.url, f"agent of {endpoint.node} at {endpoint.url}: {error}"
        )

    def _log_transition(self, key: tuple[str, str], reading: AgentReading) -> None:
        """Log when a node's agent goes away or comes back, not on every read."""
        if isinstance(reading, Unreachable):
            if self._down.get(key) != reading.error:
                self.log.warning("GPU node unreachable: %s", reading.error)
            self._down[key] = reading.error
        elif self._down.pop(key, None) is not None:
            self.log.info("GPU node %s: its agent answers again", key[0])


def _error_text(body: bytes | None) -> str:
    """The ``error`` sentence of an agent's JSON error body, else a short excerpt."""
    text = (body or b"").decode("utf-8", "replace")
    try:
        message = json.loads(text).get("error")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else text[:200]
