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

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from jupyterhub_gpu.core.jobs.record import JobRecord
from jupyterhub_gpu.core.jobs.spec import JobRequest, request_from_json
from jupyterhub_gpu.core.jobs.states import JobState
from jupyterhub_gpu.core.placement.request import PlacementRequest
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


# ---------------------------------------------------------------- the database's columns
def encode_placement_request(r: PlacementRequest) -> dict[str, Any]:
    """A job's placement request, kept in the jobs table's ``spec`` column."""
    return {
        "gpu_count": r.gpu_count,
        "min_memory_mib": r.min_memory_mib,
        "allowed_models": None if r.allowed_models is None else sorted(r.allowed_models),
        "min_driver_version": r.min_driver_version,
        "min_compute_capability": list(r.min_compute_capability or ()) or None,
        "max_compute_capability": list(r.max_compute_capability or ()) or None,
        "image": sorted(r.image),
        "shares": r.shares,
        "share_of": r.share_of,
    }


def _cc(value: object) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value[0], value[1])
    raise BadPayload("a compute capability must be two numbers")


def decode_placement_request(raw: object) -> PlacementRequest:
    if not isinstance(raw, Mapping):
        raise BadPayload("a placement request must be a JSON object")
    try:
        models = raw.get("allowed_models")
        return PlacementRequest(
            gpu_count=int(raw["gpu_count"]),
            min_memory_mib=int(raw.get("min_memory_mib", 0)),
            allowed_models=None if models is None else frozenset(str(m) for m in models),
            min_driver_version=raw.get("min_driver_version"),
            min_compute_capability=_cc(raw.get("min_compute_capability")),
            max_compute_capability=_cc(raw.get("max_compute_capability")),
            image=frozenset(str(i) for i in raw.get("image", ())),
            shares=int(raw.get("shares", 0)),
            share_of=int(raw.get("share_of", 0)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise BadPayload(f"a malformed placement request ({e})") from None


def encode_spec(job: JobRecord) -> str:
    """What a job was asked to be (fixed at submit), as the jobs table's ``spec`` text."""
    return json.dumps(
        {
            "command": list(job.command),
            "image": job.image,
            "image_ref": job.image_ref,
            "cuda": job.cuda,
            "request": encode_placement_request(job.request),
            "cpu": job.cpu,
            "mem_gib": job.mem_gib,
            "charge_group": job.charge_group,
            "time_limit_s": job.time_limit_s,
            "requeue": job.requeue,
            "workdir": job.workdir,
            "uid": job.uid,
            "gid": job.gid,
            "supplementary_gids": list(job.supplementary_gids),
            "home": list(job.home) if job.home else None,
            "binds": {k: dict(v) for k, v in job.binds.items()},
            "gpu_model": job.gpu_model,
            "array_spec": job.array_spec,
            "array_limit": job.array_limit,
            "user_gpu_cap": job.user_gpu_cap,
        },
        separators=(",", ":"),
    )


def decode_spec(text: str) -> dict[str, Any]:
    """The :class:`JobRecord` fields ``spec`` holds (BadPayload when malformed)."""
    try:
        raw = json.loads(text)
        home = raw["home"]
        return {
            "command": tuple(str(a) for a in raw["command"]),
            "image": str(raw["image"]),
            "image_ref": str(raw["image_ref"]),
            "cuda": str(raw["cuda"]),
            "request": decode_placement_request(raw["request"]),
            "cpu": float(raw["cpu"]),
            "mem_gib": float(raw["mem_gib"]),
            "charge_group": str(raw["charge_group"]),
            "time_limit_s": float(raw["time_limit_s"]),
            "requeue": bool(raw["requeue"]),
            "workdir": str(raw["workdir"]),
            "uid": int(raw["uid"]),
            "gid": int(raw["gid"]),
            "supplementary_gids": tuple(int(g) for g in raw["supplementary_gids"]),
            "home": (str(home[0]), str(home[1])) if home else None,
            "binds": {
                str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw["binds"].items()
            },
            "gpu_model": str(raw["gpu_model"]),
            "array_spec": str(raw["array_spec"]),
            "array_limit": None if raw["array_limit"] is None else int(raw["array_limit"]),
            "user_gpu_cap": None if raw.get("user_gpu_cap") is None else int(raw["user_gpu_cap"]),
        }
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise BadPayload(f"a malformed job spec ({type(e).__name__})") from None
