"""Each user's own usage page (``GET /services/gpu-accounting/``), inside the hub's own
``page.html`` (its navigation bar, :mod:`~jupyterhub_gpu.edges.hub_page`).

People log in through the hub's OAuth (``HubOAuthenticated``); a user sees only their own
GPU time, admins may pick a user (``?user=``). Days are the viewer's own: the page asks
the browser for its time zone once (``?tz=Europe/Paris``, an IANA name) and splits the
allocations at local midnights (:func:`~jupyterhub_gpu.core.accounting.daily.by_local_day`).
Every parameter is bounded; a bad one is one sentence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from tornado import web

from jupyterhub_gpu.core.accounting.daily import (
    MAX_DAYS,
    Day,
    by_local_day,
    hours_minutes,
    local_days,
    summary,
)
from jupyterhub_gpu.core.accounting.report import Interval
from jupyterhub_gpu.edges import hub_page
from jupyterhub_gpu.edges.accounting.store import AccountingStore, AccountingUnavailable

TEMPLATES = Path(__file__).resolve().parent / "templates"
DEFAULT_DAYS = 14
MAX_NAME = 255
NOT_YOURS = "You may see only your own usage; ask an admin for anyone else's."
BAD_DAYS = f"The number of days must be a whole number from 1 to {MAX_DAYS}."
NO_DATABASE = "The usage records cannot be read right now; try again in a few minutes."
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'self'; base-uri 'none'; "
    "script-src 'self'"
)


def zone_of(name: str) -> tuple[tzinfo, str]:
    """The browser's zone (an IANA name), or UTC when it is none or unknown."""
    name = name.strip()[:64]
    if name and all(c.isalnum() or c in "/_+-" for c in name):
        try:
            return ZoneInfo(name), name
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return timezone.utc, "UTC"


def rows(days: list[Day]) -> list[dict[str, str]]:
    """The table, newest day first, days without GPU time left out."""
    return [
        {
            "day": d.day.strftime("%a %d %b %Y"),
            "held": hours_minutes(d.held_h),
            "busy": hours_minutes(d.busy_h),
            "servers": str(d.allocations),
        }
        for d in reversed(days)
        if d.allocations
    ]


class UsagePageHandler(HubOAuthenticated, web.RequestHandler):
    def initialize(
        self, store: AccountingStore, prefix: str, hub_auth: HubOAuth, chrome: Mapping[str, Any]
    ) -> None:
        self.store, self.prefix, self.hub_auth, self.chrome = store, prefix, hub_auth, chrome

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("Cache-Control", "no-store")

    def _render(self, status: int = 200, /, **values: Any) -> None:
        user: dict[str, Any] = self.current_user or {}
        me = hub_page.PageUser(str(user.get("name", "")), bool(user.get("admin")))
        hub_prefix = self.hub_auth.hub_prefix
        prefix = hub_prefix[: -len("hub/")] if hub_prefix.endswith("hub/") else "/"
        ns = hub_page.namespace(
            me, prefix=prefix, hub_prefix=hub_prefix, settings=self.chrome, extra=values
        )
        ns.setdefault("message", "")
        html = (
            hub_page.environment(str(TEMPLATES))
            .get_template("usage.html")
            .render(service_prefix=self.prefix, **ns)
        )
        hashes = " ".join(hub_page.inline_script_hashes(html))
        self.set_header("Content-Security-Policy", CSP + (f" {hashes}" if hashes else ""))
        self.set_status(status)
        self.finish(html)

    @web.authenticated
    async def get(self) -> None:
        user: dict[str, Any] = self.current_user
        name, admin = str(user.get("name", "")), bool(user.get("admin"))
        who = self.get_argument("user", "")[: MAX_NAME + 1] or name
        zone, zone_name = zone_of(self.get_argument("tz", ""))
        base = {"who": who, "me": name, "admin": admin, "zone": zone_name, "users": []}
        if who != name and not admin:
            return self._render(403, message=NOT_YOURS, **base)
        if len(who) > MAX_NAME:
            return self._render(400, message="That user name is too long.", **base)
        try:
            days = int(self.get_argument("days", str(DEFAULT_DAYS)))
            if not 1 <= days <= MAX_DAYS:
                raise ValueError
        except ValueError:
            return self._render(400, message=BAD_DAYS, **base)
        now = datetime.now(timezone.utc)
        first, last = local_days(now, zone, days)
        loop = asyncio.get_running_loop()
        try:
            intervals, users = await loop.run_in_executor(None, self._read, first, zone, who, admin)
        except AccountingUnavailable:
            return self._render(503, message=NO_DATABASE, **base)
        naive_now = now.replace(tzinfo=None)
        daily = by_local_day(intervals, zone, first, last, naive_now)
        whose = "You" if who == name else who
        self._render(
            200,
            **{**base, "users": users},
            days=days,
            first=first.strftime("%d %b %Y"),
            summary=summary(daily, whose),
            rows=rows(daily),
        )

    def _read(
        self, first: Any, zone: tzinfo, who: str, admin: bool
    ) -> tuple[list[Interval], list[str]]:
        if not self.store.has_schema():  # the hub makes the tables with its first spawn
            return [], []
        start = datetime.combine(first, datetime.min.time(), zone)
        start_utc = start.astimezone(timezone.utc).replace(tzinfo=None)
        end = datetime.now(timezone.utc).replace(tzinfo=None)
        users = self.store.names("user") if admin else []
        return self.store.intervals(start_utc, end, user=who), users


class UsageCallbackHandler(HubOAuthCallbackHandler):
    def initialize(self, hub_auth: HubOAuth) -> None:
        self.hub_auth = hub_auth
