"""The spawner's own wait for a new server's first answer (hub/answer.py), against real
HTTP servers on this machine."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer
from tornado.iostream import StreamClosedError
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


async def serve(handler: type[RequestHandler], port: int, **kwargs: object) -> HTTPServer:
    server = HTTPServer(Application([(r"/.*", handler, kwargs)]))
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


def test_a_token_cut_by_the_limit_is_hidden_too() -> None:
    """The limit cuts the output inside the token: what is left of it is hidden as well
    (masked first, then cut), not shown as a part too short to match."""
    token = "f3a9c0ffee0123456789abcdef"
    after = b"\n" + b"z" * 60 + b"\n"
    for kept in range(1, len(token)):  # the cut leaves the token's last `kept` characters
        output = b"x" * 100 + f"TOKEN={token}".encode() + after
        text = log_tail(output, [token], limit=kept + len(after))
        assert token[-kept:] not in text.replace("  | ", ""), (kept, text)


MiB = 1 << 20
PIECE = b"x" * MiB  # a flood's body is this one piece, sent again and again
READ_AT_MOST = 32 * MiB  # what a check may take off the wire (kernel buffers included)


@dataclass
class Flood:
    """What a server answers: ``floods`` times ``code`` with a body of ``size`` bytes
    (chunked, or with its Content-Length), then 200 with a short body. ``sent``: for each
    big body, how much of it the server got to send and whether the client hung up on it."""

    floods: int
    code: int
    size: int
    content_length: bool = False
    sent: list[tuple[int, bool]] = field(default_factory=list)
    served: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def all_sent(self) -> list[tuple[int, bool]]:
        """Once every big body has ended (sent in full, or cut by the client)."""
        while len(self.sent) < self.floods:
            await asyncio.wait_for(self.changed.wait(), 30)
            self.changed.clear()
        return self.sent


class Flooding(RequestHandler):
    def initialize(self, flood: Flood) -> None:
        self.flood = flood

    async def get(self) -> None:
        flood = self.flood
        if flood.served >= flood.floods:
            self.write("up")
            return
        flood.served += 1
        self.set_status(flood.code)
        if flood.content_length:
            self.set_header("Content-Length", str(flood.size))
        sent, cut = 0, False
        try:
            while sent < flood.size:
                self.write(PIECE)
                await self.flush()
                sent += len(PIECE)
        except StreamClosedError:
            cut = True
        flood.sent.append((sent, cut))
        flood.changed.set()


@pytest.mark.parametrize(
    "flood",
    [
        pytest.param(Flood(floods=2, code=503, size=256 * MiB), id="chunked"),
        pytest.param(
            Flood(floods=2, code=503, size=96 * MiB, content_length=True), id="content-length"
        ),
    ],
)
async def test_a_huge_5xx_body_is_not_read_and_the_check_goes_on(port: int, flood: Flood) -> None:
    """A server (a user's ~/.jupyter config can make it so) answers 503 with hundreds of
    MiB, then 200. The check reads the status, never the body: each connection is cut
    after a few MiB at most (the old check took in 100 MiB each time, every 0.1 s), and
    the 200 after it is the answer."""
    server = await serve(Flooding, port, flood=flood)
    try:
        answer = await first_answer(f"http://127.0.0.1:{port}/user/alice/", 60, running)
        sent = await flood.all_sent()
    finally:
        server.stop()
    assert answer == Answer(answered=True)
    assert flood.served == flood.floods
    for size, cut in sent:
        assert cut and size <= READ_AT_MOST, f"{size / MiB:.0f} MiB sent, cut: {cut}"


async def test_the_status_decides_a_200_with_a_huge_body_is_an_answer(port: int) -> None:
    """Any answer under 500 counts (JupyterHub's rule), whatever its body: the check says
    so from the status without reading 256 MiB (the old one gave up at 100 MiB, no answer)."""
    flood = Flood(floods=1, code=200, size=256 * MiB)
    server = await serve(Flooding, port, flood=flood)
    try:
        assert await answers(f"http://127.0.0.1:{port}/user/alice/")
        [(size, cut)] = await flood.all_sent()
    finally:
        server.stop()
    assert cut and size <= READ_AT_MOST, f"{size / MiB:.0f} MiB sent, cut: {cut}"


async def test_the_check_has_a_client_of_its_own(port: int) -> None:
    """The hub's shared HTTP client has all its slots (10) taken by requests that hang: the
    check is not queued behind them, and they never see the user's server."""
    ok = await serve(Redirect, port)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # accepted by the kernel, never answered
        hanging = [
            asyncio.ensure_future(
                AsyncHTTPClient().fetch(
                    f"http://127.0.0.1:{silent.getsockname()[1]}/", request_timeout=30
                )
            )
            for _ in range(10)
        ]
        try:
            assert await answers(f"http://127.0.0.1:{port}/user/alice/", timeout=1.0)
        finally:
            ok.stop()
            silent.close()  # the hanging requests end now (reset)
            results = await asyncio.wait_for(asyncio.gather(*hanging, return_exceptions=True), 30)
    assert all(isinstance(r, (HTTPClientError, OSError)) for r in results), results
