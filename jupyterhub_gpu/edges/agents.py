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

An answer is untrusted: its body is capped (``max_body_size``, the transfer is cut when
the cap is passed), parsed in a worker thread by :func:`~.wire.parse_agent_body` (one
parser for everyone) with a cap on GPUs (``max_gpus``); any failure makes that one node
``Unreachable`` with a sentence saying why, logged once. ``https://`` agents are verified
against ``ca_cert``. Each endpoint carries its node's own token (:mod:`.tokens`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.simple_httpclient import HTTPTimeoutError
from traitlets import Float, Instance, Integer, Unicode, default, validate
from traitlets.config import Config, LoggingConfigurable

from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.errors import ConfigError, ProbeError
from jupyterhub_gpu.wire.agent import (
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_GPUS,
    agent_error_text,
    parse_agent_body,
)


@dataclass(frozen=True)
class AgentEndpoint:
    """Where a node's agent answers, and the token it wants (never shown in reprs)."""

    node: str
    url: str  # base URL, e.g. "http://10.0.0.12:9450"
    token: str = field(repr=False)  # this node's own token; "" = none could be derived

    @classmethod
    def for_node(cls, node: str, url: str, site_secret: str) -> AgentEndpoint:
        """The endpoint of ``node`` with its token derived from the site secret
        (:func:`~.tokens.node_token`); a missing or short secret gives no token, and
        reading the agent then reports that instead of sending anything."""
        try:
            token = node_token(site_secret, node)
        except ValueError:
            token = ""
        return cls(node, url, token)


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
    max_body_size = Integer(
        DEFAULT_MAX_BODY_SIZE,
        config=True,
        help="""Largest agent answer read, in bytes (default 2 MiB, ~6,000 GPUs' worth).
        A larger one is cut off as it arrives and the node counts as unreachable.""",
    )
    max_gpus = Integer(
        DEFAULT_MAX_GPUS,
        config=True,
        help=f"""Most GPUs one agent may list (default {DEFAULT_MAX_GPUS}); an answer with
        more makes its node unreachable instead of flooding placement.""",
    )
    ca_cert = Unicode(
        "",
        config=True,
        help="""CA bundle (PEM) that ``https://`` agents' certificates must chain to, with
        the host name of the ``agent_url`` in the certificate. Default '': the system's
        CAs. Example: ``c.AgentClient.ca_cert = "/etc/jupyterhub-gpu/agents-ca.pem"``.""",
    )
    http_client = Instance(
        AsyncHTTPClient,
        help="""The tornado HTTP client used for agents. Default: a client of its own with
        ``max_clients`` = ``concurrency``. Inject another one for tests.""",
    )
    executor = Instance(
        Executor,
        help="""Where answers are parsed, off the event loop. Default: a pool of 2 threads.""",
    )

    @default("http_client")
    def _default_http_client(self) -> AsyncHTTPClient:
        # tornado itself drops a connection past twice the cap (our own count stops at the
        # cap and names it); it also refuses a Content-Length over it before any body
        return AsyncHTTPClient(
            force_instance=True, max_clients=self.concurrency, max_body_size=2 * self.max_body_size
        )

    @default("executor")
    def _default_executor(self) -> Executor:
        return ThreadPoolExecutor(2, thread_name_prefix="agent-answers")

    @validate("ca_cert")
    def _check_ca_cert(self, proposal: Any) -> str:
        path = str(proposal["value"])
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"AgentClient.ca_cert: cannot read {path!r}; give a PEM CA file")
        return path

    @validate("max_body_size", "max_gpus")
    def _check_positive(self, proposal: Any) -> int:
        value = int(proposal["value"])
        if value < 1:
            raise ConfigError(f"AgentClient.{proposal['trait'].name} must be >= 1, got {value}")
        return value

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
        if not endpoint.token:
            return self._unreachable(
                endpoint,
                "no agent token: set c.GPUCluster.agent_token (or "
                "$JUPYTERHUB_GPU_AGENT_TOKEN) to a site secret of at least 16 characters",
            )
        body = _CappedBody(self.max_body_size)
        request = HTTPRequest(
            endpoint.url.rstrip("/") + "/v1/gpus",
            headers={"Authorization": f"token {endpoint.token}", "Accept": "application/json"},
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            follow_redirects=False,
            header_callback=body.header_line,
            streaming_callback=body.chunk,
            validate_cert=True,
            ca_certs=self.ca_cert or None,
        )
        try:
            response = await asyncio.wait_for(
                self.http_client.fetch(request, raise_error=False), self.timeout + 0.5
            )
        except (asyncio.TimeoutError, HTTPTimeoutError):
            error = f"no answer within {self.timeout:g} s"
            return self._unreachable(endpoint, body.too_big_error() or error)
        except Exception as e:  # refused, reset, TLS, DNS...: any failure means "unreachable"
            error = f"cannot reach it ({type(e).__name__}: {e})"
            return self._unreachable(endpoint, body.too_big_error() or error)
        try:
            if body.too_big_error():
                raise ProbeError(body.too_big_error())
            return await self._parse(endpoint, response.code, body.data())
        except ProbeError as e:
            return self._unreachable(endpoint, str(e))

    async def _parse(self, endpoint: AgentEndpoint, code: int, body: bytes) -> NodeInventory:
        if code in (401, 403):
            raise ProbeError(
                f"it refused the hub's token (HTTP {code}); check that the agent has this "
                "node's token, derived from the hub's site secret (docs/agent.md)"
            )
        if code != 200:
            raise ProbeError(f"HTTP {code}: {agent_error_text(body)}")
        loop = asyncio.get_running_loop()
        try:
            inventory, taken = await loop.run_in_executor(
                self.executor, parse_agent_body, body, self.max_gpus
            )
        except ProbeError:
            raise
        except Exception as e:  # a bug in the parser, not the agent: say so once
            self.log.error("Agent answer of %s not parsed", endpoint.node, exc_info=True)
            raise ProbeError(f"its answer could not be read ({type(e).__name__})") from None
        if inventory.name != endpoint.node:
            raise ProbeError(
                f"it serves node {inventory.name!r}, but is configured for {endpoint.node!r}"
            )
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


class _CappedBody:
    """Collects an answer's body up to ``limit`` bytes; past it, keeps nothing more and
    remembers that the answer was too large (a declared Content-Length counts too)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self._declared: int | None = None

    def header_line(self, line: str) -> None:
        name, _, value = line.partition(":")
        digits = value.strip()
        if name.strip().lower() == "content-length" and digits.isdigit():
            self._declared = int(digits) if len(digits) < 19 else self.limit + 1

    def chunk(self, data: bytes) -> None:
        self._size += len(data)
        if self._size <= self.limit:
            self._chunks.append(data)
        else:
            self._chunks.clear()

    def too_big_error(self) -> str:
        size = max(self._size, self._declared or 0)
        if size <= self.limit:
            return ""
        return f"its answer is larger than {self.limit} bytes (AgentClient.max_body_size); not read"

    def data(self) -> bytes:
        return b"".join(self._chunks)


def agent_client(config: Config | None, log: logging.Logger, **defaults: Any) -> AgentClient:
    """An :class:`AgentClient` that reads ``c.AgentClient.*`` from the hub's ``config``;
    ``defaults`` (e.g. ``timeout=...``) apply only to traits the config leaves unset."""
    config = config if config is not None else Config()
    section = config["AgentClient"] if "AgentClient" in config else Config()
    unset = {name: value for name, value in defaults.items() if name not in section}
    return AgentClient(config=config, log=log, **unset)
