"""Unit tests of the queue decision: order, backfill, quotas, fencing, positions."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta, timezone

import pytest

from jupyterhub_gpu.core.placement.baselines import first_fit
from jupyterhub_gpu.core.scheduling import (
    Charge,
    GroupPolicy,
    Policies,
    QueuedRequest,
    Quota,
    Reservation,
    SchedulerSettings,
    positions,
    schedule,
)
from tests.unit.test_scheduling import HOUR, NOW, RTX3090, TITANX, lab, node, req, snap, state

pytestmark = pytest.mark.unit

A = [f"GPU-a-{i}" for i in range(4)]  # RTX 3090
B = [f"GPU-b-{i}" for i in range(2)]  # TITAN X
FAIR = SchedulerSettings(weight_user_fairshare=0.0)
FIFO = SchedulerSettings.fifo()


def started(decision: object) -> dict[str, tuple[str, ...]]:
    return {s.request.id: s.placement.gpu_uuids for s in decision.starts}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "case, settings, expected",
    [
        ("fair share: the light group gets the one free GPU", FAIR, "light"),
        ("first come first served: the earlier request gets it", FIFO, "heavy"),
    ],
)
def test_the_next_gpu_goes_to_the_highest_priority(
    case: str, settings: SchedulerSettings, expected: str
) -> None:
    queue = [req("heavy", "heavy", at=NOW - 600), req("light", "light", at=NOW)]
    st = state(snap(lab(), [*A[:3], *B]), usage={"heavy": 10.0, "light": 1.0})
    decision = schedule(queue, st, settings)
    assert started(decision) == {expected: ("GPU-a-3",)}, case
    (waiting,) = decision.waiting
    assert waiting.request.id != expected
    assert "No GPU is free" in waiting.reason


@pytest.mark.parametrize(
    "case, settings, held, queue, starts, behind",
    [
        (
            "backfill: a 1-GPU request passes a blocked 2-GPU head",
            FIFO, [*A[:3], B[0]], [req("head", count=2, at=NOW - 60), req("small")],
            {"small"}, False,
        ),
        (
            "strict order: nothing passes the blocked head",
            SchedulerSettings.fifo(backfill=False), [*A[:3], B[0]],
            [req("head", count=2, at=NOW - 60), req("small")], set(), True,
        ),
        (
            "backfill never takes what the head can use: the head is placed first",
            FIFO, [*A[:3]], [req("head", models=[RTX3090], at=NOW - 60), req("any")],
            {"head", "any"}, False,
        ),
    ],
)  # fmt: skip
def test_backfill(
    case: str,
    settings: SchedulerSettings,
    held: list[str],
    queue: list[QueuedRequest],
    starts: set[str],
    behind: bool,
) -> None:
    decision = schedule(queue, state(snap(lab(), held)), settings)
    got = started(decision)
    assert set(got) == starts, case
    if "head" in got:
        assert got["head"] == ("GPU-a-3",)  # the 3090 it can use, not left to "any"
    if behind:
        assert "behind u-head's request" in decision.waiting[-1].reason


@pytest.mark.parametrize(
    "case, claims, held, expected",
    [
        # head: 4 GPUs, a has 2 free (the nearest node), b has 2 free TITAN X
        ("no claim: the 1-GPU request may take a GPU on a", 0, A[:2], "GPU-a-2"),
        ("the head claims a: the 1-GPU request goes to b", 1, A[:2], "GPU-b-0"),
        ("the head claims a and b is full: the 1-GPU request waits", 1, [*A[:2], *B], None),
    ],
)
def test_a_blocked_head_claims_the_node_nearest_to_fitting(
    case: str, claims: int, held: list[str], expected: str | None
) -> None:
    settings = SchedulerSettings(
        weight_fairshare=0, weight_user_fairshare=0, weight_admin=0, weight_age=0,
        backfill_claims=claims, claim_after_s=0,
    )  # fmt: skip
    queue = [req("head", count=4, at=NOW - 60), req("one", models=[RTX3090, TITANX])]
    decision = schedule(queue, state(snap(lab(), held)), settings, place_fn=first_fit)
    got = started(decision)
    assert got.get("one", (None,))[0] == expected, case
    assert decision.claims == ({"head": "a"} if claims else {})


def test_a_claim_waits_for_claim_after() -> None:
    settings = SchedulerSettings(backfill_claims=1, claim_after_s=HOUR)
    queue = [req("head", count=4, at=NOW - 60), req("one")]
    decision = schedule(queue, state(snap(lab(), [*A[:2], *B])), settings)
    assert decision.claims == {}
    assert set(started(decision)) == {"one"}


def test_quota_waits_block_nobody_and_starts_count_toward_the_quota() -> None:
    policies = Policies(groups={"g1": GroupPolicy(quota=Quota(max_gpus=2))})
    queue = [
        req("first", "g1", at=NOW - 30),
        req("second", "g1", at=NOW - 20),  # g1 holds 1 + first's 1 = its 2: waits
        req("other", "g2", at=NOW - 10),
    ]
    charges = {A[0]: Charge("g1", "old")}
    decision = schedule(queue, state(snap(lab(), [A[0]]), charges=charges, policies=policies), FIFO)
    assert set(started(decision)) == {"first", "other"}
    (waiting,) = decision.waiting
    assert waiting.request.id == "second" and waiting.for_quota
    assert "Group g1 holds 2 of 2 GPUs" in waiting.reason


def test_what_can_never_fit_is_refused() -> None:
    queue = [req("huge", count=8), req("fine")]
    decision = schedule(queue, state(snap(lab())), FIFO)
    assert set(started(decision)) == {"fine"}
    (refused,) = decision.refused
    assert refused.request.id == "huge"
    assert "Ask for at most 4 GPUs." in refused.reason


def test_starts_of_one_pass_never_share_a_gpu() -> None:
    queue = [req(str(i), f"g{i % 3}", count=1 + i % 2, at=NOW - i) for i in range(8)]
    decision = schedule(queue, state(snap(lab())), FAIR)
    uuids = [u for s in decision.starts for u in s.placement.gpu_uuids]
    assert len(uuids) == len(set(uuids)) == 6
    assert len(decision.starts) + len(decision.waiting) == 8


def reservation(
    group: str, gpus: list[str], start: float = NOW - HOUR, **kw: object
) -> Reservation:
    end = float(kw.pop("end", start + 4 * HOUR))  # type: ignore[arg-type]
    return Reservation(f"r-{group}", group, start, end, gpu_uuids=frozenset(gpus), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "case, reservations, queue, starts",
    [
        (
            "others' reserved GPUs look taken",
            (reservation("g2", A),), [req("x", "g1", models=[RTX3090])], {},
        ),
        (
            "a group gets its own reserved GPUs first (placement alone would pick the TITAN X)",
            (reservation("g2", A[2:]),), [req("x", "g2")], {"x": ("GPU-a-2",)},
        ),
        (
            "a model-and-count reservation fences the free GPUs first",
            (Reservation("r", "g2", NOW - 1, NOW + HOUR, model=TITANX, count=1),),
            [req("x", "g1", models=[TITANX]), req("y", "g1", models=[TITANX])],
            {"x": ("GPU-b-1",)},
        ),
        (
            "a reservation that has ended fences nothing",
            (reservation("g2", A, start=NOW - 5 * HOUR),), [req("x", "g1", models=[RTX3090])],
            {"x": ("GPU-a-0",)},
        ),
    ],
)  # fmt: skip
def test_reservations_fence_gpus(
    case: str,
    reservations: tuple[Reservation, ...],
    queue: list[QueuedRequest],
    starts: dict[str, tuple[str, ...]],
) -> None:
    decision = schedule(queue, state(snap(lab()), reservations=reservations), FIFO)
    assert started(decision) == starts, case


@pytest.mark.parametrize(
    "case, held, expected, note",
    [
        ("another free GPU: the soon-reserved one is avoided", [A[1], A[2]], "GPU-a-3", False),
        ("only the soon-reserved one is free: taken, with a warning", A[1:], "GPU-a-0", True),
    ],
)
def test_gpus_reserved_soon_are_avoided_when_possible(
    case: str, held: list[str], expected: str, note: bool
) -> None:
    soon = reservation("g2", [A[0]], start=NOW + HOUR / 2)
    st = state(snap(lab(), held), reservations=(soon,))
    decision = schedule([req("x", "g1", models=[RTX3090])], st, FIFO)
    (start,) = decision.starts
    assert start.placement.gpu_uuids == (expected,), case
    if note:
        assert start.note is not None
        assert "reserved for group g2 from 12:30 to 16:30" in start.note
        assert "stopped at 12:30" in start.note
    else:
        assert start.note is None


def test_positions_count_only_requests_competing_for_the_same_gpus() -> None:
    queue = [
        req("any", at=NOW - 40),
        req("titan", models=[TITANX], at=NOW - 30),
        req("rtx", models=[RTX3090], at=NOW - 20),
        req("rtx2", "g2", count=2, models=[RTX3090], at=NOW - 10),
    ]
    got = {p.request.id: p for p in positions(queue, state(snap(lab(), [*A, *B])), FIFO)}
    assert {k: (p.position, p.competing) for k, p in got.items()} == {
        "any": (1, 4),
        "titan": (2, 2),  # behind "any" only: the 3090 requests can't use a TITAN X
        "rtx": (2, 3),
        "rtx2": (3, 3),
    }
    assert got["titan"].kind == f"an {TITANX}"
    assert got["any"].kind == "a GPU"
    assert got["rtx2"].kind == f"2 x {RTX3090}"
    # plain words: no share numbers, no waiting time (it would change every round)
    assert got["rtx"].sentence() == f"2nd in line for an {RTX3090} (group g1)."


def test_a_request_only_one_model_can_hold_is_named_by_that_model() -> None:
    queue = [req("big", count=3)]  # only node a (4 x 3090) has 3 GPUs
    (p,) = positions(queue, state(snap((node("a", 4), node("b", 2, TITANX)))))
    assert p.kind == f"3 x {RTX3090}"


def test_the_warning_uses_the_configured_time_zone() -> None:
    soon = reservation("g2", [A[0]], start=NOW + HOUR / 2)
    settings = replace(SchedulerSettings.fifo(), timezone=timezone(timedelta(hours=2)))
    st = state(snap(lab(), A[1:]), reservations=(soon,))
    (start,) = schedule([req("x", "g1", models=[RTX3090])], st, settings).starts
    assert start.note is not None and "from 14:30 to 18:30" in start.note
