"""The spawner's own wait for a new server's first answer (hub/answer.py), against real
HTTP servers on this machine."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from tornado.httpserver import HTTPServer
from tornado.web import Application, RequestHandler

from jupyterhub_gpu.hub.answer import Answer, answers, first_answer, log_tail


class Redirect(RequestHandler):
    def get(self) -> None:
        self.redirect("/user/alice/lab")


class Broken(RequestHandler):
    def get(self) -> None:
        self.set_status(503)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def serve(handler: type[RequestHandler], port: int) -> HTTPServer:
    server = HTTPServer(Application([(r"/.*", handler)]))
    server.listen(port, "127.0.0.1")
    return server


@pytest.fixture
async def port() -> AsyncIterator[int]:
    yield free_port()


async def running() -> int | None:
    return None


async def test_a_redirect_is_an_answer_a_5xx_and_a_refusal_are_not(port: int) -> None:
    url = f"http://127.0.0.1:{port}/user/alice/"
    assert not await answers(url)  # nothing listens
    broken = await serve(Broken, port)
    try:
        assert not await answers(url)
    finally:
        broken.stop()
    other = free_port()
    ok = await serve(Redirect, other)
    try:
        assert await answers(f"http://127.0.0.1:{other}/user/alice/")
    finally:
        ok.stop()


async def test_the_answer_is_seen_within_a_tenth_of_a_second(port: int) -> None:
    """The server starts listening 1.3 s in; the wait returns within 0.1 s of it (plus
    one check's time), where JupyterHub's back-off might look again only at ~3 s."""
    loop = asyncio.get_running_loop()
    listening_at: list[float] = []

    async def start_late() -> HTTPServer:
        await asyncio.sleep(1.3)
        server = await serve(Redirect, port)
        listening_at.append(loop.time())
        return server

    late = asyncio.ensure_future(start_late())
    answer = await first_answer(f"http://127.0.0.1:{port}/user/alice/", 10, running)
    seen_at = loop.time()
    (await late).stop()
    assert answer == Answer(answered=True)
    assert 0 <= seen_at - listening_at[0] < 0.35, seen_at - listening_at[0]


async def test_an_exited_container_ends_the_wait_with_its_code(port: int) -> None:
    looks = 0

    async def exits_on_second_look() -> int | None:
        nonlocal looks
        looks += 1
        return 3 if looks >= 2 else None

    loop = asyncio.get_running_loop()
    began = loop.time()
    answer = await first_answer(
        f"http://127.0.0.1:{port}/", 30, exits_on_second_look, container_every=0.2
    )
    assert answer == Answer(answered=False, exit_code=3)
    assert looks == 2 and loop.time() - began < 5


async def test_no_answer_within_the_time_gives_up_and_looks_at_the_container_last(
    port: int,
) -> None:
    looks: list[float] = []
    loop = asyncio.get_running_loop()

    async def still_running() -> int | None:
        looks.append(loop.time())
        return None

    began = loop.time()
    answer = await first_answer(f"http://127.0.0.1:{port}/", 0.5, still_running, container_every=10)
    took = loop.time() - began
    assert answer == Answer(answered=False)
    assert 0.4 <= took < 3, took
    assert looks, "the container is looked at before giving up"


async def test_a_server_that_accepts_but_never_answers_is_not_an_answer() -> None:
    """tornado raises its own 599 (a timeout) even with raise_error=False: not up yet,
    never an error that would fail a start JupyterHub itself would have waited for."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts; nobody ever reads or answers
        port = silent.getsockname()[1]
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert not await answers(f"http://127.0.0.1:{port}/user/alice/", timeout=0.3)
        answer = await first_answer(f"http://127.0.0.1:{port}/", 0.8, running)
        assert answer == Answer(answered=False)
        assert loop.time() - began < 3


async def test_no_check_outlasts_the_time_given(port: int) -> None:
    """A node slow to say whether the container runs, a check that would take its full
    2 s: the wait still ends close to its end, so start never outlives start_timeout."""
    loop = asyncio.get_running_loop()
    timeouts: list[float] = []

    async def slow_check(url: str, timeout: float) -> bool:
        timeouts.append(timeout)
        await asyncio.sleep(timeout)
        return False

    async def slow_node() -> int | None:
        await asyncio.sleep(30)
        return None

    began = loop.time()
    answer = await first_answer("http://x/", 0.6, slow_node, check=slow_check)
    took = loop.time() - began
    assert answer == Answer(answered=False)
    assert took < 1.0, took
    assert all(t <= 0.6 for t in timeouts), timeouts


def test_an_exited_servers_output_is_bounded_escaped_and_hides_its_credentials() -> None:
    token = "f3a9c0ffee0123456789abcdef"
    output = (
        b"".join(b"line %d\n" % i for i in range(100))
        + f"JUPYTERHUB_API_TOKEN={token}\n".encode()
        + b"[E 2026-11-27 JupyterHub app:1] forged\x1b[31m\r\n"
    )
    text = log_tail(output, [token, ""], lines=5)
    lines = text.splitlines()
    assert len(lines) == 5 and all(line.startswith("  | ") for line in lines)
    assert token not in text and "JUPYTERHUB_API_TOKEN=[secret]" in text
    assert "\x1b" not in text and "\\x1b[31m" in text  # a terminal escape, shown, not run
    assert lines[0] == "  | line 97"
    assert len(log_tail(b"x" * 100_000, [], lines=20, limit=4000)) <= 4000 + 4
