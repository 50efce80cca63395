"""The dashboard's HTML from view objects: Jinja2 with autoescaping on for every template,
each page inside the hub's own ``page.html`` (its navigation bar; :mod:`~..edges.hub_page`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from jupyterhub_gpu.core.dashboard.jobs import JobRow
from jupyterhub_gpu.core.dashboard.view import ClusterView, ServerView, Viewer
from jupyterhub_gpu.edges import hub_page
from jupyterhub_gpu.services.dashboard.usage import UsageCharts

TEMPLATES = Path(__file__).resolve().parent / "templates"
STATIC = Path(__file__).resolve().parent / "static"


def environment() -> jinja2.Environment:
    return hub_page.environment(str(TEMPLATES))


@dataclass(frozen=True)
class Page:
    """Where things are, for links: the hub's prefix (``/hub/``), this service's
    (``/services/gpu-dashboard/``) and its static files'."""

    hub_prefix: str
    service_prefix: str
    interval: float = 5.0  # seconds between live updates
    chrome: Mapping[str, Any] = field(default_factory=dict)  # hub_page.page_settings()

    @property
    def static_prefix(self) -> str:
        return self.service_prefix + "static/"

    @property
    def prefix(self) -> str:
        """The proxy's prefix ("/"): the hub's without its "hub/"."""
        return self.hub_prefix[: -len("hub/")] if self.hub_prefix.endswith("hub/") else "/"

    def hub_vars(self, viewer: Viewer | None, xsrf: str = "") -> dict[str, Any]:
        """What the hub's ``page.html`` needs (its bar: the viewer's name and links)."""
        user = hub_page.PageUser(viewer.name, viewer.admin) if viewer and viewer.name else None
        ns = hub_page.namespace(
            user or hub_page.PageUser(""),
            prefix=self.prefix,
            hub_prefix=self.hub_prefix,
            xsrf=xsrf,
            settings=self.chrome,
        )
        ns["user"] = user
        del ns["xsrf"]  # each page passes its own
        return ns


@dataclass(frozen=True)
class Usage:
    everyone: UsageCharts | None = None
    mine: UsageCharts | None = None
    message: str = ""  # why there is none, as a sentence
    days: int = 14


@dataclass(frozen=True)
class Jobs:
    """The page's list of batch jobs."""

    rows: Sequence[JobRow] = ()
    everyone: bool = False  # an admin's list (with owners)
    message: str = ""  # why there is no list, as a sentence
    shown: bool = True  # False: the hub has no jobs, no section


def render_live(
    view: ClusterView,
    page: Page,
    xsrf: str,
    *,
    stale: str = "",
    notes: Sequence[str] = (),
    jobs: Jobs = Jobs(shown=False),
) -> str:
    """The live part (what the page's poll replaces)."""
    return (
        environment()
        .get_template("_live.html")
        .render(
            view=view,
            service_prefix=page.service_prefix,
            xsrf=xsrf,
            stale=stale,
            notes=list(notes),
            jobs=jobs,
        )
    )


def render_page(
    view: ClusterView,
    page: Page,
    xsrf: str,
    usage: Usage,
    *,
    stale: str = "",
    notes: Sequence[str] = (),
    jobs: Jobs = Jobs(shown=False),
) -> str:
    """The whole page (first paint)."""
    return (
        environment()
        .get_template("dashboard.html")
        .render(
            **page.hub_vars(view.viewer, xsrf),
            view=view,
            viewer=view.viewer,
            hub_prefix=page.hub_prefix,
            service_prefix=page.service_prefix,
            static_prefix=page.static_prefix,
            interval=f"{page.interval:g}",
            xsrf=xsrf,
            stale=stale,
            notes=list(notes),
            jobs=jobs,
            everyone=usage.everyone,
            mine=usage.mine,
            usage_message=usage.message,
            usage_days=usage.days,
        )
    )


def render_stop(
    page: Page, server: ServerView, gpus: int, xsrf: str, viewer: Viewer | None = None
) -> str:
    """An admin's confirmation of a stop, with the note to the owner."""
    return (
        environment()
        .get_template("stop.html")
        .render(
            **page.hub_vars(viewer, xsrf),
            server=server,
            gpus=gpus,
            xsrf=xsrf,
            service_prefix=page.service_prefix,
            static_prefix=page.static_prefix,
        )
    )


def render_message(
    page: Page, title: str, message: str, ok: bool, viewer: Viewer | None = None
) -> str:
    """A page with one sentence: an action's result or why it was refused."""
    return (
        environment()
        .get_template("message.html")
        .render(
            **page.hub_vars(viewer),
            title=title,
            message=message,
            ok=ok,
            service_prefix=page.service_prefix,
            static_prefix=page.static_prefix,
        )
    )
