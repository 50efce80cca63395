"""A container's output, read with a bound on bytes and time (an edge: docker-py).

What a saved image's code prints is the user's choice, so the hub never reads it whole:
docker-py's ``logs()`` without ``stream`` reads the entire body into memory before any
slice applies. :func:`read_output` follows the output as it comes (``stream=True,
follow=True``), keeps at most ``limit`` bytes (the hub holds ``limit`` plus one chunk at
most), and kills the container as soon as more comes, or when ``timeout`` seconds have
passed (a watchdog thread: a silent container would otherwise hold the read for the
client's whole socket timeout). The caller removes the container.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Output:
    """What :func:`read_output` read: ``data`` (at most ``limit`` bytes); ``cut`` when
    more came (the container was killed); ``timed_out`` when the container still ran at
    the deadline (it was killed)."""

    data: bytes
    cut: bool = False
    timed_out: bool = False


def _kill(client: Any, cid: str) -> None:
    with contextlib.suppress(Exception):  # already gone or stopped: nothing to stop
        client.kill(cid)


def read_output(
    client: Any,
    cid: str,
    limit: int,
    timeout: float,
    *,
    stdout: bool = True,
    stderr: bool = False,
) -> Output:
    """Follow the started container ``cid``'s output until it exits, ``limit`` bytes
    are exceeded, or ``timeout`` seconds pass (blocking). The engine's errors (docker-py's
    ``APIError``, requests' errors) propagate."""
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        _kill(client, cid)

    watchdog = threading.Timer(timeout, expire)
    watchdog.daemon = True
    buffer = bytearray()
    cut = False
    stream = client.logs(cid, stdout=stdout, stderr=stderr, stream=True, follow=True)
    watchdog.start()
    try:
        for chunk in stream:
            buffer += chunk
            if len(buffer) > limit:
                cut = True
                break
            if fired.is_set():
                break
    finally:
        watchdog.cancel()
        with contextlib.suppress(Exception):  # closes the engine's connection
            stream.close()
    if cut:
        _kill(client, cid)
        del buffer[limit:]
    return Output(bytes(buffer), cut=cut, timed_out=fired.is_set() and not cut)
