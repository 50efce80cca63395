"""The usage service over the accounting database: each user's own usage page
(:mod:`.page`, HubOAuth, ``GET /services/gpu-accounting/``) and the usage API (HubAuth):

    GET /services/gpu-accounting/api/usage?from=&to=&by=&per=&user=&group=&format=

Same parameters, checks and columns as ``jupyterhub-gpu report`` (:mod:`.query`), JSON by
default. Admins see everyone; any other user sees only their own usage (their allocations,
whatever ``user`` says is refused unless it is them, and no ``group`` filter). A token
is accepted when it holds ``access:services!service=<this service>`` (admins have it; give
it to users in the ``user`` role, docs/accounting.md). The service needs no hub scope.

Run by the hub: ``configure_usage(c)`` (``hub/extensions.py``) adds it, its users'
access and the navigation bar's "My usage" link.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from jupyterhub.services.auth import HubAuthenticated, HubOAuth
from tornado import web
from tornado.httpserver import HTTPServer

from jupyterhub_gpu.core.accounting.query import parse_format, parse_query, render
from jupyterhub_gpu.core.accounting.report import ReportError, report
from jupyterhub_gpu.edges.accounting.store import (
    DEFAULT_URL,
    AccountingStore,
    AccountingUnavailable,
)
from jupyterhub_gpu.edges.hub_page import page_settings
from jupyterhub_gpu.services.base import until_stopped
from jupyterhub_gpu.services.usage.page import UsageCallbackHandler, UsagePageHandler

log = logging.getLogger("jupyterhub_gpu.services.usage.app")
CONTENT_TYPES = {"json": "application/json", "csv": "text/csv", "table": "text/plain"}


class UsageHandler(HubAuthenticated, web.RequestHandler):
    def initialize(self, store: AccountingStore) -> None:
        self.store = store

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = getattr(kwargs.get("exc_info", (None, None))[1], "log_message", None)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": reason or self._reason}))

    def _fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status, "message": message}))

    @web.authenticated
    async def get(self) -> None:
        user: dict[str, Any] = self.current_user
        name, admin = str(user.get("name", "")), bool(user.get("admin"))
        params = {k: self.get_argument(k) for k in self.request.arguments}
        if not admin:
            if params.get("user", name) != name or "group" in params:
                return self._fail(
                    403, "You may see only your own usage: leave out 'user' and 'group'."
                )
            params["user"] = name
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        try:
            fmt = parse_format(params.pop("format", None) or "json")
            query = parse_query(params, now)
            rows = await asyncio.get_running_loop().run_in_executor(
                None, self._rows, query, now, admin
            )
        except ReportError as e:
            return self._fail(400, str(e))
        except AccountingUnavailable as e:
            log.warning("%s", e)
            return self._fail(503, "The accounting database does not answer; try later.")
        self.set_header("Content-Type", CONTENT_TYPES[fmt])
        self.finish(render(rows, query, fmt))

    def _rows(self, query: Any, now: datetime, admin: bool) -> list[Any]:
        if not self.store.has_schema():  # the hub makes the tables with its first spawn
            return []
        if admin:  # an unknown name is a mistake worth saying; a user's own is just empty
            for column, value in (("user", query.user), ("group", query.group)):
                if value is not None and not self.store.known(column, value):
                    raise ReportError(f"No allocation of {column} {value!r} was ever recorded.")
        return report(
            self.store.intervals(query.start, query.end, query.user, query.group), query, now
        )


def make_app(store: AccountingStore, prefix: str) -> web.Application:
    prefix = prefix.rstrip("/") + "/"
    hub_auth = HubOAuth(cache_max_age=60)
    page = {"store": store, "prefix": prefix, "hub_auth": hub_auth, "chrome": page_settings()}
    return web.Application(
        [
            (prefix, UsagePageHandler, page),
            (prefix + "oauth_callback", UsageCallbackHandler, {"hub_auth": hub_auth}),
            (prefix + "api/usage", UsageHandler, {"store": store}),
        ],
        cookie_secret=os.urandom(32),
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default=os.environ.get("JUPYTERHUB_GPU_ACCOUNTING_URL", DEFAULT_URL))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(name)s] %(message)s")
    try:
        store = AccountingStore(args.db)
    except AccountingUnavailable as e:
        log.error("%s", e)
        sys.exit(1)
    url = urlsplit(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10102"))
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu-accounting/")
    asyncio.run(serve(store, prefix, url.hostname or "127.0.0.1", url.port or 80))


async def serve(store: AccountingStore, prefix: str, host: str, port: int) -> None:
    """Serve until SIGINT or SIGTERM, handled even when inherited as ignored
    (:func:`~jupyterhub_gpu.services.base.until_stopped`)."""
    server = HTTPServer(make_app(store, prefix))
    server.listen(port, host)
    log.info("GPU usage API on %s:%d%sapi/usage", host, port, prefix)
    await until_stopped()
    server.stop()
    log.info("Stopping")


if __name__ == "__main__":
    main()
