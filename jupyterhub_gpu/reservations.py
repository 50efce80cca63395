"""Reservations through the hub: an admin API, its wire format, and ``jupyterhub-gpu reserve``.

    GET    /hub/api/gpu/reservations        the reservations not over yet (list:users)
    POST   /hub/api/gpu/reservations        add one (admin:users), JSON body below
    DELETE /hub/api/gpu/reservations/{id}   delete one (admin:users)

    {"group": "ml-lab", "start": "2026-12-01T09:00+01:00", "end": "2026-12-01T18:00+01:00",
     "model": "NVIDIA A100-SXM4-40GB", "count": 2}          (or "nodes": [...], "gpu_uuids": [...])

The hub checks a new reservation against the cluster it sees and the reservations stored
(``scheduling.reservations.validate``: overlaps, more GPUs than exist) and refuses it with
that sentence (400), else stores it in the accounting database and applies it at once:
the GPU queue keeps its GPUs for the group during the window, and servers of other groups
on them are stopped when it begins (docs/scheduling.md). Added to a hub's configuration
with :func:`configure`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import httpx
from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web
from traitlets.config import Config

from .scheduling import Reservation
from .scheduling.reservations import validate

FIELDS = {"group", "start", "end", "model", "count", "nodes", "gpu_uuids", "note"}
PAST_SLACK_S = 600.0  # a start this far in the past is still "now"
_ADDING = asyncio.Lock()  # one validation + insert at a time (the hub's event loop)


class BadReservation(ValueError):
    """A request body that is not a reservation; the message says what to fix."""


def _time(raw: Mapping[str, Any], key: str) -> float:
    value = raw.get(key)
    try:
        t = datetime.fromisoformat(str(value))
    except ValueError:
        raise BadReservation(f"'{key}' must be an ISO time, e.g. 2026-12-01T09:00+01:00") from None
    if t.tzinfo is None:
        raise BadReservation(f"'{key}' needs a time zone, e.g. 2026-12-01T09:00+01:00 or ...Z")
    if not 1971 <= t.year <= 9998:
        raise BadReservation(f"'{key}' must be a time between 1971 and 9998.")
    return t.timestamp()


def _names(raw: Mapping[str, Any], key: str) -> frozenset[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadReservation(f"'{key}' must be a list of names")
    return frozenset(value)


def parse_reservation(raw: Any, rid: str) -> tuple[Reservation, str]:
    """A request body -> (reservation, note); :class:`BadReservation` says what is wrong."""
    if not isinstance(raw, dict):
        raise BadReservation("The body must be a JSON object.")
    unknown = sorted(set(raw) - FIELDS)
    if unknown:
        raise BadReservation(f"Unknown field {unknown[0]!r}; known: {', '.join(sorted(FIELDS))}.")
    group, model, note = raw.get("group"), raw.get("model"), raw.get("note", "")
    if not isinstance(group, str) or not group or len(group) > 255:
        raise BadReservation("'group' must be the name of a group (1-255 characters).")
    if model is not None and (not isinstance(model, str) or not model):
        raise BadReservation("'model' must be a GPU model name.")
    count = raw.get("count", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise BadReservation("'count' must be a whole number of GPUs.")
    if not isinstance(note, str) or len(note) > 500:
        raise BadReservation("'note' must be text of at most 500 characters.")
    reservation = Reservation(
        id=rid,
        group=group,
        start=_time(raw, "start"),
        end=_time(raw, "end"),
        model=model,
        count=count,
        nodes=_names(raw, "nodes"),
        gpu_uuids=_names(raw, "gpu_uuids"),
    )
    return reservation, note


def as_json(r: Reservation) -> dict[str, Any]:
    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).isoformat()

    return {
        "id": r.id,
        "group": r.group,
        "start": iso(r.start),
        "end": iso(r.end),
        "model": r.model,
        "count": r.count,
        "nodes": sorted(r.nodes),
        "gpu_uuids": sorted(r.gpu_uuids),
    }


class _Base(APIHandler):
    """Errors are ``web.HTTPError``: JupyterHub's APIHandler answers them as
    ``{"status": ..., "message": ...}``."""

    def _ready(self) -> Any:
        from .spawner import current_cluster

        cluster = current_cluster()
        if cluster is None or cluster.recorder is None:
            raise web.HTTPError(
                503,
                "Reservations need the hub's GPU cluster and its accounting database "
                "(GPUDockerSpawner.accounting_url); start a server once, or set it.",
            )
        return cluster


class ReservationsAPIHandler(_Base):
    @needs_scope("list:users")
    async def get(self) -> None:
        cluster = self._ready()
        await cluster.queue.reload()
        self.write(json.dumps([as_json(r) for r in cluster.queue.reservations]))

    @needs_scope("admin:users")
    async def post(self) -> None:
        cluster = self._ready()
        try:
            new, note = parse_reservation(self.get_json_body(), uuid.uuid4().hex[:16])
        except BadReservation as e:
            raise web.HTTPError(400, str(e)) from None
        if new.start < time.time() - PAST_SLACK_S:
            raise web.HTTPError(
                400,
                "The reservation starts in the past: servers would be stopped at once "
                "without warning. Start it now or later.",
            )
        async with _ADDING:  # two admins at once: the second sees the first's
            await cluster.queue.reload()
            snapshot = await cluster.snapshot()
            problem = validate(new, cluster.queue.reservations, snapshot.nodes)
            if problem is not None:
                raise web.HTTPError(400, problem)
            by = getattr(self.current_user, "name", "")
            await _call(cluster, lambda store: store.add_reservation(new, note, by))
            await cluster.queue.reload()
        self.log.info("Reservation %s for group %s added by %s", new.id, new.group, by)
        self.set_status(201)
        self.write(json.dumps(as_json(new)))


class ReservationAPIHandler(_Base):
    @needs_scope("admin:users")
    async def delete(self, rid: str) -> None:
        cluster = self._ready()
        if not await _call(cluster, lambda store: store.delete_reservation(rid)):
            raise web.HTTPError(404, f"No reservation {rid!r}.")
        await cluster.queue.reload()
        self.log.info("Reservation %s deleted by %s", rid, getattr(self.current_user, "name", ""))
        self.set_status(204)


async def _call(cluster: Any, fn: Any) -> Any:
    return await asyncio.wrap_future(cluster.recorder.call(fn))


def configure(c: Config) -> None:
    """Add the reservations API to a hub's configuration (``jupyterhub_config.py``), and
    the notices of running servers whose GPUs a reservation will take (:mod:`.notices`,
    shown above every hub page)."""
    from .dashboard.hub import HUB_TEMPLATES
    from .notices import HANDLERS as NOTICES

    hub = c.JupyterHub
    handlers = list(hub.extra_handlers) if "extra_handlers" in hub else []
    hub.extra_handlers = [
        *handlers,
        (r"/api/gpu/reservations", ReservationsAPIHandler),
        (r"/api/gpu/reservations/([0-9a-f]{1,64})", ReservationAPIHandler),
        *NOTICES,
    ]
    paths = [str(p) for p in (hub.template_paths if "template_paths" in hub else [])]
    if str(HUB_TEMPLATES) not in paths:
        hub.template_paths = [str(HUB_TEMPLATES), *paths]
    variables = dict(hub.template_vars) if "template_vars" in hub else {}
    hub.template_vars = {**variables, "jhgpu_notices": True}


# ---------------------------------------------------------------------- the command
def command(argv: list[str]) -> int:
    """``jupyterhub-gpu reserve add|list|delete``: the admin API from a shell, with the
    token in ``JUPYTERHUB_API_TOKEN`` (an admin's)."""
    p = argparse.ArgumentParser(prog="jupyterhub-gpu reserve")
    p.add_argument("--hub", default=os.environ.get("JUPYTERHUB_URL", "http://127.0.0.1:8000"))
    sub = p.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="reserve GPUs for a group and a window")
    add.add_argument("--group", required=True)
    add.add_argument("--start", required=True, help="ISO time with zone")
    add.add_argument("--end", required=True, help="ISO time with zone")
    add.add_argument("--model")
    add.add_argument("--count", type=int, default=0)
    add.add_argument("--node", action="append", default=[], dest="nodes")
    add.add_argument("--gpu", action="append", default=[], dest="gpu_uuids")
    add.add_argument("--note", default="")
    sub.add_parser("list", help="the reservations not over yet")
    delete = sub.add_parser("delete", help="delete a reservation")
    delete.add_argument("id")
    args = p.parse_args(argv)
    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if not token:
        print("Set JUPYTERHUB_API_TOKEN to an admin's API token.", file=sys.stderr)
        return 2
    url = f"{args.hub.rstrip('/')}/hub/api/gpu/reservations"
    headers = {"Authorization": f"token {token}"}
    try:
        r = _request(args, url, headers)
    except httpx.HTTPError as e:
        print(f"The hub at {args.hub} did not answer: {e}", file=sys.stderr)
        return 1
    if r.status_code >= 400:
        print(_message(r), file=sys.stderr)
        return 1
    if r.content:
        print(json.dumps(r.json(), indent=2))
    return 0


def _request(args: argparse.Namespace, url: str, headers: dict[str, str]) -> httpx.Response:
    if args.action == "list":
        return httpx.get(url, headers=headers, timeout=30)
    if args.action == "delete":
        return httpx.delete(f"{url}/{args.id}", headers=headers, timeout=30)
    body = {k: getattr(args, k) for k in ("group", "start", "end", "count", "note")}
    body.update(nodes=args.nodes, gpu_uuids=args.gpu_uuids)
    if args.model:
        body["model"] = args.model
    return httpx.post(url, headers=headers, json=body, timeout=30)


def _message(r: httpx.Response) -> str:
    try:
        return str(r.json().get("message") or r.text)
    except ValueError:
        return f"HTTP {r.status_code}: {r.text[:200]}"
