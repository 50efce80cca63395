"""Idle-culling benchmark: replay GPU-utilisation traces as sessions and compare policies.

Run from the repository root::

    .venv/bin/python benchmarks/culling.py            # readable tables
    .venv/bin/python benchmarks/culling.py --json     # one JSON object
    .venv/bin/python benchmarks/culling.py --returns  # returning users (issue 35), below
    .venv/bin/python benchmarks/culling.py --smoke    # the same on a tiny slice, seconds

``--returns`` replays a notebook-session model (``notebook_model.py``) and this trace with
users who come back after a cull: the server restarts then, and the measures are those of
``culling_returns.py`` (interrupted minutes, forced restarts, freed hours until the return,
two oracles). Everything below is about the default replay.

Each container of the Alibaba GenAI trace (v2026) is one server holding one GPU, from its
first sample to its last. A seeded user-activity model (below, and docs/culler.md) adds
what the trace lacks: HTTP activity and kernel state. The same sessions and the same
activity go to every policy; each is evaluated every ``TICK_S`` seconds and a session
ends at its first cull:

- ``stock``: HTTP inactivity only, like jupyterhub-idle-culler (the hub's
  ``last_activity``, which includes kernel messages, older than the timeout);
- ``gpu_threshold``: every GPU sample of the last ``timeout`` under the threshold (at least
  one sample in that window, as a Prometheus ``max_over_time`` rule needs);
- ``ours``: :func:`jupyterhub_gpu.core.culling.idleness.judge` itself, fed by
  :class:`~jupyterhub_gpu.core.culling.tracker.GpuTracker`, with the timeout as ``gpu_timeout``
  and every other setting at its default; ``ours_default`` is ``Policy()`` as shipped. The
  trace's memory (scaled by its publisher) is fed to the tracker as if it were MiB.

Metrics, summed over sessions: ``reclaimed_gpu_hours`` = hours from the cull to the end of
the session's trace; ``busy_gpu_minutes_killed`` = GPU-minutes with utilisation at or
above the threshold in the ``--kill-window-min`` minutes after the cull (default 30), the
issue's metric. It is split (tables, ``details``) into ``interrupted_gpu_minutes``: busy
samples of a process already launched at the cull (work the cull interrupted), and
``relaunched_gpu_minutes``: busy samples of a process whose user's launch activity began
after the cull (the user came back after being away at least the timeout; a real user
would find the server stopped and start it again).

Activity model (seeded, ``--seed``; the same sessions and draws for every policy; fixed
before any policy was compared). Jobs are runs of samples at or above the threshold; a
pause of 5 minutes or more starts a new job. Every job is either *launched* or a
*continuation*:

- job 1 of a session is launched. A later job is the continuation of the previous job's
  process (a training or serving loop resuming after a pause) with probability 0.5, but
  only if the GPU memory stayed at or above 1024 (trace units) at every sample of the
  pause between them (memory falling below that means the process exited); else launched;
- a launched job has HTTP activity from U(1, 10) minutes before its start until its start
  (the user types the cell or the command), and, with probability 0.5 (watched), on to
  min(Exp(mean 10), 60) minutes after its start;
- a launched job runs in a notebook cell with probability 0.5: the kernel is busy from its
  start until the end of its process's last continuation (the cell has not returned), with
  kernel messages (hub activity) at both ends; otherwise in a terminal (HTTP only);
- a continuation leaves no new HTTP or kernel trace;
- every session opens with U(5, 20) minutes of HTTP activity (the user who spawned it).

Every random draw is made for every job, in the same order, whatever the job turns out to
be.

Sensitivity (``summary.sensitivity``, last table): ``ours`` again with other values of the
two memory-held waits, ``gpu_held_idle`` (a GPU busy before in its server that still holds
memory) and ``gpu_loaded_idle`` (memory held, never busy yet), to show what each buys.

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
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyterhub_gpu.core.culling.idleness import (
    KernelObservation,
    KernelsObservation,
    Policy,
    ServerObservation,
    judge,
)
from jupyterhub_gpu.core.culling.tracker import GpuTracker

sys.path.insert(0, str(Path(__file__).resolve().parent))

import notebook_model
from culling_returns import (
    SPAWN_S,
    Samples,
    SuspendCosts,
    Timeline,
    Work,
    print_case,
    run_case,
    run_grid,
)

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TRACE_DIR = "alibaba-genai-v2026"
TIMEOUTS_MIN = (10, 30, 60)
STOCK_SWEEP_MIN = (10, 30, 60, 90, 120, 180, 240, 360, 480, 720, 960, 1440)
TICK_S = 60.0
THRESHOLD = 10.0
JOB_GAP_S = 300.0
# the activity model (identical for every policy; fixed before any policy was compared)
P_CONTINUATION = 0.5  # a later job, its GPU memory held since the last one: same process
MEM_RELEASED_MIB = 1024.0  # memory below this between two jobs: the process exited
P_WATCHED = 0.5  # the user who launched a job stays to watch it
P_NOTEBOOK = 0.5  # a launched job runs in a notebook cell (else in a terminal)
LEAD_MIN = (1.0, 10.0)
STAY_MEAN_MIN, STAY_MAX_MIN = 10.0, 60.0
SPAWN_VISIT_MIN = (5.0, 20.0)
# (gpu_held_idle, gpu_loaded_idle) in hours, besides the shipped defaults
# the --grid of --returns (issue 35, item 4): gpu_held_idle and gpu_loaded_idle, hours
GRID_HELD_H = (1.0, 2.0, 3.0, 5.0, 8.0, 16.0)
GRID_LOADED_H = (0.5, 1.0, 2.0)
SENSITIVITY_H = ((2.0, 1.0), (3.0, 1.0), (4.0, 1.0), (6.0, 1.0), (5.0, 0.5), (5.0, 2.0), (2.0, 0.0))

ACTIVITY_MODEL = (
    "per job (samples >= threshold, a new job after a >= 5 min pause): job 1 is launched; "
    "a later job continues the previous job's process with p=0.5 if GPU memory stayed >= "
    "1024 (trace units) through the pause between them, else it is launched. A launched "
    "job has HTTP activity from U(1,10) min before its start to its start, and with p=0.5 "
    "(watched) until min(Exp(mean 10), 60) min after; it runs in a notebook cell with "
    "p=0.5 (kernel busy from its start to the end of its process's last continuation, "
    "kernel messages at both ends), else in a terminal (HTTP only). A continuation leaves "
    "no new trace. Each session opens with U(5,20) min of HTTP activity"
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
    # per job: (start, end, launch time of its process); a continuation has its
    # process's launch time, a launched job the time its user's launch activity began
    jobs: list[tuple[float, float, float]]
    presence: list[tuple[float, float]] = field(default_factory=list)  # the user's visits
    cells: list[tuple[float, float]] = field(default_factory=list)  # kernel busy spans


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


def held_through(s: Session, a: float, b: float) -> bool:
    """Whether the GPU's memory stayed held (>= MEM_RELEASED_MIB) at every sample in (a, b)."""
    lo, hi = bisect.bisect_right(s.times, a), bisect.bisect_left(s.times, b)
    return all(m is None or m >= MEM_RELEASED_MIB for m in s.mem_mib[lo:hi])


def model_activity(s: Session, seed: int) -> Activity:
    """The seeded user-activity model of the module docstring, sampled on the tick grid.

    Every job is either *launched* by its user (HTTP activity in the minutes before it
    starts; a notebook cell also makes the kernel busy) or the *continuation* of the
    process the previous job belongs to (a training or serving loop resuming after a
    pause; no new trace). Job 1 is always launched, and only a job whose GPU memory stayed
    held since the previous one can be a continuation. Every random draw is made for every
    job in the same order, whatever the job turns out to be.
    """
    rng = random.Random(f"{seed}:{s.cid}")
    presence = [(s.start, s.start + 60 * rng.uniform(*SPAWN_VISIT_MIN))]
    # one per process: [its user's launch activity began, its job started, end of its
    # last job, launched from a notebook cell]
    processes: list[list[Any]] = []
    jobs: list[tuple[float, float, float]] = []
    previous_end: float | None = None
    for start, end in jobs_of(s):
        continues = rng.random() < P_CONTINUATION
        lead = 60 * rng.uniform(*LEAD_MIN)
        watched = rng.random() < P_WATCHED
        stay = 60 * min(rng.expovariate(1 / STAY_MEAN_MIN), STAY_MAX_MIN)
        notebook = rng.random() < P_NOTEBOOK
        if previous_end is not None and continues and held_through(s, previous_end, start):
            processes[-1][2] = end
        else:
            presence.append((start - lead, start + (stay if watched else 0.0)))
            processes.append([start - lead, start, end, notebook])
        jobs.append((start, end, processes[-1][0]))
        previous_end = end
    busy = [(a, z) for _, a, z, cell in processes if cell]
    events = sorted(t for a, z in busy for t in (a, z))
    presence = merge(presence)
    ticks = [s.start + i * TICK_S for i in range(int((s.end - s.start) // TICK_S) + 1)]
    act = Activity(ticks, [], [], [], jobs, presence, busy)
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
    """Replay one session through the tracker and ``judge()``; the cull time or None."""
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
    sessions: list[Session],
    acts: list[Activity],
    culls: list[float | None],
    kill_window_s: float,
    sample_min: float,
) -> Cell:
    """Sum the metrics; killed minutes are also split by what they were (see docstring)."""
    reclaimed = killed = interrupted = relaunched = 0.0
    n_culls = n_kill = n_interrupted = 0
    for s, act, c in zip(sessions, acts, culls, strict=True):
        if c is None:
            continue
        n_culls += 1
        reclaimed += (s.end - c) / 3600
        lo = bisect.bisect_right(s.times, c)
        hi = bisect.bisect_right(s.times, c + kill_window_s)
        starts = [j[0] for j in act.jobs]
        mine = 0.0
        for t, u in zip(s.times[lo:hi], s.util[lo:hi], strict=True):
            if u < THRESHOLD:
                continue
            launched_at = act.jobs[bisect.bisect_right(starts, t) - 1][2]
            if launched_at >= c:
                relaunched += sample_min
            else:
                interrupted += sample_min
                mine += sample_min
        busy = sum(1 for u in s.util[lo:hi] if u >= THRESHOLD)
        killed += busy * sample_min
        n_kill += busy > 0
        n_interrupted += mine > 0
    return {
        "reclaimed_gpu_hours": round(reclaimed, 1),
        "busy_gpu_minutes_killed": round(killed, 1),
        "culls": n_culls,
        "sessions_with_work_killed": n_kill,
        "interrupted_gpu_minutes": round(interrupted, 1),
        "sessions_interrupted": n_interrupted,
        "relaunched_gpu_minutes": round(relaunched, 1),
    }


def run(
    folder: Path, seed: int, kill_window_min: float, max_sessions: int | None = None
) -> dict[str, Any]:
    t0 = time.perf_counter()
    sessions = load_sessions(folder / TRACE_DIR)[:max_sessions]
    acts = [model_activity(s, seed) for s in sessions]
    spacing = statistics.median(
        b - a for s in sessions for a, b in zip(s.times, s.times[1:], strict=False)
    )
    sample_min, window_s = spacing / 60, kill_window_min * 60

    def evaluate(cull: Callable[[Session, Activity], float | None]) -> Cell:
        culls = [cull(s, a) for s, a in zip(sessions, acts, strict=True)]
        return score(sessions, acts, culls, window_s, sample_min)

    def ours_at(policy: Policy) -> Cell:
        return evaluate(lambda s, a: cull_ours(s, a, policy))

    def ours_by_timeout(base: Policy) -> dict[str, Cell]:
        return {
            str(m): ours_at(replace(base, gpu_timeout=60 * m, timeout=60 * m)) for m in TIMEOUTS_MIN
        }

    cells: dict[str, dict[str, Cell]] = {"ours": ours_by_timeout(Policy())}
    cells["stock"] = {}
    cells["gpu_threshold"] = {
        str(m): evaluate(lambda s, a: cull_gpu_threshold(s, a, 60 * m))  # noqa: B023
        for m in TIMEOUTS_MIN
    }
    sweep = {str(m): evaluate(lambda s, a: cull_stock(s, a, 60 * m)) for m in STOCK_SWEEP_MIN}  # noqa: B023
    cells["stock"] = {str(m): sweep[str(m)] for m in TIMEOUTS_MIN}
    sensitivity = {}
    for held_h, loaded_h in SENSITIVITY_H:
        base = replace(Policy(), gpu_held_idle=3600 * held_h, gpu_loaded_idle=3600 * loaded_h)
        by = ours_by_timeout(base)
        sensitivity[f"held_{held_h:g}h_loaded_{loaded_h:g}h"] = {
            "by_timeout": by,
            "default": ours_at(base),
        }
    info = {
        "sessions": len(sessions),
        "session_gpu_hours": round(sum(s.end - s.start for s in sessions) / 3600, 1),
        "sample_spacing_s": spacing,
    }
    elapsed = time.perf_counter() - t0
    return {
        "cells": cells,
        "sweep": sweep,
        "default": ours_at(Policy()),
        "sensitivity": sensitivity,
        "info": info,
        "runtime_s": elapsed,
    }


def summarise(r: dict[str, Any], seed: int, kill_window_min: float) -> dict[str, Any]:
    safe = [int(m) for m, c in r["sweep"].items() if c["busy_gpu_minutes_killed"] == 0]
    shortest = min(safe) if safe else None
    stock_safe = r["sweep"][str(shortest)]["reclaimed_gpu_hours"] if shortest else None

    def targets(by_timeout: dict[str, Cell], default: Cell) -> dict[str, Any]:
        ours = default["reclaimed_gpu_hours"]
        return {
            "default_reclaimed_gpu_hours": ours,
            "ratio_default_to_stock_safe": round(ours / stock_safe, 2) if stock_safe else None,
            "zero_busy_killed_every_timeout": all(
                c["busy_gpu_minutes_killed"] == 0 for c in by_timeout.values()
            ),
            "zero_interrupted_every_timeout": all(
                c["interrupted_gpu_minutes"] == 0 for c in by_timeout.values()
            ),
            "default_beats_stock_safe": bool(stock_safe is not None and ours > stock_safe),
        }

    shipped = targets(r["cells"]["ours"], r["default"])
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
        "ours_default_reclaimed_gpu_hours": shipped["default_reclaimed_gpu_hours"],
        "ratio_ours_default_to_stock_safe": shipped["ratio_default_to_stock_safe"],
        "target_ours_zero_busy_killed_every_timeout": shipped["zero_busy_killed_every_timeout"],
        "target_ours_default_beats_stock_safe": shipped["default_beats_stock_safe"],
        "ours_zero_interrupted_every_timeout": shipped["zero_interrupted_every_timeout"],
        "ours_settings_h": {
            "gpu_timeout": Policy().gpu_timeout / 3600,
            "gpu_loaded_idle": Policy().gpu_loaded_idle / 3600,
            "gpu_held_idle": Policy().gpu_held_idle / 3600,
        },
        "sensitivity": {
            name: {**v, **targets(v["by_timeout"], v["default"])}
            for name, v in r["sensitivity"].items()
        },
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
    head = ("policy", "timeout", "reclaimed", "busy killed", "interrupted", "relaunched", "culls")
    print(
        f"{head[0]:<16}{head[1]:>8}{head[2]:>11}{head[3]:>13}{head[4]:>13}{head[5]:>12}{head[6]:>7}"
    )
    rows = [(p, m, c) for p, by in r["cells"].items() for m, c in by.items()]
    default_m = str(int(Policy().gpu_timeout / 60))
    rows += [("ours default", default_m, r["default"])]
    for policy, m, c in rows:
        print(
            f"{policy:<16}{m + 'm':>8}{c['reclaimed_gpu_hours']:>11}"
            f"{c['busy_gpu_minutes_killed']:>13}{c['interrupted_gpu_minutes']:>13}"
            f"{c['relaunched_gpu_minutes']:>12}{c['culls']:>7}"
        )
    print("(GPU-hours reclaimed; GPU-minutes killed = interrupted + relaunched, see docstring)")
    print("\nstock sweep (timeout: reclaimed GPU-h / busy GPU-min killed):")
    for m, c in r["sweep"].items():
        print(f"  {m:>5}m  {c['reclaimed_gpu_hours']:>7} / {c['busy_gpu_minutes_killed']}")
    print(
        "\nshortest stock timeout killing no busy work: "
        f"{summary['stock_shortest_safe_timeout_min']} min, reclaiming "
        f"{summary['stock_reclaimed_gpu_hours_at_safe_timeout']} GPU-h; ours at default "
        f"settings: {summary['ours_default_reclaimed_gpu_hours']} GPU-h, ratio "
        f"{summary['ratio_ours_default_to_stock_safe']}; ours kills no busy work at any "
        f"timeout: {summary['target_ours_zero_busy_killed_every_timeout']}"
    )
    shipped = summary["ours_settings_h"]
    print(
        f"\nsensitivity of ours (shipped: gpu_held_idle {shipped['gpu_held_idle']:g} h, "
        f"gpu_loaded_idle {shipped['gpu_loaded_idle']:g} h): reclaimed GPU-h / busy GPU-min "
        "killed"
    )
    print(
        f"{'held, loaded':<16}"
        + "".join(f"{m:>16}" for m in [*(f"{t}m" for t in TIMEOUTS_MIN), "default"])
    )
    for name, v in summary["sensitivity"].items():
        cols = [v["by_timeout"][str(m)] for m in TIMEOUTS_MIN] + [v["default"]]
        _, held, _, loaded = name.split("_")
        print(
            f"{held + ', ' + loaded:<16}"
            + "".join(
                f"{c['reclaimed_gpu_hours']:>9} / {c['busy_gpu_minutes_killed']:<5}" for c in cols
            )
            + f"  default ratio {v['ratio_default_to_stock_safe']}"
        )
    print(f"({summary['runtime_s']} s)")


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
    ap.add_argument(
        "--sessions",
        type=int,
        default=None,
        help="replay only the trace's first N sessions (default: all)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--returns",
        action="store_true",
        help="returning users (issue 35): notebook-session model and the inference trace,\n"
        "a culled session restarts when its user comes back (benchmarks/culling_returns.py)",
    )
    ap.add_argument(
        "--notebook-sessions", type=int, default=400, help="sessions of the notebook model"
    )
    ap.add_argument(
        "--suspend-failure-rate",
        type=float,
        default=0.0,
        help="--returns: the share of restores that fail (a forced restart each; default 0)",
    )
    ap.add_argument(
        "--suspend-gib",
        type=float,
        default=SuspendCosts.gib,
        help="--returns: GiB written per suspended server (default %(default)s: the model's\n"
        "GPU memory; 28.4 s to checkpoint and 17.5 s to restore per GiB, as measured)",
    )
    ap.add_argument(
        "--timeouts",
        type=_floats,
        default=TIMEOUTS_MIN,
        help="--returns: the timeouts in minutes, comma-separated (default 10,30,60)",
    )
    ap.add_argument(
        "--grid",
        action="store_true",
        help="--returns: also ours (stop) at every timeout x --held-hours x --loaded-hours\n"
        "(the tuning of issue 35's item 4; minutes on 2 cores)",
    )
    ap.add_argument(
        "--held-hours",
        type=_floats,
        default=GRID_HELD_H,
        help="--grid: gpu_held_idle values in hours (default %(default)s)",
    )
    ap.add_argument(
        "--loaded-hours",
        type=_floats,
        default=GRID_LOADED_H,
        help="--grid: gpu_loaded_idle values in hours (default %(default)s)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="smallest meaningful run (seconds; the same keys): --sessions 12, or with\n"
        "--returns 12 notebook sessions, 8 trace sessions and one timeout",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        ap.set_defaults(sessions=12)
        args = ap.parse_args(argv)
    if not (args.traces / TRACE_DIR).is_dir():
        print(f"no {TRACE_DIR}/ under {args.traces} (see --traces)", file=sys.stderr)
        return 2
    if args.returns:
        return run_returns(args)
    result = run(args.traces, args.seed, args.kill_window_min, args.sessions)
    summary = summarise(result, args.seed, args.kill_window_min)
    if args.json:
        print(json.dumps(as_json(result, summary), indent=1))
    else:
        print_tables(result, summary)
    return 0


def inference_timelines(folder: Path, seed: int, limit: int | None) -> list[Timeline]:
    """The trace's containers as sessions for the returning-user replay: GPU readings as
    recorded, visits and notebook cells from the activity model above."""
    out = []
    for s in load_sessions(folder / TRACE_DIR)[:limit]:
        act = model_activity(s, seed)
        work = tuple(Work(a, z, launched) for a, z, launched in act.jobs)
        visits = tuple((a, min(z, s.end)) for a, z in act.presence if a < s.end)
        samples = Samples(s.times, s.util, s.mem_mib)
        out.append(Timeline(s.cid, s.start, s.end, work, visits, tuple(act.cells), samples=samples))
    return out


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def run_returns(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    n_notebook = 12 if args.smoke else args.notebook_sessions
    timeouts = (30,) if args.smoke else args.timeouts
    costs = SuspendCosts(
        gib=args.suspend_gib, failure_rate=args.suspend_failure_rate, seed=args.seed
    )
    timelines = {
        "notebook": notebook_model.sessions(n_notebook, args.seed),
        "inference": inference_timelines(args.traces, args.seed, 8 if args.smoke else None),
    }
    cases = {name: run_case(tls, timeouts, costs) for name, tls in timelines.items()}
    out: dict[str, Any] = {
        "mode": "returns" + (" (smoke)" if args.smoke else ""),
        "seed": args.seed,
        "tick_s": TICK_S,
        "spawn_s_per_restart": SPAWN_S,
        "suspend": {
            "checkpoint_s": round(costs.checkpoint_s, 1),
            "restore_s": round(costs.restore_s, 1),
            "gib": costs.gib,
            "failure_rate": costs.failure_rate,
        },
        "notebook_model": notebook_model.MODEL,
        "inference_activity_model": ACTIVITY_MODEL,
        "cases": cases,
    }
    if args.grid:
        held = (5.0,) if args.smoke else args.held_hours
        loaded = (1.0,) if args.smoke else args.loaded_hours
        out["grid"] = {
            name: run_grid(tls, timeouts, held, loaded) for name, tls in timelines.items()
        }
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print_case("notebook sessions (model)", cases["notebook"])
        print_case("inference containers (Alibaba GenAI v2026)", cases["inference"])
        for name, grid in out.get("grid", {}).items():
            print(f"\ngrid, {name}: timeout min/gpu_held_idle h/gpu_loaded_idle h")
            for key, c in grid.items():
                print(
                    f"{key:>14} interrupted {c['interrupted_gpu_minutes']:>9} forced "
                    f"{c['forced_restarts']:>6} freed {c['freed_gpu_hours']:>9} "
                    f"(before a return {c['freed_before_return_gpu_hours']})"
                )
        print(f"({out['runtime_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
