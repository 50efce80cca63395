"""Idle-culling benchmark: replay GPU-utilisation traces as sessions and compare policies.

Run from the repository root::

    .venv/bin/python benchmarks/culling.py            # readable tables
    .venv/bin/python benchmarks/culling.py --json     # one JSON object

Each container of the Alibaba GenAI trace (v2026) is one server holding one GPU, from its
first sample to its last. A seeded user-activity model (below, and docs/culler.md) adds
what the trace lacks: HTTP activity and kernel state. The same sessions and the same
activity go to every policy; each is evaluated every ``TICK_S`` seconds and a session
ends at its first cull:

- ``stock``: HTTP inactivity only, like jupyterhub-idle-culler (the hub's
  ``last_activity``, which includes kernel messages, older than the timeout);
- ``gpu_threshold``: every GPU sample of the last ``timeout`` under the threshold (at least
  one sample in that window, as a Prometheus ``max_over_time`` rule needs);
- ``ours``: :func:`jupyterhub_gpu.culler.idleness.judge` itself, fed by
  :class:`~jupyterhub_gpu.culler.tracker.GpuTracker`, with the timeout as ``gpu_timeout``
  and every other setting at its default; ``ours_default`` is ``Policy()`` as shipped. The
  trace's memory (scaled by its publisher) is fed to the tracker as if it were MiB.

Metrics, summed over sessions: ``reclaimed_gpu_hours`` = hours from the cull to the end of
the session's trace; ``busy_gpu_minutes_killed`` = GPU-minutes with utilisation at or
above the threshold in the ``--kill-window-min`` minutes after the cull (default 30): work
the cull interrupted. Activity model, per job (a run of samples at or above the threshold,
a new job after a pause of 5 minutes or more): with probability 0.5 the user is there
(HTTP activity from 1-10 minutes before the job starts to an exponential 10-minute mean,
at most 60, after); an attended job was started from a notebook cell with probability 0.5
(its kernel is busy for the whole job, kernel messages at its start and end), otherwise
from a terminal; unattended jobs (the other half) leave no HTTP or kernel trace: scripts,
``nohup``, training left running. Every session opens with 5-20 minutes of HTTP activity
(the user who spawned it).

Trace: Lin et al., SoCC '25 (alibaba/clusterdata, cluster-trace-v2026-GenAI).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import gzip
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyterhub_gpu.culler.idleness import (
    KernelObservation,
    KernelsObservation,
    Policy,
    ServerObservation,
    judge,
)
from jupyterhub_gpu.culler.tracker import GpuTracker

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TRACE_DIR = "alibaba-genai-v2026"
TIMEOUTS_MIN = (10, 30, 60)
STOCK_SWEEP_MIN = (10, 30, 60, 90, 120, 180, 240, 360, 480, 720, 960, 1440)
TICK_S = 60.0
THRESHOLD = 10.0
JOB_GAP_S = 300.0
# the activity model (identical for every policy)
P_ATTENDED = 0.5
P_NOTEBOOK = 0.5
LEAD_MIN = (1.0, 10.0)
STAY_MEAN_MIN, STAY_MAX_MIN = 10.0, 60.0
SPAWN_VISIT_MIN = (5.0, 20.0)

ACTIVITY_MODEL = (
    "per job (samples >= threshold, a new job after a >= 5 min pause): attended with p=0.5 "
    "(HTTP activity from U(1,10) min before its start to min(Exp(mean 10), 60) min after); "
    "an attended job runs in a notebook cell with p=0.5 (kernel busy for the job, kernel "
    "messages at start and end), else in a terminal; unattended jobs leave no HTTP or "
    "kernel trace; each session opens with U(5,20) min of HTTP activity"
)

Cell = dict[str, float]


@dataclass
class Session:
    cid: str
    times: list[float]  # Unix seconds, increasing
    util: list[float]  # %
    mem_mib: list[float | None]  # scaled by the publisher: compare, don't read absolutely

    @property
    def start(self) -> float:
        return self.times[0]

    @property
    def end(self) -> float:
        return self.times[-1]


@dataclass
class Activity:
    """What the hub and the kernels would have shown, per tick of one session."""

    ticks: list[float]
    hub_last: list[float]  # the hub's last_activity (session start if none yet)
    kernel_busy: list[bool]
    kernel_last: list[float | None]


def load_sessions(folder: Path) -> list[Session]:
    util: dict[str, dict[float, float]] = defaultdict(dict)
    mem: dict[str, dict[float, float]] = defaultdict(dict)
    with gzip.open(folder / "pod_gpu_duty_cycle_anon.csv.gz", "rt", newline="") as f:
        for row in csv.DictReader(f):
            util[row["container_ip"]][float(row["timestamp_anon"])] = float(row["value"])
    with gzip.open(folder / "pod_gpu_memory_used_bytes_anon.csv.gz", "rt", newline="") as f:
        for row in csv.DictReader(f):
            mem[row["container_ip"]][float(row["timestamp_anon"])] = float(row["value"]) / 2**20
    sessions = []
    for cid in sorted(util):
        times = sorted(util[cid])
        if len(times) < 2:
            continue
        m = mem.get(cid, {})
        sessions.append(
            Session(cid, times, [util[cid][t] for t in times], [m.get(t) for t in times])
        )
    return sessions


def jobs_of(s: Session) -> list[tuple[float, float]]:
    """(start, end) of each run of busy samples; a pause of JOB_GAP_S or more starts a new job."""
    jobs: list[list[float]] = []
    for t, u in zip(s.times, s.util, strict=True):
        if u < THRESHOLD:
            continue
        if jobs and t - jobs[-1][1] < JOB_GAP_S:
            jobs[-1][1] = t
        else:
            jobs.append([t, t])
    return [(a, b) for a, b in jobs]


def merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, z in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z))
        else:
            out.append((a, z))
    return out


def model_activity(s: Session, seed: int) -> Activity:
    """The seeded user-activity model of the module docstring, sampled on the tick grid."""
    rng = random.Random(f"{seed}:{s.cid}")
    presence = [(s.start, s.start + 60 * rng.uniform(*SPAWN_VISIT_MIN))]
    busy: list[tuple[float, float]] = []
    events: list[float] = []
    for start, end in jobs_of(s):
        if rng.random() >= P_ATTENDED:
            continue
        stay = min(rng.expovariate(1 / STAY_MEAN_MIN), STAY_MAX_MIN)
        presence.append((start - 60 * rng.uniform(*LEAD_MIN), start + 60 * stay))
        if rng.random() < P_NOTEBOOK:
            busy.append((start, end))
            events += [start, end]
    presence = merge(presence)
    events.sort()
    ticks = [s.start + i * TICK_S for i in range(int((s.end - s.start) // TICK_S) + 1)]
    act = Activity(ticks, [], [], [])
    last_seen, p, b, e = s.start, 0, 0, 0
    for t in ticks:
        while p < len(presence) and presence[p][1] <= t:
            last_seen = max(last_seen, presence[p][1])
            p += 1
        here = p < len(presence) and presence[p][0] <= t
        while e < len(events) and events[e] <= t:
            e += 1
        last_event = events[e - 1] if e else None
        act.hub_last.append(max(t if here else last_seen, last_event or s.start))
        while b < len(busy) and busy[b][1] < t:
            b += 1
        act.kernel_busy.append(b < len(busy) and busy[b][0] <= t)
        act.kernel_last.append(last_event)
    return act


# -- policies: each returns the cull time of one session, or None ---------------------------


def cull_stock(s: Session, act: Activity, timeout_s: float) -> float | None:
    for t, last in zip(act.ticks, act.hub_last, strict=True):
        if t - last >= timeout_s:
            return t
    return None


def cull_gpu_threshold(s: Session, act: Activity, timeout_s: float) -> float | None:
    last_busy: float | None = None
    i = 0
    for t in act.ticks:
        while i < len(s.times) and s.times[i] <= t:
            if s.util[i] >= THRESHOLD:
                last_busy = s.times[i]
            i += 1
        has_data = i > 0 and s.times[i - 1] > t - timeout_s
        quiet = last_busy is None or last_busy <= t - timeout_s
        if t - s.start >= timeout_s and has_data and quiet:
            return t
    return None


def cull_ours(s: Session, act: Activity, policy: Policy) -> float | None:
    tracker = GpuTracker(
        s.cid,
        threshold=policy.gpu_threshold,
        window=policy.gpu_window,
        memory_change=policy.gpu_memory_change,
        max_gap=policy.gpu_stale_after,
    )
    utc = timezone.utc
    started = datetime.fromtimestamp(s.start, utc)
    i = 0
    for k, t in enumerate(act.ticks):
        while i < len(s.times) and s.times[i] <= t:
            tracker.add(datetime.fromtimestamp(s.times[i], utc), s.util[i], s.mem_mib[i])
            i += 1
        last_kernel = act.kernel_last[k]
        kernel = KernelObservation(
            "busy" if act.kernel_busy[k] else "idle",
            None if last_kernel is None else datetime.fromtimestamp(last_kernel, utc),
        )
        obs = ServerObservation(
            name=s.cid,
            started=started,
            last_activity=datetime.fromtimestamp(act.hub_last[k], utc),
            gpus={s.cid: tracker.summary()},
            kernels=KernelsObservation((kernel,)),
        )
        if judge(obs, policy, datetime.fromtimestamp(t, utc)).cull:
            return t
    return None


# -- scoring --------------------------------------------------------------------------------


def score(
    sessions: list[Session], culls: list[float | None], kill_window_s: float, sample_min: float
) -> Cell:
    reclaimed = killed = 0.0
    n_culls = n_kill = 0
    for s, c in zip(sessions, culls, strict=True):
        if c is None:
            continue
        n_culls += 1
        reclaimed += (s.end - c) / 3600
        lo = bisect.bisect_right(s.times, c)
        hi = bisect.bisect_right(s.times, c + kill_window_s)
        busy = sum(1 for u in s.util[lo:hi] if u >= THRESHOLD)
        killed += busy * sample_min
        n_kill += busy > 0
    return {
        "reclaimed_gpu_hours": round(reclaimed, 1),
        "busy_gpu_minutes_killed": round(killed, 1),
        "culls": n_culls,
        "sessions_with_work_killed": n_kill,
    }


def run(folder: Path, seed: int, kill_window_min: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    sessions = load_sessions(folder / TRACE_DIR)
    acts = [model_activity(s, seed) for s in sessions]
    spacing = statistics.median(
        b - a for s in sessions for a, b in zip(s.times, s.times[1:], strict=False)
    )
    sample_min, window_s = spacing / 60, kill_window_min * 60

    def evaluate(cull: Callable[[Session, Activity], float | None]) -> Cell:
        culls = [cull(s, a) for s, a in zip(sessions, acts, strict=True)]
        return score(sessions, culls, window_s, sample_min)

    def ours_at(policy: Policy) -> Cell:
        return evaluate(lambda s, a: cull_ours(s, a, policy))

    cells: dict[str, dict[str, Cell]] = {"ours": {}, "stock": {}, "gpu_threshold": {}}
    for m in TIMEOUTS_MIN:
        cells["ours"][str(m)] = ours_at(replace(Policy(), gpu_timeout=60 * m, timeout=60 * m))
        cells["gpu_threshold"][str(m)] = evaluate(lambda s, a: cull_gpu_threshold(s, a, 60 * m))  # noqa: B023
    sweep = {str(m): evaluate(lambda s, a: cull_stock(s, a, 60 * m)) for m in STOCK_SWEEP_MIN}  # noqa: B023
    cells["stock"] = {str(m): sweep[str(m)] for m in TIMEOUTS_MIN}
    default = ours_at(Policy())
    info = {
        "sessions": len(sessions),
        "session_gpu_hours": round(sum(s.end - s.start for s in sessions) / 3600, 1),
        "sample_spacing_s": spacing,
    }
    elapsed = time.perf_counter() - t0
    return {"cells": cells, "sweep": sweep, "default": default, "info": info, "runtime_s": elapsed}


def summarise(r: dict[str, Any], seed: int, kill_window_min: float) -> dict[str, Any]:
    safe = [int(m) for m, c in r["sweep"].items() if c["busy_gpu_minutes_killed"] == 0]
    shortest = min(safe) if safe else None
    stock_safe = r["sweep"][str(shortest)]["reclaimed_gpu_hours"] if shortest else None
    ours = r["default"]["reclaimed_gpu_hours"]
    ratio = round(ours / stock_safe, 2) if stock_safe else None
    zero = all(c["busy_gpu_minutes_killed"] == 0 for c in r["cells"]["ours"].values())
    return {
        **r["info"],
        "threshold_pct": THRESHOLD,
        "kill_window_min": kill_window_min,
        "tick_s": TICK_S,
        "seed": seed,
        "activity_model": ACTIVITY_MODEL,
        "ours_default": {"gpu_timeout_min": Policy().gpu_timeout / 60, **r["default"]},
        "stock_sweep": r["sweep"],
        "stock_shortest_safe_timeout_min": shortest,
        "stock_reclaimed_gpu_hours_at_safe_timeout": stock_safe,
        "ours_default_reclaimed_gpu_hours": ours,
        "ratio_ours_default_to_stock_safe": ratio,
        "target_ours_zero_busy_killed_every_timeout": zero,
        "target_ours_default_beats_stock_safe": bool(stock_safe is not None and ours > stock_safe),
        "details": r["cells"],
        "runtime_s": round(r["runtime_s"], 1),
    }


def as_json(r: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    keys = ("reclaimed_gpu_hours", "busy_gpu_minutes_killed")
    out: dict[str, Any] = {
        policy: {m: {k: cell[k] for k in keys} for m, cell in by_timeout.items()}
        for policy, by_timeout in r["cells"].items()
    }
    out["summary"] = summary
    return out


def print_tables(r: dict[str, Any], summary: dict[str, Any]) -> None:
    info, window = r["info"], summary["kill_window_min"]
    print(
        f"{info['sessions']} sessions, {info['session_gpu_hours']} GPU-hours; threshold "
        f"{THRESHOLD:g}%, kill window {window:g} min, seed {summary['seed']}"
    )
    head = ("policy", "timeout", "reclaimed GPU-h", "busy GPU-min killed", "culls")
    print(f"{head[0]:<14}{head[1]:>8}{head[2]:>17}{head[3]:>21}{head[4]:>7}")
    rows = [(p, m, c) for p, by in r["cells"].items() for m, c in by.items()]
    rows.append(("ours default", str(int(Policy().gpu_timeout / 60)), r["default"]))
    for policy, m, c in rows:
        reclaimed, killed = c["reclaimed_gpu_hours"], c["busy_gpu_minutes_killed"]
        print(f"{policy:<14}{m + 'm':>8}{reclaimed:>17}{killed:>21}{c['culls']:>7}")
    print("\nstock sweep (timeout: reclaimed GPU-h / busy GPU-min killed):")
    for m, c in r["sweep"].items():
        print(f"  {m:>5}m  {c['reclaimed_gpu_hours']:>7} / {c['busy_gpu_minutes_killed']}")
    print(
        "\nshortest stock timeout killing no busy work: "
        f"{summary['stock_shortest_safe_timeout_min']} min, reclaiming "
        f"{summary['stock_reclaimed_gpu_hours_at_safe_timeout']} GPU-h; ours at default "
        f"settings: {summary['ours_default_reclaimed_gpu_hours']} GPU-h; ratio "
        f"{summary['ratio_ours_default_to_stock_safe']} ({summary['runtime_s']} s)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--traces",
        type=Path,
        default=DEFAULT_TRACES,
        help=f"folder holding {TRACE_DIR}/ (default: %(default)s)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the activity model")
    ap.add_argument(
        "--kill-window-min",
        type=float,
        default=30.0,
        help="minutes after a cull in which busy GPU samples count as killed work",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if not (args.traces / TRACE_DIR).is_dir():
        print(f"no {TRACE_DIR}/ under {args.traces} (see --traces)", file=sys.stderr)
        return 2
    result = run(args.traces, args.seed, args.kill_window_min)
    summary = summarise(result, args.seed, args.kill_window_min)
    if args.json:
        print(json.dumps(as_json(result, summary), indent=1))
    else:
        print_tables(result, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
