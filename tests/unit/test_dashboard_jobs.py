"""The dashboard's job list (pure, core/dashboard/jobs.py; issue 32): rows with state,
GPUs and local times, who may cancel, and the last lines of output bounded and cleaned;
and the rendered section escapes what a job printed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.core.dashboard.jobs import (
    MAX_ROWS,
    TAIL_ROWS,
    job_rows,
    last_lines,
    tail_ids,
)
from jupyterhub_gpu.core.dashboard.view import ClusterView, Viewer
from jupyterhub_gpu.services.dashboard.render import Jobs, Page, render_live

pytestmark = pytest.mark.unit

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 12, 6, 13, 0, tzinfo=PARIS).timestamp()


@dataclass(frozen=True)
class Job:
    id: str = "42"
    user: str = "alice"
    name: str = "train"
    state: str = "running"
    sentence: str = "Running on node node-a."
    gpus: int = 2
    share: str = ""
    gpu_model: str = ""
    node: str = "node-a"
    submitted_at: float = NOW - 3600
    started_at: float | None = NOW - 600
    ended_at: float | None = None
    exit_code: int | None = None


def test_last_lines_keep_the_end_bounded_and_clean() -> None:
    text = "".join(f"line {i}\n" for i in range(20))
    assert last_lines(text, cut=False) == tuple(f"line {i}" for i in range(15, 20))
    # a cut start drops its partial first line, even when few lines are left
    assert last_lines("ne 1\nline 2\n", cut=True) == ("line 2",)
    assert last_lines("ne 1\nline 2\n", cut=False) == ("ne 1", "line 2")
    # a progress bar redrawn with carriage returns: its last drawing
    assert last_lines("epoch 1\n 10%\r 50%\r100%\n", cut=False) == ("epoch 1", "100%")
    # terminal colours and other control characters go; HTML stays text (the page escapes)
    assert last_lines("\x1b[31mred\x1b[0m <b>\x07\x00x\n\n\n", cut=False) == ("red <b>x",)
    long = last_lines("x" * 1000, cut=False, width=50)
    assert long == ("x" * 49 + "…",)
    assert last_lines("", cut=False) == ()


def test_rows_state_gpus_local_time_and_cancel() -> None:
    jobs = [
        Job(),
        Job(id="41", state="failed", exit_code=3, started_at=NOW - 7200, ended_at=NOW - 6900),
        Job(id="40", state="queued", started_at=None, share="1/4", gpus=1),
        Job(id="39", user="bob", gpus=0, state="cancelled", started_at=None, ended_at=NOW - 60),
    ]
    rows = job_rows(jobs, {"42": ("epoch 3",)}, "alice", admin=False, now=NOW, tz=PARIS)
    running, failed, queued, cancelled = rows
    assert (running.state_label, running.gpus) == ("running", "2 GPUs")
    assert running.time == "running since 12:50 CET (10 min)"
    assert running.output == ("epoch 3",) and failed.output == ()
    assert running.can_cancel and queued.can_cancel
    assert failed.state_label == "failed (exit code 3)" and not failed.can_cancel
    assert failed.time == "ended 11:05 CET, ran 5 min"
    assert queued.gpus == "share 1/4 of a GPU"
    assert queued.time == "waiting since 12:00 CET (1 h)"
    assert cancelled.gpus == "no GPU" and cancelled.time == "ended 12:59 CET, never ran"
    # only its owner or an admin may cancel an active job
    other = job_rows([Job(user="bob")], {}, "alice", admin=False, now=NOW)
    assert not other[0].can_cancel
    assert job_rows([Job(user="bob")], {}, "carol", admin=True, now=NOW)[0].can_cancel


def test_rows_and_tails_are_bounded() -> None:
    many = [Job(id=str(i)) for i in range(MAX_ROWS + 20)]
    assert len(job_rows(many, {}, "alice", False, NOW)) == MAX_ROWS
    assert tail_ids(many) == [str(i) for i in range(TAIL_ROWS)]
    waiting = [Job(id="1", state="queued", started_at=None), Job(id="2")]
    assert tail_ids(waiting) == ["2"]  # a job not started yet has written nothing


def test_the_section_escapes_output_and_names() -> None:
    hostile = "<script>window.x=1</script>"
    rows = job_rows([Job(name=hostile)], {"42": (hostile,)}, "alice", False, NOW)
    view = ClusterView(Viewer("alice"), "12:00", True, "", {}, [], [], [], [])
    html = render_live(view, Page("/hub/", "/services/d/"), "xsrf", jobs=Jobs(rows=rows))
    assert "<script>" not in html and "&lt;script&gt;window.x=1&lt;/script&gt;" in html
    assert 'action="/services/d/actions/cancel-job"' in html and 'value="42"' in html
    assert "Your jobs" in html
    hidden = render_live(view, Page("/hub/", "/services/d/"), "xsrf")
    assert "jhgpu-jobs" not in hidden
