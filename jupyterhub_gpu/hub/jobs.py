"""Batch jobs in the hub process (issue 32, docs/jobs.md): ``c.GPUJobs``'s settings, the
submission (checked like a spawn: the same catalog, bounds and sharing rules), and the
:class:`JobRunner`, owned by the :class:`~.runtime.HubRuntime` (``runtime.jobs``).

The runner's round (every ``interval`` s, and at once when kicked):

- **watch**: one listing of job containers per node that runs jobs; an exited one's exit
  code ends its job (:func:`~jupyterhub_gpu.core.jobs.states.ended_state`), its GPUs are
  freed, its allocation record closed with the exit code, its container removed; a
  container gone from a node that answers makes the job ``lost``;
- **stop**: a job past its time limit, cancelled, or on GPUs a reservation of another
  group takes now gets SIGTERM, then SIGKILL ``grace`` s later
  (:func:`~jupyterhub_gpu.core.jobs.states.stop_step`);
- **admit**: each queued job in submission order passes the same
  :func:`~jupyterhub_gpu.core.scheduling.admission.admit` as a spawn; admitted, its GPUs
  are reserved with no await in between and its container is created and started;
  told to queue, the user's first such job waits in the hub's one GPU queue
  (:class:`~.queue.SpawnQueue`: fair share, positions, reservations) beside spawns, the
  others wait their turn behind it.

Every change of a job is written to the accounting database (edges/accounting/jobs.py)
before the runner acts on the next one, so a hub killed with -9 finds every queued job
queued and every placed job placed: at the cluster's creation :func:`protect` marks the
placed ones live in the ledger (reconciliation never takes a job's sealed container for
an interrupted spawn), and the runner's first round reads the exit code of those that
ended meanwhile. A job is started only from ``queued`` and is ``starting`` in the
database before its container is created, so none starts twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import docker
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from traitlets import Float, Int, Unicode, validate
from traitlets.config import Configurable

from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.allocation import ALLOCATION_LABEL, Allocation, new_allocation_id
from jupyterhub_gpu.core.containers import ServerContainer, server_labels
from jupyterhub_gpu.core.form.resources import ResourcePolicy, resource_limits
from jupyterhub_gpu.core.form.user_quota import holdings_of
from jupyterhub_gpu.core.jobs.container import JOB_LABEL, JobLaunch, job_workload
from jupyterhub_gpu.core.jobs.record import JobRecord
from jupyterhub_gpu.core.jobs.spec import JobRequest, JobSettings, parse_duration, validate_job
from jupyterhub_gpu.core.jobs.states import (
    ACTIVE,
    JobState,
    StopCause,
    StopClock,
    after_end,
    ended_state,
    limit_reached,
    startable_tasks,
    stop_step,
)
from jupyterhub_gpu.core.placement.request import Placement
from jupyterhub_gpu.core.scheduling import QueuedRequest
from jupyterhub_gpu.core.scheduling.admission import Admit, Queue, QueueView, admit
from jupyterhub_gpu.core.sharing.mps import MpsPaths
from jupyterhub_gpu.core.sharing.policy import Share
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.core.workload import make_container
from jupyterhub_gpu.edges.accounting.jobs import JobStore
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from jupyterhub_gpu.errors import (
    ConfigError,
    InvalidRequest,
    QueueFull,
    QueueRefused,
    QueueTimeout,
)

if TYPE_CHECKING:
    from jupyterhub_gpu.hub.cluster import Cluster
    from jupyterhub_gpu.hub.queue import SpawnQueue

T = TypeVar("T")
#: how long one wait in the GPU queue lasts before the job joins it again (it keeps its
#: place: its age is its submission time)
QUEUE_TURN_S = 24 * 3600.0
_END_REASONS = {
    JobState.SUCCEEDED: EndReason.DIED,
    JobState.FAILED: EndReason.DIED,
    JobState.CANCELLED: EndReason.STOPPED,
    JobState.TIMED_OUT: EndReason.STOPPED,
    JobState.PREEMPTED: EndReason.PREEMPTED,
    JobState.LOST: EndReason.NODE_LOST,
    JobState.QUEUED: EndReason.PREEMPTED,  # a requeued job's allocation ended that way
}


class GPUJobs(Configurable):
    """The site's rules for batch jobs (``c.GPUJobs.*``, docs/jobs.md)."""

    default_time = Unicode(
        "4h",
        config=True,
        help="""A job's time limit when its submission gives none (``4h``, ``90m``,
        ``1:30:00``, ``2d``).""",
    )
    max_time = Unicode(
        "7d",
        config=True,
        help="""The longest time limit a job may ask for; a longer one is refused with a
        sentence that says the maximum.""",
    )
    grace = Float(
        120.0,
        config=True,
        help="""Seconds between the SIGTERM a job gets (at its time limit, when cancelled,
        or when a reservation takes its GPUs) and the SIGKILL that ends it: the time it
        has to save a checkpoint. Jobs see it as ``JUPYTERHUB_GPU_PREEMPT_GRACE``.""",
    )
    output_limit_mib = Float(
        100.0,
        config=True,
        help="""The most output (MiB) a job writes to ``~/jobs/ID/output.log``; the rest
        is dropped, after one line that says so (the job goes on).""",
    )
    max_queued_per_user = Int(
        100,
        config=True,
        help="""How many jobs (array tasks count one each) one user may have waiting at
        once; a submission over it is refused.""",
    )
    max_array = Int(1000, config=True, help="The most tasks one ``--array`` may have.")
    lost_after = Float(
        600.0,
        config=True,
        help="""Seconds a job's node may stop answering before the job ends ``lost`` (a
        ``--requeue`` job goes back to the queue); a container still running when the
        node answers again is removed by reconciliation.""",
    )
    interval = Float(
        1.0,
        config=True,
        help="""Seconds between the job runner's rounds (watching, time limits, starts);
        a submission, a cancel and freed GPUs start a round at once.""",
    )

    @validate("grace", "output_limit_mib", "interval", "lost_after")
    def _positive(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if value <= 0:
            raise ConfigError(f"GPUJobs.{proposal['trait'].name} must be more than 0")
        return value

    def settings(self) -> JobSettings:
        try:
            default, maximum = parse_duration(self.default_time), parse_duration(self.max_time)
        except Exception as e:
            raise ConfigError(f"GPUJobs.default_time / max_time: {e}") from None
        return JobSettings(
            default_time_s=min(default, maximum),
            max_time_s=maximum,
            grace_s=self.grace,
            output_limit_bytes=int(self.output_limit_mib * 1024 * 1024),
            max_queued_per_user=self.max_queued_per_user,
            max_array=self.max_array,
            lost_after_s=self.lost_after,
        )


class JobsCollector:
    """``jupyterhub_gpu_jobs{state, group}``: the hub's active jobs (queued, starting,
    running) per charge group, for /hub/metrics (no user names in labels)."""

    def __init__(self) -> None:
        self.runner: JobRunner | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "jupyterhub_gpu_jobs",
            "Batch jobs queued, starting and running, by charge group",
            labels=["state", "group"],
        )
        counts: dict[tuple[str, str], int] = {}
        for active in ACTIVE:
            counts[(active.value, "")] = 0
        for job in list(self.runner.jobs.values()) if self.runner else []:
            key = (job.state.value, job.charge_group)
            counts[key] = counts.get(key, 0) + 1
        for (state, group), n in sorted(counts.items()):
            family.add_metric([state, group], n)
        yield family


JOBS_METRICS = JobsCollector()
REGISTRY.register(JOBS_METRICS)


def _made_for(container: dict[str, Any], job: JobRecord) -> bool:
    """Is ``container`` (a listing's entry) the one made for this start of ``job``?"""
    labels = container.get("Labels") or {}
    return bool(labels.get(JOB_LABEL) == job.id and labels.get(ALLOCATION_LABEL) == job.allocation)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300].rstrip(".") if text else type(e).__name__


def _now() -> float:
    return time.time()


def protect(cluster: Cluster, log: logging.Logger) -> list[JobRecord]:
    """At the cluster's creation (before any reconciliation can run): the placed jobs of
    the database are live in the ledger, their GPUs held, so their sealed containers are
    not taken for interrupted spawns. Returns the active jobs read."""
    if not cluster.settings.accounting_url:
        return []
    try:
        if cluster.recorder is not None:  # its thread migrates the schema first
            cluster.recorder.flush().result(timeout=60)
        store = AccountingStore(cluster.settings.accounting_url)
        active = JobStore(store).active(cluster.settings.hub_id)
    except Exception as e:
        log.error("Jobs: the accounting database can't be read, jobs not found again: %s", e)
        return []
    for job in active:
        if job.state.placed and job.allocation:
            cluster.ledger.place_server(job.holder, job.node, job.allocation)
            if job.gpu_uuids and not job.share:
                cluster.ledger.adopt(job.holder, job.node, job.gpu_uuids, job.allocation)
    if active:
        log.info("Jobs: %d found again in the database", len(active))
    return active


class JobRunner:
    """The hub's batch jobs: submissions, the rounds, cancels (see the module's doc)."""

    def __init__(
        self,
        cluster: Cluster,
        queue: SpawnQueue,
        settings: JobSettings,
        log: logging.Logger,
        *,
        network: str,
        bridge: str,
        device_driver: str = "nvidia",
        policy: ResourcePolicy | None = None,
        mps: MpsPaths | None = None,
        interval: float = 1.0,
        pull_timeout: float = 1800.0,
    ) -> None:
        if not cluster.settings.accounting_url:
            raise ConfigError(
                "Jobs need the accounting database (GPUCluster.accounting_url): they "
                "are kept there across hub restarts."
            )
        self.cluster = cluster
        self.queue = queue
        self.settings = settings
        self.log = log
        self.network = network
        self.bridge = bridge
        self.device_driver = device_driver
        self.policy = policy or ResourcePolicy()
        self.mps = mps
        self.interval = interval
        self.pull_timeout = pull_timeout
        self.store = JobStore(AccountingStore(cluster.settings.accounting_url))
        self._db = ThreadPoolExecutor(1, thread_name_prefix="jhgpu-jobs-db")
        self.jobs: dict[str, JobRecord] = {}  # the active ones
        self._waiting: dict[str, asyncio.Task[None]] = {}  # job id -> its wait in line
        self._launching: dict[str, asyncio.Task[None]] = {}
        self._down_since: dict[str, float] = {}  # node -> when it stopped answering
        self._share_of: dict[str, Share | None] = {}  # a reserved job's share, until it starts
        self._kick: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.starts = 0  # containers started (a test counts double starts with it)

    # ------------------------------------------------------------------ plumbing
    async def db(self, fn: Callable[[], T]) -> T:
        """Run a store call on the one database thread (the order of writes is kept)."""
        return await asyncio.get_running_loop().run_in_executor(self._db, fn)

    def start(self, active: list[JobRecord] | None = None) -> None:
        """Take the active jobs (read at the cluster's creation, else now) and begin."""
        if self._task is not None:
            return
        if active is None:
            active = protect(self.cluster, self.log)
        self.jobs = {j.id: j for j in active}
        JOBS_METRICS.runner = self
        self._task = asyncio.ensure_future(self._loop())

    def kick(self) -> None:
        if self._kick is None:
            self._kick = asyncio.Event()
        self._kick.set()

    async def _loop(self) -> None:
        with contextlib.suppress(Exception):
            await self.cluster.reconciler.ensure_reconciled()
            self.cluster.start_reconciling()  # and the node checks
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("Jobs: a round failed; the next one tries again")
            if self._kick is None:
                self._kick = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.interval)
            self._kick.clear()

    async def _save(self, job: JobRecord) -> JobRecord:
        if job.state.active:
            self.jobs[job.id] = job
        else:
            self.jobs.pop(job.id, None)
        await self.db(lambda: self.store.save(job))
        return job

    # ------------------------------------------------------------------ submit, cancel
    async def submit(self, jobs: list[JobRecord]) -> list[JobRecord]:
        """Store a checked submission (ids from the next number) and start a round."""
        seq = await self.db(self.store.next_seq)
        numbered = []
        for job in jobs:
            jid = f"{seq}_{job.array_index}" if job.array_index is not None else str(seq)
            numbered.append(
                replace(job, id=jid, seq=seq, array_id=str(seq) if job.array_spec else "")
            )
        await self.db(lambda: self.store.add(numbered))
        for job in numbered:
            self.jobs[job.id] = job
        self.kick()
        return numbered

    def queued_of(self, user: str) -> int:
        return sum(1 for j in self.jobs.values() if j.user == user and j.state is JobState.QUEUED)

    async def cancel(self, job: JobRecord) -> JobRecord:
        """Cancel one job: a queued one ends at once, a placed one is stopped (SIGTERM,
        the grace, SIGKILL) and ends ``cancelled``. An ended one stays as it is."""
        job = self.jobs.get(job.id, job)
        if job.state is JobState.QUEUED:
            wait = self._waiting.pop(job.id, None)
            if wait is not None:
                wait.cancel()
            return await self._save(replace(job, state=JobState.CANCELLED, ended_at=_now()))
        if job.state.placed and job.stopping is None:
            job = await self._save(replace(job, stopping="cancel", stop_since=_now()))
            self.kick()
        return job

    # ------------------------------------------------------------------ the round
    async def round(self) -> None:
        self.rounds += 1
        await self._watch()
        await self._admit_queued()

    async def _watch(self) -> None:
        placed = [j for j in self.jobs.values() if j.state.placed and j.id not in self._launching]
        nodes = sorted({j.node for j in placed})
        listings = await asyncio.gather(*(self._list(n) for n in nodes))
        found = dict(zip(nodes, listings, strict=True))
        now = _now()
        for node, listing in found.items():
            if listing is None:
                self._down_since.setdefault(node, now)
            else:
                self._down_since.pop(node, None)
        for job in placed:
            listing = found.get(job.node)
            if listing is None:  # the node did not answer: kept, until it is too long
                down = now - self._down_since.get(job.node, now)
                if down >= self.settings.lost_after_s:
                    why = f"Its node {job.node} stopped answering for {duration(down)}."
                    await self._end(job, JobState.LOST, None, why)
                continue
            c = listing.get(job.container) if job.container else None
            if c is None and not job.container:  # the hub died before it kept the id
                c = next((x for x in listing.values() if _made_for(x, job)), None)
                if c is not None:
                    job = await self._save(replace(job, container=c["Id"]))
            if c is None:
                if job.state is JobState.STARTING and not job.container:
                    # the hub died before the container was made: it never ran
                    await self._unplace(job, "")
                else:
                    await self._end(job, JobState.LOST, None, "")
                continue
            if c["State"] != "running":
                if c["State"] == "created":  # created, never started (hub died then)
                    with contextlib.suppress(Exception):
                        await self._docker(job.node, "start", job.container)
                    continue
                code = await self._exit_code(job)
                end = JobState.LOST if code is None else ended_state(code, job.stopping)
                await self._end(job, end, code, "")
                continue
            if job.state is JobState.STARTING:
                job = await self._save(replace(job, state=JobState.RUNNING, started_at=now))
            await self._enforce(job, now)

    async def _list(self, node: str) -> dict[str, dict[str, Any]] | None:
        if self.cluster.known_down(node):
            return None
        hub = f"jupyterhub-gpu.hub={self.cluster.settings.hub_id}"
        try:
            listing = await self._docker(
                node, "containers", all=True, filters={"label": [hub, JOB_LABEL]}
            )
        except Exception as e:
            self.log.warning("Jobs: listing node %s failed: %s", node, e)
            return None
        return {c["Id"]: c for c in listing}

    async def _docker(self, node: str, method: str, *args: Any, **kwargs: Any) -> Any:
        client = self.cluster.client(node)
        return await self.cluster.run(node, lambda: getattr(client, method)(*args, **kwargs))

    async def _exit_code(self, job: JobRecord) -> int | None:
        try:
            info = await self._docker(job.node, "inspect_container", job.container)
        except docker.errors.NotFound:
            return None
        code = (info.get("State") or {}).get("ExitCode")
        return code if isinstance(code, int) else None

    async def _enforce(self, job: JobRecord, now: float) -> None:
        """Time limit, cancel, preemption: SIGTERM, then SIGKILL after the grace."""
        cause: StopCause | None = job.stopping
        if cause is None and limit_reached(now, job.started_at, job.time_limit_s):
            cause = "time"
        preempted = cause is None and bool(job.gpu_uuids)
        if preempted and self.queue.preempted(job.holder, job.gpu_uuids, now) is not None:
            cause = "preempt"
        if cause is None:
            return
        if job.stopping is None:
            job = await self._save(replace(job, stopping=cause, stop_since=now))
        clock = StopClock(job.stop_since or now, job.term_sent_at)
        step = stop_step(now, clock, self.settings.grace_s)
        if step is None:
            return
        signal = "SIGTERM" if step == "term" else "SIGKILL"
        self.log.info("Jobs: %s to job %s of %s (%s)", signal, job.id, job.user, cause)
        try:
            await self._docker(job.node, "kill", job.container, signal=signal)
        except docker.errors.APIError as e:  # exited meanwhile: the next round ends it
            self.log.info("Jobs: %s to job %s not sent: %s", signal, job.id, e)
        if step == "term":
            await self._save(replace(job, term_sent_at=now))

    async def _unplace(self, job: JobRecord, reason: str) -> None:
        """Back to the queue, at its place, a job whose container was never made."""
        self.cluster.ledger.release(job.holder)
        self.cluster.ledger.release_server(job.holder)
        if job.allocation:
            self.cluster.ledger.end_allocation(job.allocation, EndReason.INTERRUPTED)
        await self._save(
            replace(job, state=JobState.QUEUED, node="", gpu_uuids=(), share="", allocation="",
                    container="", started_at=None, reason=reason)
        )  # fmt: skip
        self.log.info("Jobs: job %s of %s was never started; back in the queue", job.id, job.user)

    async def _end(self, job: JobRecord, state: JobState, code: int | None, reason: str) -> None:
        """``job`` ended as ``state``: free its GPUs, close its allocation (with the exit
        code), remove its container, and requeue it when it asked for that."""
        ledger = self.cluster.ledger
        ledger.release(job.holder)
        ledger.release_server(job.holder)
        nxt = after_end(state, job.requeue)
        if job.allocation:
            ledger.end_allocation(job.allocation, _END_REASONS[nxt])
            allocation = job.allocation
            await self.db(lambda: self.store.set_exit_code(allocation, code))
        if job.container:
            with contextlib.suppress(Exception):
                await self._docker(job.node, "remove_container", job.container, force=True)
        if nxt is JobState.QUEUED:  # back to its old place (its age is its submission)
            job = replace(
                job, state=JobState.QUEUED, restarts=job.restarts + 1, node="", gpu_uuids=(),
                share="", allocation="", container="", stopping=None, stop_since=None,
                term_sent_at=None, started_at=None, reason="",
            )  # fmt: skip
            self.log.info("Jobs: job %s of %s ended %s; requeued", job.id, job.user, state.value)
        else:
            job = replace(job, state=state, exit_code=code, ended_at=_now(), reason=reason)
            self.log.info(
                "Jobs: job %s of %s ended %s (exit code %s)", job.id, job.user, state.value, code
            )
        await self._save(job)
        self.queue.kick()

    # ------------------------------------------------------------------ admission
    async def _admit_queued(self) -> None:
        queued = sorted(
            (
                j
                for j in self.jobs.values()
                if j.state is JobState.QUEUED and j.id not in self._waiting
            ),
            key=lambda j: (j.submitted_at, j.seq, j.array_index or 0),
        )
        if not queued:
            return
        snapshot = await self.cluster.snapshot()
        in_line = {self.jobs[i].user for i in self._waiting if i in self.jobs}
        for job in queued:
            if job.id not in self.jobs or self.jobs[job.id].state is not JobState.QUEUED:
                continue
            if not self._array_allows(job):
                continue
            verdict = self._decide(snapshot, job)
            if isinstance(verdict, Admit):
                self._launch(self._reserve(job, verdict.placement, snapshot))
            elif isinstance(verdict, Queue):
                if job.user not in in_line:
                    in_line.add(job.user)
                    self._waiting[job.id] = asyncio.ensure_future(self._wait_in_line(job, snapshot))
                if job.reason != verdict.reason:
                    await self._save(replace(self.jobs[job.id], reason=verdict.reason))
            else:
                await self._save(
                    replace(job, state=JobState.FAILED, ended_at=_now(), reason=verdict.sentence)
                )

    def _array_allows(self, job: JobRecord) -> bool:
        if not job.array_id or job.array_limit is None:
            return True
        tasks = [j for j in self.jobs.values() if j.array_id == job.array_id]
        running = sum(1 for j in tasks if j.state.placed)
        waiting = [j.array_index or 0 for j in tasks if j.state is JobState.QUEUED]
        return (job.array_index or 0) in startable_tasks(waiting, running, job.array_limit)

    def _item(self, job: JobRecord) -> QueuedRequest:
        return QueuedRequest(job.holder, job.user, job.charge_group, job.request, job.submitted_at)

    def _decide(self, snapshot: ClusterSnapshot, job: JobRecord) -> Any:
        """:func:`admit` for ``job``, as for a spawn of the same size (no await)."""
        over = self._over_cap(job)
        if over:
            return Queue(over)
        snap = self.cluster.ledger.overlay(snapshot)
        if job.request.gpu_count:
            view = self.queue.view(self._item(job), snap, True)
            servers: dict[str, int] = {}
        else:
            view = QueueView()
            servers = {n.name: self.cluster.ledger.servers_on(n.name) for n in snap.nodes}
        return admit(snap, job.request, view, servers_on=servers)

    def _over_cap(self, job: JobRecord) -> str:
        """Why ``job`` must wait for its user's own GPUs to free up ("" when it need not):
        their servers and running jobs hold their cap (``max_gpus_per_user``)."""
        if job.user_gpu_cap is None or not job.request.gpu_count:
            return ""
        held = holdings_of(self.cluster.ledger.charged(), job.user, exclude=job.holder)
        if held.gpus + job.request.gpu_count <= job.user_gpu_cap:
            return ""
        return (
            f"You hold {held.gpus} of your {job.user_gpu_cap} GPUs; it starts when yours free up."
        )

    async def _wait_in_line(self, job: JobRecord, snapshot: ClusterSnapshot) -> None:
        """The job waits in the hub's GPU queue beside spawns; when its turn comes, its
        GPUs are reserved by ``take`` (no await) and it starts."""

        def take(decision: Placement) -> bool:
            current = self.jobs.get(job.id)
            if current is None or current.state is not JobState.QUEUED:
                return False
            if self._over_cap(current):
                return False
            try:
                self._launch(self._reserve(current, decision, snapshot))
            except KeyError as e:
                self.log.warning("Jobs: job %s not taken: %s", job.id, e)
                return False
            return True

        def news(words: str) -> None:
            current = self.jobs.get(job.id)
            if current is not None and current.state is JobState.QUEUED:
                self.jobs[job.id] = replace(current, reason=words)

        try:
            await self.queue.wait(self._item(job), take, news, QUEUE_TURN_S, job.user_gpu_cap)
        except (QueueTimeout, QueueFull):
            pass  # the next round puts it in line again (QueueFull: the user's spawns)
        except QueueRefused as e:
            current = self.jobs.get(job.id)
            if current is not None and current.state is JobState.QUEUED:
                await self._save(replace(current, state=JobState.FAILED, ended_at=_now(),
                                         reason=str(e)))  # fmt: skip
        finally:
            self._waiting.pop(job.id, None)
            self.kick()

    def _reserve(self, job: JobRecord, decision: Placement, snapshot: ClusterSnapshot) -> JobRecord:
        """Hold what admission decided (no await); KeyError when a share was taken."""
        ledger = self.cluster.ledger
        allocation = new_allocation_id()
        share = decision.share
        if share is None:
            ledger.reserve(job.holder, decision.node, decision.gpu_uuids, allocation)
        else:
            (uuid,) = decision.gpu_uuids
            ledger.reserve_share(
                job.holder, decision.node, uuid, (share.count, share.of), allocation
            )
        ledger.place_server(job.holder, decision.node, allocation)
        self.cluster.pending.add(job.holder)
        node = next((n for n in snapshot.nodes if n.name == decision.node), None)
        models = [g.model for g in map(node.inventory.gpu, decision.gpu_uuids) if g] if node else []
        ledger.open_allocation(
            AllocationRecord(
                id=allocation,
                user=job.user,
                server=job.server,
                group=job.charge_group,
                node=decision.node,
                gpu_uuids=tuple(decision.gpu_uuids),
                gpu_model=models[0] if models else "",
                gpu_fraction=share.fraction if share else 1.0,
                image=job.image,
                cuda=job.cuda,
                cpus=job.cpu,
                mem_gib=job.mem_gib,
                hub=self.cluster.settings.hub_id,
                kind="job",
            )
        )
        placed = replace(
            job, state=JobState.STARTING, node=decision.node, gpu_uuids=tuple(decision.gpu_uuids),
            share=share.label if share else "", allocation=allocation, container="",
            started_at=_now(), reason="",
        )  # fmt: skip
        self.jobs[job.id] = placed
        self._share_of[job.id] = share
        return placed

    def _launch(self, job: JobRecord) -> None:
        self._launching[job.id] = asyncio.ensure_future(self._start(job))

    async def _start(self, job: JobRecord) -> None:
        """Create and start ``job``'s container; on failure free everything, job failed."""
        share = self._share_of.pop(job.id, None)
        node = job.node
        try:
            await self._save(job)  # "starting" is in the database before the container exists
            await self.cluster.recorded()
            await self._ensure_image(node, job.image_ref)
            await self.cluster.ensure_user_network(node, self.network, self.bridge)
            claim = Allocation(
                self.cluster.settings.hub_id, job.allocation, job.user, job.server, node,
                job.gpu_uuids, share.label if share else "", share.memory_mib if share else 0,
            )  # fmt: skip
            labels = server_labels(
                claim, job.image_ref, datetime.now(timezone.utc), self.cluster.settings.seal_key
            )
            labels[JOB_LABEL] = job.id
            container = ServerContainer(
                uid=job.uid,
                gid=job.gid,
                supplementary_gids=job.supplementary_gids,
                labels=labels,
                gpu_uuids=job.gpu_uuids,
                network=self.network,
                limits=resource_limits(job.cpu, job.mem_gib, self.policy),
                home=job.home,
                binds=job.binds,
                device_driver=self.device_driver,
                mps=self.mps if share is not None and share.mode == "mps" else None,
            )
            launch = JobLaunch(
                job_id=job.id,
                user=job.user,
                command=job.command,
                image=job.image_ref,
                home=job.home[1] if job.home else "/tmp",
                workdir=job.workdir,
                allocation=job.allocation,
                array_index=job.array_index,
                restarts=job.restarts,
                grace_s=self.settings.grace_s,
                output_limit=self.settings.output_limit_bytes,
            )
            request = make_container(job_workload(launch, container, share))
            client = self.cluster.client(node)
            host_config = client.create_host_config(**request.host)
            created = await self.cluster.run(
                node, lambda: client.create_container(**request.create, host_config=host_config)
            )
            job = await self._save(replace(self.jobs.get(job.id, job), container=created["Id"]))
            await self.cluster.run(node, lambda: client.start(created["Id"]))
            self.starts += 1
            self.cluster.ledger.allocation_started(job.allocation)
            current = self.jobs.get(job.id, job)
            await self._save(replace(current, state=JobState.RUNNING, started_at=_now()))
            self.log.info("Jobs: job %s of %s runs on %s, GPUs %s", job.id, job.user, node,
                          ",".join(job.gpu_uuids) or "none")  # fmt: skip
        except Exception as e:
            self.log.warning(
                "Jobs: job %s of %s could not start on %s: %s", job.id, job.user, node, e
            )
            await self._end(
                replace(self.jobs.get(job.id, job), requeue=False),
                JobState.FAILED,
                None,
                f"It could not start on node {node}: {_first_line(e)}.",
            )
        finally:
            self.cluster.pending.discard(job.holder)
            self._launching.pop(job.id, None)

    async def _ensure_image(self, node: str, image: str) -> None:
        try:
            await self._docker(node, "inspect_image", image)
            return
        except docker.errors.NotFound:
            pass
        from jupyterhub_gpu.hub.pull import pull

        await pull(self.cluster, node, image, self.pull_timeout, lambda pct, msg: None, self.log)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for t in [*self._waiting.values()]:
            t.cancel()
        self._db.shutdown(wait=False)


# ---------------------------------------------------------------------- from a spawner
def runner_for(spawner: Any) -> JobRunner:
    """The runtime's job runner, made (and started) the first time from a
    :class:`~.spawner.GPUDockerSpawner` (the cluster-wide settings are ``c.GPUCluster``'s,
    as the spawner reads them: ``spawner.site``; the resource policy is the spawner's; the
    runtime's cluster is built by it when it is not yet)."""
    runtime = spawner.runtime
    cluster = spawner.cluster  # builds the runtime's cluster and queue the first time
    runner = getattr(runtime, "jobs", None)
    if isinstance(runner, JobRunner):
        return runner
    from jupyterhub_gpu.hub.sharing import GPUSharing

    jobs_config = GPUJobs(config=spawner.config)
    site = spawner.site  # c.GPUCluster (old c.GPUDockerSpawner keys included)
    runner = JobRunner(
        cluster,
        spawner.queue,
        jobs_config.settings(),
        spawner.log,
        network=site.user_network,
        bridge=site.user_bridge,
        device_driver=site.gpu_device_driver,
        policy=spawner.policy,
        mps=GPUSharing(config=spawner.config, parent=spawner).mps,
        interval=jobs_config.interval,
        pull_timeout=site.pull_timeout,
    )
    runtime.jobs = runner
    runner.start(getattr(runtime, "found_jobs", None))
    return runner


async def build_jobs(spawner: Any, runner: JobRunner, request: JobRequest) -> list[JobRecord]:
    """A checked submission of ``spawner``'s user as records (not yet numbered): the
    resources as a spawn's (catalog, bounds, models, sharing), the job's own fields by
    :func:`~jupyterhub_gpu.core.jobs.spec.validate_job`; a request that can never fit is
    refused. Raises :class:`~jupyterhub_gpu.errors.UserFacingError` with one sentence;
    nothing is stored before every check passed. The user's home is made (the job's
    output goes there)."""
    from jupyterhub_gpu.core import homes
    from jupyterhub_gpu.core.form.availability import gpu_model_availability
    from jupyterhub_gpu.core.form.resources import resolve_bounds
    from jupyterhub_gpu.core.form.validation import (
        placement_request,
        resolve_entry,
        validate_options,
    )
    from jupyterhub_gpu.core.mounts import dataset_binds, parse_group_mounts
    from jupyterhub_gpu.core.scheduling.quota import never_fits
    from jupyterhub_gpu.edges.home_dirs import ensure_home
    from jupyterhub_gpu.hub.image_checks import user_catalog
    from jupyterhub_gpu.hub.spawner import home_layout

    ident = await spawner.identity()
    path = spawner.home_host_path(ident)
    if path is None:
        raise InvalidRequest(
            "Jobs need a home on the shared filesystem, and this hub gives none; ask an admin."
        )
    home = (str(path), home_layout(spawner).in_container(spawner.user.name))
    snapshot = await runner.cluster.snapshot()
    bounds = resolve_bounds(spawner.policy, ident.groups)
    saves = spawner.saved_images()
    catalog, _ = await user_catalog(spawner.catalog, saves, ident, request.options.get("image"))
    options = validate_options(
        dict(request.options),
        catalog=catalog,
        bounds=bounds,
        models=gpu_model_availability(snapshot),
        charge_groups=spawner._charge_groups(ident),
        sharing=snapshot.sharing,
    )
    entry = resolve_entry(catalog, options)
    if entry.custom or entry.saved_from:
        raise InvalidRequest(
            "Jobs run images of the catalog for now; choose one of them with --image."
        )
    spec = validate_job(
        request, runner.settings, queued_now=runner.queued_of(ident.username), home=home[1]
    )
    names = {g.model for n in snapshot.nodes for g in n.inventory.gpus}
    placement = placement_request(options, entry, bounds, names)
    never = never_fits(snapshot, placement) if placement.gpu_count else None
    if never:
        raise InvalidRequest(never)
    cap = bounds.quota.limit
    if cap is not None and placement.gpu_count > cap:
        raise InvalidRequest(
            f"You may hold at most {cap} GPUs at once ({bounds.quota.source}); ask for fewer."
        )
    root = homes.template_root(spawner.home_template)
    await asyncio.get_running_loop().run_in_executor(
        None, lambda: ensure_home(path, ident.uid, ident.gid, shared_root=root)
    )
    base = JobRecord(
        id="",
        seq=0,
        hub=runner.cluster.settings.hub_id,
        user=ident.username,
        name=spec.name,
        command=spec.command,
        image=options.image,
        image_ref=entry.image,
        cuda=entry.cuda_version or "",
        request=placement,
        cpu=options.cpu,
        mem_gib=options.mem_gib,
        charge_group=spawner._group_of(ident, options.charge_group),
        time_limit_s=spec.time_limit_s,
        requeue=spec.requeue,
        workdir=spec.workdir,
        uid=ident.uid,
        gid=ident.gid,
        supplementary_gids=tuple(ident.supplementary_gids),
        home=home,
        binds=dataset_binds(parse_group_mounts(spawner.group_mounts), ident.groups),
        gpu_model=options.gpu_model or "",
        user_gpu_cap=cap,
        submitted_at=_now(),
    )
    if spec.array is None:
        return [base]
    return [
        replace(base, array_index=i, array_spec=spec.array.text(), array_limit=spec.array.limit)
        for i in spec.array.indices
    ]


def protect_at_creation(runtime: Any, log: logging.Logger) -> Callable[[Cluster], None]:
    """The runtime's hook at its cluster's creation: :func:`protect` the placed jobs and
    keep what was read for the runner."""

    def hook(cluster: Cluster) -> None:
        runtime.found_jobs = protect(cluster, log)

    return hook


async def start_at_hub_start(log: logging.Logger) -> None:
    """Once the hub runs, start the job runner from the first user's spawner (it reads
    ``c.GPUCluster`` and has the resource policy: :func:`runner_for`): a hub restarted
    with jobs but no server must watch them without waiting for a request. No user: no
    job either."""
    from jupyterhub import orm
    from jupyterhub.app import JupyterHub

    app = JupyterHub.instance()
    while getattr(app, "http_server", None) is None:
        await asyncio.sleep(0.5)
    try:
        first = app.db.query(orm.User).order_by(orm.User.id).first()
        if first is None:
            return
        runner = runner_for(app.users[first].spawner)
        log.info("Jobs: the runner started with the hub (%d active jobs)", len(runner.jobs))
    except Exception:
        log.exception(
            "Jobs: the runner could not start with the hub; the first job request starts it"
        )
