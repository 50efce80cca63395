"""The GPU dashboard service (``python -m jupyterhub_gpu.services.dashboard``), run by the hub.

It logs people in through the hub's OAuth (``HubOAuthenticated``), reads the cluster from
the hub's ``/hub/api/gpu/cluster`` every ``poll_interval`` s with its own token (one
reader, however many browsers are open; a short history per GPU is kept here), the usage
from the accounting database (read-only), and serves the page, its live part and the
admins' actions (:mod:`.handlers`). Set up by :func:`jupyterhub_gpu.hub.api.cluster.configure`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import datetime, timezone, tzinfo
from typing import Any
from urllib.parse import urlsplit

import httpx
from jupyterhub.services.auth import HubOAuth
from tornado.httpserver import HTTPServer
from traitlets import Bool, Float, Instance, Int, Unicode, default

from jupyterhub_gpu.core.accounting.report import Interval
from jupyterhub_gpu.core.dashboard.history import History
from jupyterhub_gpu.core.dashboard.jobs import TAIL_BYTES, job_rows, last_lines, tail_ids
from jupyterhub_gpu.core.dashboard.payload import ClusterPayload
from jupyterhub_gpu.core.dashboard.view import ClusterView, Viewer, cluster_view, redact
from jupyterhub_gpu.edges.accounting.store import (
    DEFAULT_URL,
    AccountingStore,
    AccountingUnavailable,
)
from jupyterhub_gpu.edges.hub_page import page_settings
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.services.base import HubService
from jupyterhub_gpu.services.dashboard.client import HubClient, HubError
from jupyterhub_gpu.services.dashboard.handlers import make_app
from jupyterhub_gpu.services.dashboard.notes import messages_for
from jupyterhub_gpu.services.dashboard.render import Jobs, Page, Usage
from jupyterhub_gpu.services.dashboard.usage import load_intervals, period, summarize, usage_charts


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def local_zone() -> tzinfo:
    """The site's time zone (the service's), for the times people read."""
    return datetime.now().astimezone().tzinfo or timezone.utc


class GPUDashboard(HubService):
    """The cluster dashboard: who uses which GPU since when, what is free, the queue and
    the usage, in the browser (a hub-managed service)."""

    name = "jupyterhub-gpu-dashboard"
    description = "GPU cluster dashboard for jupyterhub-gpu (a hub-managed service)."

    show_names = Bool(
        True,
        help="""Whether users who are not admins see other users' names (and server names)
        on the dashboard, in the queue and in its JSON. Default True: names visible to
        everyone logged in, as on the seed sites' dashboards. False: they see their own
        servers by name and everyone else's as "another user" (admins always see names).""",
    ).tag(config=True)
    poll_interval = Float(
        5.0, help="Seconds between two reads of the hub's cluster view (and live updates)."
    ).tag(config=True)
    history_window = Float(
        600.0, help="Seconds of utilisation history kept per GPU (its sparkline)."
    ).tag(config=True)
    show_jobs = Bool(
        False,
        help="""Whether the page lists batch jobs (docs/jobs.md): the viewer's own (an
        admin's: everyone's), read from the hub's job API with the viewer's own login, with
        a cancel button and the last lines of their output. Turned on by
        ``configure_jobs(c)`` with ``configure_dashboard(c)`` (which also let the
        dashboard's logins carry the job scope); on a hub without jobs it shows nothing.""",
    ).tag(config=True)
    usage_days = Int(14, help="Days of GPU-hours the usage charts show.").tag(config=True)
    usage_interval = Float(300.0, help="Seconds between two reads of the accounting database.").tag(
        config=True
    )
    accounting_url = Unicode(
        help="""The accounting database (the hub's ``GPUCluster.accounting_url``),
        read only; default $JUPYTERHUB_GPU_ACCOUNTING_URL, else the hub's default
        ``sqlite:///jupyterhub-gpu-accounting.sqlite``. '' = no usage charts.""",
    ).tag(config=True)
    notes_file = Unicode(
        "jupyterhub-gpu-admin-notes.json",
        help="""JSON file of admins' notes to the owners of servers they stopped here (the
        culler's note format, a file of its own); '' = notes are not kept.""",
    ).tag(config=True)
    notes_keep = Int(5, help="Notes kept per user.").tag(config=True)
    request_timeout = Float(10.0, help="Timeout (s) of hub API requests.").tag(config=True)
    service_prefix = Unicode(
        help="URL prefix of the service. Default: $JUPYTERHUB_SERVICE_PREFIX."
    ).tag(config=True)
    service_url = Unicode(help="Where the service listens. Default: $JUPYTERHUB_SERVICE_URL.").tag(
        config=True
    )
    http_client = Instance(
        httpx.AsyncClient, allow_none=True, help="The HTTP client (default: a new one)."
    )
    hub_auth = Instance(HubOAuth, help="How people log in (default: the hub's OAuth).")

    aliases = {
        "config": "GPUDashboard.config_file",
        "url": "GPUDashboard.api_url",
        "log-level": "Application.log_level",
    }
    flags = {
        "hide-names": ({"GPUDashboard": {"show_names": False}}, "Hide other users' names."),
    }

    @default("service_prefix")
    def _service_prefix(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu-dashboard/")

    @default("service_url")
    def _service_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10103")

    @default("accounting_url")
    def _accounting_url(self) -> str:
        return os.environ.get("JUPYTERHUB_GPU_ACCOUNTING_URL", DEFAULT_URL)

    @default("hub_auth")
    def _hub_auth(self) -> HubOAuth:
        return HubOAuth(api_url=self.api_url, api_token=self.api_token, cache_max_age=60)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.payload: ClusterPayload | None = None
        self.last_ok: datetime | None = None
        self.poll_error = ""
        self.rounds = 0
        self.history = History(self.history_window, int(self.history_window / 1.0) + 1)
        self._intervals: list[Interval] | None = None
        self._usage_message = "Usage is being read."
        self._usage_cache: dict[str, Usage] = {}
        self._store: AccountingStore | None = None
        self._chrome = page_settings()  # the hub's navigation bar's links

    def initialize(self, argv: Any = None) -> None:
        super().initialize(argv)
        points = int(self.history_window / max(self.poll_interval, 0.5)) + 1
        self.history = History(self.history_window, points)

    @property
    def page(self) -> Page:
        prefix = self.payload.hub_prefix if self.payload else "/hub/"
        return Page(prefix, self.service_prefix, self.poll_interval, self._chrome)

    def client(self) -> HubClient:
        if self.http_client is None:
            self.http_client = httpx.AsyncClient()
        return HubClient(self.http_client, self.api_url, self.api_token, self.request_timeout)

    # ------------------------------------------------------------------ reading
    async def poll_once(self) -> None:
        """Read the hub's cluster view once; a failure keeps the last one (shown as stale)."""
        try:
            payload = await self.client().cluster()
        except HubError as e:
            if not self.poll_error:
                self.log.warning("Cluster view unavailable: %s", e)
            self.poll_error = str(e)
            return
        if self.poll_error:
            self.log.info("The hub answers again")
        self.payload, self.last_ok, self.poll_error = payload, utcnow(), ""
        self.history.record(payload, time.time())
        self.rounds += 1
        self.log.debug("Cluster view %d read: %d node(s)", self.rounds, len(payload.nodes))

    def _read_intervals(self) -> list[Interval] | None:
        if self._store is None:
            self._store = AccountingStore(self.accounting_url)
        start, end = period(utcnow().replace(tzinfo=None), self.usage_days)
        return load_intervals(self._store, start, end)

    async def load_usage(self) -> None:
        """Read the last ``usage_days`` days of allocations (in a thread: it is blocking)."""
        if not self.accounting_url:
            self._usage_message = "Usage charts are off (no accounting database is set)."
            return
        try:
            loop = asyncio.get_running_loop()
            intervals = await loop.run_in_executor(None, self._read_intervals)
        except AccountingUnavailable as e:
            self.log.warning("%s", e)
            self._usage_message = (
                "The accounting database does not answer; usage shows when it does."
            )
            return
        self._intervals, self._usage_cache = intervals, {}
        self._usage_message = (
            "No usage recorded yet: the hub creates the accounting tables with its first spawn."
            if intervals is None
            else ""
        )

    # ------------------------------------------------------------------ what a viewer sees
    def visible_payload(self, viewer: Viewer) -> ClusterPayload:
        waiting = self.poll_error or "The dashboard is reading the cluster; reload in a moment."
        payload = self.payload or ClusterPayload(message=waiting)
        return redact(payload, viewer, self.show_names)

    def view_for(self, viewer: Viewer) -> ClusterView:
        return cluster_view(self.visible_payload(viewer), viewer, self.history, now=utcnow())

    async def jobs_for(self, viewer: Viewer, user_token: str) -> Jobs:
        """The viewer's jobs (an admin's: everyone's) with the last lines of the first
        ones' output, read from the hub with the viewer's own token (so only what the
        hub lets them see). No token (an old login): nothing, with a sentence."""
        if not self.show_jobs:
            return Jobs(shown=False)
        if not user_token:
            return Jobs(message="Reload the page to see your jobs.")
        client = self.client()
        try:
            jobs = await client.jobs(user_token, everyone=viewer.admin)
        except HubError as e:
            if e.status == 404:
                return Jobs(shown=False)
            return Jobs(message=str(e))
        ids = tail_ids(jobs)
        texts = await asyncio.gather(*(client.job_tail(user_token, i, TAIL_BYTES) for i in ids))
        tails = {
            i: last_lines(t, cut=len(t.encode()) >= TAIL_BYTES)
            for i, t in zip(ids, texts, strict=True)
        }
        now = time.time()
        rows = job_rows(jobs, tails, viewer.name, viewer.admin, now, local_zone())
        return Jobs(rows=rows, everyone=viewer.admin)

    def stale_message(self) -> str:
        if not self.poll_error or self.payload is None:
            return ""
        when = self.last_ok.strftime("%H:%M:%S UTC") if self.last_ok else "?"
        return f"{self.poll_error} The figures below are from {when}."

    def notes_for(self, viewer: Viewer) -> list[str]:
        return messages_for(self.notes_file, viewer.name, utcnow()) if self.notes_file else []

    def usage_for(self, viewer: Viewer) -> Usage:
        """Everyone's charts (made once per read of the database) and the viewer's own."""
        cached = self._usage_cache.get(viewer.name)
        if cached is not None:
            return cached
        if self._intervals is None:
            return Usage(message=self._usage_message, days=self.usage_days)
        now = utcnow().replace(tzinfo=None)
        everyone = self._usage_cache.get("")  # "" is no user's name
        if everyone is None or everyone.everyone is None:
            charts = usage_charts(summarize(self._intervals, now, self.usage_days))
            everyone = self._usage_cache[""] = Usage(charts, days=self.usage_days)
        mine = usage_charts(summarize(self._intervals, now, self.usage_days, viewer.name))
        usage = Usage(everyone.everyone, mine, self._usage_message, self.usage_days)
        self._usage_cache[viewer.name] = usage
        return usage

    # ------------------------------------------------------------------ running
    def check_config(self) -> None:
        if not self.api_token:
            raise ConfigError(
                "no hub token: run the dashboard as a hub service (JUPYTERHUB_API_TOKEN)"
            )
        if self.poll_interval <= 0 or self.usage_interval <= 0:
            raise ConfigError("poll_interval and usage_interval must be > 0")
        if not self.service_prefix.endswith("/"):
            raise ConfigError(f"service_prefix must end with '/', got {self.service_prefix!r}")

    async def run(self) -> None:
        """Serve and read until SIGINT or SIGTERM (handled even when inherited ignored)."""
        self.check_config()
        url = urlsplit(self.service_url)
        server = HTTPServer(make_app(self), xheaders=True)
        server.listen(url.port or 80, url.hostname or "127.0.0.1")
        self.log.info("GPU dashboard on %s%s", self.service_url, self.service_prefix)
        try:
            await self.every_until_stopped(
                (self.poll_interval, self.poll_once), (self.usage_interval, self.load_usage)
            )
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> None:
    logging.getLogger("tornado.access").setLevel(logging.WARNING)
    GPUDashboard.launch_instance(argv)
