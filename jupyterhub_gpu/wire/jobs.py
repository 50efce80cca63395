"""The job API's JSON (issue 32, docs/jobs.md): one encoder and one typed decoder for
each body, used by the hub's handlers (hub/api/jobs.py) and the ``jupyterhub-gpu job``
command (cli/job.py).

    POST /hub/api/gpu/jobs            {"command": [...], "options": {...}, "name": ...,
                                       "time": "4h", "array": "0-99%8", "requeue": false,
                                       "workdir": "runs/a"}  -> {"jobs": [JOB, ...]}
    GET  /hub/api/gpu/jobs[?all=1]    -> {"jobs": [JOB, ...]}
    GET  /hub/api/gpu/jobs/ID         -> JOB
    GET  /hub/api/gpu/jobs/ID/logs?offset=N  -> {"offset": M, "text": "...", "done": b}
    DELETE /hub/api/gpu/jobs/ID       -> {"jobs": [JOB, ...]} (an array's id: every task)

JOB is :class:`JobView`'s fields; times are epoch seconds (the reader shows them in its
own zone). A malformed answer is :class:`~jupyterhub_gpu.errors.BadPayload`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from jupyterhub_gpu.core.jobs.spec import JobRequest, request_from_json
from jupyterhub_gpu.core.jobs.states import JobState
from jupyterhub_gpu.errors import BadPayload

#: the most text one logs answer carries (the CLI asks again from the new offset)
LOG_CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True)
class JobView:
    """One job (or one task of an array) as its owner sees it."""

    id: str
    user: str
    name: str
    state: str  # a JobState value
    sentence: str  # describe(): which state, when, where, why
    command: tuple[str, ...]
    image: str
    gpus: int
    gpu_model: str
    share: str  # "K/N" or ""
    node: str
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    time_limit_s: float
    array: str  # the array's spec ("0-99%8") on each of its tasks, "" for a single job
    array_id: str  # the array's id ("42" for task "42_3"), "" for a single job
    array_index: int | None
    requeue: bool
    restarts: int
    workdir: str
    output: str  # the output file in the container's home (~/jobs/ID/output.log)


@dataclass(frozen=True)
class LogChunk:
    offset: int  # where the next read starts
    text: str
    done: bool  # the job has ended and this is the end of its output


_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "user": (str,), "name": (str,), "state": (str,), "sentence": (str,),
    "image": (str,), "gpus": (int,), "gpu_model": (str,), "share": (str,), "node": (str,),
    "submitted_at": (int, float), "started_at": (int, float, type(None)),
    "ended_at": (int, float, type(None)), "exit_code": (int, type(None)),
    "time_limit_s": (int, float), "array": (str,), "array_id": (str,),
    "array_index": (int, type(None)), "requeue": (bool,), "restarts": (int,),
    "workdir": (str,), "output": (str,),
}  # fmt: skip


def encode_request(request: JobRequest) -> dict[str, Any]:
    return {
        "command": list(request.command),
        "options": dict(request.options),
        "name": request.name,
        "time": request.time,
        "array": request.array,
        "requeue": request.requeue,
        "workdir": request.workdir,
    }


def decode_request(raw: object) -> JobRequest:
    """The submit body, checked field by field (InvalidRequest with one sentence)."""
    return request_from_json(raw)


def encode_job(job: JobView) -> dict[str, Any]:
    out = asdict(job)
    out["command"] = list(job.command)
    return out


def decode_job(raw: object) -> JobView:
    if not isinstance(raw, Mapping):
        raise BadPayload("a job must be a JSON object")
    values: dict[str, Any] = {}
    for f in fields(JobView):
        value = raw.get(f.name)
        if f.name == "command":
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                raise BadPayload("a job's command must be a list of strings")
            values["command"] = tuple(value)
            continue
        kinds = _TYPES[f.name]
        if isinstance(value, bool) and bool not in kinds:
            raise BadPayload(f"a job's {f.name} has the wrong type")
        if not isinstance(value, kinds):
            raise BadPayload(f"a job's {f.name} has the wrong type")
        values[f.name] = value
    if values["state"] not in {s.value for s in JobState}:
        raise BadPayload(f"unknown job state {str(values['state'])[:20]!r}")
    return JobView(**values)


def encode_jobs(jobs: list[JobView]) -> dict[str, Any]:
    return {"jobs": [encode_job(j) for j in jobs]}


def decode_jobs(raw: object) -> list[JobView]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("jobs"), list):
        raise BadPayload("expected an object with a list of jobs")
    return [decode_job(j) for j in raw["jobs"]]


def encode_chunk(chunk: LogChunk) -> dict[str, Any]:
    return {"offset": chunk.offset, "text": chunk.text, "done": chunk.done}


def decode_chunk(raw: object) -> LogChunk:
    if not isinstance(raw, Mapping):
        raise BadPayload("a log chunk must be a JSON object")
    offset, text, done = raw.get("offset"), raw.get("text"), raw.get("done")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise BadPayload("a log chunk's offset must be a number")
    if not isinstance(text, str) or not isinstance(done, bool):
        raise BadPayload("a log chunk needs its text and whether it is done")
    return LogChunk(offset, text, done)
