"""What the culler's warnings and notes say on a user's hub pages, and "I'm still here".

    POST /hub/api/gpu/users/{user}/keep                  (the default server)
    POST /hub/api/gpu/users/{user}/servers/{name}/keep   (a named server)

A server the culler warned (``GPUCluster.cull_warnings_file``, written by the culler
each round, core/culling/warning.py) shows on every hub page: "Your server will be stopped
at 14:05 (local time) because it has been idle for 50 min." with "I'm still here", which
posts here. That records the moment in the server's spawner state
(:data:`~jupyterhub_gpu.core.culling.warning.POSTPONED_KEY`), which the culler reads as hub
activity then: the cull moves a whole timeout later, once per server start (a second
press is refused with a sentence). Scope: ``servers`` on that server (a user's own, as
starting and stopping it). After a cull, the server's note
(``GPUCluster.cull_notes_file``) says why and when, on the home page and on a bookmarked
``/user/...`` URL of it (JupyterHub's not_running page), until the server starts again.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from jupyterhub_gpu.core.culling.warning import (
    CullWarning,
    lab_warning_words,
    stopped_words,
    warning_words,
)
from jupyterhub_gpu.core.suspend import suspended_words
from jupyterhub_gpu.core.times import parse_time
from jupyterhub_gpu.edges.files import load_cull_warnings, load_notes
from jupyterhub_gpu.wire.cull_notes import notes_for

#: How long after a cull its note stays on the home page (the spawn form shows it longer).
NOTE_SHOWN_FOR = timedelta(days=7)


def _site_file(spawner: Any, key: str) -> str:
    """``c.GPUCluster.<key>`` as ``spawner`` (a GPUDockerSpawner) reads it; '' for another
    spawner."""
    return str(getattr(getattr(spawner, "site", None), key, "") or "")


def _naive_utc(t: datetime | None) -> datetime | None:
    return None if t is None else t.replace(tzinfo=timezone.utc)


def _warning_of(spawner: Any, holder: str, now: datetime) -> CullWarning | None:
    """The culler's current warning of this active server, unless its user already
    pressed "I'm still here" after it was issued."""
    path = _site_file(spawner, "cull_warnings_file")
    if not path or not spawner.active:
        return None
    warning = load_cull_warnings(path, now).get(holder)
    postponed = parse_time(getattr(spawner, "cull_postponed_at", ""))
    if warning is None or (postponed is not None and postponed >= warning.issued):
        return None
    return warning


def cull_notices(user: Any, now: datetime) -> list[dict[str, Any]]:
    """The warnings of ``user``'s active servers, why the culler stopped the others (each
    note until that server starts again, at most :data:`NOTE_SHOWN_FOR`), and which are
    suspended (until they start again: docs/culler.md).
    ``keep_url``: "I'm still here"'s API path under the hub's base URL, or ''."""
    found: list[dict[str, Any]] = []
    notes_files: dict[str, Any] = {}
    for name, orm in sorted(user.orm_user.orm_spawners.items()):
        spawner = user.spawners[name]
        holder = f"{user.name}/{name}"
        warning = _warning_of(spawner, holder, now)
        if warning is not None:
            words = warning_words(name, warning, now)
            keep = f"api/gpu/users/{quote(user.name, safe='')}/" + (
                f"servers/{quote(name, safe='')}/keep" if name else "keep"
            )
            found.append(
                {
                    "server": name,
                    "kind": "cull-warning",
                    "at": warning.at.isoformat(),
                    "message": words.text,
                    "said": words.said,
                    "keep_url": keep if words.postponable else "",
                    # the same in the server's own JupyterLab, short for its notification
                    "lab_message": lab_warning_words(warning, now).text,
                }
            )
            continue
        path = _site_file(spawner, "cull_notes_file")
        suspended = getattr(spawner, "suspended", None)
        if spawner.active or orm.pending or not (path or suspended):
            continue
        if path not in notes_files:
            notes_files[path] = load_notes(path) if path else {}
        # the hub sets last_activity when a server stops: a note after a later start is old
        last = _naive_utc(orm.last_activity)
        since = now - NOTE_SHOWN_FOR
        if last is not None:
            since = max(since, last - timedelta(minutes=10))
        mine = [n for n in notes_for(notes_files[path], user.name, since=since) if n.server == name]
        if suspended is not None:  # checkpointed, not stopped: its next start resumes it
            words = suspended_words(name, suspended.at, mine[-1].reason if mine else "", now)
            found.append(
                {
                    "server": name,
                    "kind": "suspended",
                    "at": suspended.at.isoformat(),
                    "message": words.text,
                    "said": words.said,
                    "keep_url": "",
                }
            )
        elif mine:
            words = stopped_words(name, mine[-1].at, mine[-1].reason, now)
            found.append(
                {
                    "server": name,
                    "kind": "culled",
                    "at": mine[-1].at.isoformat(),
                    "message": words.text,
                    "said": words.said,
                    "keep_url": "",
                }
            )
    return found


class KeepServerAPIHandler(APIHandler):
    """ "I'm still here": postpone the culler's warned cull of one's own server, once."""

    @needs_scope("servers")
    async def post(self, user_name: str, server_name: str = "") -> None:
        user = self.find_user(user_name)
        if user is None or server_name not in user.orm_user.orm_spawners:
            raise web.HTTPError(404, "That server does not exist.")
        spawner = user.spawners[server_name]
        if not spawner.active:
            raise web.HTTPError(409, "That server is not running: there is nothing to keep.")
        now = datetime.now(timezone.utc)
        holder = f"{user.name}/{server_name}"
        path = _site_file(spawner, "cull_warnings_file")
        warning = load_cull_warnings(path, now).get(holder) if path else None
        if warning is None:
            raise web.HTTPError(409, "Your server is not about to be stopped: nothing to do.")
        if getattr(spawner, "cull_postponed_at", ""):
            raise web.HTTPError(
                409,
                "You kept this server once already: use it (run a cell, open a file) to "
                "keep it running.",
            )
        spawner.cull_postponed_at = now.isoformat()
        spawner.orm_spawner.state = spawner.get_state()
        self.db.commit()
        self.log.info("%s pressed I'm still here: the culler waits a timeout more", holder)
        which = f"Your server '{server_name}'" if server_name else "Your server"
        self.write(json.dumps({"message": f"{which} is kept: thank you."}))


HANDLERS: list[tuple[str, type]] = [
    (r"/api/gpu/users/(?P<user_name>[^/]+)/keep", KeepServerAPIHandler),
    (r"/api/gpu/users/(?P<user_name>[^/]+)/servers/(?P<server_name>[^/]+)/keep",
     KeepServerAPIHandler),
]  # fmt: skip
