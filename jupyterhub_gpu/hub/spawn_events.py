"""The lines of a spawn's progress page (``Spawner.progress``): added as ``start`` goes,
streamed to the page until the start ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any


class SpawnEvents:
    """One server's spawn events (``lines``: the same list for the server's life)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.changed = asyncio.Event()
        self.done = True

    def begin(self) -> None:
        """A start begins: no lines yet, streamed until :meth:`end`."""
        self.lines.clear()
        self.changed = asyncio.Event()
        self.done = False

    def end(self) -> None:
        self.done = True
        self.changed.set()

    def add(self, progress: int, message: str, **extra: Any) -> None:
        """One line (``extra``: more keys of the event, such as ``html_message``); a line
        the same as the last one is not added again."""
        event = {"progress": progress, "message": message, **extra}
        if self.lines and self.lines[-1] == event:
            return
        self.lines.append(event)
        self.changed.set()

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        """Every line so far, then each new one, until the start ends."""
        sent = 0
        while True:
            while sent < len(self.lines):
                yield self.lines[sent]
                sent += 1
            if self.done:
                return
            self.changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)


__all__ = ["SpawnEvents"]
