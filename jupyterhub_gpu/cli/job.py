"""``jupyterhub-gpu job submit|list|show|logs|cancel``: batch jobs through the hub's job
API (docs/jobs.md, :mod:`jupyterhub_gpu.wire.jobs`), with the base install (the standard
library's ``urllib``; no hub dependency).

Where the hub is and who you are: ``JUPYTERHUB_API_TOKEN`` (inside a server it is the
server's own token; from a laptop a token from the hub's token page) and
``JUPYTERHUB_API_URL`` (set inside a server) or ``JUPYTERHUB_URL`` (the hub's address,
``https://hub.example.org``), or ``--hub``; without ``JUPYTERHUB_API_TOKEN``, the hub and
token stored by ``jupyterhub-gpu login`` (:mod:`.login`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jupyterhub_gpu.cli.login import Login, config_dir, is_untrusted, load, untrusted
from jupyterhub_gpu.core.jobs.spec import JobRequest
from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.errors import BadPayload, InvalidRequest
from jupyterhub_gpu.wire.jobs import (
    JobView,
    decode_chunk,
    decode_jobs,
    encode_request,
)

TIMEOUT_S = 60.0


class Hub:
    def __init__(self, api: str, token: str, ca: str = "") -> None:
        self.api, self.token = api.rstrip("/"), token
        self.context = Login(api, token, ca).context() if api.startswith("https:") else None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.api}/gpu/jobs{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=self.context) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raise SystemExit(_message(e)) from None
        except (urllib.error.URLError, OSError) as e:
            if is_untrusted(e):
                raise SystemExit(untrusted(self.api.removesuffix("/hub/api"), e)) from None
            raise SystemExit(
                f"The hub at {self.api} did not answer ({e}); check JUPYTERHUB_URL."
            ) from None


def _message(e: urllib.error.HTTPError) -> str:
    try:
        raw = json.loads(e.read() or b"{}")
        text = str(raw.get("message") or "")
    except (ValueError, AttributeError):
        text = ""
    if e.code == 403 and not text:
        text = (
            "The hub refused this token for jobs; use a token of yours from the hub's token page."
        )
    if e.code == 403 and "scope" in text.lower():
        text = (
            "This token may not manage jobs; make a new one on the hub's token page "
            "(it needs the custom:gpu-jobs permission)."
        )
    return text or f"The hub answered HTTP {e.code}."


def _hub(args: argparse.Namespace) -> Hub:
    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if not token:
        stored = load(config_dir())  # jupyterhub-gpu login
        if stored is None:
            raise SystemExit(
                "Run jupyterhub-gpu login (or set JUPYTERHUB_URL and JUPYTERHUB_API_TOKEN to "
                "a token from the hub's token page); inside a server they are set already."
            )
        api = args.hub.rstrip("/") + "/hub/api" if args.hub else stored.api
        return Hub(api, stored.token, stored.ca)
    if args.hub:
        api = args.hub.rstrip("/") + "/hub/api"
    elif os.environ.get("JUPYTERHUB_API_URL"):
        api = os.environ["JUPYTERHUB_API_URL"]
    elif os.environ.get("JUPYTERHUB_URL"):
        api = os.environ["JUPYTERHUB_URL"].rstrip("/") + "/hub/api"
    else:
        raise SystemExit("Set JUPYTERHUB_URL to the hub's address, like https://hub.example.org.")
    return Hub(api, token)


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _memory(text: str) -> float:
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = 1.0
    if raw.endswith("g"):
        raw = raw[:-1]
    elif raw.endswith("m"):
        raw, scale = raw[:-1], 1 / 1024
    elif raw.endswith("t"):
        raw, scale = raw[:-1], 1024.0
    try:
        return float(raw) * scale
    except ValueError:
        raise SystemExit(f"--memory must be like 8G or 512M, not {text[:20]!r}.") from None


def request_of(args: argparse.Namespace, cwd: str, home: str) -> JobRequest:
    """The submission the options describe (``--workdir`` defaults to the current folder
    when it is inside the home, as ``sbatch`` runs where it was called)."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    options: dict[str, Any] = {}
    if args.share:
        options["gpu_share"] = args.share
        options["gpu_count"] = 1
    elif args.gpus is not None:
        options["gpu_count"] = args.gpus
    if args.gpu_model:
        options["gpu_model"] = args.gpu_model
        options.setdefault("gpu_count", 1)
    if args.image:
        options["image"] = args.image
    if args.cpus is not None:
        options["cpu"] = args.cpus
    if args.memory:
        options["mem_gib"] = _memory(args.memory)
    workdir = args.workdir
    if workdir is None:
        inside = home and (cwd == home or cwd.startswith(home.rstrip("/") + "/"))
        workdir = cwd if inside else ""
    return JobRequest(
        command=tuple(command),
        options=options,
        name=args.name or "",
        time=args.time or "",
        array=args.array or "",
        requeue=bool(args.requeue),
        workdir=workdir,
    )


def _line(j: JobView) -> str:
    gpus = j.share or (str(j.gpus) if j.gpus else "-")
    ran = ""
    if j.started_at is not None:
        ran = duration((j.ended_at or time.time()) - j.started_at)
    state = j.state if j.exit_code is None or j.state != "failed" else f"failed({j.exit_code})"
    return f"{j.id:<12} {j.name[:20]:<20} {state:<14} {gpus:<5} {j.node or '-':<12} {ran}"


def list_lines(jobs: Sequence[JobView]) -> list[str]:
    """One line per job, and one per array (its tasks counted by state)."""
    lines = [f"{'ID':<12} {'NAME':<20} {'STATE':<14} {'GPUS':<5} {'NODE':<12} TIME"]
    arrays: dict[str, list[JobView]] = {}
    for j in jobs:
        if j.array_id:
            if j.array_id not in arrays:
                arrays[j.array_id] = []
                lines.append(f"\0{j.array_id}")
            arrays[j.array_id].append(j)
        else:
            lines.append(_line(j))
    out = []
    for line in lines:
        if not line.startswith("\0"):
            out.append(line)
            continue
        tasks = arrays[line[1:]]
        counts: dict[str, int] = {}
        for t in tasks:
            counts[t.state] = counts.get(t.state, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        first = tasks[0]
        gpus = first.share or (str(first.gpus) if first.gpus else "-")
        ident = f"{first.array_id}[{first.array}]"
        out.append(f"{ident:<12} {first.name[:20]:<20} {summary:<14} {gpus:<5}")
    return out


def show_lines(j: JobView) -> list[str]:
    return [
        f"Job {j.id} ({j.name}) of {j.user}: {j.state}",
        f"  {j.sentence}",
        f"  command:   {' '.join(j.command)}",
        f"  image:     {j.image}",
        f"  GPUs:      {j.share or j.gpus}{' ' + j.gpu_model if j.gpu_model else ''}",
        f"  submitted: {_when(j.submitted_at)}",
        f"  started:   {_when(j.started_at)}",
        f"  ended:     {_when(j.ended_at)}",
        f"  exit code: {'-' if j.exit_code is None else j.exit_code}",
        f"  limit:     {duration(j.time_limit_s)}"
        + (f"; requeued {j.restarts} times" if j.restarts else ""),
        f"  workdir:   {j.workdir}",
        f"  output:    {j.output}",
    ]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jupyterhub-gpu job", description="GPU batch jobs.")
    p.add_argument("--hub", help="the hub's address (default: JUPYTERHUB_API_URL, JUPYTERHUB_URL)")
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("submit", help="submit a command as a job: job submit [options] -- CMD")
    gpu = s.add_mutually_exclusive_group()
    gpu.add_argument("--gpus", type=int, help="how many whole GPUs (default: the site's)")
    gpu.add_argument("--share", help="a share of one GPU, K/N (like 1/4)")
    s.add_argument("--gpu-model", help="the GPU model (as the spawn form lists it)")
    s.add_argument("--image", help="the catalog image's slug (default: the site's)")
    s.add_argument("--cpus", type=float)
    s.add_argument("--memory", help="like 8G")
    s.add_argument("--time", help="the time limit: 4h, 90m, 1:30:00 (default: the site's)")
    s.add_argument("--name")
    s.add_argument("--array", help="tasks, like 0-99%%8 (at most 8 at once)")
    s.add_argument("--requeue", action="store_true", help="back to the queue if preempted")
    s.add_argument("--workdir", help="in your home (default: here, if inside your home)")
    s.add_argument("command", nargs=argparse.REMAINDER)
    ls = sub.add_parser("list", help="your jobs (admins: --all)")
    ls.add_argument("--all", action="store_true")
    sh = sub.add_parser("show", help="one job, or every task of an array")
    sh.add_argument("id")
    lg = sub.add_parser("logs", help="a job's output")
    lg.add_argument("-f", "--follow", action="store_true")
    lg.add_argument("id")
    cancel = sub.add_parser("cancel", help="cancel a job, or every task of an array")
    cancel.add_argument("id")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    hub = _hub(args)
    try:
        return _act(args, hub)
    except BadPayload as e:
        print(
            f"The hub's answer was not understood ({e}); is it the same version?", file=sys.stderr
        )
        return 1
    except InvalidRequest as e:
        print(str(e), file=sys.stderr)
        return 2


def _act(args: argparse.Namespace, hub: Hub) -> int:
    if args.action == "submit":
        request = request_of(args, os.getcwd(), os.environ.get("HOME", ""))
        if not request.command:
            raise InvalidRequest(
                "Give the command to run after --, for example: -- python train.py."
            )
        jobs = decode_jobs(hub.call("POST", "", encode_request(request)))
        first = jobs[0]
        ident = f"{first.array_id}[{first.array}]" if first.array_id else first.id
        print(f"Submitted job {ident} ({first.name}): {first.sentence}")
        output = first.output.replace(first.id, "ID") if first.array_id else first.output
        print(f"Output: {output}")
        return 0
    if args.action == "list":
        suffix = "?all=1" if args.all else ""
        print("\n".join(list_lines(decode_jobs(hub.call("GET", suffix)))))
        return 0
    if args.action == "show":
        for j in decode_jobs(hub.call("GET", f"/{args.id}")):
            print("\n".join(show_lines(j)))
        return 0
    if args.action == "cancel":
        for j in decode_jobs(hub.call("DELETE", f"/{args.id}")):
            stopping = "stopping (SIGTERM, then SIGKILL after the grace)."
            print(f"Job {j.id}: {stopping if j.state == 'running' else j.sentence}")
        return 0
    offset = 0
    while True:
        chunk = decode_chunk(hub.call("GET", f"/{args.id}/logs?offset={offset}"))
        sys.stdout.write(chunk.text)
        sys.stdout.flush()
        offset = chunk.offset
        if chunk.done or not args.follow:
            return 0
        if not chunk.text:
            time.sleep(1.0)
