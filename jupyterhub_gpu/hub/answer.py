"""Waiting, inside the spawner's ``start``, for a new server's first HTTP answer.

JupyterHub checks a started server itself (``User._wait_up``), but with an exponential,
jittered back-off: after a failed check it sleeps a random time of up to 0.2 s, 0.4 s,
0.8 s, 1.6 s, 3.2 s, then 5 s. A server that needs 3 s to import JupyterLab is therefore
seen up to seconds after it answers, and every user waits for that. ``first_answer``
checks the same URL with the same rule (any answer under 500 counts, as in
``jupyterhub.utils.wait_for_http_server``) every ``interval`` seconds, and looks at the
container now and then so that a server that exits is reported at once, with its exit
code, instead of after ``http_timeout``. When it returns, JupyterHub's own first check
succeeds at once; when it gives up, JupyterHub's wait goes on as before.

The user's server decides what it answers (her ``~/.jupyter`` configuration can make it
answer 503 with 100 MiB, ten times a second): each check has an HTTP client of its own,
closed when it ends, that reads the status and headers, throws the body away as it comes
and cuts the connection past :data:`BODY_LIMIT` bytes of it. The hub's shared client, its
slots and its memory are never the user's to fill.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jupyterhub.spawner import SpawnException
from jupyterhub.utils import fmt_ip_url
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.httputil import HTTPInputError, parse_response_start_line
from tornado.simple_httpclient import SimpleAsyncHTTPClient

from jupyterhub_gpu.core.words import one_line
from jupyterhub_gpu.errors import NodeError, NotOnNode
from jupyterhub_gpu.hub.refusal import spawn_refusal

# What a check of the container says: None while it runs, else its exit code.
ExitCheck = Callable[[], Awaitable[int | None]]

#: The most of an answer's body a check reads (and drops) before it cuts the connection;
#: the status, read before it, still decides.
BODY_LIMIT = 64 * 1024
#: What a check's connection holds at once: headers (tornado's limit: 64 KiB), a piece of body.
BUFFER_LIMIT = 256 * 1024


@dataclass(frozen=True)
class Answer:
    """How the wait ended: the server answered, its container exited (with this code),
    or neither within the time given."""

    answered: bool
    exit_code: int | None = None


async def answers(url: str, timeout: float = 2.0) -> bool:
    """One check, JupyterHub's rule: any HTTP answer under 500 (a redirect to the login
    or to JupyterLab included); a refused connection, a silence, a 5xx is not an answer
    yet. Even with ``raise_error=False`` tornado raises its own 599s (a timeout, a body
    over :data:`BODY_LIMIT`): then the status, if its head came whole, decides, since the
    body is never looked at. A client of its own (not the hub's shared one), closed here."""
    head = _Head()
    request = HTTPRequest(
        url,
        method="GET",
        follow_redirects=False,
        connect_timeout=timeout,
        request_timeout=timeout,
        header_callback=head.line,
        streaming_callback=_drop,
    )
    client = SimpleAsyncHTTPClient(
        force_instance=True, max_body_size=BODY_LIMIT, max_buffer_size=BUFFER_LIMIT
    )
    code: int | None
    try:
        code = (await client.fetch(request, raise_error=False)).code
    except (OSError, asyncio.TimeoutError, HTTPClientError):
        code = head.code  # None: no head came (refused, timed out, not HTTP)
    finally:
        client.close()
    return code is not None and 200 <= code < 500  # 599: tornado's "no answer"


def _drop(chunk: bytes) -> None:
    """A check's ``streaming_callback``: the body is not kept."""


class _Head:
    """The status of the last response head a check read whole: tornado's
    ``header_callback`` gives each head (a 1xx's, then the answer's) as its start line,
    its header lines, then an empty line, once it has parsed all of it."""

    def __init__(self) -> None:
        self.code: int | None = None
        self._starts = True

    def line(self, line: str) -> None:
        if self._starts:
            try:
                self.code = parse_response_start_line(line.strip()).code
            except HTTPInputError:
                self.code = None
        self._starts = line == "\r\n"


async def first_answer(
    url: str,
    seconds: float,
    exited: ExitCheck,
    interval: float = 0.1,
    container_every: float = 1.0,
    check: Callable[[str, float], Awaitable[bool]] = answers,
    check_timeout: float = 2.0,
) -> Answer:
    """Check ``url`` every ``interval`` s for at most ``seconds`` s, and the container
    (``exited``) every ``container_every`` s; the first of: an answer, an exit, the end.
    No check outlasts the end: each is bounded by the time left."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    def left() -> float:
        return max(0.05, deadline - loop.time())

    next_look = loop.time() + container_every
    while True:
        if await check(url, min(check_timeout, left())):
            return Answer(answered=True)
        now = loop.time()
        if now >= next_look or now + interval >= deadline:
            try:
                code = await asyncio.wait_for(exited(), left())
            except asyncio.TimeoutError:
                code = None  # the node is slow to say: JupyterHub's own wait goes on
            if code is not None:
                return Answer(answered=False, exit_code=code)
            next_look = loop.time() + container_every
        if loop.time() + interval >= deadline:
            return Answer(answered=False)
        await asyncio.sleep(interval)


def log_tail(output: bytes, secrets: Sequence[str], lines: int = 20, limit: int = 4000) -> str:
    """An exited server's last output, fit for the hub's log: every one of ``secrets``
    (the server's own credentials, which a start command that prints its environment
    would show) replaced first, in all of ``output``, then its last ``lines`` lines (at
    most ``limit`` bytes; a cut can't leave part of a secret, too short to be replaced),
    control characters escaped (:func:`~jupyterhub_gpu.core.words.one_line`) and each
    line marked as the server's, so that it can't pass for the hub's own log lines."""
    for secret in secrets:
        if secret:
            output = output.replace(secret.encode(), b"[secret]")
    text = output[-limit:].decode("utf-8", "replace")
    kept = text.splitlines()[-lines:]
    return "\n".join("  | " + one_line(line) for line in kept)


def exited_refusal(code: int, node: str) -> SpawnException:
    """What a user is told when their container exits while starting (``code``: its exit
    code, -1 when the container is gone)."""
    how = f"exit code {code}" if code >= 0 else "its container exited and is gone"
    return spawn_refusal(
        f"Your server stopped while starting ({how}): its image's start command "
        f"failed on node {node}. Start again; if it happens again, choose "
        "another image or tell an admin (the hub's log has the server's last lines "
        "when the node kept them).",
        reason="server_exited",
        status_code=500,
    )


async def exit_code(call: Callable[..., Awaitable[Any]], container_id: str) -> int | None:
    """None while the container runs (or its node can't say); else its exit code, -1 when
    it is gone (``call``: a Docker call on its node that raises ours, ``Cluster.run``)."""
    try:
        info = await call("inspect_container", container_id)
    except NotOnNode:
        return -1
    except NodeError:
        return None
    state = info.get("State") or {}
    if state.get("Running") or state.get("Status") in ("created", "restarting"):
        return None
    return int(state.get("ExitCode", -1))


def answer_window(
    began: float, now: float, start_timeout: float, http_timeout: float, check_for: float
) -> float:
    """Seconds ``start`` checks a new server for its first answer itself: ``check_for``
    (``answer_check_timeout``), at most ``http_timeout`` and what is left of
    ``start_timeout`` (since ``began``) but a second."""
    return min(check_for, float(http_timeout), began + float(start_timeout) - now - 1.0)


async def answer_or_exit(
    ip_port: tuple[str, int],
    base_url: str,
    window: float,
    call: Callable[..., Awaitable[Any]],
    container_id: str,
) -> int | None:
    """``start``'s own fast wait for a new server's first answer (so that JupyterHub's
    first check succeeds at once): None once it answers or ``window`` ends, its container's
    exit code if it exits meanwhile (``call``: a Docker call on its node)."""
    url = f"http://{fmt_ip_url(ip_port[0])}:{ip_port[1]}{base_url}"
    answer = await first_answer(url, window, lambda: exit_code(call, container_id))
    return answer.exit_code


async def exited(
    call: Callable[..., Awaitable[Any]],
    container_id: str,
    code: int,
    *,
    secrets: Sequence[str],
    log: logging.Logger,
    holder: str,
    node: str,
) -> SpawnException:
    """What a user is told when their container exits while starting (:func:`exited_refusal`);
    its last lines (when the node still has them), bounded, ``secrets`` hidden, go to the
    hub's log for the admin (:func:`log_tail`)."""
    with contextlib.suppress(NodeError):
        raw = await call("logs", container_id, tail=20)
        log.warning(
            "%s: server exited while starting on node %s; its last lines:\n%s",
            holder,
            node,
            log_tail(bytes(raw or b""), secrets),
        )
    return exited_refusal(code, node)


#: the environment variables whose values never reach the hub's log (an exited server's
#: output that prints its environment)
SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)


async def spawner_exited(spawner: Any, code: int) -> SpawnException:
    """:func:`exited` for a GPUDockerSpawner whose container exited while starting: its
    environment's secrets and its server token hidden from the log."""
    env = spawner.get_env()
    secrets = [str(v) for k, v in env.items() if SECRET_ENV.search(k)]
    return await exited(
        spawner._on_node,
        spawner.container_id,
        code,
        secrets=[*secrets, str(spawner.api_token or "")],
        log=spawner.log,
        holder=spawner.holder,
        node=spawner.node_name,
    )


async def spawner_answer(spawner: Any, ip_port: tuple[str, int]) -> None:
    """A GPUDockerSpawner's own fast wait for its server's first answer, once its
    container runs (a new one, or one resumed from a checkpoint): within what is left of
    ``start_timeout`` since ``start`` began, at most ``http_timeout`` and
    ``answer_check_timeout``; a container that exits meanwhile fails the start."""
    loop = asyncio.get_running_loop()
    began = spawner._start_began or loop.time()
    timeouts = (spawner.start_timeout, spawner.http_timeout, spawner.answer_check_timeout)
    window = answer_window(began, loop.time(), *timeouts)
    if window <= 0 or spawner.internal_ssl or spawner.server is None:
        return
    base_url = spawner.server.base_url
    code = await answer_or_exit(ip_port, base_url, window, spawner._on_node, spawner.container_id)
    if code is not None:
        raise await spawner_exited(spawner, code)
