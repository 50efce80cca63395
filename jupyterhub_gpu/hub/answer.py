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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

# What a check of the container says: None while it runs, else its exit code.
ExitCheck = Callable[[], Awaitable[int | None]]


@dataclass(frozen=True)
class Answer:
    """How the wait ended: the server answered, its container exited (with this code),
    or neither within the time given."""

    answered: bool
    exit_code: int | None = None


async def answers(url: str, timeout: float = 2.0) -> bool:
    """One check, JupyterHub's rule: any HTTP answer under 500 (a redirect to the login
    or to JupyterLab included); a refused connection or a 5xx is not an answer yet."""
    request = HTTPRequest(
        url, method="GET", follow_redirects=False, connect_timeout=timeout, request_timeout=timeout
    )
    try:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
    except (OSError, asyncio.TimeoutError):
        return False
    return response.code < 500  # 599: tornado's "no answer" (refused, timed out)


async def first_answer(
    url: str,
    seconds: float,
    exited: ExitCheck,
    interval: float = 0.1,
    container_every: float = 1.0,
    check: Callable[[str], Awaitable[bool]] = answers,
) -> Answer:
    """Check ``url`` every ``interval`` s for at most ``seconds`` s, and the container
    (``exited``) every ``container_every`` s; the first of: an answer, an exit, the end."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    next_look = loop.time() + container_every
    while True:
        if await check(url):
            return Answer(answered=True)
        now = loop.time()
        if now >= next_look or now + interval >= deadline:
            code = await exited()
            if code is not None:
                return Answer(answered=False, exit_code=code)
            next_look = loop.time() + container_every
        if loop.time() + interval >= deadline:
            return Answer(answered=False)
        await asyncio.sleep(interval)
