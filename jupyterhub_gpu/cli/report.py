"""``jupyterhub-gpu report``: GPU-hours allocated and used, from the accounting database.

    jupyterhub-gpu report [--db URL] [--from DATE] [--to DATE] [--by group,model,kind]
                          [--per day|week|month] [--user NAME] [--group NAME]
                          [--format table|csv|json]

The database URL is ``--db``, else ``$JUPYTERHUB_GPU_ACCOUNTING_URL``, else the hub's
default ``sqlite:///jupyterhub-gpu-accounting.sqlite`` (run it in the hub's directory).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone

from jupyterhub_gpu.core.accounting.query import parse_format, parse_query, render
from jupyterhub_gpu.core.accounting.report import ReportError, report
from jupyterhub_gpu.edges.accounting.store import (
    DEFAULT_URL,
    AccountingStore,
    AccountingUnavailable,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu report",
        description="GPU-hours allocated and used (utilisation-weighted), grouped and by "
        "period, with efficiency (used/allocated) and the idle GPU-hours the culler "
        "reclaimed. Times are UTC.",
    )
    p.add_argument("--db", help="accounting database URL (see the command's help)")
    p.add_argument("--from", dest="start", help="start, YYYY-MM-DD[THH:MM] (default: 1st)")
    p.add_argument("--to", dest="end", help="end (exclusive), default: now")
    p.add_argument("--by", default="group", help="user, group, model, node, kind (comma separated)")
    p.add_argument("--per", choices=("day", "week", "month"), help="one row per period")
    p.add_argument("--user", help="only this user's allocations")
    p.add_argument("--group", help="only this group's allocations")
    p.add_argument("--format", default="table", help="table, csv or json")
    return p


def run(argv: list[str], now: datetime | None = None) -> tuple[int, str]:
    """(exit status, text to print): the whole command, without touching stdout."""
    args = build_parser().parse_args(argv)
    now = now or datetime.now(timezone.utc).replace(tzinfo=None)
    url = args.db or os.environ.get("JUPYTERHUB_GPU_ACCOUNTING_URL") or DEFAULT_URL
    params = {
        k: v
        for k, v in {
            "from": args.start,
            "to": args.end,
            "by": args.by,
            "per": args.per,
            "user": args.user,
            "group": args.group,
        }.items()
        if v is not None
    }
    try:
        fmt = parse_format(args.format)
        query = parse_query(params, now)
        store = AccountingStore(url)
        store.require_schema()
        for column, value in (("user", query.user), ("group", query.group)):
            if value is not None and not store.known(column, value):
                names = store.names(column)
                listed = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")
                raise ReportError(
                    f"No allocation of {column} {value!r} was ever recorded. Known: "
                    f"{listed or 'none yet'}."
                )
        rows = report(store.intervals(query.start, query.end, query.user, query.group), query, now)
    except (ReportError, AccountingUnavailable) as e:
        return 2, f"jupyterhub-gpu report: {e}"
    return 0, render(rows, query, fmt)


def main(argv: list[str] | None = None) -> int:
    status, text = run(sys.argv[1:] if argv is None else argv)
    print(text, file=sys.stderr if status else sys.stdout)
    return status
