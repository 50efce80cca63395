"""Report requests from text (the command's options, the API's query string) and the
report's output formats (pure). One parser for both, so they refuse the same things with
the same sentences."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jupyterhub_gpu.core.accounting.report import (
    ReportQuery,
    ReportRow,
    validate_query,
)
from jupyterhub_gpu.errors import ReportError

FORMATS = ("table", "csv", "json")
_DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M")
_MAX_TEXT = 200
_NUMBERS = (
    "allocations",
    "gpu_hours_allocated",
    "gpu_hours_used",
    "efficiency",
    "reclaimed_idle_gpu_hours",
)


def parse_time(name: str, text: str) -> datetime:
    """A date or date-time (UTC), or :class:`ReportError` naming the option."""
    text = text.strip()
    if len(text) <= 32:
        for fmt in _DATE_FORMATS:
            try:
                return datetime.strptime(text, fmt)
            except ValueError:
                continue
    raise ReportError(
        f"{name} {text[:40]!r} is not a date: use YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)."
    )


def parse_query(params: Mapping[str, str], now: datetime) -> ReportQuery:
    """``from``, ``to`` (default: the current month so far), ``by`` (comma separated, of
    user, group, model, node; default group), ``per`` (day, week, month; default none),
    ``user``, ``group``. Unknown parameters are refused by name."""
    unknown = sorted(set(params) - {"from", "to", "by", "per", "user", "group", "format"})
    if unknown:
        raise ReportError(
            f"Unknown parameter {unknown[0]!r}: use from, to, by, per, user, group, format."
        )
    for key, value in params.items():
        if len(value) > _MAX_TEXT or any(ord(ch) < 32 for ch in value):
            raise ReportError(f"The value of {key} is too long or has control characters.")
    start = (
        parse_time("from", params["from"])
        if params.get("from")
        else now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    )
    end = parse_time("to", params["to"]) if params.get("to") else now
    by = tuple(b.strip() for b in params.get("by", "group").split(",") if b.strip())
    per = params.get("per") or None
    query = ReportQuery(
        start=start,
        end=end,
        by=by,
        bucket=per,
        user=params.get("user") or None,
        group=params.get("group") if params.get("group") is not None else None,
    )
    return validate_query(query, now)


def parse_format(text: str | None) -> str:
    fmt = text or "table"
    if fmt not in FORMATS:
        raise ReportError(f"Unknown format {fmt[:20]!r}: choose one of {', '.join(FORMATS)}.")
    return fmt


def as_dicts(rows: Sequence[ReportRow], query: ReportQuery) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        item: dict[str, Any] = dict(zip(query.by, r.keys, strict=True))
        if query.bucket:
            item[query.bucket] = r.bucket.date().isoformat() if r.bucket else None
        item.update(
            allocations=r.allocations,
            gpu_hours_allocated=round(r.gpu_hours_allocated, 4),
            gpu_hours_used=round(r.gpu_hours_used, 4),
            efficiency=None if r.efficiency is None else round(r.efficiency, 4),
            reclaimed_idle_gpu_hours=round(r.reclaimed_idle_gpu_hours, 4),
        )
        out.append(item)
    return out


def render(rows: Sequence[ReportRow], query: ReportQuery, fmt: str) -> str:
    """The report as a table for people, CSV for spreadsheets or JSON for programs."""
    items = as_dicts(rows, query)
    columns = [*query.by, *([query.bucket] if query.bucket else []), *_NUMBERS]
    if fmt == "json":
        return json.dumps(
            {
                "from": query.start.isoformat(),
                "to": query.end.isoformat(),
                "by": list(query.by),
                "per": query.bucket,
                "rows": items,
            },
            indent=2,
        )
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, columns, lineterminator="\n")
        writer.writeheader()
        for item in items:  # a cell starting with = + - @ is not a formula in a spreadsheet
            writer.writerow({k: _csv_safe(v) for k, v in item.items()})
        return buf.getvalue()
    cells = [[_cell(item[c]) for c in columns] for item in items]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    if not items:
        lines.append("(no allocations in this period)")
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return "".join(ch if ch.isprintable() else "?" for ch in str(value))


def _csv_safe(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value
