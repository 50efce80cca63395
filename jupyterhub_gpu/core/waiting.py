"""The words of a spawn that waits in the GPU queue, for its progress page.

Pure: the admission code (``hub/admission.py``) sends these as progress events; the
hub's ``spawn_pending.html`` (``hub/templates``) shows them, and turns the ``<time>`` of
an estimate into the browser's own local time.
"""

from __future__ import annotations

import html
import re
from datetime import datetime, tzinfo

from jupyterhub_gpu.core.words import UTC, zoned_clock

#: What the waiting page says under its title while the spawn waits in line.
CLOSE_THE_TAB = "You can close this tab: your server starts when a GPU frees."

# "Try later" is placement's advice to a spawn that is refused; one that waits in line
# is already trying later, so the advice goes (and "X or try later" keeps X).
_TRY_LATER = re.compile(r"\s*\bTry later\.\s*$|\s+or try later(?=\.)", re.IGNORECASE)


def queued_reason(why: str) -> str:
    """Placement's reason for a spawn that now waits in line, without "Try later"."""
    return _TRY_LATER.sub("", why).strip()


def joined_line(why: str, wait: str) -> str:
    """The first line of a spawn that joins the queue: why, and for how long it may wait
    (``wait``, as :func:`~jupyterhub_gpu.core.words.duration` says it)."""
    reason = queued_reason(why)
    joined = f"Your server waits in line for GPUs (up to {wait})."
    return f"{reason} {joined}" if reason else joined


def news_html(words: str, at: float | None, now: float, tz: tzinfo = UTC) -> str:
    """``words`` as HTML, the estimate's clock time (as ``words`` says it, in ``tz``)
    wrapped in ``<time datetime="...">`` so that the page can show it in the browser's
    own zone; everything else escaped."""
    text = html.escape(words, quote=False)
    if at is None:
        return text
    said = html.escape(zoned_clock(at, now, tz), quote=False)
    iso = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return text.replace(said, f'<time datetime="{iso}">{said}</time>', 1)
