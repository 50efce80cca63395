"""Small wording helpers for the sentences people read (pure).

Every sentence the scheduler, the queue, the culler and the dashboard produce is read by a
person (the spawn-pending page, a culler note on the spawn form, the dashboard) or by an
admin at a command line: counts with their nouns, ordinals, durations (:func:`duration`,
the one formatter of them), and wall-clock times in the hub's time zone; and
:func:`one_line`, the one escaper of text someone else chose, for the hub's log.
"""

from __future__ import annotations

from datetime import datetime, timezone, tzinfo

UTC = timezone.utc


def gpus(n: int) -> str:
    """``1 GPU``, ``3 GPUs``."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def of_model(n: int, model: str) -> str:
    """``1 x NVIDIA A100``: a count of one model."""
    return f"{n} x {model}"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``22nd``."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def article(noun: str) -> str:
    """``an NVIDIA TITAN X``, ``a GPU``: the indefinite article a reader expects."""
    first = noun[:1].upper()
    vowel_sound = first in "AEIO" or noun.startswith(("NVIDIA", "RTX", "H100", "L40", "MI"))
    return f"{'an' if vowel_sound else 'a'} {noun}"


def duration(seconds: float) -> str:
    """A span of time for people: ``45 s``, ``119 s``, ``12 min``, ``2 h``, ``3 h 05 min``,
    ``7 days``, ``2 days 4 h``.

    The one formatter of durations (queue sentences, the culler's reasons, the dashboard):
    seconds under two minutes, then minutes, then hours and minutes, from two days on days
    and hours; a zero last part is left out. Every part is rounded down (a negative span is
    ``0 s``), so ``active 29 s ago, needs 30 s idle`` never reads as if the limit were met.
    """
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 2 * 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m:02d} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} days {h} h" if h else f"{d} days"


def clock(at: float, now: float, tz: tzinfo = UTC) -> str:
    """``14:20`` on the same day as ``now`` (in ``tz``), else ``Tue 25 Nov 14:20``."""
    when = datetime.fromtimestamp(at, tz)
    if when.date() == datetime.fromtimestamp(now, tz).date():
        return when.strftime("%H:%M")
    return when.strftime("%a %d %b %H:%M")


def zone(at: float, tz: tzinfo = UTC) -> str:
    """``UTC``, ``CET``: the name of ``tz`` at ``at``, to follow a :func:`clock` time."""
    return datetime.fromtimestamp(at, tz).strftime("%Z")


def zoned_clock(at: float, now: float, tz: tzinfo = UTC) -> str:
    """``14:20 UTC``, ``Tue 25 Nov 14:20 CET``: :func:`clock` with the zone's name."""
    return f"{clock(at, now, tz)} {zone(at, tz)}".strip()


def moment(at: float, tz: tzinfo = UTC) -> str:
    """``2026-11-24 14:00 UTC``: a full wall-clock time, for reservations."""
    return datetime.fromtimestamp(at, tz).strftime("%Y-%m-%d %H:%M %Z").strip()


def listing(items: list[str], limit: int = 4) -> str:
    """``a, b and c``; past ``limit`` items, ``a, b, c, d and 3 more``."""
    if len(items) > limit:
        return ", ".join(items[:limit]) + f" and {len(items) - limit} more"
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def one_line(text: str) -> str:
    """``text`` fit for one line of the hub's log: newlines, carriage returns, terminal
    escapes, every other control character and anything outside ASCII written as Python
    writes them in a string (``\\n``, ``\\x1b``, ``\\xe9``), backslashes doubled.
    For text that someone else chose (a server's output, a registry's error), so that it
    can't pass for, hide or rewrite the hub's own lines."""
    return text.encode("unicode_escape").decode("ascii")
