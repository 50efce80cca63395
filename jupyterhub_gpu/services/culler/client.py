"""The culler's HTTP edges: the hub's REST API, single-user servers, node agents.

Every call goes through one injected ``httpx.AsyncClient`` with an explicit timeout and
returns plain data (dicts, :mod:`~jupyterhub_gpu.core.culling.idleness` dataclasses). Agents'
answers go through the one parser of them, :mod:`jupyterhub_gpu.wire.agent`. Failures
raise ``httpx.HTTPError`` (network, status) or :class:`~jupyterhub_gpu.errors.ProbeError`
(an answer that breaks its contract); the service decides what a failure means.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from jupyterhub_gpu.core.culling.idleness import KernelObservation, KernelsObservation
from jupyterhub_gpu.core.inventory import GpuProcess
from jupyterhub_gpu.core.times import parse_time
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.wire.agent import DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_GPUS, parse_agent_body
from jupyterhub_gpu.wire.agent_list import decode_agent_list

PAGINATION = "application/jupyterhub-pagination+json"
MAX_PAGES = 10_000
#: Bytes a single-user server may answer the culler (a kernel is ~300; 1,000s fit).
MAX_SERVER_ANSWER = 2 * 1024 * 1024


def describe_failure(e: Exception, timeout: float) -> str:
    """A failed call in a few words for one log line. httpx's text for a timeout is often
    empty and for a status error spans lines; a ``ProbeError`` already says what was wrong."""
    if isinstance(e, httpx.TimeoutException):
        return f"no answer within {timeout:g}s"
    if isinstance(e, httpx.HTTPStatusError):
        response = e.response
        return f"HTTP {response.status_code} {response.reason_phrase} from {e.request.url.path}"
    return str(e) or type(e).__name__


AGENT_LIST_LIMIT = 4 << 20  # bytes of the hub's agent list


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


class HubAPI:
    """The few hub API calls the culler makes, with the service's own token: sent to the
    hub API only, never to a single-user server (see :mod:`~jupyterhub_gpu.core.culling.access`)."""

    def __init__(
        self, client: httpx.AsyncClient, api_url: str, token: str, *, page_size: int, timeout: float
    ) -> None:
        self.client = client
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.page_size = page_size
        self.timeout = timeout

    async def ready_users(self) -> list[dict[str, Any]]:
        """Every user with a ready server (``?state=ready``), following pagination."""
        url = httpx.URL(f"{self.api_url}/users")
        params: dict[str, str] | None = {"state": "ready"}
        if self.page_size and params is not None:
            params["limit"] = str(self.page_size)
        headers = {**_auth(self.token), "Accept": PAGINATION}
        users: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            resp = await self.client.get(url, params=params, headers=headers, timeout=self.timeout)
            resp.raise_for_status()
            model = resp.json()
            if isinstance(model, list):  # a hub without pagination
                return users + [u for u in model if isinstance(u, dict)]
            if not isinstance(model, Mapping) or not isinstance(model.get("items"), list):
                raise ProbeError("hub answered /users without an 'items' list")
            users.extend(u for u in model["items"] if isinstance(u, dict))
            nxt = (model.get("_pagination") or {}).get("next")
            if not nxt or not nxt.get("url"):
                return users
            url, params = url.join(nxt["url"]), None
        raise ProbeError(f"hub /users pagination did not end after {MAX_PAGES} pages")

    async def agents(self) -> tuple[bool, dict[str, str]]:
        """The hub's nodes and their agent URLs (``GET /hub/api/gpu/agents``, scope
        ``custom:gpu-agents:read``): ``(loaded, {node: url})``."""
        resp = await self.client.get(
            f"{self.api_url}/gpu/agents", headers=_auth(self.token), timeout=self.timeout
        )
        resp.raise_for_status()
        if len(resp.content) > AGENT_LIST_LIMIT:
            raise ProbeError(f"the hub's agent list is over {AGENT_LIST_LIMIT} bytes")
        try:
            return decode_agent_list(resp.json())
        except ValueError:
            raise ProbeError("the hub's agent list is not JSON") from None

    async def suspend_server(self, user: str, server: str, timeout: float) -> httpx.Response:
        """Ask the hub to suspend one server instead of stopping it (``POST
        /hub/api/gpu/users/{user}[/servers/{name}]/suspend``, docs/culler.md); its answer
        as it came (200 suspended; 409 or 503: not, and why), waited for ``timeout`` s (a
        checkpoint takes seconds to minutes)."""
        path = f"/gpu/users/{quote(user, safe='')}/suspend"
        if server:
            path = f"/gpu/users/{quote(user, safe='')}/servers/{quote(server, safe='')}/suspend"
        return await self.client.post(
            self.api_url + path, headers=_auth(self.token), timeout=timeout
        )

    async def stop_server(self, user: str, server: str) -> int:
        """Stop one server; returns the status code (204 stopped, 202 stopping)."""
        path = f"/users/{quote(user, safe='')}/server"
        if server:
            path = f"/users/{quote(user, safe='')}/servers/{quote(server, safe='')}"
        resp = await self.client.delete(
            self.api_url + path, headers=_auth(self.token), timeout=self.timeout
        )
        resp.raise_for_status()
        return resp.status_code


#: seconds the culler waits for the hub to suspend a server (a checkpoint takes seconds
#: to minutes; the hub bounds it by GPUCluster.suspend_timeout)
SUSPEND_WAIT = 600.0


async def ask_suspend(hub: HubAPI, user: str, server: str) -> tuple[bool, str]:
    """Ask the hub to suspend ``user``'s ``server`` (waiting up to :data:`SUSPEND_WAIT`):
    ``(True, its answer)`` when it did, else ``(False, what its answer says)`` on one line
    (:func:`hub_message`: 409 it will not, 503 the checkpoint failed; the server still
    runs either way), each bounded. The culler decides what a refusal means
    (docs/culler.md)."""
    resp = await hub.suspend_server(user, server, SUSPEND_WAIT)
    if resp.status_code == 200:
        return True, " ".join(resp.text[:300].split())
    return False, hub_message(resp)


def hub_message(resp: httpx.Response) -> str:
    """What the hub's error answer says (JupyterHub's ``{"status", "message"}``), on one
    line, bounded; its status when it says nothing."""
    message = ""
    try:
        body = resp.json()
        if isinstance(body, Mapping) and isinstance(body.get("message"), str):
            message = body["message"]
    except ValueError:
        pass
    words = " ".join(message.split())[:300]
    return f"HTTP {resp.status_code}: {words}" if words else f"HTTP {resp.status_code}"


async def _get_json(
    client: httpx.AsyncClient, url: str, token: str, timeout: float, limit: int
) -> Any:
    """GET ``url`` as JSON from a single-user server, whose answer is its user's to write:
    no redirect is followed (the token goes to this URL only) and a body over ``limit``
    bytes, or JSON too deep to parse, is a :class:`ProbeError`."""
    body = bytearray()
    async with client.stream(
        "GET",
        url,
        params={"no_track_activity": "1"},
        headers=_auth(token),
        timeout=timeout,
        follow_redirects=False,
    ) as resp:
        resp.raise_for_status()
        async for chunk in resp.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise ProbeError(f"{url} answered more than {limit} bytes")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise ProbeError(f"{url} did not answer readable JSON") from None


async def read_kernels(
    client: httpx.AsyncClient,
    server_url: str,
    token: str,
    timeout: float,
    limit: int = MAX_SERVER_ANSWER,
) -> KernelsObservation:
    """``/api/kernels`` and ``/api/status`` of one single-user server, without counting as
    activity there (``no_track_activity=1``). ``token`` must be that server's own token
    (:mod:`~jupyterhub_gpu.core.culling.access`): whatever the server receives, its user
    can read."""
    base = server_url.rstrip("/") + "/"
    got: dict[str, Any] = {}
    for name in ("kernels", "status"):
        got[name] = await _get_json(client, f"{base}api/{name}", token, timeout, limit)
    if not isinstance(got["kernels"], list) or not isinstance(got["status"], Mapping):
        raise ProbeError(f"unexpected answer from {base}api/kernels or api/status")
    kernels = tuple(
        KernelObservation(
            execution_state=str(k.get("execution_state") or "unknown"),
            last_activity=parse_time(k.get("last_activity")),
            kernel_id=str(k.get("id") or ""),
        )
        for k in got["kernels"]
        if isinstance(k, Mapping)
    )
    return KernelsObservation(kernels, parse_time(got["status"].get("last_activity")))


@dataclass(frozen=True)
class GpuReading:
    """One GPU in a node agent's answer, as far as the culler cares."""

    uuid: str
    utilization_pct: float
    memory_used_mib: float | None
    # each process with its container (None: the agent reports no per-process data)
    processes: tuple[GpuProcess, ...] | None = None


def _agent_readings(body: bytes, max_gpus: int) -> tuple[str, list[GpuReading]]:
    """An agent's raw answer -> (its node name, its GPUs' readings), through the one
    parser of the agents' answers (:func:`~jupyterhub_gpu.wire.agent.parse_agent_body`).
    CPU-bound: run off the event loop."""
    inventory, _taken = parse_agent_body(body, max_gpus)
    return inventory.name, [
        GpuReading(g.uuid, g.utilization_pct, float(g.memory_used_mib), g.processes)
        for g in inventory.gpus
    ]


async def read_agent(
    client: httpx.AsyncClient,
    agent_url: str,
    token: str,
    timeout: float,
    *,
    limit: int = DEFAULT_MAX_BODY_SIZE,
    max_gpus: int = DEFAULT_MAX_GPUS,
    executor: Executor | None = None,
) -> tuple[str, list[GpuReading]]:
    """One node agent's current GPU readings: ``token`` is that node's own token
    (:func:`~jupyterhub_gpu.core.tokens.node_token`). The answer is untrusted: no
    redirect is followed, a body over ``limit`` bytes (declared or sent) is not read, and
    it is parsed in ``executor`` (default: the loop's) by the agents' one parser; any
    problem is a :class:`ProbeError` naming it."""
    url = f"{agent_url.rstrip('/')}/v1/gpus"
    body = bytearray()
    async with client.stream(
        "GET",
        url,
        headers={**_auth(token), "Accept": "application/json"},
        timeout=timeout,
        follow_redirects=False,
    ) as resp:
        if resp.status_code in (401, 403):
            raise ProbeError(
                f"agent {agent_url} refused its token (HTTP {resp.status_code}): it needs its "
                "node's own token, derived from the site secret (docs/agent.md)"
            )
        resp.raise_for_status()
        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise ProbeError(f"agent {agent_url} answers {declared} bytes, more than {limit}")
        async for chunk in resp.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise ProbeError(f"agent {agent_url} answered more than {limit} bytes")
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(executor, _agent_readings, bytes(body), max_gpus)
    except ProbeError as e:
        raise ProbeError(f"agent {agent_url}: {e}") from None
    except Exception as e:  # a bug in the parser, not the agent's answer: still one node
        raise ProbeError(f"agent {agent_url}: answer not read ({type(e).__name__})") from None
