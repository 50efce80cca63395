"""A job as the hub keeps it: what was asked and checked (fixed at submit) and where it
stands (changed by the runner), as plain data. The accounting database keeps it
(edges/accounting/jobs.py), so a hub killed with -9 finds it again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jupyterhub_gpu.core.jobs.states import JobFacts, JobState, StopCause
from jupyterhub_gpu.core.placement.request import PlacementRequest

#: a job's "server" in labels, the ledger and allocation records: never a JupyterHub
#: server name (those hold no colon)
JOB_SERVER_PREFIX = "job:"


def job_server(job_id: str) -> str:
    return f"{JOB_SERVER_PREFIX}{job_id}"


def job_holder(user: str, job_id: str) -> str:
    """The ledger's holder of a job's GPUs (a server's is ``user/server``)."""
    return f"{user}/{job_server(job_id)}"


@dataclass(frozen=True)
class JobRecord:
    id: str  # "42", or "42_3" for task 3 of array 42
    seq: int  # the submission's number (the order of the queue among one's jobs)
    hub: str
    user: str
    name: str
    command: tuple[str, ...]
    image: str  # the catalog slug (records, views)
    image_ref: str  # the reference run
    cuda: str
    request: PlacementRequest
    cpu: float
    mem_gib: float
    charge_group: str
    time_limit_s: float
    requeue: bool
    workdir: str
    uid: int
    gid: int
    supplementary_gids: tuple[int, ...] = ()
    home: tuple[str, str] | None = None  # (on the node, in the container)
    binds: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    gpu_model: str = ""  # the model asked for ("" any)
    #: the user's cap on GPUs held at once (servers and jobs together), None for none
    user_gpu_cap: int | None = None
    array_id: str = ""
    array_spec: str = ""
    array_index: int | None = None
    array_limit: int | None = None
    # where it stands
    state: JobState = JobState.QUEUED
    reason: str = ""
    submitted_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    node: str = ""
    gpu_uuids: tuple[str, ...] = ()
    share: str = ""  # the share held ("K/N"), "" for whole GPUs
    allocation: str = ""
    container: str = ""
    stopping: StopCause | None = None
    stop_since: float | None = None
    term_sent_at: float | None = None
    restarts: int = 0

    @property
    def holder(self) -> str:
        return job_holder(self.user, self.id)

    @property
    def server(self) -> str:
        return job_server(self.id)

    @property
    def output(self) -> str:
        """The output file's path in the container (its home)."""
        home = self.home[1] if self.home else "~"
        return f"{home}/jobs/{self.id}/output.log"

    def facts(self) -> JobFacts:
        return JobFacts(
            state=self.state,
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            ended_at=self.ended_at,
            node=self.node,
            gpus=len(self.gpu_uuids) or self.request.gpu_count,
            exit_code=self.exit_code,
            time_limit_s=self.time_limit_s,
            reason=self.reason,
            restarts=self.restarts,
        )
