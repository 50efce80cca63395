"""The gateway's open SSH sessions and forwarded connections, counted (pure: times are
given, nothing here reads a clock or the network).

The gateway keeps a :class:`Census` (one entry per open session or ``-L`` connection) and
sends its whole list to the hub whenever it changes and every ``interval`` seconds
(:mod:`jupyterhub_gpu.wire.ssh_sessions`); the hub keeps the last list
(:class:`SSHReport`) for the dashboard (per server: :func:`per_server`) and the metrics
(per charge group: :func:`per_group`, no user names), and forgets a list older than three
intervals (a gateway that stopped)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

#: what an open channel is: a session (shell, command, sftp, legacy scp) or a forward
SESSION_KINDS = ("shell", "command", "command+pty", "sftp", "scp")
KINDS = (*SESSION_KINDS, "forward")
#: at most this many channels are reported (10 sessions and 32 forwards per connection)
MAX_CHANNELS = 10_000


@dataclass(frozen=True)
class OpenChannel:
    """One open session or forwarded connection of a user's server."""

    user: str
    server: str  # "" for the default server
    kind: str  # one of KINDS
    since: float  # epoch seconds
    peer: str  # the client's address "203.0.113.7:51234" (admins only)

    @property
    def is_forward(self) -> bool:
        return self.kind == "forward"


@dataclass
class Census:
    """The open channels, each under the number :meth:`opened` gave it; ``version`` moves
    at every change (the reporter sends when it moved)."""

    _open: dict[int, OpenChannel] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    version: int = 0

    def opened(self, channel: OpenChannel) -> int:
        number = next(self._ids)
        self._open[number] = channel
        self.version += 1
        return number

    def closed(self, number: int) -> None:
        if self._open.pop(number, None) is not None:
            self.version += 1

    def channels(self) -> list[OpenChannel]:
        """The open channels, oldest first (at most :data:`MAX_CHANNELS`)."""
        return sorted(self._open.values(), key=lambda c: c.since)[:MAX_CHANNELS]


@dataclass(frozen=True)
class ServerSSH:
    """What the dashboard shows of a server's SSH use."""

    sessions: int = 0
    forwards: int = 0
    since: float | None = None  # the oldest open one's start
    peers: tuple[str, ...] = ()  # the clients' addresses, each once (admins only)


def per_server(channels: Iterable[OpenChannel]) -> dict[tuple[str, str], ServerSSH]:
    """(user, server) -> its open sessions and forwards."""
    grouped: dict[tuple[str, str], list[OpenChannel]] = {}
    for c in channels:
        grouped.setdefault((c.user, c.server), []).append(c)
    out = {}
    for key, found in grouped.items():
        forwards = sum(1 for c in found if c.is_forward)
        out[key] = ServerSSH(
            sessions=len(found) - forwards,
            forwards=forwards,
            since=min(c.since for c in found),
            peers=tuple(dict.fromkeys(c.peer for c in found if c.peer)),
        )
    return out


def per_group(
    channels: Iterable[OpenChannel], group_of: Callable[[str, str], str]
) -> dict[str, tuple[int, int]]:
    """charge group -> (open sessions, open forwards); ``group_of(user, server)`` names a
    server's group (the metrics' label: never a user name)."""
    out: dict[str, tuple[int, int]] = {}
    for c in channels:
        group = group_of(c.user, c.server)
        sessions, forwards = out.get(group, (0, 0))
        out[group] = (sessions, forwards + 1) if c.is_forward else (sessions + 1, forwards)
    return out


@dataclass
class SSHReport:
    """The hub's copy of the gateway's last list: when it came (monotonic) and the
    interval the gateway promised to send again within."""

    channels: tuple[OpenChannel, ...] = ()
    received: float = float("-inf")
    interval: float = 30.0
    groups: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def current(self, now: float) -> tuple[OpenChannel, ...]:
        """The channels, or none when the list is older than three intervals."""
        return self.channels if now - self.received <= 3 * self.interval else ()

    def current_groups(self, now: float) -> Mapping[str, tuple[int, int]]:
        return self.groups if now - self.received <= 3 * self.interval else {}


__all__ = [
    "KINDS",
    "MAX_CHANNELS",
    "SESSION_KINDS",
    "Census",
    "OpenChannel",
    "SSHReport",
    "ServerSSH",
    "per_group",
    "per_server",
]
