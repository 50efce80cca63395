"""The spawner's own wait for a new server's first answer (hub/answer.py), against real
HTTP servers on this machine."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from tornado.httpserver import HTTPServer
from tornado.web import Application, RequestHandler

from jupyterhub_gpu.hub.answer import Answer, answers, first_answer


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
