"""Failed logins refused for a while: per user and per client address, each a sliding
window over the failures' times (``now`` is always given; nothing here reads a clock)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class FailureLimiter:
    """At most ``max_failures`` failures per key within ``window`` seconds; past that the
    key is refused until its oldest failure in the window is ``window`` seconds old.

    Keys are whatever the caller counts by (``("user", "alice")``, ``("addr", ip)``).
    Memory is bounded: at most ``max_failures`` times per key, keys with nothing left in
    their window forgotten (:meth:`forget_old`), and at most ``max_keys`` keys (the
    oldest dropped first)."""

    max_failures: int = 5
    window: float = 60.0
    max_keys: int = 10_000
    _failures: dict[tuple[str, str], deque[float]] = field(default_factory=dict)

    def blocked(self, key: tuple[str, str], now: float) -> bool:
        """Whether ``key`` has had ``max_failures`` failures within ``window`` of ``now``."""
        times = self._failures.get(key)
        if not times:
            return False
        while times and now - times[0] >= self.window:
            times.popleft()
        return len(times) >= self.max_failures

    def failed(self, key: tuple[str, str], now: float) -> None:
        """Count one failure of ``key`` at ``now``."""
        times = self._failures.pop(key, None) or deque(maxlen=self.max_failures)
        times.append(now)
        self._failures[key] = times  # last in the dict: the most recently failed
        while len(self._failures) > self.max_keys:
            del self._failures[next(iter(self._failures))]

    def forget_old(self, now: float) -> None:
        """Drop the keys whose last failure is out of the window."""
        for key in [k for k, t in self._failures.items() if not t or now - t[-1] >= self.window]:
            del self._failures[key]


__all__ = ["FailureLimiter"]
