"""The job API's JSON (issue 32): what the hub encodes the CLI decodes, field for field,
and a malformed answer is refused with BadPayload, not half-read."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from jupyterhub_gpu.core.jobs.spec import JobRequest
from jupyterhub_gpu.errors import BadPayload, InvalidRequest
from jupyterhub_gpu.wire.jobs import (
    JobView,
    LogChunk,
    decode_chunk,
    decode_job,
    decode_jobs,
    decode_request,
    encode_chunk,
    encode_job,
    encode_jobs,
    encode_request,
)

pytestmark = pytest.mark.unit

JOB = JobView(
    id="42_3", user="alice", name="train", state="failed", sentence="Failed at 14:02 UTC.",
    command=("python", "train.py"), image="pytorch", gpus=1, gpu_model="RTX", share="",
    node="gpu1", submitted_at=1.5, started_at=2.0, ended_at=None, exit_code=3,
    time_limit_s=3600.0, array="0-9%2", array_id="42", array_index=3, requeue=True,
    restarts=1, workdir="/home/alice", output="/home/alice/jobs/42_3/output.log",
)  # fmt: skip


def test_a_job_round_trips_through_json() -> None:
    assert decode_job(json.loads(json.dumps(encode_job(JOB)))) == JOB
    assert decode_jobs(json.loads(json.dumps(encode_jobs([JOB, JOB])))) == [JOB, JOB]


def test_a_request_round_trips() -> None:
    request = JobRequest(("python", "t.py"), {"gpu_count": 2}, "n", "4h", "0-3%2", True, "r")
    assert decode_request(json.loads(json.dumps(encode_request(request)))) == request
    with pytest.raises(InvalidRequest):
        decode_request({"command": []})


@pytest.mark.parametrize(
    "field, value",
    [("state", "sleeping"), ("gpus", "1"), ("requeue", 1), ("exit_code", 1.5),
     ("command", "python"), ("id", None), ("gpus", True)],
)  # fmt: skip
def test_a_malformed_job_is_refused(field: str, value: object) -> None:
    raw = encode_job(JOB)
    raw[field] = value
    with pytest.raises(BadPayload):
        decode_job(raw)


def test_log_chunks() -> None:
    chunk = LogChunk(12, "hello\n", False)
    assert decode_chunk(encode_chunk(chunk)) == chunk
    for bad in ({"offset": -1, "text": "", "done": True}, {"offset": 0, "text": 3, "done": 1}, []):
        with pytest.raises(BadPayload):
            decode_chunk(bad)
    assert replace(chunk, done=True).done
