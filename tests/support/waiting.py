"""Waiting for a condition in tests: the one "poll until it holds, or fail saying what"
helper, for plain code (:func:`wait_until`) and for coroutines (:func:`wait_until_async`).

A test waits for something that will happen (a server ready, a record closed, a line
logged) with these; it never proves that something did *not* happen by sleeping "long
enough": it waits for the event that shows the round which would have done it has run
(a counter, a log line, a state the code exposes), then asserts.
"""

from __future__ import annotations

import asyncio
import reprlib
import time
from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")

_shown = reprlib.Repr()
_shown.maxstring = 300
_shown.maxother = 300
_shown.maxlist = _shown.maxdict = _shown.maxset = _shown.maxtuple = 10


class _Poll(Generic[T]):
    """One waiting: checks, remembers the last value seen, and says why it gave up."""

    def __init__(
        self,
        predicate: Callable[[], T],
        timeout: float,
        what: str,
        ignore: tuple[type[BaseException], ...],
        details: Callable[[], str] | None,
    ) -> None:
        self.predicate, self.timeout, self.what = predicate, timeout, what
        self.ignore, self.details = ignore, details
        self.deadline = time.monotonic() + timeout
        self.last = "(not checked)"
        self.checks = 0

    def check(self) -> tuple[bool, T | None]:
        self.checks += 1
        try:
            value = self.predicate()
        except self.ignore as e:
            self.last = f"raised {type(e).__name__}: {e}"
            return False, None
        if value:
            return True, value
        self.last = _shown.repr(value)
        return False, None

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def failure(self) -> AssertionError:
        message = (
            f"timed out after {self.timeout:g}s waiting for {self.what} "
            f"({self.checks} check(s); last value seen: {self.last})"
        )
        if self.details is not None:
            try:
                message += "\n" + self.details()
            except Exception as e:  # the details must never hide the timeout itself
                message += f"\n(could not add details: {e!r})"
        return AssertionError(message)


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.2,
    ignore: tuple[type[BaseException], ...] = (),
    details: Callable[[], str] | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` s until it returns something truthy, and
    return that. After ``timeout`` s (checked once at least, even at 0 or less) raise
    :class:`AssertionError` naming ``what`` was awaited and the last value seen.

    ``ignore``: exceptions of ``predicate`` that mean "not yet" (a server not listening
    yet); they show as the last value. ``details``: more text for the failure (a log's
    tail, e.g. ``hub.log_tail``), read only when it fails."""
    poll = _Poll(predicate, timeout, what, ignore, details)
    while True:
        done, value = poll.check()
        if done:
            return cast(T, value)
        if poll.expired():
            raise poll.failure()
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.01,
    ignore: tuple[type[BaseException], ...] = (),
    details: Callable[[], str] | None = None,
) -> T:
    """:func:`wait_until` on the running event loop: between checks the loop runs the
    code under test. ``predicate`` is a plain function (no await)."""
    poll = _Poll(predicate, timeout, what, ignore, details)
    while True:
        done, value = poll.check()
        if done:
            return cast(T, value)
        if poll.expired():
            raise poll.failure()
        await asyncio.sleep(interval)
