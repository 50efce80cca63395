"""Whether a spawn gets its GPUs now, waits in the GPU queue, or is refused.

The spawner's side of the GPU queue (``spawnqueue.py``), the quotas (``form/quota.py``,
``queue_policy``'s through ``SpawnQueue.admit``), the group a server is charged to and the
reservations of other groups. The decisions are pure (``placement.place``,
``scheduling``, ``chargeable_groups`` and the functions below); :class:`QueueingSpawnerMixin`
wires them into JupyterHub's ``Spawner``, and ``GPUDockerSpawner`` (``spawner.py``, which
keeps the container's life cycle and the spawner's state) extends it:

- ``_decide_and_reserve``: the quotas, then the placement and the ledger reservation with
  no ``await`` in between (concurrent spawns on the hub's event loop can't collide), or
  :class:`~.spawnqueue.MustQueue`; ``_wait_in_line``: the wait in the queue, whose
  decisions reserve through ``_take``, the same synchronous step;
- ``_charge_groups``/``_group_of``: the one place that decides which group pays, and
  ``_max_wait``: how long that group may wait;
- ``run_pre_spawn_hook``: JupyterHub's ``start_timeout`` raised by that wait;
- ``_warn_of_reservations`` (the spawn page) and ``_preempted`` (``poll``): reservations
  of other groups on a server's GPUs.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from traitlets import Dict, Float

from jupyterhub_gpu.core.accounting.records import EndReason, chargeable_groups
from jupyterhub_gpu.core.form.user_quota import (
    GPUQuotaExceeded,
    UserQuota,
    holdings_of,
    quota_refusal,
)
from jupyterhub_gpu.core.placement.request import Placement, PlacementRequest
from jupyterhub_gpu.core.scheduling import Policies, QueuedRequest
from jupyterhub_gpu.core.scheduling.admission import (
    Admission,
    Admit,
    Queue,
    QueueView,
    Refused,
    admit,
)
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.waiting import joined_line, news_html
from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.edges.node_errors import node_calls
from jupyterhub_gpu.errors import NodeError
from jupyterhub_gpu.hub.queue import MustQueue, QueueFull, QueueRefused, QueueTimeout, SpawnQueue
from jupyterhub_gpu.hub.refusal import spawn_refusal

if TYPE_CHECKING:
    from jupyterhub.spawner import Spawner as _SpawnerBase

    from jupyterhub_gpu.core.form import ResourcePolicy
    from jupyterhub_gpu.core.identity import Identity
    from jupyterhub_gpu.hub.cluster import Cluster
    from jupyterhub_gpu.hub.cluster_settings import GPUCluster
else:  # JupyterHub refuses a Spawner subclass without its own start, stop and poll
    from traitlets.config import LoggingConfigurable as _SpawnerBase


def charge_group(allowed: Sequence[str], chosen: str | None) -> str:
    """The group a server is charged to: ``chosen`` if it is one of ``allowed`` (the
    groups the user may charge, the default first), else the default ("" for none)."""
    if chosen in allowed:
        return str(chosen)
    return allowed[0] if allowed else ""


def group_wait(policies: Policies, group: str, default: float) -> float:
    """Seconds a spawn charged to ``group`` may wait in the queue: the group's own
    ``max_queue_wait`` (``default_group``'s for a group not listed), else ``default``."""
    own = policies.group(group).max_queue_wait_s
    return default if own is None else own


def longest_wait(policies: Policies, default: float) -> float:
    """The longest any group may wait (``default`` included)."""
    waits = [p.max_queue_wait_s for p in (policies.default, *policies.groups.values())]
    return max([default, *(w for w in waits if w is not None)])


class QueueingSpawnerMixin(_SpawnerBase):
    """The GPU queue, quotas, charge groups and reservations of a GPU spawner, for a
    Spawner class to extend before its upstream base: ``class
    GPUDockerSpawner(QueueingSpawnerMixin, DockerSpawner)``. A configurable (its traits
    are read as ``c.GPUDockerSpawner.*``), a ``Spawner`` to the type checker."""

    if TYPE_CHECKING:  # what the spawner provides (spawner.py)
        node_name: str
        gpu_uuids: list[str]
        site: GPUCluster
        allocation_id: str
        _events: list[dict[str, Any]]
        _ended_note: str

        @property
        def cluster(self) -> Cluster: ...
        @property
        def queue(self) -> SpawnQueue: ...
        @property
        def holder(self) -> str: ...
        @property
        def policy(self) -> ResourcePolicy: ...
        async def identity(self) -> Identity: ...
        def _event(self, progress: int, message: str, **extra: Any) -> None: ...
        def _reserve(self, decision: Placement) -> Placement: ...
        def _forget_placement(self, ended: EndReason | None = None) -> None: ...

    _start_budget: float | None = None  # the configured start_timeout, once raised

    max_queue_wait = Float(
        3600.0,
        config=True,
        help="""Seconds a spawn that finds no GPU free waits in the GPU queue, its
        progress page saying where it stands, before it gives up with a message
        (docs/scheduling.md). 0: no queue, such a spawn is refused at once. A request
        that can never fit (more GPUs than any node has) is refused at once either way.
        The wait does not count against ``start_timeout``: the hub's bound on a start is
        raised by this much, and ``start_timeout`` bounds what follows the queue. A group
        may have its own (``queue_policy``'s ``groups.NAME.max_queue_wait``): the group a
        spawn is charged to decides; this is the default.""",
    )
    queue_policy = Dict(
        config=True,
        help="""The GPU queue's order and quotas (docs/scheduling.md, "Settings"): fair
        share's ``half_life_hours`` and ``model_weights``, the priority ``weights``,
        ``max_age_hours``, ``backfill``, and per group (``groups``, ``default_group``)
        ``priority``, ``shares``, ``max_gpus`` (and ``max_gpus_per_model``) held by the
        group's servers together, ``user_max_gpus`` (and per model) per user, and
        ``max_queue_wait`` (seconds; 0: never wait); per-user caps in ``users``;
        ``reservation_notice_hours`` (24): how far ahead users hear of reservations;
        ``timezone`` (an IANA name, default ``"UTC"``): the zone of the clock times in
        users' and admins' messages. A request over a cap waits; one over the absolute
        cap is refused with the number. An unknown key is an error at start-up.""",
    )

    # ------------------------------------------------------------------ placement
    def _decide_and_reserve(
        self,
        snapshot: ClusterSnapshot,
        request: PlacementRequest,
        quota: UserQuota | None = None,
        group: str = "",
    ) -> Placement:
        """Gather what :func:`~jupyterhub_gpu.core.scheduling.admission.admit` decides on,
        and apply its answer: reserve, queue (:class:`MustQueue`) or refuse. No await in
        between: concurrent spawns can't collide, nor can two spawns of one user both pass
        their ``max_gpus_per_user``."""
        verdict, _ = self._admission(self.cluster.ledger.overlay(snapshot), request, quota, group)
        return self._apply(verdict)

    def _admission(
        self,
        snapshot: ClusterSnapshot,
        request: PlacementRequest,
        quota: UserQuota | None = None,
        group: str = "",
    ) -> tuple[Admission, QueueView]:
        """What :func:`admit` says of ``request`` now (``snapshot``: the ledger's holds
        laid over it), and the queue's view it read. No I/O."""
        held = holdings_of(self.cluster.ledger.charged(), self.user.name, exclude=self.holder)
        cap = quota_refusal(held, request.gpu_count, quota or UserQuota(None))
        may_wait = self._max_wait(group) > 0  # 0: this group never waits (refused at once)
        if request.gpu_count:
            item = QueuedRequest(self.holder, self.user.name, group, request, time.time())
            view = self.queue.view(item, snapshot, may_wait)
            servers: dict[str, int] = {}
        else:
            view = QueueView(may_wait=may_wait)
            servers = {n.name: self.cluster.ledger.servers_on(n.name) for n in snapshot.nodes}
        verdict = admit(snapshot, request, view, user_cap_refusal=cap, servers_on=servers)
        return verdict, view

    def _apply(self, verdict: Admission) -> Placement:
        """Reserve an :class:`Admit`'s placement; raise :class:`MustQueue` for a
        :class:`Queue`, the user's refusal otherwise."""
        if isinstance(verdict, Admit):
            return self._reserve(verdict.placement)
        if isinstance(verdict, Queue):
            raise MustQueue(verdict.reason)
        self._refuse(verdict)

    def _refuse(self, verdict: Refused) -> NoReturn:
        """Raise the user's refusal of a :class:`Refused`."""
        if verdict.code == "user_gpu_cap":
            self.log.info("%s: refused, %s", self.holder, verdict.sentence)
            raise GPUQuotaExceeded(verdict.sentence)
        raise spawn_refusal(verdict.sentence, reason=verdict.code, status_code=verdict.status)

    def _take(self, decision: Placement) -> bool:
        """Reserve what the queue decided for this spawn (False: taken meanwhile)."""
        try:
            self._reserve(decision)
        except KeyError as e:
            self.log.warning("%s: queued start not taken: %s", self.holder, e)
            return False
        return True

    # ------------------------------------------------------------------ the queue
    async def _wait_in_line(
        self,
        request: PlacementRequest,
        quota: UserQuota,
        why: str,
        group: str,
        prefer: Callable[[], Placement | None] | None = None,
    ) -> Placement:
        """Wait in the GPU queue (spawnqueue.py), charged to ``group`` and for as long as
        that group may wait (:meth:`_max_wait`); the progress page follows its news. When
        its turn comes, the user's GPU cap is checked again (their other servers may have
        taken GPUs meanwhile): over it, the spawn keeps waiting.

        ``prefer``: called when the turn comes, the placement to take instead of the
        queue's, if it can be held now (a suspended server's own node and GPUs: it then
        resumes); None, or taken meanwhile: the queue's. The placement taken is returned."""
        taken: list[Placement] = []

        def take(decision: Placement) -> bool:
            held = holdings_of(self.cluster.ledger.charged(), self.user.name, exclude=self.holder)
            if quota_refusal(held, request.gpu_count, quota):
                return False
            own = prefer() if prefer is not None else None
            for choice in (own, decision):
                if choice is not None and self._take(choice):
                    taken.append(choice)
                    return True
            return False

        item = QueuedRequest(self.holder, self.user.name, group, request, time.time())
        limit = self._max_wait(group)
        wait = duration(limit)
        self._queue_news(joined_line(why, wait))
        try:
            given = await self.queue.wait(item, take, self._queue_news, limit, quota.limit)
            return taken[-1] if taken else given
        except QueueFull as e:
            raise spawn_refusal(str(e), reason="queue_full", status_code=429) from None
        except QueueTimeout as e:
            raise spawn_refusal(
                f"No GPU freed up for your server within {wait} "
                f"({e.where.rstrip('.') or 'in line'}). Start again later, or ask for fewer or "
                "other GPUs.",
                reason="queue_timeout",
                status_code=503,
            ) from None
        except QueueRefused as e:
            raise spawn_refusal(str(e), reason="never_fits", status_code=503) from None

    def _queue_news(self, words: str) -> None:
        """A line of the progress page while the spawn waits in line: marked
        ``jhgpu_queued`` (the page then says so and offers "Leave the queue"), with the
        estimate's time as ``<time>`` in ``html_message`` (shown in the browser's zone)."""
        at = self.queue.expected_at(self.holder)
        tz = self.queue.settings.timezone
        html = news_html(words, at, time.time(), tz)
        self._event(20, words, html_message=html, jhgpu_queued=True)

    def run_pre_spawn_hook(self) -> Any:
        """JupyterHub bounds ``start`` by ``start_timeout``, read right after this hook (it
        awaits what the hook returns): a wait in the GPU queue must not count, nor an image
        pull that makes progress, so the bound grows by the wait of the group the spawn is
        charged to (:meth:`_spawn_wait`) and by the pull's own bound
        (``pull_timeout``); ``_create`` keeps the configured one for the start."""
        return self._extend_start_timeout()

    async def _extend_start_timeout(self) -> None:
        hub = cast(Any, self)  # start_timeout: JupyterHub's Integer trait
        if self._start_budget is None:
            self._start_budget = float(hub.start_timeout)
        wait = await self._spawn_wait()
        hub.start_timeout = int(self._start_budget + wait + self.site.pull_timeout)
        result = super().run_pre_spawn_hook()
        if inspect.isawaitable(result):
            await result

    async def _spawn_wait(self) -> float:
        """How long this spawn may wait in the GPU queue: the ``max_queue_wait`` of the
        group it is charged to (``user_options``' charge group if the user may charge it,
        else their default; ``start`` refuses a bad choice). If the user's groups can't be
        read here, the longest any group may wait (``start`` then says what is wrong)."""
        try:
            ident = await self.identity()
        except Exception:
            return longest_wait(self.queue.policies, self.max_queue_wait)
        chosen = (self.user_options or {}).get("charge_group")
        group = self._group_of(ident, chosen.strip() if isinstance(chosen, str) else None)
        return self._max_wait(group)

    # ------------------------------------------------------------------ who pays
    def _charge_groups(self, ident: Identity) -> tuple[str, ...]:
        """The groups this user may charge a server to, the default first: their groups
        the site configures (group_bounds, queue_policy.groups); else their first group."""
        configured = [*self.policy.group_bounds, *self.queue.policies.groups]
        return chargeable_groups(ident.groups, configured)

    def _group_of(self, ident: Identity, chosen: str | None = None) -> str:
        """The group a server is charged to (accounting record, queue item, quotas,
        reservations, the wait): ``chosen`` (the validated ``charge_group`` option) if the
        user may charge it, else the first group they may charge ("" in no group)."""
        return charge_group(self._charge_groups(ident), chosen)

    def _max_wait(self, group: str) -> float:
        """Seconds a spawn charged to ``group`` may wait in the GPU queue: the group's own
        ``queue_policy`` ``max_queue_wait`` (``default_group``'s for a group not listed),
        else ``max_queue_wait``. 0: it never waits (nothing free: refused at once)."""
        return group_wait(self.queue.policies, group, self.max_queue_wait)

    # ------------------------------------------------------------------ reservations
    def _warn_of_reservations(self, snapshot: ClusterSnapshot) -> None:
        """Tell the spawn page when a reservation of another group will take this server's
        GPUs within ``queue_policy``'s ``reservation_notice_hours``: it will be stopped
        then (once: a queued start may have been told already). Never fails the spawn."""
        if not self.gpu_uuids:
            return
        queue = self.queue
        try:
            found = queue.upcoming(self.holder, self.gpu_uuids, snapshot.nodes)
        except Exception:
            self.log.exception("%s: upcoming reservations could not be checked", self.holder)
            return
        told = {e["message"] for e in self._events}
        for conflict in found:
            words = conflict.notice(time.time(), queue.settings.timezone)
            if words not in told:
                told.add(words)
                self._event(30, words)

    async def _preempted(self) -> bool:
        """Stop this server if a reservation of another group began on its GPUs (the
        container goes here: the hub then sees the server gone and cleans up). Never
        raises: a poll that fails would read as a dead server."""
        try:
            await self.queue.refresh()
            conflict = self.queue.preempted(self.holder, self.gpu_uuids)
        except Exception:
            self.log.exception("%s: reservations could not be checked; kept", self.holder)
            return False
        if conflict is None:
            return False
        self.log.warning(
            "Stopping %s: reservation %s of group %s began on its GPUs %s",
            self.holder,
            conflict.reservation.id,
            conflict.reservation.group,
            ", ".join(conflict.gpu_uuids),
        )
        allocation = self.allocation_id  # DockerSpawner.stop clears the state
        try:
            with node_calls(self.node_name):
                await super().stop(now=True)
        except NodeError as e:
            self.log.warning("%s not stopped, node unreachable: %s", self.holder, e)
            return False
        self.cluster.ledger.end_allocation(allocation, EndReason.PREEMPTED)
        self._forget_placement()
        tz = self.queue.settings.timezone
        self._ended_note = conflict.stopped_note(self.name, time.time(), tz)  # for the form
        return True
