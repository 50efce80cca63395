"""The reservations API's wire format and storage (the hub's part is tested for real in
tests/integration/test_reservations.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.scheduling import Reservation
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from jupyterhub_gpu.hub.api.reservations import BadReservation, as_json, parse_reservation

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
GOOD = {"group": "ml-lab", "start": "2026-12-01T09:00+01:00", "end": "2026-12-01T18:00Z",
        "model": "NVIDIA A100-SXM4-40GB", "count": 2, "note": "exam"}  # fmt: skip


def test_a_good_body_is_a_reservation() -> None:
    r, note = parse_reservation(GOOD, "abc")
    assert r == Reservation("abc", "ml-lab", T0.timestamp(), T0.timestamp() + 10 * 3600,
                            model="NVIDIA A100-SXM4-40GB", count=2)  # fmt: skip
    assert note == "exam"
    assert as_json(r)["start"] == "2026-12-01T08:00:00+00:00"


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"start": "2026-12-01T09:00"}, "time zone"),
        ({"end": "tomorrow"}, "ISO time"),
        ({"start": "0001-01-01T00:00+01:00"}, "between 1971 and 9998"),
        ({"group": ""}, "'group'"),
        ({"group": 7}, "'group'"),
        ({"count": -1}, "whole number"),
        ({"count": True}, "whole number"),
        ({"count": 1.5}, "whole number"),
        ({"nodes": "node-c"}, "list of names"),
        ({"gpu_uuids": [""]}, "list of names"),
        ({"note": "x" * 501}, "500"),
        ({"model": ""}, "'model'"),
        ({"shell": "rm -rf /"}, "Unknown field 'shell'"),
    ],
)
def test_bad_bodies_say_what_to_fix(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(BadReservation, match=fragment):
        parse_reservation({**GOOD, **change}, "abc")


def test_not_an_object() -> None:
    with pytest.raises(BadReservation, match="JSON object"):
        parse_reservation(["x"], "abc")


def test_reservations_are_stored_listed_and_deleted(tmp_path: Path) -> None:
    store = AccountingStore(f"sqlite:///{tmp_path / 'a.sqlite'}")
    store.upgrade()
    model, _ = parse_reservation(GOOD, "r1")
    nodes = Reservation("r2", "course", T0.timestamp(), T0.timestamp() + 60,
                        nodes=frozenset({"node-c"}), gpu_uuids=frozenset({"GPU-1"}))  # fmt: skip
    store.add_reservation(model, "exam", "carol")
    store.add_reservation(nodes)
    assert store.reservations(T0) == [model, nodes]  # by start
    assert store.reservations(datetime(2026, 12, 1, 8, 5)) == [model]  # r2 is over
    assert store.delete_reservation("r2") and not store.delete_reservation("r2")
    assert store.reservations(T0) == [model]
    store.engine.dispose()
