"""Unit tests of start estimates from known releases."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.core.scheduling import Release, Reservation, SchedulerSettings, estimates
from tests.unit.test_scheduling import HOUR, NOW, RTX3090, TITANX, lab, req, snap, state

pytestmark = pytest.mark.unit

A = [f"GPU-a-{i}" for i in range(4)]
B = [f"GPU-b-{i}" for i in range(2)]
FIFO = SchedulerSettings.fifo()
FULL = {**{u: f"h-{u}/" for u in A}, **{u: f"h-{u}/" for u in B}}


def rel(uuid: str, minutes: float, why: str) -> Release:
    return Release(uuid.split("-")[1], (uuid,), NOW + minutes * 60, why)


RELEASES = [
    rel(A[0], 20, "bob's server reaches its idle limit"),
    rel(A[1], 50, "eve's server reaches its age limit"),
    rel(B[0], 10, "ann's server reaches its idle limit"),
]


@pytest.mark.parametrize(
    "case, queue, expected",
    [
        (
            "first in line gets the first release it can use, second the next one",
            [req("one", models=[RTX3090], at=NOW - 20), req("two", models=[RTX3090])],
            {"one": (20, "bob's"), "two": (50, "eve's")},
        ),
        (
            "a TITAN X request is not delayed by 3090 requests ahead of it",
            [req("one", models=[RTX3090], at=NOW - 20), req("t", models=[TITANX])],
            {"one": (20, "bob's"), "t": (10, "ann's")},
        ),
        (
            "two GPUs on one node: the later of the two releases",
            [req("pair", count=2)],
            {"pair": (50, "eve's")},
        ),
        (
            "nothing known frees enough: no estimate",
            [req("four", count=4)],
            {"four": (None, None)},
        ),
    ],
)
def test_estimates(
    case: str, queue: list, expected: dict[str, tuple[float | None, str | None]]
) -> None:
    got = estimates(queue, state(snap(lab(), FULL)), RELEASES, FIFO)
    for rid, (minutes, who) in expected.items():
        e = got[rid]
        if minutes is None:
            assert e.at is None and e.why is None, case
        else:
            assert e.at == NOW + minutes * 60, case
            assert e.why is not None and who is not None and e.why.startswith(who), case


def test_a_request_that_fits_now_starts_at_the_next_round() -> None:
    got = estimates([req("x")], state(snap(lab())), [], FIFO)
    assert got["x"].at == NOW
    assert got["x"].sentence(NOW) == "It should start at the next scheduling round."


def test_a_reservation_end_frees_its_gpus() -> None:
    res = Reservation("r", "g2", NOW - HOUR, NOW + 2 * HOUR, gpu_uuids=frozenset(B))
    queue = [req("t", "g1", models=[TITANX])]
    got = estimates(queue, state(snap(lab()), reservations=(res,)), [], FIFO)
    assert got["t"].at == NOW + 2 * HOUR
    assert got["t"].why == "group g2's reservation ends"


def test_a_release_of_a_gpu_someone_else_took_meanwhile_frees_nothing() -> None:
    # the A[0] release is for its holder now; "one" takes it at 20 min; a second release
    # of A[0] listed later (the old holder's) must not free it again for "two"
    releases = [*RELEASES[:1], rel(A[0], 30, "stale")]
    queue = [req("one", models=[RTX3090], at=NOW - 20), req("two", models=[RTX3090])]
    got = estimates(queue, state(snap(lab(), FULL)), releases, FIFO)
    assert got["two"].at is None


def test_sentences() -> None:
    got = estimates([req("one", models=[RTX3090]), req("four", count=4)],
                    state(snap(lab(), FULL)), RELEASES, FIFO)  # fmt: skip
    assert got["one"].sentence(NOW) == (
        f"An {RTX3090} is expected to free up by about 12:20 UTC (bob's server reaches its "
        "idle limit)."
    )
    paris = ZoneInfo("Europe/Paris")  # the time is said in the hub's zone, with its name
    assert "by about 13:20 CET (" in got["one"].sentence(NOW, paris)
    assert got["four"].sentence(NOW) == (
        f"There is no estimate yet: nothing the hub knows of (idle limits, age limits, "
        f"reservations) frees 4 x {RTX3090} for this server."
    )


def test_estimates_follow_the_fair_share_order() -> None:
    queue = [req("heavy", "heavy", at=NOW - 60), req("light", "light")]
    st = state(snap(lab(), FULL), usage={"heavy": 10.0, "light": 0.0})
    got = estimates(queue, st, RELEASES[:2], SchedulerSettings())
    assert (got["light"].at, got["heavy"].at) == (NOW + 20 * 60, NOW + 50 * 60)
