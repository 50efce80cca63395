"""Writes the ledger's events and usage into the accounting store (edge).

One worker thread applies the writes in the order they were announced, off the hub's
event loop. A database that doesn't answer loses nothing: the writes wait in order and
go in when it answers again (one warning per outage, one info line when it is back).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from jupyterhub_gpu.core.accounting.records import AllocationEvent, EndReason, EventKind
from jupyterhub_gpu.core.accounting.usage import Usage
from jupyterhub_gpu.edges.accounting.store import AccountingStore, AccountingUnavailable

Write = Callable[[AccountingStore], object]
T = TypeVar("T")


def write_for(event: AllocationEvent) -> Write | None:
    """The store write an event stands for (pure)."""
    if event.kind is EventKind.RESERVED and event.record is not None:
        record = event.record
        return lambda store: store.open(record)
    if event.kind is EventKind.STARTED:
        return lambda store: store.mark_running(event.allocation, event.at)
    if event.kind is EventKind.RELEASED:
        reason = event.reason or EndReason.STOPPED
        return lambda store: store.close(event.allocation, event.at, reason)
    return None


class Recorder:
    def __init__(self, store: AccountingStore, log: logging.Logger) -> None:
        self.store = store
        self.log = log
        self._queue: deque[Write] = deque()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="jhgpu-accounting")
        self._failing = False
        self.written = 0

    def __call__(self, event: AllocationEvent) -> None:
        write = write_for(event)
        if write is not None:
            self.submit(write)

    def save_usage(self, usages: dict[str, Usage]) -> None:
        if usages:
            self.submit(lambda store: store.save_usage(usages))

    def submit(self, write: Write) -> Future[None]:
        with self._lock:
            self._queue.append(write)
        return self._executor.submit(self._drain)

    def call(self, read: Callable[[AccountingStore], T]) -> Future[T]:
        """Run ``read`` on the worker thread, after the writes queued so far."""
        return self._executor.submit(read, self.store)

    def flush(self) -> Future[None]:
        """Retry what waits (a no-op when nothing does); done when the queue was drained
        or the database failed again."""
        return self._executor.submit(self._drain)

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    return
                write = self._queue[0]
            try:
                write(self.store)
            except AccountingUnavailable as e:
                if not self._failing:
                    self.log.warning("Accounting: %s (%d writes wait)", e, len(self._queue))
                self._failing = True
                return
            except Exception:
                self.log.exception("Accounting: a write failed and is dropped")
            else:
                self.written += 1
                if self._failing:
                    self.log.info("Accounting database answers again; writing what waited")
                    self._failing = False
            with self._lock:
                self._queue.popleft()

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def close_missed(open_ids: dict[str, str], seen: set[str], answered: set[str]) -> list[str]:
    """Pure: of the allocations the store has open (id -> node), those to close as MISSED:
    not seen (no live server or spawn, no running container with that id) on a node that
    answered, or on a node the hub no longer has (absent from ``answered`` and from the
    nodes: the caller passes retired nodes as answered)."""
    return sorted(a for a, node in open_ids.items() if a not in seen and node in answered)
