"""The job API (issue 32, docs/jobs.md), under the hub's API, for the scope
``custom:gpu-jobs`` (granted to users, to their tokens, and to their servers' tokens by
:func:`jupyterhub_gpu.hub.extensions.configure_jobs`):

    POST   /hub/api/gpu/jobs               submit (an array: every task)
    GET    /hub/api/gpu/jobs[?all=1]       one's jobs (admins: ?all=1 for everyone's)
    GET    /hub/api/gpu/jobs/ID            one job, or every task of array ID
    GET    /hub/api/gpu/jobs/ID/logs?offset=N   its output from byte N
    GET    /hub/api/gpu/jobs/ID/logs?tail=N     its last N bytes (N <= 64 KiB; the
                                                dashboard's last lines)
    DELETE /hub/api/gpu/jobs/ID            cancel (an array's id: every task)

Bodies: :mod:`jupyterhub_gpu.wire.jobs`. A user sees, reads and cancels only their own
jobs (another's is a 404, as if it did not exist); an admin all. Errors are JupyterHub's
JSON ``{"status", "message"}`` with one sentence.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from pathlib import Path
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import define_custom_scopes, needs_scope
from tornado import web

from jupyterhub_gpu.core.jobs.record import JobRecord
from jupyterhub_gpu.core.jobs.states import describe
from jupyterhub_gpu.edges.job_output import read_output
from jupyterhub_gpu.errors import UserFacingError
from jupyterhub_gpu.hub.jobs import JobRunner, build_jobs, runner_for
from jupyterhub_gpu.wire.jobs import (
    LOG_CHUNK_BYTES,
    JobView,
    LogChunk,
    decode_request,
    encode_chunk,
    encode_jobs,
)

JOBS_SCOPE = "custom:gpu-jobs"
JOB_SCOPES: dict[str, dict[str, Any]] = {
    JOBS_SCOPE: {
        "description": "Submit, list, read the output of and cancel one's own GPU batch jobs."
    }
}
define_custom_scopes(JOB_SCOPES)
MAX_BODY_BYTES = 64 * 1024
MAX_TAIL_BYTES = 64 * 1024


def view_of(job: JobRecord, now: float) -> JobView:
    return JobView(
        id=job.id,
        user=job.user,
        name=job.name,
        state=job.state.value,
        sentence=describe(job.facts(), now),
        command=job.command,
        image=job.image,
        gpus=len(job.gpu_uuids) or job.request.gpu_count,
        gpu_model=job.gpu_model,
        share=job.share,
        node=job.node,
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        ended_at=job.ended_at,
        exit_code=job.exit_code,
        time_limit_s=job.time_limit_s,
        array=job.array_spec,
        array_id=job.array_id,
        array_index=job.array_index,
        requeue=job.requeue,
        restarts=job.restarts,
        workdir=job.workdir,
        output=job.output,
    )


class _JobsBase(APIHandler):
    def _user(self) -> Any:
        user = self.current_user
        if user is None or getattr(user, "kind", "user") != "user":
            raise web.HTTPError(403, "Jobs are submitted and read by users, with their own token.")
        return user

    async def _runner(self) -> JobRunner:
        user = self._user()
        try:
            return runner_for(user.spawner)
        except AttributeError:
            raise web.HTTPError(503, "Jobs need GPUDockerSpawner as the hub's spawner.") from None
        except UserFacingError as e:
            raise web.HTTPError(e.status_code, str(e)) from None

    async def _visible(self, runner: JobRunner, job_id: str) -> list[JobRecord]:
        """The job ``job_id`` (or every task of array ``job_id``) if the caller may see
        it; 404 otherwise (another user's job looks like no job)."""
        if len(job_id) > 32:
            raise web.HTTPError(404, "No such job.")
        user = self._user()
        hub = runner.cluster.settings.hub_id
        owner = None if user.admin else user.name
        found = await runner.db(lambda: _find(runner, hub, owner, job_id))
        if not found:
            raise web.HTTPError(
                404, f"You have no job {job_id}; jupyterhub-gpu job list shows yours."
            )
        return [runner.jobs.get(j.id, j) for j in found]


def _find(runner: JobRunner, hub: str, owner: str | None, job_id: str) -> list[JobRecord]:
    one = runner.store.get(job_id)
    if one is not None and one.hub == hub and (owner is None or one.user == owner):
        return [one]
    tasks = runner.store.array(hub, job_id)
    return [t for t in tasks if owner is None or t.user == owner]


class JobsAPIHandler(_JobsBase):
    """``POST`` submit, ``GET`` list."""

    @needs_scope(JOBS_SCOPE)
    async def post(self) -> None:
        user = self._user()
        if len(self.request.body or b"") > MAX_BODY_BYTES:
            raise web.HTTPError(413, f"A job's submission is at most {MAX_BODY_BYTES // 1024} KiB.")
        try:
            raw = json.loads(self.request.body or b"null")
        except ValueError:
            raise web.HTTPError(400, "Send the job as a JSON object.") from None
        runner = await self._runner()
        try:
            request = decode_request(raw)
            jobs = await build_jobs(user.spawner, runner, request)
        except UserFacingError as e:
            raise web.HTTPError(e.status_code, str(e)) from None
        stored = await runner.submit(jobs)
        now = time.time()
        self.set_status(201)
        self.write(json.dumps(encode_jobs([view_of(j, now) for j in stored])))

    @needs_scope(JOBS_SCOPE)
    async def get(self) -> None:
        user = self._user()
        runner = await self._runner()
        everyone = self.get_argument("all", "") in ("1", "true") and user.admin
        hub = runner.cluster.settings.hub_id
        owner = None if everyone else user.name
        rows = await runner.db(lambda: runner.store.recent(hub, owner))
        now = time.time()
        views = [view_of(runner.jobs.get(j.id, j), now) for j in rows]
        self.write(json.dumps(encode_jobs(views)))


class JobAPIHandler(_JobsBase):
    """``GET`` show, ``DELETE`` cancel."""

    @needs_scope(JOBS_SCOPE)
    async def get(self, job_id: str) -> None:
        runner = await self._runner()
        now = time.time()
        jobs = await self._visible(runner, job_id)
        self.write(json.dumps(encode_jobs([view_of(j, now) for j in jobs])))

    @needs_scope(JOBS_SCOPE)
    async def delete(self, job_id: str) -> None:
        runner = await self._runner()
        jobs = await self._visible(runner, job_id)
        done = [await runner.cancel(j) for j in jobs]
        now = time.time()
        self.write(json.dumps(encode_jobs([view_of(j, now) for j in done])))


class JobLogsAPIHandler(_JobsBase):
    """``GET`` a job's output from ``offset`` (at most :data:`LOG_CHUNK_BYTES`)."""

    @needs_scope(JOBS_SCOPE)
    async def get(self, job_id: str) -> None:
        runner = await self._runner()
        jobs = await self._visible(runner, job_id)
        if len(jobs) != 1:
            raise web.HTTPError(400, "Give one task of the array, like 42_3.")
        job = jobs[0]
        try:
            offset = max(0, int(self.get_argument("offset", "0")))
            tail = self.get_argument("tail", "")
            tail_bytes = min(max(0, int(tail)), MAX_TAIL_BYTES) if tail else 0
        except ValueError:
            raise web.HTTPError(400, "The offset and tail must be numbers of bytes.") from None
        if job.home is None:
            raise web.HTTPError(404, "This job has no output file.")
        home = Path(job.home[0])
        ended = not job.state.active
        if tail:
            data = await asyncio.get_running_loop().run_in_executor(
                None, lambda: read_output(home, job.id, job.uid, 0, tail_bytes, tail=True)
            )
            text = data.decode("utf-8", "replace")
            self.write(json.dumps(encode_chunk(LogChunk(0, text, ended))))  # no offset: a view
            return
        data = await asyncio.get_running_loop().run_in_executor(
            None, lambda: read_output(home, job.id, job.uid, offset, LOG_CHUNK_BYTES)
        )
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final=False)
        pending = len(decoder.getstate()[0])  # a UTF-8 sequence cut at the end: read again
        if ended and len(data) < LOG_CHUNK_BYTES:
            text += decoder.decode(b"", final=True)
            pending = 0
        done = ended and len(data) < LOG_CHUNK_BYTES
        chunk = LogChunk(offset + len(data) - pending, text, done)
        self.write(json.dumps(encode_chunk(chunk)))


HANDLERS = [
    (r"/api/gpu/jobs", JobsAPIHandler),
    (r"/api/gpu/jobs/([0-9_]+)", JobAPIHandler),
    (r"/api/gpu/jobs/([0-9_]+)/logs", JobLogsAPIHandler),
]

__all__ = ["HANDLERS", "JOBS_SCOPE", "JOB_SCOPES", "view_of"]
