"""The culler sees SSH: input on a session (or a forwarded connection) is the server's
activity, reported to the hub at most once per ``interval`` per server
(``POST /hub/api/users/{name}/activity``), so a server used only over SSH is not culled
while someone types, and an idle session sends nothing (the culler's rules then apply).

:class:`ActivityBook` only keeps times (``now`` is always given; nothing here reads a
clock or the network); the gateway's service sends what :meth:`ActivityBook.due` returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ActivityBook:
    """The last input per (user, server) not yet reported, and when each was last sent.

    Memory is bounded: at most ``max_keys`` servers are remembered (the oldest dropped)."""

    interval: float = 60.0
    max_keys: int = 10_000
    _seen: dict[tuple[str, str], float] = field(default_factory=dict)
    _sent: dict[tuple[str, str], float] = field(default_factory=dict)

    def saw(self, user: str, server: str, now: float) -> None:
        """Input arrived on a session of ``user``'s server ``server`` at ``now``."""
        key = (user, server)
        self._seen.pop(key, None)
        self._seen[key] = now
        while len(self._seen) > self.max_keys:
            del self._seen[next(iter(self._seen))]

    def due(self, now: float) -> list[tuple[str, str, float]]:
        """(user, server, time of the last input) to send now: input seen since the last
        report, whose last report is at least ``interval`` old. They count as sent."""
        out = []
        for key, at in list(self._seen.items()):
            if now - self._sent.get(key, float("-inf")) >= self.interval:
                out.append((key[0], key[1], at))
                self._sent[key] = now
                del self._seen[key]
        for key in [k for k, t in self._sent.items() if now - t >= self.interval]:
            if key not in self._seen:
                del self._sent[key]
        return out


__all__ = ["ActivityBook"]
