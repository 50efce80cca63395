"""The dashboard service's pages (tornado), under the service's prefix:

- ``GET  /``: the page (first paint); people log in through the hub's OAuth;
- ``GET  live``: the live part as HTML (the page's poll replaces it), ``api/cluster``: the
  same as JSON (what this viewer may see);
- ``GET actions/stop?user=&server=`` (the confirmation, with an admin's note to the
  owner), ``POST actions/stop`` (``user``, ``server``, ``note``): admins, and each user
  for their own servers; ``POST actions/drain`` (``node``, ``action`` = drain | undrain,
  ``note``): admins only; the POSTs with the page's XSRF token; names not on the
  dashboard are refused;
- ``GET  oauth_callback``: the end of the hub's OAuth login.

Every page is the hub's own ``page.html`` (its navigation bar) around ours. Every answer
carries a strict Content-Security-Policy (scripts and styles from this origin only, and
the hub page's own inline scripts by their hashes); every error is a sentence. The pages
read the service through :class:`Dashboard`, what they need of it
(:class:`~.app.GPUDashboard` is the one).
"""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import datetime, timezone
from typing import Any, Protocol

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from tornado import web

from jupyterhub_gpu.core.dashboard.inputs import BadInput, clean_note, known_node, user_and_server
from jupyterhub_gpu.core.dashboard.payload import ClusterPayload, ServerEntry
from jupyterhub_gpu.core.dashboard.view import ClusterView, Viewer, server_view
from jupyterhub_gpu.edges.hub_page import inline_script_hashes
from jupyterhub_gpu.services.dashboard.client import HubClient, HubError
from jupyterhub_gpu.services.dashboard.notes import record_stop
from jupyterhub_gpu.services.dashboard.render import (
    STATIC,
    Jobs,
    Page,
    Usage,
    render_live,
    render_message,
    render_page,
    render_stop,
)
from jupyterhub_gpu.wire.cluster import payload_json

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'self'",
        "base-uri 'none'",
    ]
)
JOB_ID = re.compile(r"[0-9]{1,16}(_[0-9]{1,9})?")
LOGIN_EXPIRED = "Your login has expired or is not valid here: reload the page to log in again."
ADMINS_ONLY = "Only admins can do this; ask one of your hub's admins."
NOT_YOURS = "You can stop only your own servers; ask one of your hub's admins to stop others."
NO_ACCESS = (
    "You may not use the GPU dashboard: your hub role lacks access to it. Ask an admin "
    "(docs/dashboard.md, 'Set-up')."
)
NOT_SHOWN = "That server is not on the dashboard; reload it and use its buttons."
STALE_FORM = (
    "The form is out of date or did not come from this page (XSRF check): reload the page "
    "and try again."
)


class Dashboard(Protocol):
    """What the pages read from the dashboard service and ask of it."""

    @property
    def log(self) -> logging.Logger: ...
    @property
    def hub_auth(self) -> HubOAuth: ...
    @property
    def service_prefix(self) -> str: ...
    @property
    def notes_file(self) -> str: ...
    @property
    def notes_keep(self) -> int: ...
    @property
    def payload(self) -> ClusterPayload | None: ...  # the hub's, as last read
    @property
    def page(self) -> Page: ...
    def client(self) -> HubClient: ...
    async def poll_once(self) -> None: ...
    def visible_payload(self, viewer: Viewer) -> ClusterPayload: ...
    def view_for(self, viewer: Viewer) -> ClusterView: ...
    def stale_message(self) -> str: ...
    def notes_for(self, viewer: Viewer) -> list[str]: ...
    def usage_for(self, viewer: Viewer) -> Usage: ...
    async def jobs_for(self, viewer: Viewer, user_token: str) -> Jobs: ...


class _Handler(HubOAuthenticated, web.RequestHandler):
    def initialize(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.hub_auth = dashboard.hub_auth

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("Cache-Control", "no-store")

    @property
    def viewer(self) -> Viewer:
        user: dict[str, Any] = self.current_user
        return Viewer(str(user.get("name", "")), bool(user.get("admin")))

    def page(self, html: str) -> None:
        """Send a page, allowing exactly its inline scripts (the hub's page.html has some)."""
        hashes = inline_script_hashes(html)
        if hashes:
            csp = CSP.replace("script-src 'self'", "script-src 'self' " + " ".join(hashes))
            self.set_header("Content-Security-Policy", csp)
        self.finish(html)

    def user_token(self) -> str:
        """The viewer's own token for this service (from the login cookie; never logged)."""
        return str(self.hub_auth.get_token(self) or "")

    def xsrf(self) -> str:
        token = self.xsrf_token
        return token.decode() if isinstance(token, bytes) else str(token)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = getattr(error, "log_message", None) or ""
        if "xsrf" in message.lower():
            message = STALE_FORM
        elif message.endswith(" is not allowed."):  # HubAuthenticated: no access scope
            message = NO_ACCESS
        elif status_code == 403 and not message:  # @web.authenticated on a POST
            message = LOGIN_EXPIRED
        self.answer(status_code, message or f"{self._reason}: reload the page and try again.")

    def answer(self, status: int, message: str) -> None:
        """One sentence, as a page (or JSON for ``api/`` paths)."""
        self.set_status(status)
        if self.request.path.startswith(self.dashboard.service_prefix + "api/"):
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"status": status, "message": message}))
            return
        title = "Done" if status < 400 else "Not done"
        viewer = self.viewer if self.current_user else None
        self.page(render_message(self.dashboard.page, title, message, status < 400, viewer))

    def require_user(self) -> Viewer:
        """The viewer, or 403 (no redirect: live updates and the API are not pages)."""
        if not self.current_user:
            raise web.HTTPError(403, LOGIN_EXPIRED)
        return self.viewer

    def require_admin(self) -> Viewer:
        viewer = self.require_user()
        if not viewer.admin:
            raise web.HTTPError(403, ADMINS_ONLY)
        return viewer


class PageHandler(_Handler):
    @web.authenticated
    async def get(self) -> None:
        viewer, d = self.viewer, self.dashboard
        jobs = await d.jobs_for(viewer, self.user_token())
        html = render_page(
            d.view_for(viewer),
            d.page,
            self.xsrf(),
            d.usage_for(viewer),
            stale=d.stale_message(),
            notes=d.notes_for(viewer),
            jobs=jobs,
        )
        self.page(html)


class LiveHandler(_Handler):
    async def get(self) -> None:
        viewer, d = self.require_user(), self.dashboard
        jobs = await d.jobs_for(viewer, self.user_token())
        html = render_live(
            d.view_for(viewer),
            d.page,
            self.xsrf(),
            stale=d.stale_message(),
            notes=d.notes_for(viewer),
            jobs=jobs,
        )
        self.finish(html)


class ClusterJSONHandler(_Handler):
    def get(self) -> None:
        viewer = self.require_user()
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(payload_json(self.dashboard.visible_payload(viewer))))


class StopHandler(_Handler):
    def _shown(self) -> tuple[str, str, ServerEntry]:
        """The (user, server) the request names, if the dashboard shows that server."""
        try:
            user, server = user_and_server(
                self.get_argument("user", None), self.get_argument("server", "")
            )
        except BadInput as e:
            raise web.HTTPError(e.status, str(e)) from None
        payload = self.dashboard.payload
        for s in payload.servers if payload else ():
            if (s.user, s.server) == (user, server):
                return user, server, s
        raise web.HTTPError(404, NOT_SHOWN)

    def _allowed(self) -> tuple[Viewer, str, str, ServerEntry]:
        """The viewer and the server, if the viewer may stop it: an admin any, a user
        their own."""
        viewer = self.require_user()
        user, server, entry = self._shown()
        if not viewer.admin and user != viewer.name:
            raise web.HTTPError(403, NOT_YOURS)
        return viewer, user, server, entry

    def get(self) -> None:
        viewer, _, _, entry = self._allowed()
        view = server_view(entry, viewer, datetime.now(timezone.utc))
        html = render_stop(self.dashboard.page, view, len(entry.gpus), self.xsrf(), viewer)
        self.page(html)

    async def post(self) -> None:
        admin, user, server, _ = self._allowed()
        d = self.dashboard
        try:
            note = clean_note(self.get_body_argument("note", ""))
        except BadInput as e:
            return self.answer(e.status, str(e))
        try:
            message = await d.client().stop_server(user, server)
        except HubError as e:
            return self.answer(e.status, str(e))
        d.log.info("%s stopped %s/%s from the dashboard", admin.name, user, server)
        if d.notes_file and user != admin.name:
            try:
                at = datetime.now(timezone.utc)
                record_stop(d.notes_file, user, server, admin.name, note, at, d.notes_keep)
            except OSError as e:
                d.log.warning("Could not write the note to %s: %s", d.notes_file, e)
                message += " The note could not be saved; tell the owner yourself."
        await d.poll_once()
        self.answer(200, message)


class DrainHandler(_Handler):
    async def post(self) -> None:
        admin, d = self.require_admin(), self.dashboard
        nodes = {n.name for n in d.payload.nodes} if d.payload else set()
        action = self.get_body_argument("action", "drain")
        try:
            node = known_node(self.get_body_argument("node", None), nodes)
            note = clean_note(self.get_body_argument("note", ""))
            if action not in ("drain", "undrain"):
                raise BadInput("The action must be 'drain' or 'undrain'.")
        except BadInput as e:
            return self.answer(e.status, str(e))
        try:
            client = d.client()
            if action == "drain":
                message = await client.drain(node, note, admin.name)
            else:
                message = await client.undrain(node, admin.name)
        except HubError as e:
            return self.answer(e.status, str(e))
        await d.poll_once()
        self.answer(200, message)


class CancelJobHandler(_Handler):
    async def post(self) -> None:
        viewer, d = self.require_user(), self.dashboard
        job_id = self.get_body_argument("job", "")
        if not JOB_ID.fullmatch(job_id):
            return self.answer(400, "That is not a job's number; use the button of its row.")
        try:
            message = await d.client().cancel_job(self.user_token(), job_id)
        except HubError as e:
            return self.answer(e.status, str(e))
        d.log.info("%s cancelled job %s from the dashboard", viewer.name, job_id)
        self.answer(200, message)


class CallbackHandler(HubOAuthCallbackHandler):
    def initialize(self, dashboard: Dashboard) -> None:
        self.hub_auth = dashboard.hub_auth


def make_app(dashboard: Dashboard, cookie_secret: bytes | None = None) -> web.Application:
    """The service's tornado application (``cookie_secret``: a new random one by default;
    a restarted service then logs people in again through the hub, without asking them)."""
    prefix = dashboard.service_prefix
    args = {"dashboard": dashboard}
    return web.Application(
        [
            (prefix, PageHandler, args),
            (prefix + "live", LiveHandler, args),
            (prefix + "api/cluster", ClusterJSONHandler, args),
            (prefix + "actions/stop", StopHandler, args),
            (prefix + "actions/drain", DrainHandler, args),
            (prefix + "actions/cancel-job", CancelJobHandler, args),
            (prefix + "oauth_callback", CallbackHandler, args),
        ],
        cookie_secret=cookie_secret or os.urandom(32),
        xsrf_cookies=True,
        compress_response=True,
        static_path=str(STATIC),
        static_url_prefix=prefix + "static/",
    )
