"""Reservations through the hub: an admin API and its wire format (the command
``jupyterhub-gpu reserve`` is :mod:`jupyterhub_gpu.cli.reserve`).

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
with :func:`jupyterhub_gpu.hub.extensions.configure_reservations`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from jupyterhub_gpu.core.scheduling import Reservation
from jupyterhub_gpu.core.scheduling.reservations import validate
from jupyterhub_gpu.errors import BadReservation
from jupyterhub_gpu.hub.cluster import Cluster
from jupyterhub_gpu.hub.queue import SpawnQueue
from jupyterhub_gpu.hub.runtime import runtime_of

FIELDS = {"group", "start", "end", "model", "count", "nodes", "gpu_uuids", "note"}
PAST_SLACK_S = 600.0  # a start this far in the past is still "now"
_ADDING = asyncio.Lock()  # one validation + insert at a time (the hub's event loop)


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

    def _ready(self) -> tuple[Cluster, SpawnQueue]:
        runtime = runtime_of(self.settings)
        cluster, queue = runtime.cluster, runtime.queue
        if cluster is None or queue is None or cluster.recorder is None:
            raise web.HTTPError(
                503,
                "Reservations need the hub's GPU cluster and its accounting database "
                "(GPUCluster.accounting_url); start a server once, or set it.",
            )
        return cluster, queue


class ReservationsAPIHandler(_Base):
    @needs_scope("list:users")
    async def get(self) -> None:
        _cluster, queue = self._ready()
        await queue.reload()
        self.write(json.dumps([as_json(r) for r in queue.reservations]))

    @needs_scope("admin:users")
    async def post(self) -> None:
        cluster, queue = self._ready()
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
            await queue.reload()
            snapshot = await cluster.snapshot()
            problem = validate(new, queue.reservations, snapshot.nodes)
            if problem is not None:
                raise web.HTTPError(400, problem)
            by = getattr(self.current_user, "name", "")
            await _call(cluster, lambda store: store.add_reservation(new, note, by))
            await queue.reload()
        self.log.info("Reservation %s for group %s added by %s", new.id, new.group, by)
        self.set_status(201)
        self.write(json.dumps(as_json(new)))


class ReservationAPIHandler(_Base):
    @needs_scope("admin:users")
    async def delete(self, rid: str) -> None:
        cluster, queue = self._ready()
        if not await _call(cluster, lambda store: store.delete_reservation(rid)):
            raise web.HTTPError(404, f"No reservation {rid!r}.")
        await queue.reload()
        self.log.info("Reservation %s deleted by %s", rid, getattr(self.current_user, "name", ""))
        self.set_status(204)


async def _call(cluster: Cluster, fn: Any) -> Any:
    assert cluster.recorder is not None  # _ready() checked it
    return await asyncio.wrap_future(cluster.recorder.call(fn))


HANDLERS: list[tuple[str, type]] = [
    (r"/api/gpu/reservations", ReservationsAPIHandler),
    (r"/api/gpu/reservations/([0-9a-f]{1,64})", ReservationAPIHandler),
]
