"""A seeded model of notebook sessions on a shared GPU server (a model, not a trace).

No public trace of notebook sessions with per-session idle gaps and returns was found (the
notebook trace issue 35 cites is held out). This model gives the shape that the published
descriptions of production notebook workloads share (Carver et al., "NotebookOS: A
Replicated Notebook Platform for Interactive Training with On-Demand GPUs", ASPLOS '26,
arXiv 2503.20591: sessions are long-running, their GPU use intermittent and sporadic, the
reserved GPUs idle for most of a session's life), and the rhythm of a working day; every
number below is an assumption, named here and in docs/culler.md, and a site can replace
them. One session is one user's server holding one GPU:

- it starts when its user arrives (day 0, 08:00 + U(0, 3) h); the user comes back to the
  same server on the next day with probability ``P_NEXT_DAY`` (at most ``MAX_DAYS`` days;
  days are consecutive, no weekends), arriving at 08:00 + U(0, 3) h;
- a working day lasts U(6, 9) h with one lunch break of U(30, 90) min starting U(3, 4.5) h
  after arrival; the user leaves after the first cell that would start past the day's end;
- the user edits for Exp(mean ``THINK_MIN``) min, then runs a GPU cell: a training of
  U(30, 180) min with probability ``P_LONG``, else lognormal (median 2 min, sigma 1),
  capped at 60 min; during a training the user leaves with probability ``P_LEAVE_LONG`` and
  comes back Exp(mean 20) min after it ends; after any cell, a break of Exp(mean
  ``BREAK_MIN``) min with probability ``P_BREAK``; a cell that runs past lunch or the
  day's end goes on (a training left over lunch or overnight);
- every cell runs in the kernel (busy while it runs) at U(30, 95) % utilisation; the
  framework keeps its GPU memory (4 GiB) from its first cell until the kernel dies with
  probability ``P_MEMORY_HELD`` (PyTorch's caching allocator, TensorFlow), else only while
  a cell runs;
- the user is present (HTTP activity) while editing and watching, away during breaks,
  lunch, trainings left alone, and nights;
- after the last day the user stops the server with probability ``P_STOP`` at the end of
  the last visit; otherwise it is forgotten and runs until ``HORIZON_S`` after its start
  (the culler's default ``max_age``, 7 days).
"""

from __future__ import annotations

import math
import random

from culling_returns import Interval, Timeline, Work

P_NEXT_DAY = 0.6
MAX_DAYS = 5
THINK_MIN = 8.0
P_LONG = 0.08
P_LEAVE_LONG = 0.6
P_BREAK = 0.1
BREAK_MIN = 20.0
P_MEMORY_HELD = 0.85
P_STOP = 0.4
HORIZON_S = 7 * 86400.0
DAY_S = 86400.0

MODEL = (
    "a model, not a trace: day 0 arrival 08:00+U(0,3)h; next-day return p=0.6 (<= 5 days, "
    "consecutive); day U(6,9)h with lunch U(30,90)min at U(3,4.5)h; think Exp(8)min then a "
    "GPU cell: p=0.08 training U(30,180)min (user leaves p=0.6, back Exp(20)min after it "
    "ends), else lognormal median 2 min sigma 1 capped 60 min; break Exp(20)min p=0.1 after "
    "a cell; util U(30,95)%; memory 4 GiB held from the first cell p=0.85, else only while "
    "a cell runs; server stopped by its user after the last visit p=0.4, else forgotten "
    "until 7 days after its start"
)


def _minutes(rng: random.Random, mean: float) -> float:
    return 60 * rng.expovariate(1 / mean)


def _day(rng: random.Random, arrive: float) -> tuple[list[Interval], list[Work]]:
    """One working day: the user's visits and the cells run."""
    leave = arrive + 3600 * rng.uniform(6, 9)
    lunch_at = arrive + 3600 * rng.uniform(3, 4.5)
    lunch_s = 60 * rng.uniform(30, 90)
    visits: list[Interval] = []
    work: list[Work] = []
    present, t, busy_until = arrive, arrive, arrive
    lunched = False
    while True:
        t = max(t, busy_until) + _minutes(rng, THINK_MIN)
        if not lunched and t >= lunch_at:
            visits.append((present, max(present, lunch_at)))
            t = present = max(lunch_at, busy_until) + lunch_s
            lunched = True
            continue
        if t >= leave:
            break
        long = rng.random() < P_LONG
        if long:
            run = 60 * rng.uniform(30, 180)
        else:
            run = min(60 * math.exp(math.log(2.0) + rng.gauss(0, 1)), 3600.0)
        work.append(Work(t, t + run, t, rng.uniform(30, 95)))
        busy_until = t + run
        if long and rng.random() < P_LEAVE_LONG:
            visits.append((present, t + 60))
            t = present = busy_until + _minutes(rng, 20)
        if rng.random() < P_BREAK:
            visits.append((present, max(present, min(t, busy_until))))
            t = present = max(t, busy_until) + _minutes(rng, BREAK_MIN)
    last_seen = max(present, min(t, work[-1].end if work else present))
    visits.append((present, last_seen + 60 * rng.uniform(1, 10)))
    return visits, work


def _merge(intervals: list[Interval]) -> tuple[Interval, ...]:
    out: list[Interval] = []
    for a, z in sorted(intervals):
        if z <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z))
        else:
            out.append((a, z))
    return tuple(out)


def session(seed: int, index: int) -> Timeline:
    """Session ``index`` of the model under ``seed`` (independent of the other sessions)."""
    rng = random.Random(f"notebook:{seed}:{index}")
    days = 1
    while days < MAX_DAYS and rng.random() < P_NEXT_DAY:
        days += 1
    memory_held = rng.random() < P_MEMORY_HELD
    stops = rng.random() < P_STOP
    visits: list[Interval] = []
    work: list[Work] = []
    start = 8 * 3600 + 3600 * rng.uniform(0, 3)
    for d in range(days):
        arrive = start if d == 0 else d * DAY_S + 8 * 3600 + 3600 * rng.uniform(0, 3)
        arrive = max(arrive, work[-1].end if work else arrive)  # a training still running
        v, w = _day(rng, arrive)
        visits += v
        work += w
    merged = _merge(visits)
    last = max(merged[-1][1], work[-1].end if work else start)
    end = last if stops else max(start + HORIZON_S, last)
    cells = tuple((w.start, w.end) for w in work)
    return Timeline(
        f"nb{index:04d}",
        start,
        end,
        tuple(work),
        merged,
        cells,
        memory_held=memory_held,
    )


def sessions(n: int, seed: int) -> list[Timeline]:
    return [session(seed, i) for i in range(n)]
