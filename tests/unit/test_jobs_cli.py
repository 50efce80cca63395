"""``jupyterhub-gpu job`` (issue 32): its options become the submission the API takes,
an array is one line of ``job list``, and the command needs no hub dependency."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jupyterhub_gpu.cli.job import list_lines, parser, request_of
from jupyterhub_gpu.wire.jobs import JobView

pytestmark = pytest.mark.unit


def test_options_become_the_submission() -> None:
    args = parser().parse_args(
        ["submit", "--share", "1/4", "--gpu-model", "RTX", "--image", "pytorch", "--cpus", "2",
         "--memory", "512M", "--time", "4h", "--name", "n", "--array", "0-9%2", "--requeue",
         "--", "python", "t.py", "--lr", "1"]
    )  # fmt: skip
    r = request_of(args, "/home/alice/runs", "/home/alice")
    assert r.command == ("python", "t.py", "--lr", "1")
    assert r.options == {"gpu_share": "1/4", "gpu_count": 1, "gpu_model": "RTX",
                         "image": "pytorch", "cpu": 2.0, "mem_gib": 0.5}  # fmt: skip
    assert (r.name, r.time, r.array, r.requeue) == ("n", "4h", "0-9%2", True)
    assert r.workdir == "/home/alice/runs"  # where it was submitted, inside the home
    outside = request_of(parser().parse_args(["submit", "--", "true"]), "/tmp", "/home/alice")
    assert outside.workdir == "" and outside.options == {}


def view(i: int, state: str, array: bool) -> JobView:
    return JobView(
        id=f"7_{i}" if array else str(i), user="alice", name="sweep", state=state,
        sentence="", command=("x",), image="p", gpus=1, gpu_model="", share="", node="n1",
        submitted_at=0.0, started_at=None, ended_at=None, exit_code=None, time_limit_s=60.0,
        array="0-2%1" if array else "", array_id="7" if array else "",
        array_index=i if array else None, requeue=False, restarts=0, workdir="/h", output="o",
    )  # fmt: skip


def test_an_array_is_one_line() -> None:
    jobs = [view(0, "running", True), view(1, "queued", True), view(2, "queued", True),
            view(5, "succeeded", False)]  # fmt: skip
    lines = list_lines(jobs)
    assert len(lines) == 3  # the header, the array, the job
    assert lines[1].startswith("7[0-2%1]") and "2 queued, 1 running" in lines[1]
    assert lines[2].startswith("5 ")


def test_the_command_needs_no_hub_dependency() -> None:
    code = (
        "import sys; import jupyterhub_gpu.cli.job; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('docker', 'sqlalchemy', "
        "'jupyterhub', 'httpx', 'alembic', 'jinja2', 'dockerspawner')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
