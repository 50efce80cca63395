"""A spawn's pull (hub/pull.py): a pull that keeps making progress goes on past its stall
limit; one that stops making progress fails after it, with a sentence, its connection
closed; the progress says bytes and time left. With a real docker-py client, a given-up
pull's connection is shut down and it never holds the node's threads."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyterhub_gpu.errors import ImageUnavailable
from jupyterhub_gpu.hub.pull import pull

pytestmark = pytest.mark.unit

log = logging.getLogger("test.pull")
MB = 10**6


class Client:
    """An engine's pull stream: ``steps`` events of 1 MB each, ``pause`` s apart; then,
    with ``hang``, no more events until closed (a stuck registry)."""

    def __init__(self, steps: int, pause: float, hang: bool = False) -> None:
        self.steps, self.pause, self.hang = steps, pause, hang
        self.closed = threading.Event()

    def pull(self, image: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        for i in range(1, self.steps + 1):
            time.sleep(self.pause)
            yield {"status": "Downloading", "id": "l1",
                   "progressDetail": {"current": i * MB, "total": 100 * MB}}  # fmt: skip
        if self.hang:
            self.closed.wait(30)
            return
        yield {"status": "Pull complete", "id": "l1"}

    def close(self) -> None:
        self.closed.set()


class Cluster:
    def __init__(self, client: Client) -> None:
        self.streaming = client
        self.pulled: list[tuple[str, str]] = []

    def new_client(self, node: str, timeout: float) -> Client:
        return self.streaming

    async def run(
        self, node: str, fn: Callable[[], Any], timeout: float | None = None, *,
        executor: Any = None,
    ) -> Any:  # fmt: skip
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(executor, fn), timeout)

    def image_pulled(self, node: str, image: str) -> None:
        self.pulled.append((node, image))


async def test_a_pull_that_keeps_coming_outlasts_its_stall_limit() -> None:
    client = Client(steps=12, pause=0.1)  # 1.2 s in all, never 0.4 s without a byte
    cluster: Any = Cluster(client)
    messages: list[str] = []
    await pull(cluster, "n1", "reg/big:1", 30, lambda p, m: messages.append(m), log,
               stall_timeout=0.4)  # fmt: skip
    assert cluster.pulled == [("n1", "reg/big:1")]
    assert client.closed.is_set()
    assert messages[0] == "Pulling reg/big:1 on node n1 (not there yet)"
    assert any("of 100 MB" in m for m in messages), messages


async def test_a_stalled_pull_fails_with_a_sentence_and_closes_its_connection() -> None:
    client = Client(steps=6, pause=0.01, hang=True)
    cluster: Any = Cluster(client)
    t0 = time.monotonic()
    with pytest.raises(ImageUnavailable) as e:
        await pull(cluster, "n1", "reg/big:1", 30, lambda p, m: None, log, stall_timeout=0.5)
    assert time.monotonic() - t0 < 10  # the stall limit, not the 30 s pull limit
    message = str(e.value)  # 6 of 100 MB downloaded, none unpacked: 3%
    assert message.startswith("Pulling reg/big:1 on node n1 made no progress for 0.5 s (at 3%)")
    assert "ask an admin to check the registry and the node" in message
    assert client.closed.is_set() and cluster.pulled == []  # not counted as present


# ------------------------------------------------ a real client, an engine that stops sending
class HangingEngine:
    """A Docker engine on a unix socket whose pull answers, sends one event, then nothing
    until the client goes away (a stuck registry behind a live engine); ``gone`` is set
    when the client's connection ends."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.gone = threading.Event()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(4)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            conn.settimeout(30)  # the test's bound: never a thread left for good
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            detail = {"current": MB, "total": 100 * MB}
            event = json.dumps({"status": "Downloading", "id": "l1", "progressDetail": detail})
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(event):x}\r\n{event}\r\n".encode()
            )  # fmt: skip
            with contextlib.suppress(OSError):
                while conn.recv(4096):  # until the client shuts its end down
                    pass
            self.gone.set()

    def close(self) -> None:
        self.server.close()


class RealClientCluster(Cluster):
    """One node whose pool has a single thread (``threads_per_node = 1``): a pull that
    held it would starve every later call on the node."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="node-n1")
        self.pulled: list[tuple[str, str]] = []

    def new_client(self, node: str, timeout: float) -> Any:
        return docker.APIClient(base_url=f"unix://{self.path}", version="1.41", timeout=timeout)

    async def run(
        self, node: str, fn: Callable[[], Any], timeout: float | None = None, *,
        executor: Any = None,
    ) -> Any:  # fmt: skip
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(executor or self.pool, fn), timeout)


async def test_a_stalled_pull_is_cut_off_and_never_holds_the_nodes_threads(tmp_path: Path) -> None:
    """The watchdog gives up on a real docker-py pull whose engine stopped sending: its
    connection is shut down (the engine sees it go, so its download stops) and the node's
    one thread is free at once for the next call."""
    engine = HangingEngine(str(tmp_path / "docker.sock"))
    cluster: Any = RealClientCluster(engine.path)
    try:
        with pytest.raises(ImageUnavailable, match=r"made no progress for 0\.5 s") as e:
            await pull(cluster, "n1", "reg/big:1", 60, lambda p, m: None, log, stall_timeout=0.5)
        assert e.value.cause == "stalled" and cluster.pulled == []
        # the node's thread pool answers the next call (a pull in it would hold it 30 s)
        assert await asyncio.wait_for(cluster.run("n1", lambda: "next"), 5) == "next"
        # the engine saw the client go (the blocked read was not left to run on)
        assert await asyncio.get_running_loop().run_in_executor(None, engine.gone.wait, 5)
    finally:
        engine.close()
        cluster.pool.shutdown(wait=False)
