"""A spawn's pull (hub/pull.py): a pull that keeps making progress goes on past its stall
limit; one that stops making progress fails after it, with a sentence, its connection
closed; the progress says bytes and time left."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

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

    async def run(self, node: str, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, fn), timeout)

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
