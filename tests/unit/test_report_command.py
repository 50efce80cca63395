"""``jupyterhub-gpu report`` over a real SQLite database: a scripted scenario comes out
exact to the second, in every format; bad input gets a sentence and exit status 2."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyterhub_gpu import cli as top
from jupyterhub_gpu.cli.report import run
from jupyterhub_gpu.core.accounting.records import AllocationRecord, EndReason
from jupyterhub_gpu.core.accounting.usage import GPUSample, Usage, fold
from jupyterhub_gpu.edges.accounting.store import AccountingStore

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 24, 12, 0)
UTC = timezone.utc


@pytest.fixture
def db(tmp_path: Path) -> str:
    """alice (ml): 2 A100 for 1 h 30 min 15 s at 50 %, stopped; bob (vision): 1 TITAN X for
    45 min, culled after 30 idle minutes; carol (ml): 1 A100 since 11:00, still open."""
    url = f"sqlite:///{tmp_path / 'acc.sqlite'}"
    store = AccountingStore(url)
    store.upgrade()
    t = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)
    alice = AllocationRecord("a", "alice", "", "ml", "n1", ("G1", "G2"), "A100", "pt", "12.1",
                             started_at=t)  # fmt: skip
    store.open(alice)
    u = fold(Usage(), t, [GPUSample(50, 1), GPUSample(50, 1)])
    u = fold(u, t + timedelta(minutes=5), [GPUSample(50, 1), GPUSample(50, 1)])
    store.save_usage({"a": u})
    store.close("a", t + timedelta(hours=1, minutes=30, seconds=15), EndReason.STOPPED)
    bob = AllocationRecord("b", "bob", "gpu", "vision", "n2", ("G3",), "TITAN X", "tf", "11.8",
                           started_at=t)  # fmt: skip
    store.open(bob)
    u = fold(Usage(), t, [GPUSample(90, 1)])
    u = fold(u, t + timedelta(minutes=5), [GPUSample(90, 1)])
    u = fold(u, t + timedelta(minutes=10), [GPUSample(0, 1)])
    u = fold(u, t + timedelta(minutes=15), [GPUSample(0, 1)])
    store.save_usage({"b": u})
    store.close("b", t + timedelta(minutes=45), EndReason.CULLED)
    carol = AllocationRecord("c", "carol", "", "ml", "n1", ("G4",), "A100", "pt", "12.1",
                             started_at=datetime(2026, 11, 24, 11, 0, tzinfo=UTC))  # fmt: skip
    store.open(carol)
    return url


def report_json(db: str, *args: str) -> dict:
    status, text = run(["--db", db, "--format", "json", *args], now=NOW)
    assert status == 0, text
    return json.loads(text)


def test_the_scenario_to_the_second(db: str) -> None:
    rows = report_json(db, "--by", "group,model")["rows"]
    by = {(r["group"], r["model"]): r for r in rows}
    alice_h = 2 * (1 + 30 / 60 + 15 / 3600)
    assert by[("ml", "A100")]["gpu_hours_allocated"] == pytest.approx(alice_h + 1.0, abs=1e-4)
    assert by[("ml", "A100")]["gpu_hours_used"] == pytest.approx(alice_h * 0.5, abs=1e-4)
    assert by[("ml", "A100")]["allocations"] == 2
    vision = by[("vision", "TITAN X")]
    assert vision["gpu_hours_allocated"] == pytest.approx(0.75, abs=1e-4)
    # busy until minute 5 (the last busy reading), culled at 45: 40 idle minutes reclaimed
    assert vision["reclaimed_idle_gpu_hours"] == pytest.approx(40 / 60, abs=1e-4)
    # used: 90 % over the first 5 sampled minutes, 0 % over the next 10: mean 30 %
    assert vision["efficiency"] == pytest.approx(0.3, abs=1e-4)


def test_per_day_a_user_and_the_formats(db: str) -> None:
    rows = report_json(db, "--by", "user", "--per", "day", "--user", "carol")["rows"]
    assert rows == [
        {
            "user": "carol",
            "day": "2026-11-24",
            "allocations": 1,
            "gpu_hours_allocated": 1.0,
            "gpu_hours_used": 0.0,
            "efficiency": 0.0,
            "reclaimed_idle_gpu_hours": 0.0,
        }
    ]
    status, text = run(["--db", db, "--by", "user", "--format", "csv"], now=NOW)
    assert status == 0
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [r["user"] for r in parsed] == ["alice", "bob", "carol"]
    status, text = run(["--db", db, "--by", "user"], now=NOW)
    assert status == 0 and text.splitlines()[0].split()[:3] == [
        "user",
        "allocations",
        "gpu_hours_allocated",
    ]
    assert "alice" in text and "3.01" in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--group", "nobody"],
            "No allocation of group 'nobody' was ever recorded. Known: ml, vision",
        ),
        (["--user", "x' OR '1'='1"], "No allocation of user"),
        (["--from", "2026-12-01", "--to", "2026-11-01"], "inverted"),
        (["--from", "2026-13-45"], "is not a date"),
        (["--from", "1900-01-01"], "out of range"),
        (["--by", "colour"], "Can't group by colour"),
        (["--format", "xml"], "Unknown format"),
    ],
)
def test_bad_input_gets_a_sentence(db: str, args: list[str], says: str) -> None:
    status, text = run(["--db", db, *args], now=NOW)
    assert status == 2 and says in text, text


def test_an_unreachable_database_is_named_without_its_password() -> None:
    status, text = run(["--db", "postgresql+psycopg://u:pw-secret@127.0.0.1:1/x"], now=NOW)
    assert status == 2 and "127.0.0.1:1" in text and "pw-secret" not in text, text


def test_the_top_level_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert top.main([]) == 2 and "report" in capsys.readouterr().err
    assert top.main(["--help"]) == 0
