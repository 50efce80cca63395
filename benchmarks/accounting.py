"""Accounting benchmark: a year of a 64-GPU lab in the store, and the monthly report.

Run from the repository root::

    .venv/bin/python benchmarks/accounting.py            # readable lines
    .venv/bin/python benchmarks/accounting.py --json     # one JSON object

**The year.** ``--allocations`` (default 250,000) allocations of a lab of 8 nodes x 8 GPUs
(four models, two nodes each), drawn with ``--seed`` from the Alibaba GPU trace (v2023,
``openb_pod_list_default.csv``): each allocation takes the GPU count (0, 1, 2, 4 or 8) and
the run time (``deletion_time - scheduled_time``) of a pod of the trace that ran, drawn
with replacement. Run times are clipped to [1 min, 7 days] (a notebook server's life
under a culler) and then all multiplied by one factor so that the lab's GPUs are
allocated ``--load`` (default 0.6) of the year on average (the trace's run times alone
would ask for about twice the lab). Starts are uniform over 2025 (overlap beyond 8 GPUs
on a node is allowed: the report does not check it); an allocation still running at
the end of the year stays open. Users: 60, with Zipf(0.8) shares of the allocations, each
in one of 8 charge groups; a node is drawn uniformly, the GPUs on it at random; end
reasons stopped / culled / died / failed with shares 0.55 / 0.3 / 0.1 / 0.05; mean
utilisation uniform in [0, 100] %, a culled allocation idle for its last 30-60 min.

**What is timed.** The rows are written with SQLAlchemy core ``insert`` on
``AllocationRow.__table__`` in batches of 5,000 (``insert_s_*``) into a schema made by
``AccountingStore.upgrade()``: an SQLite file in a temporary folder, and a PostgreSQL
database (a throw-away server started with ``tests.support.postgres.PostgresServer``, or
``--postgres-url`` of an empty database; ``--no-postgres`` skips it). PostgreSQL is
``ANALYZE``d after the load (its autovacuum would do the same within a minute); SQLite is
left as the store leaves it (no ``ANALYZE``). Then the monthly report by group, as
``jupyterhub-gpu report`` makes it: ``AccountingStore.intervals`` for June 2025 plus
``report.report(..., ReportQuery(by=("group",), bucket=None))``, ``--runs`` times (default
5), median (``report_month_by_group_s_*``), and the year by group in monthly buckets
(median of 3, ``report_year_by_group_monthly_s_*``). Both back-ends must give the same
rows (``reports_agree``). The throw-away server runs with ``fsync`` off: insert times are
not those of a durable server; read times are unaffected.

Trace: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23 (alibaba/clusterdata, cluster-trace-gpu-v2023).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import sqlalchemy
from sqlalchemy import Table, func, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyterhub_gpu.core.accounting.records import EndReason
from jupyterhub_gpu.core.accounting.report import ReportQuery, ReportRow, report
from jupyterhub_gpu.edges.accounting.schema import AllocationRow
from jupyterhub_gpu.edges.accounting.store import AccountingStore, safe_url
from tests.support.postgres import PostgresServer

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TRACE_FILE = Path("alibaba-gpu-v2023") / "openb_pod_list_default.csv"
YEAR_START, YEAR_END = datetime(2025, 1, 1), datetime(2026, 1, 1)
MONTH_START, MONTH_END = datetime(2025, 6, 1), datetime(2025, 7, 1)
NODES = tuple(
    (f"gpu{n + 1:02d}", model)
    for n, model in enumerate(
        m
        for m in (
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA GeForce RTX 3090",
            "Tesla V100-SXM2-32GB",
            "Tesla T4",
        )
        for _ in range(2)
    )
)
GPUS_PER_NODE = 8
USERS, GROUPS, ZIPF_S = 60, 8, 0.8
MIN_S, MAX_S = 60.0, 7 * 86400.0
END_REASONS = (EndReason.STOPPED, EndReason.CULLED, EndReason.DIED, EndReason.FAILED)
END_REASON_SHARES = (0.55, 0.30, 0.10, 0.05)
BATCH = 5000
Row = dict[str, Any]


# -- the synthetic year --------------------------------------------------------------------


def load_trace(path: Path) -> list[tuple[int, float]]:
    """(GPUs, run time s) of every pod of the trace that ran (scheduled and deleted)."""
    pods = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if not row["scheduled_time"] or not row["deletion_time"]:
                continue
            run_s = float(row["deletion_time"]) - float(row["scheduled_time"])
            if run_s > 0:
                pods.append((int(row["num_gpu"]), run_s))
    return pods


def synthesise(
    pods: Sequence[tuple[int, float]], n: int, seed: int, load: float
) -> tuple[list[Row], dict[str, Any]]:
    """``n`` table rows for the year (see the module docstring) and what was made."""
    rng = random.Random(seed)
    drawn = [rng.choice(pods) for _ in range(n)]
    clipped = [(g, min(max(s, MIN_S), MAX_S)) for g, s in drawn]
    capacity_gpu_s = len(NODES) * GPUS_PER_NODE * (YEAR_END - YEAR_START).total_seconds()
    factor = load * capacity_gpu_s / sum(g * s for g, s in clipped)
    users = [f"user{u:02d}" for u in range(USERS)]
    user_group = {u: f"group-{rng.randrange(GROUPS)}" for u in users}
    weights = [1 / (k + 1) ** ZIPF_S for k in range(USERS)]
    year_s = (YEAR_END - YEAR_START).total_seconds()
    rows: list[Row] = []
    for gpus, run_s in clipped:
        duration = timedelta(seconds=round(max(run_s * factor, MIN_S)))
        start = YEAR_START + timedelta(seconds=rng.randrange(int(year_s)))
        user = rng.choices(users, weights)[0]
        node, model = rng.choice(NODES)
        slots = sorted(rng.sample(range(GPUS_PER_NODE), gpus))
        reason = rng.choices(END_REASONS, END_REASON_SHARES)[0]
        util = rng.uniform(0.0, 100.0)
        idle = timedelta(minutes=rng.uniform(30.0, 60.0))
        # still running when the year's data ends: open, its usage saved up to then
        end = start + duration if start + duration <= YEAR_END else None
        sampled = ((end or YEAR_END) - start).total_seconds()
        last_busy = end
        if end is not None and reason is EndReason.CULLED:
            last_busy = max(start, end - idle)
        rows.append(
            {
                "id": uuid.UUID(int=rng.getrandbits(128), version=4).hex,
                "user": user,
                "server": "" if rng.random() < 0.8 else "train",
                "charge_group": user_group[user],
                "node": node,
                "gpu_uuids": ",".join(f"GPU-{node}-{i}" for i in slots),
                "gpus": gpus,
                "gpu_model": model if gpus else "",
                "image": rng.choice(("pytorch", "tensorflow", "jax", "datascience")),
                "cuda": "12.4" if gpus else "",
                "cpus": 4.0 * max(gpus, 1),
                "mem_gib": 16.0 * max(gpus, 1),
                "started_at": start,
                "running_at": start + timedelta(seconds=5),
                "ended_at": end,
                "end_reason": reason.value if end is not None else None,
                "sampled_s": sampled,
                "util_pct_seconds": util * sampled,
                "peak_util_pct": min(100.0, util * 1.5),
                "peak_memory_mib": rng.randrange(0, 80 * 1024) if gpus else 0,
                "busy_s": sampled * util / 100,
                "last_sample_at": end or YEAR_END,
                "last_busy_at": last_busy,
            }
        )
    gpu_s = sum(
        r["gpus"] * ((r["ended_at"] or YEAR_END) - r["started_at"]).total_seconds() for r in rows
    )
    info = {
        "allocations": n,
        "trace_pods": len(pods),
        "duration_factor": round(factor, 4),
        "gpu_hours_allocated": round(gpu_s / 3600, 1),
        "open_at_year_end": sum(r["ended_at"] is None for r in rows),
        "users": USERS,
        "groups": len(set(user_group.values())),
        "nodes": len(NODES),
        "gpus": len(NODES) * GPUS_PER_NODE,
    }
    return rows, info


# -- the stores ----------------------------------------------------------------------------


def load_rows(store: AccountingStore, rows: Sequence[Row]) -> float:
    """Bulk insert ``rows``; seconds taken."""
    table = cast(Table, AllocationRow.__table__)
    t = time.perf_counter()
    for i in range(0, len(rows), BATCH):
        with store.engine.begin() as conn:
            conn.execute(insert(table), list(rows[i : i + BATCH]))
    return time.perf_counter() - t


def count_rows(store: AccountingStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(AllocationRow)).scalar_one())


def timed(
    query: ReportQuery, store: AccountingStore, runs: int
) -> tuple[list[float], list[float], list[ReportRow], int]:
    """``runs`` x (store.intervals, report.report): seconds of each half, rows, intervals."""
    fetch, aggregate, rows, n = [], [], [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        intervals = store.intervals(query.start, query.end)
        t1 = time.perf_counter()
        rows = report(intervals, query, YEAR_END)
        fetch.append(t1 - t0)
        aggregate.append(time.perf_counter() - t1)
        n = len(intervals)
    return fetch, aggregate, rows, n


def measure(store: AccountingStore, runs: int) -> dict[str, Any]:
    """Time the monthly report by group (and the year's, monthly buckets) on ``store``."""
    month = ReportQuery(MONTH_START, MONTH_END, ("group",), None)
    year = ReportQuery(YEAR_START, YEAR_END, ("group",), "month")
    fetch, aggregate, month_rows, n = timed(month, store, runs)
    year_fetch, year_aggregate, year_rows, _ = timed(year, store, 3)
    return {
        "month_intervals": n,
        "report_month_by_group_runs_s": [a + b for a, b in zip(fetch, aggregate, strict=True)],
        "intervals_month_s": statistics.median(fetch),
        "aggregate_month_s": statistics.median(aggregate),
        "report_year_by_group_monthly_s": statistics.median(
            a + b for a, b in zip(year_fetch, year_aggregate, strict=True)
        ),
        "_rows": (month_rows, year_rows),
    }


def same_rows(a: Sequence[ReportRow], b: Sequence[ReportRow]) -> bool:
    if [(r.keys, r.bucket, r.allocations) for r in a] != [
        (r.keys, r.bucket, r.allocations) for r in b
    ]:
        return False
    return all(
        abs(x.gpu_hours_allocated - y.gpu_hours_allocated) <= 1e-6 * max(1, x.gpu_hours_allocated)
        and abs(x.gpu_hours_used - y.gpu_hours_used) <= 1e-6 * max(1, x.gpu_hours_used)
        for x, y in zip(a, b, strict=True)
    )


def sqlite_bytes(path: Path, store: AccountingStore) -> int:
    with store.engine.connect() as conn:
        conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def postgres_bytes(store: AccountingStore) -> tuple[int, int]:
    """(pg_database_size, pg_total_relation_size of the allocations table)."""
    with store.engine.connect() as conn:
        db = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
        table = conn.execute(text("SELECT pg_total_relation_size('jhgpu_allocations')"))
        return int(db), int(table.scalar_one())


def run_backend(name: str, url: str, rows: Sequence[Row], runs: int) -> dict[str, Any]:
    store = AccountingStore(url)
    try:
        store.upgrade()
        if count_rows(store):
            raise SystemExit(f"{safe_url(url)} already holds allocations: give an empty database")
        out: dict[str, Any] = {"insert_s": load_rows(store, rows)}
        if name == "postgres":
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.execute(text("ANALYZE jhgpu_allocations"))
                out["server_version"] = c.execute(text("SHOW server_version")).scalar_one()
        else:
            out["server_version"] = sqlite3.sqlite_version
        out["rows"] = count_rows(store)
        out.update(measure(store, runs))
        if name == "postgres":
            out["db_bytes"], out["table_bytes"] = postgres_bytes(store)
        else:
            out["db_bytes"] = sqlite_bytes(Path(url.removeprefix("sqlite:///")), store)
        return out
    finally:
        store.engine.dispose()


@contextmanager
def postgres(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with PostgresServer(database="accounting_bench") as server:
        yield server.url


# -- output --------------------------------------------------------------------------------


def summarise(info: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {**info}
    for name, r in results.items():
        out[f"insert_s_{name}"] = round(r["insert_s"], 2)
        runs = r["report_month_by_group_runs_s"]
        out[f"report_month_by_group_s_{name}"] = round(statistics.median(runs), 4)
        out[f"report_month_by_group_runs_s_{name}"] = [round(t, 4) for t in runs]
        out[f"intervals_month_s_{name}"] = round(r["intervals_month_s"], 4)
        out[f"aggregate_month_s_{name}"] = round(r["aggregate_month_s"], 4)
        out[f"report_year_by_group_monthly_s_{name}"] = round(
            r["report_year_by_group_monthly_s"], 3
        )
        out[f"db_bytes_{name}"] = r["db_bytes"]
        if "table_bytes" in r:
            out[f"table_bytes_{name}"] = r["table_bytes"]
        out[f"version_{name}"] = r["server_version"]
        out[f"rows_{name}"] = r["rows"]
    first = next(iter(results.values()))
    out["month_intervals"] = first["month_intervals"]
    month_rows, _ = first["_rows"]
    out["month_report"] = {
        r.keys[0]: {
            "allocations": r.allocations,
            "gpu_hours_allocated": round(r.gpu_hours_allocated, 1),
            "gpu_hours_used": round(r.gpu_hours_used, 1),
        }
        for r in month_rows
    }
    if len(results) == 2:
        a, b = (r["_rows"] for r in results.values())
        out["reports_agree"] = same_rows(a[0], b[0]) and same_rows(a[1], b[1])
    out["machine"] = {
        "cpus": os.cpu_count(),
        "loadavg_1min": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlalchemy": sqlalchemy.__version__,
    }
    return out


def print_lines(out: dict[str, Any]) -> None:
    print(
        f"{out['allocations']:,} allocations ({out['gpu_hours_allocated']:,.0f} GPU-hours, "
        f"duration x{out['duration_factor']}), {out['month_intervals']:,} in June 2025"
    )
    for name in ("sqlite", "postgres"):
        if f"insert_s_{name}" not in out:
            continue
        print(
            f"{name:9} insert {out[f'insert_s_{name}']:7.2f} s   month by group "
            f"{out[f'report_month_by_group_s_{name}'] * 1000:8.1f} ms   year by group, "
            f"monthly {out[f'report_year_by_group_monthly_s_{name}']:6.2f} s   "
            f"{out[f'db_bytes_{name}'] / 2**20:7.1f} MiB"
        )
    if "reports_agree" in out:
        print(f"reports agree: {out['reports_agree']}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--traces",
        type=Path,
        default=DEFAULT_TRACES,
        help=f"folder holding {TRACE_FILE} (default: %(default)s)",
    )
    ap.add_argument("--allocations", type=int, default=250_000, help="default: %(default)s")
    ap.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    ap.add_argument(
        "--load",
        type=float,
        default=0.6,
        help="mean share of the lab's GPUs allocated (default: %(default)s)",
    )
    ap.add_argument("--runs", type=int, default=5, help="timed monthly reports (median)")
    ap.add_argument(
        "--postgres-url",
        default=None,
        help="an empty PostgreSQL database (postgresql+psycopg://...), not a throw-away server",
    )
    ap.add_argument("--no-postgres", action="store_true", help="SQLite only")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="smallest meaningful run (seconds; the same keys): --allocations 2000 --runs 1",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        ap.set_defaults(allocations=2000, runs=1)
        args = ap.parse_args(argv)
    if args.allocations < 1 or args.runs < 1 or not 0 < args.load <= 10:
        ap.error("--allocations and --runs must be positive, --load in (0, 10]")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    trace = args.traces / TRACE_FILE
    if not trace.is_file():
        print(f"no {TRACE_FILE} under {args.traces} (see --traces)", file=sys.stderr)
        return 2
    t = time.perf_counter()
    rows, info = synthesise(load_trace(trace), args.allocations, args.seed, args.load)
    info.update(seed=args.seed, load=args.load, runs=args.runs)
    info["synthesise_s"] = round(time.perf_counter() - t, 2)
    results: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jhgpu-acct-")))
        results["sqlite"] = run_backend(
            "sqlite", f"sqlite:///{folder / 'accounting.sqlite'}", rows, args.runs
        )
        if not args.no_postgres:
            url = stack.enter_context(postgres(args.postgres_url))
            results["postgres"] = run_backend("postgres", url, rows, args.runs)
    out = summarise(info, results)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print_lines(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
