"""Batch jobs benchmark (issue 32): many users' jobs through a real hub on the test
cluster, a hub killed with -9 mid-run, a reservation preempting ``--requeue`` jobs that
checkpoint on SIGTERM and resume.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python benchmarks/jobs.py            # readable lines
    .venv/bin/python benchmarks/jobs.py --json     # one JSON object
    .venv/bin/python benchmarks/jobs.py --smoke --json

Set-up: the test cluster's three engines (``cluster_up(3)``), a declared inventory of
``--gpus-per-node`` RTX 3090s per node (the second node's split in two shares), one real
JupyterHub with ``configure_jobs`` and ``configure_reservations`` (grace 3 s).

Steps: (1) ``--free`` jobs one after the other on the idle cluster: the time from the
submit call to the job's ``running`` state (polled every 50 ms) is
``submit_to_running_p50_s``; (2) ``--users`` users submit ``--jobs`` jobs between them
(single 1-GPU jobs of 1 to 4 s, a share of a GPU now and then, and an array
``0-3%2`` per user); (3) ``--requeue-jobs`` ``--requeue`` jobs that save a counter on
SIGTERM and resume from it; when they run, a reservation of another group takes their
nodes for 15 s; (4) while jobs run, the hub is killed with -9 and started again; (5) wait
until every job has ended. ``double_starts``: starts the hub's log shows beyond one per
job and restart; ``jobs_lost``: jobs that ended ``lost``.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import yaml  # noqa: E402

from tests.support.cluster import TEST_IMAGE, cluster_up, remove_hub_containers  # noqa: E402
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub  # noqa: E402

RTX = "NVIDIA GeForce RTX 3090"
CATALOG = REPO / "scripts" / "demo" / "catalog.yaml"
UID, GID = 10001, 5000
CHECKPOINT = (
    "f=$HOME/ckpt-$JUPYTERHUB_GPU_JOB_ID; n=$(cat $f 2>/dev/null || echo 0); "
    'echo "start at $n, restart $JUPYTERHUB_GPU_JOB_RESTARTS"; '
    "trap 'echo $n > $f; echo \"checkpoint at $n\"; exit 0' TERM; "
    "while [ $n -lt 400 ]; do n=$((n+1)); sleep 0.1; done"
)


def hub_config(engines: list[Any], work: Path, gpus: int) -> str:
    inventory = {
        "nodes": [
            {"name": e.name, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
             "gpus": [{"uuid": f"GPU-b{i}{k}000000-0000-0000-0000-000000000000", "index": k,
                       "model": RTX, "memory_mib": 24576, "compute_capability": "8.6"}
                      for k in range(gpus)]}
            for i, e in enumerate(engines)
        ]
    }  # fmt: skip
    inv = work / "inventory.yaml"
    inv.write_text(yaml.safe_dump(inventory))
    homes = work / "homes"
    homes.mkdir(exist_ok=True)
    nodes = [e.node_config() for e in engines]
    return f"""
c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.nodes = {nodes!r}
c.GPUCluster.probe_mode = "declared"
c.GPUCluster.inventory_file = {str(inv)!r}
c.GPUDockerSpawner.image = {TEST_IMAGE!r}
c.GPUCluster.catalog_file = {str(CATALOG)!r}
c.GPUDockerSpawner.resource_defaults = {{
    "max_gpus": 8, "max_cpu": 2, "max_mem_gib": 4, "default_cpu": 0.5, "default_mem_gib": 0.5,
}}
c.GPUDockerSpawner.home_template = "{homes}/{{username}}"
c.GPUDockerSpawner.default_uid = {UID}
c.GPUDockerSpawner.default_gid = {GID}
c.GPUDockerSpawner.queue_policy = {{"groups": {{"course": {{}}}}}}
c.GPUSharing.models = {{{RTX!r}: {{"shares": 2}}}}
c.GPUJobs.grace = 3
c.GPUJobs.interval = 0.5
{TOKEN_ROLE_CONFIG}
from jupyterhub_gpu.hub.extensions import configure_jobs, configure_reservations
configure_jobs(c)
configure_reservations(c)
"""


class Jobs:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.tokens: dict[str, str] = {}
        self.submitted: dict[str, str] = {}  # job id -> user

    def api(self, user: str, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"token {self.tokens[user]}"}
        return httpx.request(method, f"{self.hub.url}/hub/api/gpu/jobs{path}", headers=headers,
                             timeout=60, **kw)  # fmt: skip

    def submit(self, user: str, body: dict[str, Any]) -> list[str]:
        r = self.api(user, "POST", "", json=body)
        r.raise_for_status()
        ids = [j["id"] for j in r.json()["jobs"]]
        for i in ids:
            self.submitted[i] = user
        return ids

    def all(self) -> dict[str, dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for user in self.tokens:
            for j in self.api(user, "GET", "").json()["jobs"]:
                seen[j["id"]] = j
        return seen


def run(args: argparse.Namespace) -> dict[str, Any]:
    engines = cluster_up(3)
    work = Path(tempfile.mkdtemp(prefix="jhgpu-bench-jobs-"))
    hub = Hub(work / "hub")
    hub.workdir.mkdir(parents=True)
    hub.extra_config = hub_config(engines, hub.workdir, args.gpus_per_node)
    out: dict[str, Any] = {}
    try:
        hub.start()
        jobs = Jobs(hub)
        users = [f"user{i}" for i in range(args.users)]
        for u in users:
            hub.create_user(u)
            jobs.tokens[u] = hub.user_token(u)

        # (1) submit to running on a free GPU, image present
        waits = []
        for _ in range(args.free):
            t0 = time.monotonic()
            (jid,) = jobs.submit(users[0], {"command": ["true"], "options": {"gpu_count": 1}})
            while True:
                state = jobs.api(users[0], "GET", f"/{jid}").json()["jobs"][0]["state"]
                if state not in ("queued", "starting"):
                    break
                time.sleep(0.05)
            waits.append(time.monotonic() - t0)
        out["submit_to_running_p50_s"] = round(statistics.median(waits), 3)

        # (2) the load: singles, shares, arrays
        n = 0
        for k in range(args.jobs):
            user = users[k % len(users)]
            if k % len(users) == 0 and k // len(users) < 1:
                array = {"command": ["sh", "-c", "sleep 1"], "options": {"gpu_count": 1},
                         "array": "0-3%2"}  # fmt: skip
                n += len(jobs.submit(user, array))
                continue
            options: dict[str, Any] = {"gpu_count": 1}
            if k % 7 == 3:
                options = {"gpu_count": 1, "gpu_share": "1/2", "gpu_model": RTX}
            n += len(jobs.submit(user, {"command": ["sh", "-c", f"sleep {1 + k % 4}"],
                                        "options": options}))  # fmt: skip
        # (3) requeue jobs that checkpoint
        requeued = [
            jobs.submit(users[i % len(users)], {"command": ["sh", "-c", CHECKPOINT],
                                                "options": {"gpu_count": 1}, "requeue": True})[0]
            for i in range(args.requeue_jobs)
        ]  # fmt: skip
        deadline = time.monotonic() + 300
        nodes: set[str] = set()
        while time.monotonic() < deadline:
            seen = jobs.all()
            running = [seen[r] for r in requeued if seen[r]["state"] == "running"]
            if len(running) == len(requeued):
                nodes = {j["node"] for j in running}
                break
            time.sleep(0.2)
        now = datetime.now(timezone.utc)
        for node in sorted(nodes):
            start, end = now - timedelta(minutes=1), now + timedelta(seconds=15)
            body = {"group": "course", "nodes": [node], "start": start.isoformat(),
                    "end": end.isoformat()}  # fmt: skip
            r = hub.api("POST", "/gpu/reservations", json=body)
            r.raise_for_status()
        # (4) kill -9 while jobs run, start again
        time.sleep(1.0)
        hub.stop(signal.SIGKILL)
        time.sleep(2.0)
        t0 = time.monotonic()
        hub.start()
        out["hub_restart_s"] = round(time.monotonic() - t0, 2)
        # (5) every job ends
        deadline = time.monotonic() + args.timeout
        seen = jobs.all()
        while time.monotonic() < deadline:
            seen = jobs.all()
            if all(j["state"] not in ("queued", "starting", "running") for j in seen.values()):
                break
            time.sleep(0.5)
        states = [j["state"] for j in seen.values()]
        out["jobs_submitted"] = len(jobs.submitted)
        out["jobs_completed"] = states.count("succeeded")
        out["jobs_lost"] = states.count("lost")
        out["jobs_unfinished"] = sum(s in ("queued", "starting", "running") for s in states)
        out["jobs_by_state"] = {s: states.count(s) for s in sorted(set(states))}
        out["preempted"] = sum(1 for q in requeued if seen[q]["restarts"] >= 1)
        homes = hub.workdir / "homes"
        checkpointed = 0
        for q in requeued:
            log = homes / seen[q]["user"] / "jobs" / q / "output.log"
            text = log.read_text() if log.exists() else ""
            m = re.search(r"checkpoint at (\d+)", text)
            if m and int(m.group(1)) > 0 and f"start at {m.group(1)}, restart 1" in text:
                checkpointed += 1
        out["preempted_checkpointed"] = checkpointed
        starts = re.findall(r"Jobs: job (\S+) of \S+ runs on", hub.log_path.read_text())
        per_job: dict[str, int] = {}
        for jid in starts:
            per_job[jid] = per_job.get(jid, 0) + 1
        out["double_starts"] = sum(
            max(0, count - 1 - seen.get(jid, {}).get("restarts", 0))
            for jid, count in per_job.items()
        )
        out["config"] = {"users": args.users, "jobs": args.jobs, "free": args.free,
                         "requeue_jobs": args.requeue_jobs,
                         "gpus": 3 * args.gpus_per_node}  # fmt: skip
        return out
    finally:
        hub.stop()
        for e in engines:
            try:
                remove_hub_containers(e, hub.hub_id)
            except Exception as exc:
                print(f"could not clean {e.name}: {exc}", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--smoke", action="store_true", help="smallest scale (tests)")
    p.add_argument("--users", type=int)
    p.add_argument("--jobs", type=int, help="submissions (an array counts its tasks)")
    p.add_argument("--free", type=int, help="jobs timed on the idle cluster")
    p.add_argument("--requeue-jobs", type=int)
    p.add_argument("--gpus-per-node", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()
    defaults = {"users": 2, "jobs": 6, "free": 2, "requeue_jobs": 1} if args.smoke else {
        "users": 5, "jobs": 50, "free": 10, "requeue_jobs": 2}  # fmt: skip
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    out = run(args)
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:28s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
