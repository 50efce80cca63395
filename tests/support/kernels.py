"""A kernel on a user's server, used as a notebook uses it, through the hub's proxy: the
kernel REST API starts it, an ``execute_request`` over the kernel websocket runs a cell
(Jupyter's messaging protocol 5.3)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import httpx
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from tests.support.hub import Hub


def start_kernel(hub: Hub, user: str) -> str:
    """A new kernel on ``user``'s server; its id."""
    r = httpx.post(
        f"{hub.url}/user/{user}/api/kernels",
        headers={"Authorization": f"token {hub.token}"},
        json={},
        timeout=60,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def execute(
    hub: Hub,
    user: str,
    kernel: str,
    code: str,
    until: Callable[[dict[str, Any]], bool],
    timeout: float = 60,
) -> list[dict[str, Any]]:
    """Send ``code`` to ``kernel`` and read the messages about it (those whose parent is
    this request) until one satisfies ``until``; all of them, that one last. The
    websocket is closed then: a cell still running keeps running, as with a closed tab."""
    headers = {"Authorization": f"token {hub.token}"}
    url = "ws" + hub.url[4:] + f"/user/{user}/api/kernels/{kernel}/channels"
    ws = await websocket_connect(HTTPRequest(url, headers=headers, connect_timeout=timeout))
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "username": user,
        "session": uuid.uuid4().hex,
        "date": datetime.now(timezone.utc).isoformat(),
        "version": "5.3",
    }
    content = {"code": code, "silent": False, "store_history": False}
    content |= {"user_expressions": {}, "allow_stdin": False}
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    await ws.write_message(json.dumps({**message, "channel": "shell"}))
    seen: list[dict[str, Any]] = []
    try:
        while True:
            raw = await asyncio.wait_for(ws.read_message(), timeout)
            assert raw is not None, "the kernel websocket closed before the cell ended"
            msg = json.loads(raw) if isinstance(raw, str) else {}
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            seen.append(msg)
            if until(msg):
                return seen
    finally:
        ws.close()


def _replied(msg: dict[str, Any]) -> bool:
    return msg.get("msg_type") == "execute_reply"


def _busy(msg: dict[str, Any]) -> bool:
    return msg.get("msg_type") == "status" and msg["content"].get("execution_state") == "busy"


def run_cell(hub: Hub, user: str, kernel: str, code: str) -> str:
    """Run ``code`` in ``kernel`` of ``user``'s server to its end; its output (streams,
    and an error as ``name: value``)."""
    out: list[str] = []
    for msg in asyncio.run(execute(hub, user, kernel, code, _replied)):
        if msg.get("msg_type") == "stream":
            out.append(msg["content"]["text"])
        elif msg.get("msg_type") == "error":
            out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
    return "".join(out).strip()


def start_busy_kernel(hub: Hub, user: str, seconds: int = 600) -> str:
    """A new kernel on ``user``'s server running ``time.sleep(seconds)``; returns its id
    once the kernel said it is busy with that cell, which nobody watches then."""
    kernel = start_kernel(hub, user)
    code = f"import time; time.sleep({seconds})"
    asyncio.run(execute(hub, user, kernel, code, _busy, timeout=30))
    return kernel
