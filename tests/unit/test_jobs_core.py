"""Batch jobs' pure parts (issue 32): a request's checks (one sentence each), states and
their sentences, time limits (SIGTERM then SIGKILL after the grace), the array parser and
gate, the job's container, and its admission beside servers through the same admit()."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.containers import ServerContainer
from jupyterhub_gpu.core.form.resources import ResourceLimits
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.jobs.container import (
    JOB_LABEL,
    WRAPPER,
    JobLaunch,
    job_workload,
)
from jupyterhub_gpu.core.jobs.record import job_holder
from jupyterhub_gpu.core.jobs.spec import (
    MAX_COMMAND_BYTES,
    ArraySpec,
    JobRequest,
    JobSettings,
    parse_array,
    parse_duration,
    request_from_json,
    validate_job,
)
from jupyterhub_gpu.core.jobs.states import (
    JobFacts,
    JobState,
    StopClock,
    after_end,
    describe,
    ended_state,
    limit_reached,
    startable_tasks,
    stop_step,
)
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.scheduling import Allowed
from jupyterhub_gpu.core.scheduling.admission import Admit, Queue, QueueView, admit, overlay
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.workload import make_container
from jupyterhub_gpu.errors import InvalidRequest

pytestmark = pytest.mark.unit

SITE = JobSettings(default_time_s=3600, max_time_s=86400, max_queued_per_user=10, max_array=100)
HOME = "/home/alice"


def check(**changes: Any) -> Any:
    base: dict[str, Any] = {"command": ("python", "train.py")}
    base.update(changes)
    queued = base.pop("queued", 0)
    return validate_job(JobRequest(**base), SITE, queued_now=queued, home=HOME)


def refusal(**changes: Any) -> str:
    with pytest.raises(InvalidRequest) as e:
        check(**changes)
    return str(e.value)


# ---------------------------------------------------------------- requests
def test_a_plain_request_takes_the_sites_defaults() -> None:
    spec = check()
    assert spec.command == ("python", "train.py")
    assert spec.name == "python"
    assert spec.time_limit_s == 3600
    assert spec.array is None and spec.requeue is False
    assert spec.workdir == HOME


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"command": ()}, "Give the command to run after --"),
        ({"command": ("",)}, "Give the command to run after --"),
        ({"command": ("x" * MAX_COMMAND_BYTES,)}, "put it in a script"),
        ({"command": ("a",) * 600}, "at most 512 words"),
        ({"time": "2d"}, "over this hub's maximum of 24 h"),
        ({"time": "soon"}, "must be like 4h"),
        ({"time": "0m"}, "more than 0 seconds"),
        ({"array": "0-100"}, "at most 100 tasks"),
        ({"array": "5-1"}, "must go up"),
        ({"array": "0-9%0"}, "a number from 1 up"),
        ({"queued": 9, "array": "0-1"}, "at most 10 jobs waiting; you have 9, and this adds 2"),
        ({"workdir": "../bob"}, "inside your home (/home/alice)"),
        ({"workdir": "/etc"}, "inside your home"),
        ({"workdir": "x" * 2000}, "at most 1024 characters"),
        ({"name": "a b"}, "A job's name is 1 to 64"),
        ({"name": "n" * 65}, "A job's name is 1 to 64"),
    ],
)
def test_bad_input_gets_one_sentence(changes: dict[str, Any], words: str) -> None:
    sentence = refusal(**changes)
    assert words in sentence
    assert sentence.endswith(".") and "\n" not in sentence and "Error" not in sentence


def test_working_directories_inside_the_home() -> None:
    assert check(workdir="runs/a").workdir == "/home/alice/runs/a"
    assert check(workdir="~/runs/../b").workdir == "/home/alice/b"
    assert check(workdir="/home/alice/x").workdir == "/home/alice/x"
    assert refusal(workdir="/home/alicex").startswith("The working directory")


@pytest.mark.parametrize(
    "text, seconds",
    [("4h", 14400), ("90m", 5400), ("1h30m", 5400), ("2d", 172800), ("45s", 45),
     ("1:30:00", 5400), ("30:00", 1800), ("30", 1800), ("1 h 5 min", 3900)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_the_array_parser() -> None:
    assert parse_array("0-99%8", 100) == ArraySpec(tuple(range(100)), 8)
    assert parse_array("1,3,5", 100) == ArraySpec((1, 3, 5))
    assert parse_array("0-20:5", 100).indices == (0, 5, 10, 15, 20)
    assert parse_array("7", 100) == ArraySpec((7,))
    assert parse_array("0-99%8", 100).text() == "0-99%8"
    assert parse_array("1,3", 100).text() == "1,3"
    with pytest.raises(InvalidRequest, match="at most 100 tasks"):
        parse_array("0-9999999", 100)  # refused before anything is built


def test_the_json_request_is_checked_key_by_key() -> None:
    got = request_from_json({"command": ["python", "t.py"], "time": "2h", "array": "0-3%2",
                             "options": {"gpu_count": 1}})  # fmt: skip
    assert got.command == ("python", "t.py") and got.options == {"gpu_count": 1}
    for raw, words in [
        ([], "JSON object"),
        ({"command": ["x"], "priority": 9}, "Unknown job field 'priority'"),
        ({"command": "python t.py"}, "Give the command"),
        ({"command": ["x"], "options": []}, "options must be a JSON object"),
        ({"command": ["x"], "name": 3}, "name must be text"),
        ({"command": ["x"], "requeue": "yes"}, "true or false"),
        ({"command": ["x"], "workdir": "w" * 5000}, "at most 1024 characters"),
    ]:
        with pytest.raises(InvalidRequest, match=words):
            request_from_json(raw)


# ---------------------------------------------------------------- states
def test_what_ends_a_job() -> None:
    assert ended_state(0, None) is JobState.SUCCEEDED
    assert ended_state(3, None) is JobState.FAILED
    assert ended_state(0, "cancel") is JobState.CANCELLED
    assert ended_state(143, "time") is JobState.TIMED_OUT
    assert ended_state(137, "preempt") is JobState.PREEMPTED
    assert after_end(JobState.PREEMPTED, requeue=True) is JobState.QUEUED
    assert after_end(JobState.LOST, requeue=True) is JobState.QUEUED
    assert after_end(JobState.FAILED, requeue=True) is JobState.FAILED
    assert after_end(JobState.PREEMPTED, requeue=False) is JobState.PREEMPTED
    assert {s for s in JobState if s.active} == {JobState.QUEUED, JobState.STARTING,
                                                 JobState.RUNNING}  # fmt: skip


def test_every_state_has_its_sentence() -> None:
    now = time.time()
    seen = set()
    for state in JobState:
        facts = JobFacts(state, now - 600, now - 500, now - 10, "gpu1", 2, 1, 3600,
                         "Others are waiting for GPUs before you.")  # fmt: skip
        sentence = describe(facts, now)
        assert sentence.endswith(".") and sentence not in seen
        seen.add(sentence)
    failed = describe(JobFacts(JobState.FAILED, now, now, now, "gpu1", exit_code=7), now)
    assert "exit code 7" in failed and "gpu1" in failed
    queued = describe(JobFacts(JobState.QUEUED, now, reason="Others are waiting."), now)
    assert queued.startswith("Waiting for its turn since") and "Others are waiting." in queued


def test_time_limit_then_grace_then_kill() -> None:
    assert not limit_reached(1000.0, 0.0, 3600)
    assert limit_reached(3600.0, 0.0, 3600)
    assert not limit_reached(1e9, None, 3600)  # not running: no clock
    clock = StopClock(since=3600.0)
    assert stop_step(3600.0, clock, 120) == "term"
    sent = StopClock(since=3600.0, term_sent=3600.0)
    assert stop_step(3719.0, sent, 120) is None
    assert stop_step(3720.0, sent, 120) == "kill"


def test_which_tasks_of_an_array_start() -> None:
    assert startable_tasks([5, 1, 3, 2], running=0, limit=2) == [1, 2]
    assert startable_tasks([5, 1, 3], running=2, limit=2) == []
    assert startable_tasks([5, 1, 3], running=7, limit=8) == [1]
    assert startable_tasks([5, 1, 3], running=9, limit=None) == [1, 3, 5]


# ---------------------------------------------------------------- container
LIMITS = ResourceLimits(cpu=2.0, mem_bytes=4 << 30, shm_bytes=1 << 30, pids_limit=4096)


def launch(**changes: Any) -> JobLaunch:
    base: dict[str, Any] = {
        "job_id": "42_3", "user": "alice", "command": ("python", "train.py", "--lr", "0.1"),
        "image": "jupyterhub-gpu/pytorch:2.4", "home": HOME, "workdir": HOME + "/runs",
        "allocation": "abcdef0123456789", "array_index": 3, "restarts": 1, "grace_s": 120,
        "output_limit": 1000, "extra_env": {"NVIDIA_VISIBLE_DEVICES": "all", "X": "1"},
    }  # fmt: skip
    base.update(changes)
    return JobLaunch(**base)


def test_a_job_is_a_workload_without_port_or_jupyterlab() -> None:
    c = ServerContainer(
        uid=10001, gid=5000, supplementary_gids=(), labels={JOB_LABEL: "42_3"},
        gpu_uuids=("GPU-1",), network="jhgpu-users", limits=LIMITS,
        home=("/mnt/homes/alice", HOME),
    )  # fmt: skip
    request = make_container(job_workload(launch(), c, site_host={"privileged": True}))
    create, host = request.create, request.host
    assert create["user"] == "10001:5000"
    assert create["name"] == "jhgpu-job-42_3-abcdef01"
    assert create["command"][:3] == ["/bin/sh", "-c", WRAPPER]
    assert create["command"][4:] == ["python", "train.py", "--lr", "0.1"]
    assert "ports" not in create and "port_bindings" not in host
    assert "jupyterhub-singleuser" not in " ".join(create["command"])
    env = create["environment"]
    assert env["JUPYTERHUB_GPU_JOB_ID"] == "42_3"
    assert env["JUPYTERHUB_GPU_ARRAY_INDEX"] == "3"
    assert env["JUPYTERHUB_GPU_JOB_RESTARTS"] == "1"
    assert env["JUPYTERHUB_GPU_PREEMPT_GRACE"] == "120"
    assert env["HOME"] == HOME and env["X"] == "1"
    assert not any("TOKEN" in k for k in env)  # a job gets no credential of ours
    assert list(env)[-2:] == ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-1"  # GPU variables last, ours
    assert host["network_mode"] == "jhgpu-users" and "privileged" not in host
    assert host["binds"] == {"/mnt/homes/alice": {"bind": HOME, "mode": "rw"}}
    assert host["auto_remove"] is False  # its exit code outlives a hub down at the time
    assert create["labels"] == {JOB_LABEL: "42_3"}
    assert job_holder("alice", "42_3") == "alice/job:42_3"


def _run_wrapper(
    tmp_path: Path, command: list[str], limit: int, term_after: float = 0
) -> tuple[int, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "JUPYTERHUB_GPU_JOB_ID": "7",
           "JUPYTERHUB_GPU_JOB_WORKDIR": str(home),
           "JUPYTERHUB_GPU_OUTPUT_LIMIT": str(limit)}  # fmt: skip
    proc = subprocess.Popen(["/bin/sh", "-c", WRAPPER, "job", *command], env=env)
    if term_after:
        log = home / "jobs" / "7" / "output.log"
        deadline = time.monotonic() + 10
        while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.terminate()
    code = proc.wait(timeout=20)
    return code, (home / "jobs" / "7" / "output.log").read_text()


def test_the_wrapper_keeps_the_exit_code_and_output(tmp_path: Path) -> None:
    code, out = _run_wrapper(tmp_path, ["sh", "-c", "echo hello; echo oops >&2; exit 3"], 1000)
    assert code == 3
    assert out == "hello\noops\n"


def test_the_wrapper_cuts_output_at_the_limit_and_the_job_goes_on(tmp_path: Path) -> None:
    code, out = _run_wrapper(
        tmp_path,
        ["sh", "-c", "i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); done; exit 0"],
        100,
    )
    assert code == 0  # ran to the end: not killed by a closed pipe
    assert out.startswith("line0\nline1\n")
    head, cut = out.split("\n[jupyterhub-gpu:")
    assert len(head.encode()) == 100
    assert "the output was cut here at 100 bytes" in cut


def test_the_wrapper_passes_sigterm_to_the_command(tmp_path: Path) -> None:
    script = "trap 'echo checkpoint saved; exit 0' TERM; echo started; while :; do sleep 0.1; done"
    code, out = _run_wrapper(tmp_path, ["sh", "-c", script], 1000, term_after=0.1)
    assert out == "started\ncheckpoint saved\n"
    assert code == 0  # the command's own exit code after its checkpoint


# ---------------------------------------------------------------- admission
RTX = "NVIDIA GeForce RTX 3090"


def cluster(taken: dict[str, str]) -> ClusterSnapshot:
    gpus = tuple(
        GPU(uuid=f"GPU-{i}", index=i, model=RTX, memory_mib=24576, compute_capability=(8, 6))
        for i in range(2)
    )
    inventory = NodeInventory(name="n1", driver_version="550.54.15", gpus=gpus)
    return ClusterSnapshot(nodes=(NodeState(inventory),))


def test_a_job_is_admitted_like_a_server_of_the_same_size() -> None:
    """A server holds GPU-0 (the ledger's hold laid over the snapshot): a one-GPU job gets
    GPU-1, and a second one waits in the same queue with the same sentence a server gets."""
    one = PlacementRequest(1)
    snap = overlay(cluster({}), {"GPU-0": "alice/"}, {})
    first = admit(snap, one, QueueView(quota=Allowed(one)))
    assert isinstance(first, Admit) and first.placement.gpu_uuids == ("GPU-1",)
    snap = overlay(snap, {"GPU-0": "alice/", "GPU-1": job_holder("alice", "1")}, {})
    second = admit(snap, one, QueueView(quota=Allowed(one)))
    assert isinstance(second, Queue)


def test_a_restart_appends_to_the_output(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "JUPYTERHUB_GPU_JOB_ID": "9",
           "JUPYTERHUB_GPU_JOB_WORKDIR": str(home),
           "JUPYTERHUB_GPU_OUTPUT_LIMIT": "100"}  # fmt: skip
    for restarts, word in (("0", "first"), ("1", "second")):
        env["JUPYTERHUB_GPU_JOB_RESTARTS"] = restarts
        subprocess.run(["/bin/sh", "-c", WRAPPER, "job", "echo", word], env=env, check=True)
    assert (home / "jobs" / "9" / "output.log").read_text() == "first\nsecond\n"
    env["JUPYTERHUB_GPU_JOB_RESTARTS"] = "0"  # a new job of the same id starts afresh
    subprocess.run(["/bin/sh", "-c", WRAPPER, "job", "echo", "third"], env=env, check=True)
    assert (home / "jobs" / "9" / "output.log").read_text() == "third\n"
