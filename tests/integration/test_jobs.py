"""Batch jobs against a real hub on the test cluster (issue 32): submit with alice's
token through ``jupyterhub-gpu job`` (the command, as from a laptop) and with her
server's own token; the output file and ``job logs``; an exit code; cancel; a time limit
(SIGTERM, the job's own checkpoint line, then its end); bob can neither see, cancel nor
read alice's job; a hub killed with -9 mid-run finds a job that ended meanwhile ended
(its exit code read), and one still running running, ends it once, and starts none twice.
The dashboard, in Debian's Chromium: alice sees her jobs' rows with their last output
line (escaped), cancels one with its button and sees it cancelled; bob sees none of hers
and his cancel of it is refused.

One hub for the whole module's story (the steps share its jobs and users)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import gpu_inventory
from tests.support.browser import chromium_page, hub_login, screenshot
from tests.support.cluster import Engine, container_env
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub, free_port

pytestmark = [pytest.mark.integration, pytest.mark.browser]
DASHBOARD = "/services/gpu-dashboard/"

UID, GID = 10001, 5000
RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")


def job_cli(
    hub: Hub, token: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    code = "import sys; from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB_")}
    env.update(JUPYTERHUB_URL=hub.url, JUPYTERHUB_API_TOKEN=token)
    done = subprocess.run(
        [sys.executable, "-c", code, "job", *args], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, (done.stdout, done.stderr, hub.log_tail())
    return done


def api(hub: Hub, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, f"{hub.url}/hub/api/gpu/jobs{path}",
        headers={"Authorization": f"token {token}"}, timeout=30, **kwargs,
    )  # fmt: skip


def job(hub: Hub, token: str, job_id: str) -> dict[str, Any]:
    r = api(hub, token, "GET", f"/{job_id}")
    assert r.status_code == 200, (r.text, hub.log_tail())
    return dict(r.json()["jobs"][0])


def wait_for(
    hub: Hub, token: str, job_id: str, ok: Callable[[dict[str, Any]], bool], timeout: float = 90
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = job(hub, token, job_id)
        if ok(seen):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never got there: {seen}\n{hub.log_tail()}")


def wait_until_text(path: Path, words: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if words in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{words!r} never in {path}: {text!r}")


def submit(hub: Hub, token: str, command: list[str], gpus: int = 1) -> str:
    r = api(hub, token, "POST", "", json={"command": command, "options": {"gpu_count": gpus}})
    assert r.status_code == 201, r.text
    return str(r.json()["jobs"][0]["id"])


def submitted_id(out: str) -> str:
    m = re.search(r"Submitted job (\S+) ", out)
    assert m, out
    return m.group(1)


def test_jobs_end_to_end(make_hub, engine: Engine, tmp_path: Path) -> None:
    extra = f"""
c.GPUDockerSpawner.default_uid = {UID}
c.GPUDockerSpawner.default_gid = {GID}
c.GPUJobs.grace = 4
c.GPUJobs.interval = 0.5
c.GPUDockerSpawner.queue_policy = {{"groups": {{"course": {{}}}}}}
{TOKEN_ROLE_CONFIG}
from jupyterhub_gpu.hub.extensions import configure_dashboard, configure_jobs
from jupyterhub_gpu.hub.extensions import configure_reservations
configure_dashboard(c, url="http://127.0.0.1:{free_port()}")
configure_jobs(c)
configure_reservations(c)
"""
    hub: Hub = make_hub([engine], [gpu_inventory(engine.name, "eeeeeeee", [RTX, RTX])], extra)
    for user in ("alice", "bob"):
        hub.create_user(user)
    alice, bob = hub.user_token("alice"), hub.user_token("bob")
    homes = tmp_path / "homes"

    # submit from outside with alice's token: one line, its output, its exit code
    out = job_cli(hub, alice, "submit", "--gpus", "1", "--name", "hello", "--",
                  "sh", "-c", "echo hello $JUPYTERHUB_GPU_JOB_ID $NVIDIA_VISIBLE_DEVICES; "
                  "id -u; pwd; exit 3").stdout  # fmt: skip
    first = submitted_id(out)
    done = wait_for(hub, alice, first, lambda j: j["state"] == "failed")
    assert done["exit_code"] == 3 and "exit code 3" in done["sentence"], done
    log = (homes / "alice" / "jobs" / first / "output.log").read_text()
    gpu = log.split()[2]
    assert log.split() == ["hello", first, gpu, str(UID), "/home/alice"], log
    assert gpu.startswith("GPU-eeeeeeee"), log
    assert (homes / "alice" / "jobs" / first / "output.log").stat().st_uid == UID
    logs = job_cli(hub, alice, "logs", first).stdout
    assert logs == log
    shown = job_cli(hub, alice, "show", first).stdout
    assert f"Job {first} (hello) of alice: failed" in shown and "exit code: 3" in shown

    # submit to running on a free GPU (image present): how long
    started = time.monotonic()
    sleeps = "echo up; echo 'epoch 3 <b>loss</b> 0.25'; sleep 300"
    r = api(hub, alice, "POST", "", json={"command": ["sh", "-c", sleeps],
                                          "options": {"gpu_count": 1}})  # fmt: skip
    assert r.status_code == 201, r.text
    sleeper = r.json()["jobs"][0]["id"]
    wait_for(hub, alice, sleeper, lambda j: j["state"] == "running")
    took = time.monotonic() - started
    print(f"\nsubmit to running (free GPU, image present): {took:.2f} s")
    assert took < 10, took

    # bob can neither see, cancel nor read alice's job
    for method, path in (("GET", f"/{sleeper}"), ("DELETE", f"/{sleeper}"),
                         ("GET", f"/{sleeper}/logs")):  # fmt: skip
        r = api(hub, bob, method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert "You have no job" in r.json()["message"]
    assert api(hub, bob, "GET", "").json()["jobs"] == []
    assert job(hub, alice, sleeper)["state"] == "running"

    # the dashboard: bob sees none of alice's jobs; alice sees hers and cancels one there
    wait_until_text(homes / "alice" / "jobs" / sleeper / "output.log", "epoch 3")
    _dashboard_as_bob(hub, sleeper)
    _dashboard_as_alice(hub, first, sleeper)
    wait_for(hub, alice, sleeper, lambda j: j["state"] == "cancelled", timeout=5)

    # a time limit: SIGTERM (the job writes its checkpoint line), then its end
    script = "trap 'echo checkpoint at TERM; exit 0' TERM; echo up; while :; do sleep 0.2; done"
    out = job_cli(hub, alice, "submit", "--gpus", "0", "--time", "0:04", "--", "sh", "-c",
                  script).stdout  # fmt: skip
    limited = submitted_id(out)
    ended = wait_for(hub, alice, limited, lambda j: j["state"] == "timed_out", timeout=60)
    assert "time limit of 4 s" in ended["sentence"], ended
    follow = job_cli(hub, alice, "logs", "-f", limited).stdout
    assert follow == "up\ncheckpoint at TERM\n", follow

    # bad input: one sentence, nothing queued
    before = len(api(hub, alice, "GET", "").json()["jobs"])
    bad = job_cli(hub, alice, "submit", "--gpus", "9", "--", "true", check=False)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1, bad
    bad = job_cli(hub, alice, "submit", "--workdir", "/etc", "--", "true", check=False)
    assert "inside your home" in bad.stderr, bad
    assert len(api(hub, alice, "GET", "").json()["jobs"]) == before

    # an array 0-3%2: four tasks, never more than two at once, each with its index
    task = "echo task $JUPYTERHUB_GPU_ARRAY_INDEX; sleep 2"
    out = job_cli(hub, alice, "submit", "--gpus", "1", "--array", "0-3%2", "--name", "sweep",
                  "--", "sh", "-c", task).stdout  # fmt: skip
    array = submitted_id(out).split("[")[0]
    most, deadline = 0, time.monotonic() + 90
    tasks: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        tasks = api(hub, alice, "GET", f"/{array}").json()["jobs"]
        most = max(most, sum(t["state"] in ("starting", "running") for t in tasks))
        if all(t["state"] == "succeeded" for t in tasks):
            break
        time.sleep(0.1)
    assert [t["state"] for t in tasks] == ["succeeded"] * 4, (tasks, hub.log_tail())
    assert most == 2, most
    for t in tasks:
        text = (homes / "alice" / "jobs" / t["id"] / "output.log").read_text()
        assert text == f"task {t['array_index']}\n", text
    listed = job_cli(hub, alice, "list").stdout.splitlines()
    assert sum(line.startswith(f"{array}[0-3%2]") for line in listed) == 1, listed
    assert not any(line.startswith(f"{array}_") for line in listed), listed

    # preemption: a reservation of another group takes the GPUs; the --requeue job gets
    # SIGTERM, saves its checkpoint, goes back to the queue, and resumes from it
    ckpt = "$HOME/ckpt-$JUPYTERHUB_GPU_JOB_ID"
    script = (
        f"n=$(cat {ckpt} 2>/dev/null || echo 0); "
        'echo "start at $n, restart $JUPYTERHUB_GPU_JOB_RESTARTS, '
        'grace $JUPYTERHUB_GPU_PREEMPT_GRACE"; '
        f"trap 'echo $n > {ckpt}; echo \"checkpoint at $n\"; exit 0' TERM; "
        "while :; do n=$((n+1)); sleep 0.1; done"
    )
    out = job_cli(hub, alice, "submit", "--gpus", "1", "--requeue", "--", "sh", "-c",
                  script).stdout  # fmt: skip
    resumed = submitted_id(out)
    wait_for(hub, alice, resumed, lambda j: j["state"] == "running")
    wait_until_text(homes / "alice" / "jobs" / resumed / "output.log", "start at 0")
    now = datetime.now(timezone.utc)
    r = hub.api("POST", "/gpu/reservations", json={
        "group": "course", "nodes": [engine.name],
        "start": (now - timedelta(minutes=1)).isoformat(),
        "end": (now + timedelta(seconds=20)).isoformat(),
    })  # fmt: skip
    assert r.status_code in (200, 201), r.text
    back = wait_for(hub, alice, resumed, lambda j: j["restarts"] == 1, timeout=60)
    assert back["state"] in ("queued", "starting", "running"), back
    again = wait_for(hub, alice, resumed, lambda j: j["state"] == "running" and j["restarts"] == 1,
                     timeout=90)  # fmt: skip
    assert again["restarts"] == 1
    text = wait_until_text(homes / "alice" / "jobs" / resumed / "output.log", "restart 1")
    lines = text.splitlines()
    assert lines[0] == "start at 0, restart 0, grace 4", lines
    saved = int(lines[1].removeprefix("checkpoint at "))
    assert saved > 0 and lines[2] == f"start at {saved}, restart 1, grace 4", lines
    job_cli(hub, alice, "cancel", resumed)
    wait_for(hub, alice, resumed, lambda j: j["state"] == "cancelled", timeout=30)

    # from inside a server: its own token (JUPYTERHUB_API_TOKEN) may submit jobs
    r = hub.spawn("alice", {"gpu_count": 0})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")
    container = hub.api("GET", "/users/alice").json()["servers"][""]["state"]["object_id"]
    server_token = container_env(engine, container)["JUPYTERHUB_API_TOKEN"]
    r = api(hub, server_token, "POST", "", json={"command": ["echo", "from my server"],
                                                 "options": {"gpu_count": 0}})  # fmt: skip
    assert r.status_code == 201, r.text
    inside = r.json()["jobs"][0]["id"]
    wait_for(hub, alice, inside, lambda j: j["state"] == "succeeded")
    assert (homes / "alice" / "jobs" / inside / "output.log").read_text() == "from my server\n"
    hub.stop_server("alice")

    # the hub killed with -9 mid-run: one job ends while it is down, one runs on
    short = submit(hub, alice, ["sh", "-c", "sleep 6; exit 7"])
    long = submit(hub, alice, ["sh", "-c", "echo long; sleep 300"])
    for jid in (short, long):
        wait_for(hub, alice, jid, lambda j: j["state"] == "running")
    hub.stop(signal.SIGKILL)
    _wait_exited(engine, short, hub)
    offset = hub.log_offset()
    hub.start()
    ended = wait_for(hub, alice, short, lambda j: j["state"] == "failed", timeout=60)
    assert ended["exit_code"] == 7, ended
    kept = wait_for(hub, alice, long, lambda j: j["state"] == "running")
    assert kept["node"] == engine.name
    assert (homes / "alice" / "jobs" / long / "output.log").read_text() == "long\n"
    job_cli(hub, alice, "cancel", long)
    wait_for(hub, alice, long, lambda j: j["state"] == "cancelled", timeout=30)
    restarted_log = hub.log_since(offset)
    assert f"job {long} of alice runs on" not in restarted_log  # never started twice
    assert "removed container" not in restarted_log  # not taken for an interrupted spawn
    assert restarted_log.count(f"job {long} of alice ended cancelled") == 1


def _job_row(page: Any, job_id: str) -> str:
    return " ".join(page.locator(f'tr[data-job="{job_id}"]').inner_text().split())


def _dashboard_as_bob(hub: Hub, alices: str) -> None:
    with chromium_page() as page:
        hub_login(page, hub.url, "bob", "any password")
        page.goto(hub.url + DASHBOARD)
        page.wait_for_selector("section.jhgpu-jobs")
        text = page.locator("section.jhgpu-jobs").inner_text()
        assert "No jobs yet" in text and page.locator("tr[data-job]").count() == 0, text
        assert "epoch 3" not in page.content()
        xsrf = page.get_attribute("#jhgpu-dashboard", "data-xsrf")
        r = page.request.post(
            hub.url + DASHBOARD + "actions/cancel-job", form={"_xsrf": str(xsrf), "job": alices}
        )
        assert r.status == 404 and "You have no job" in r.text(), (r.status, r.text())


def _dashboard_as_alice(hub: Hub, failed: str, running: str) -> None:
    with chromium_page() as page:
        try:
            hub_login(page, hub.url, "alice", "any password")
            page.goto(hub.url + DASHBOARD)
            page.wait_for_selector(f'tr[data-job="{running}"]')
            row = _job_row(page, running)
            assert "running" in row and "1 GPU" in row and "running since" in row, row
            output = page.locator(f'tr[data-job="{running}"] .jhgpu-job-output').inner_text()
            assert output == "up\nepoch 3 <b>loss</b> 0.25", output  # shown as text
            assert "failed (exit code 3)" in _job_row(page, failed)
            assert f"hello {failed}" in _job_row(page, failed)
            screenshot(page, "jobs-1-dashboard")
            page.click(f'tr[data-job="{running}"] .jhgpu-cancel-job button')
            message = page.locator("#jhgpu-message").inner_text()
            assert f"Job {running} is" in message, message
            page.click("#jhgpu-back")
            deadline = time.monotonic() + 30
            while "cancelled" not in _job_row(page, running):
                assert time.monotonic() < deadline, (_job_row(page, running), hub.log_tail())
                page.wait_for_timeout(500)
                page.reload()
            assert page.locator(f'tr[data-job="{running}"] .jhgpu-cancel-job').count() == 0
            screenshot(page, "jobs-2-cancelled")
        except BaseException:
            screenshot(page, "jobs-failure")
            raise


def _wait_exited(engine: Engine, job_id: str, hub: Hub) -> None:
    deadline = time.monotonic() + 60
    with engine.client() as client:
        while time.monotonic() < deadline:
            label = f"jupyterhub-gpu.job={job_id}"
            found = client.api.containers(all=True, filters={"label": label})
            if found and found[0]["State"] == "exited":
                return
            time.sleep(0.2)
    raise AssertionError(f"job {job_id}'s container did not exit")
