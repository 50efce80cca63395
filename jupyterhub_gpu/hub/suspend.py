"""Suspend instead of stop (issue 35, docs/culler.md), the spawner's side.

:class:`SuspendingSpawnerMixin`, which ``GPUDockerSpawner`` extends first:

- :meth:`~SuspendingSpawnerMixin.suspend_server` (the hub's suspend API, ``api/suspend.py``, which
  the culler calls instead of stopping an idle server): when the hub may
  (:func:`~jupyterhub_gpu.core.suspend.suspend_refusal`: ``GPUCluster.suspend``, the
  node's engine offers checkpoints, the container's memory within
  ``GPUCluster.suspend_max_gib``), the server's container is checkpointed on its node
  and exits, keeping the checkpoint (Docker's own folder of that container: nothing of
  the node's disk is the hub's to read). What it was is kept in the spawner's state
  (:class:`~jupyterhub_gpu.core.suspend.SuspendedServer`); the API then stops the server
  as JupyterHub stops any, and :meth:`~SuspendingSpawnerMixin._stop_suspended` frees its
  GPUs and ends its allocation (``suspended``) without removing the container. The
  server's API token stays valid (``will_resume``): the restored process still holds it.
  A checkpoint that fails leaves the server running (the API says why; the culler then
  stops it).
- :meth:`~SuspendingSpawnerMixin._resumed` (``start``, once the request is validated):
  the admission decision of any start of its size first (refused: the checkpoint kept;
  in line: its own GPUs when its turn comes, if free), then
  :func:`~jupyterhub_gpu.core.suspend.resume_or_fresh` decides; a resume holds the same
  node and GPUs again (a new allocation; the container's labels keep the old one, which
  the ledger counts as this server's: ``GPULedger.label_allocation``), starts the same
  container from its checkpoint and gives the server its own token back; otherwise, and
  on any failure of the restore, the progress page says why in one line, the container
  and its checkpoint are removed, the old token revoked, and the start goes on as a
  fresh one.
- :meth:`~SuspendingSpawnerMixin.delete_forever`: a deleted server's checkpoint goes too.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn, cast

from jupyterhub_gpu.core.accounting.records import EndReason
from jupyterhub_gpu.core.form import resolve_bounds
from jupyterhub_gpu.core.placement.request import Placement
from jupyterhub_gpu.core.scheduling.admission import Admission, Queue, Refused
from jupyterhub_gpu.core.scheduling.quota import Allowed
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.suspend import (
    RESUMING,
    Fresh,
    Resume,
    SuspendedServer,
    checkpoint_name,
    fresh_line,
    kept_line,
    options_key,
    resume_or_fresh,
    suspend_refusal,
)
from jupyterhub_gpu.core.words import one_line
from jupyterhub_gpu.edges.suspend import (
    can_checkpoint,
    checkpoint_in_place,
    memory_in_use,
    remove_checkpoint,
    start_from_checkpoint,
)
from jupyterhub_gpu.errors import GPUHubError, NotOnNode, SuspendFailed, SuspendRefused
from jupyterhub_gpu.hub.answer import spawner_answer
from jupyterhub_gpu.hub.suspend_sweep import held_on, start_sweeping
from jupyterhub_gpu.wire.server_state import decode_suspension, encode_suspension

if TYPE_CHECKING:
    from jupyterhub.spawner import Spawner as _SpawnerBase

    from jupyterhub_gpu.core.accounting.records import AllocationRecord
    from jupyterhub_gpu.core.form import ResourcePolicy, SpawnOptions
    from jupyterhub_gpu.core.form.user_quota import UserQuota
    from jupyterhub_gpu.core.identity import Identity
    from jupyterhub_gpu.core.placement.request import PlacementRequest
    from jupyterhub_gpu.core.scheduling.admission import QueueView
    from jupyterhub_gpu.core.sharing import Share
    from jupyterhub_gpu.hub.cluster import Cluster
    from jupyterhub_gpu.hub.cluster_settings import GPUCluster
    from jupyterhub_gpu.hub.queue import SpawnQueue
    from jupyterhub_gpu.hub.runtime import HubRuntime
else:  # JupyterHub refuses a Spawner subclass without its own start, stop and poll
    from traitlets.config import LoggingConfigurable as _SpawnerBase

DAY = 86400.0


class SuspendingSpawnerMixin(_SpawnerBase):
    """Suspend instead of stop, and resume on the next start, for ``GPUDockerSpawner``
    (extended first, so its state keys and ``will_resume`` come before DockerSpawner's)."""

    if TYPE_CHECKING:  # what the spawner provides (spawner.py)
        node_name: str
        gpu_uuids: list[str]
        share: Share | None
        allocation_id: str
        object_id: str
        site: GPUCluster
        remove: bool

        @property
        def cluster(self) -> Cluster: ...
        @property
        def holder(self) -> str: ...
        @property
        def policy(self) -> ResourcePolicy: ...
        def _event(self, progress: int, message: str, **extra: Any) -> None: ...
        def _reserve(self, decision: Placement) -> Placement: ...
        def _record(
            self,
            snapshot: ClusterSnapshot,
            decision: Placement,
            ident: Identity,
            options: SpawnOptions,
        ) -> AllocationRecord: ...
        def _forget_placement(self, ended: EndReason | None = None) -> None: ...
        async def get_ip_and_port(self) -> tuple[str, int]: ...
        @property
        def queue(self) -> SpawnQueue: ...
        @property
        def runtime(self) -> HubRuntime: ...
        def _admission(
            self,
            snapshot: ClusterSnapshot,
            request: PlacementRequest,
            quota: UserQuota | None = None,
            group: str = "",
        ) -> tuple[Admission, QueueView]: ...
        def _refuse(self, verdict: Refused) -> NoReturn: ...
        async def _wait_in_line(
            self,
            request: PlacementRequest,
            quota: UserQuota,
            why: str,
            group: str,
            prefer: Callable[[], Placement | None] | None = None,
        ) -> Placement: ...

    #: the suspended server kept in the state (None: this server is not suspended)
    suspended: SuspendedServer | None = None
    #: a resumed server's container's own allocation id (its labels'), "" otherwise
    labelled_allocation = ""
    #: a checkpoint is being taken, until the stop that follows it has run
    suspending = False

    @property
    def will_resume(self) -> bool:
        """JupyterHub keeps a stopped server's API token when this is true: a suspended
        server's restored process still holds it (DockerSpawner's rule otherwise)."""
        return self.suspended is not None or not self.remove

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = super().get_state()
        return {**state, **encode_suspension(self.suspended, self.labelled_allocation)}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.suspended, self.labelled_allocation = decode_suspension(state)
        if self.labelled_allocation:  # before the spawner rejoins its server's allocation
            self.cluster.ledger.label_allocation(self.holder, self.labelled_allocation)

    def clear_state(self) -> None:
        super().clear_state()
        self.labelled_allocation = ""  # its container is gone; a suspended one stays known

    # ------------------------------------------------------------------ suspend
    async def suspend_server(self) -> SuspendedServer:
        """Checkpoint this running server's container on its node (it exits, keeping the
        checkpoint) and remember it; the caller then stops the server as JupyterHub does
        (:meth:`_stop_suspended` runs then). Raises
        :class:`~jupyterhub_gpu.errors.SuspendRefused` (the hub will not: the sentence
        why), :class:`~jupyterhub_gpu.errors.SuspendFailed` (the engine's reason) or a
        :class:`~jupyterhub_gpu.errors.NodeError`; the server then keeps running."""
        site, cluster, node, container = self.site, self.cluster, self.node_name, self.object_id
        if not (node and container) or self.suspending:
            raise SuspendRefused("it is not running on a node, or is being suspended already")
        api = cluster.client(node)
        checkpoints = site.suspend and await cluster.run(node, lambda: can_checkpoint(api))
        memory = (
            await cluster.run(node, lambda: memory_in_use(api, container)) if site.suspend else None
        )
        refusal = suspend_refusal(
            enabled=site.suspend,
            node=node,
            checkpoints=bool(checkpoints),
            memory_bytes=memory,
            max_bytes=int(site.suspend_max_gib * 2**30),
            # what the node's checkpoints hold, and those being taken there now
            node_held_bytes=(
                held_on(self.user.db, node) + self.runtime.suspending_bytes.get(node, 0)
                if site.suspend_node_gib
                else 0
            ),
            node_max_bytes=int(site.suspend_node_gib * 2**30),
        )
        if refusal:
            raise SuspendRefused(refusal)
        now = datetime.now(timezone.utc)
        name = checkpoint_name(now)
        self.suspending = True  # poll says "running" while it is frozen, stop keeps it
        cluster.pending.add(self.holder)  # nor does reconciliation free it meanwhile
        self._taking(node, memory or 0)  # counted in the node's budget until its stop
        try:
            with contextlib.closing(cluster.new_client(node, site.suspend_timeout)) as long:
                seconds = await cluster.run(
                    node, lambda: checkpoint_in_place(long, container, name), site.suspend_timeout
                )
        except BaseException as e:
            self.suspending = False
            cluster.pending.discard(self.holder)
            self._taking(node, -(memory or 0))
            if isinstance(e, SuspendFailed) and not await self._still_runs():
                raise SuspendFailed(f"{e} (the server stopped: its hub poll ends it)") from e
            raise
        self.suspended = SuspendedServer(
            node=node,
            container_id=container,
            checkpoint=name,
            at=now,
            size_bytes=memory or 0,
            seconds=seconds,
            gpu_uuids=tuple(self.gpu_uuids),
            share=self.share,
            allocation=self.labelled_allocation or self.allocation_id,
            options_key=options_key(self.user_options),
            token=str(cast(Any, self).api_token or ""),
        )
        self.log.info(
            "%s: suspended on %s in %.1f s (checkpoint %s of container %s, %.0f MiB of memory)",
            self.holder,
            node,
            seconds,
            name,
            container[:12],
            (memory or 0) / 2**20,
        )
        return self.suspended

    def _taking(self, node: str, size: int) -> None:
        """Count (or, negative, uncount) a checkpoint being taken on ``node`` in its budget."""
        taking = self.runtime.suspending_bytes
        taking[node] = max(taking.get(node, 0) + size, 0)

    async def _still_runs(self) -> bool:
        """Whether the server's container still runs (after a checkpoint that failed: a
        dump that failed leaves it running, one that failed later may have stopped it)."""
        api = self.cluster.client(self.node_name)
        try:
            info = await self.cluster.run(
                self.node_name, lambda: api.inspect_container(self.object_id)
            )
        except NotOnNode:
            return False
        except (GPUHubError, OSError):
            return True  # not known: the hub's poll decides
        return bool((info.get("State") or {}).get("Running"))

    def _stop_suspended(self) -> None:
        """The stop that follows a checkpoint: the container stays (it holds the
        checkpoint), the GPUs and the place on the node are freed, the allocation ends as
        ``suspended``."""
        self._forget_placement(EndReason.SUSPENDED)
        self.cluster.pending.discard(self.holder)
        if self.suspended is not None:  # its record, in the state now, counts it from here
            self._taking(self.suspended.node, -self.suspended.size_bytes)
        self.object_id = ""
        self.suspending = False
        self.clear_state()

    async def poll(self) -> int | str | None:
        """DockerSpawner's poll; a container found exited is removed when suspend is on
        (containers are then made without Docker's auto-remove, which would remove a
        checkpointed container with its checkpoint)."""
        status: int | str | None = await super().poll()
        if status is not None and self.site.suspend and self.object_id and not self.suspending:
            with contextlib.suppress(GPUHubError, OSError):
                await self.cluster.run(
                    self.node_name,
                    lambda: self.cluster.client(self.node_name).remove_container(
                        self.object_id, force=True
                    ),
                )
        return status

    # ------------------------------------------------------------------ resume
    async def _resumed(
        self,
        snapshot: ClusterSnapshot,
        ident: Identity,
        options: SpawnOptions,
        request: PlacementRequest,
        group: str,
    ) -> tuple[str, int] | Placement | None:
        """The start of a suspended server: resumed from its checkpoint (its address); or
        the placement a wait in line took when its own GPUs were not free then (a fresh
        start, reserved); or None for a start as any (the progress page said why the
        server was not resumed, the checkpoint is gone). A start the admission decision
        refuses is refused here, the checkpoint kept (:func:`kept_line`)."""
        saved = self.suspended
        if saved is None:
            return None
        quota = resolve_bounds(self.policy, ident.groups).quota
        overlaid = self.cluster.ledger.overlay(snapshot)
        admission, view = self._admission(overlaid, request, quota, group)
        allowed = view.quota.request.allowed_models if isinstance(view.quota, Allowed) else None
        decision = self._resume_decision(saved, overlaid, admission, view.fenced, allowed)
        if isinstance(decision, Refused):  # a fresh start would be refused too: keep it
            self.log.info("%s: not resumed now, checkpoint kept: %s", self.holder, decision)
            lasting = decision.code == "gpu_quota" and decision.status == 403
            self._refuse(replace(decision, sentence=kept_line(decision.sentence, lasting)))
        if isinstance(decision, Queue):  # in line like any start; its own GPUs if free then
            placement = await self._wait_in_line(
                request, quota, decision.reason, group, prefer=lambda: self._own_placement(group)
            )
            if not self._is_own(saved, placement):
                await self._forget_suspended("its GPU was not free when your turn came")
                return placement  # reserved: the start goes on as a fresh one
            decision = Resume(placement)
        elif isinstance(decision, Fresh):
            await self._forget_suspended(decision.why)
            return None
        else:
            try:
                self._reserve(decision.placement)  # no await since the decision
            except KeyError:
                await self._forget_suspended("its GPU was taken a moment ago")
                return None
        self._event(30, RESUMING)
        fresh_token = cast(Any, self).api_token
        try:
            self.cluster.ledger.open_allocation(
                self._record(snapshot, decision.placement, ident, options)
            )
            await self.cluster.recorded()
            return await self._restore(saved)
        except Exception as e:  # whatever it was, the user gets a fresh server
            self.log.warning(
                "%s: resume from checkpoint %s failed: %s", self.holder, saved.checkpoint, e
            )
            self.api_token = fresh_token
            self.object_id = ""
            self._forget_placement(EndReason.FAILED)
            await self._forget_suspended(
                f"starting it from its checkpoint failed ({one_line(str(e))[:200]})"
            )
            return None

    def _resume_decision(
        self,
        saved: SuspendedServer,
        snapshot: ClusterSnapshot,
        admission: Admission | None,
        fenced: frozenset[str],
        allowed_models: frozenset[str] | None = None,
    ) -> Resume | Fresh | Queue | Refused:
        return resume_or_fresh(
            saved,
            snapshot,
            now=datetime.now(timezone.utc),
            options=options_key(self.user_options),
            keep_for_s=self.site.suspend_keep_days * DAY,
            admission=admission,
            fenced=fenced,
            allowed_models=allowed_models,
        )

    def _own_placement(self, group: str) -> Placement | None:
        """When a suspended server's turn in line comes: its own node and GPUs, if they
        may be held again now (free, healthy, not fenced), else None. No I/O."""
        saved = self.suspended
        if saved is None:
            return None
        nodes = self.cluster.last_nodes()
        overlaid = self.cluster.ledger.overlay(ClusterSnapshot(nodes=nodes))
        fenced = self.queue.fenced_for(group, overlaid)
        if saved.gpu_uuids and self.queue.upcoming(self.holder, list(saved.gpu_uuids), nodes):
            return None  # a reservation of another group takes them soon: the queue's
        decision = self._resume_decision(saved, overlaid, None, fenced)
        return decision.placement if isinstance(decision, Resume) else None

    @staticmethod
    def _is_own(saved: SuspendedServer, placement: Placement) -> bool:
        return placement.node == saved.node and tuple(placement.gpu_uuids) == tuple(
            saved.gpu_uuids
        )

    async def _restore(self, saved: SuspendedServer) -> tuple[str, int]:
        """Start the suspended container from its checkpoint, as this server again."""
        cluster, node = self.cluster, saved.node
        self.labelled_allocation = saved.allocation
        cluster.ledger.label_allocation(self.holder, saved.allocation)
        self.object_id = saved.container_id
        with contextlib.closing(cluster.new_client(node, self.site.suspend_timeout)) as long:
            seconds = await cluster.run(
                node,
                lambda: start_from_checkpoint(long, saved.container_id, saved.checkpoint),
                self.site.suspend_timeout,
            )
        self.api_token = saved.token  # the restored process's; JupyterHub keeps it
        ip_port = await self.get_ip_and_port()
        cluster.ledger.allocation_started(self.allocation_id)
        await spawner_answer(self, ip_port)
        self.suspended = None
        api = cluster.client(node)
        with contextlib.suppress(GPUHubError, OSError):  # disk only: it goes with the container
            await cluster.run(
                node, lambda: remove_checkpoint(api, saved.container_id, saved.checkpoint)
            )
        self.log.info(
            "%s: resumed on %s from checkpoint %s in %.1f s (suspended at %s)",
            self.holder,
            node,
            saved.checkpoint,
            seconds,
            saved.at.isoformat(timespec="seconds"),
        )
        return ip_port

    async def _forget_suspended(self, why: str) -> None:
        """The suspended server will not be resumed: ``why`` on the progress page (""
        says nothing: a deleted server), its container and checkpoint removed, its old
        token revoked."""
        saved, self.suspended = self.suspended, None
        if saved is None:
            return
        if why:
            self.log.info("%s: not resumed, %s", self.holder, why)
            self._event(20, fresh_line(why))
        revoke_token(self, saved.token)
        cluster = self.cluster
        try:
            api = cluster.client(saved.node)
            await cluster.run(
                saved.node, lambda: api.remove_container(saved.container_id, force=True)
            )
        except NotOnNode:
            pass
        except (GPUHubError, OSError) as e:  # an exited container holds nothing but disk
            self.log.warning(
                "%s: could not remove the suspended container %s on %s: %s",
                self.holder,
                saved.container_id[:12],
                saved.node,
                e,
            )

    async def forget_expired(self) -> None:
        """The sweep's (hub/suspend_sweep.py): this stopped server's checkpoint is older
        than ``GPUCluster.suspend_keep_days``; forget it as its next start would."""
        saved = self.suspended
        await self._forget_suspended("")
        if saved is not None:
            self.log.info(
                "%s: removed its checkpoint %s on %s, suspended at %s: older than "
                "GPUCluster.suspend_keep_days (its files are kept)",
                self.holder,
                saved.checkpoint,
                saved.node,
                saved.at.isoformat(timespec="seconds"),
            )

    def _start_sweeping(self) -> None:
        """The hub's sweep of expired checkpoints, started once (from start and poll)."""
        start_sweeping(self.runtime, self.user.settings, self.site, self.log)

    async def delete_forever(self) -> None:
        """A deleted server (or user): its checkpoint goes too."""
        await self._forget_suspended("")
        result = super().delete_forever()
        if inspect.isawaitable(result):
            await result


def revoke_token(spawner: Any, token: str) -> None:
    """Delete a suspended server's API token from the hub's database (JupyterHub kept it
    for the resume: ``will_resume``), unless the spawner uses it now."""
    if not token or token == spawner.api_token:
        return
    from jupyterhub import orm  # the hub's own tables: this runs inside the hub

    db = spawner.user.db
    found = orm.APIToken.find(db, token)
    if found is not None:
        db.delete(found)
        db.commit()


__all__ = ["SuspendingSpawnerMixin", "revoke_token"]
