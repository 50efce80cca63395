"""Unit tests of reservations: validation, which GPUs, fencing, conflicts."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.core.scheduling import (
    Charge,
    Conflict,
    Reservation,
    assign,
    conflicts,
    fenced,
    reserved_lines,
    validate,
)
from tests.unit.test_scheduling import HOUR, NOW, RTX3090, TITANX, lab, node, snap

pytestmark = pytest.mark.unit

A = [f"GPU-a-{i}" for i in range(4)]
B = [f"GPU-b-{i}" for i in range(2)]


def model_res(
    rid: str, count: int, start: float = NOW, hours: float = 2, **kw: object
) -> Reservation:
    model = str(kw.pop("model", RTX3090))
    group = str(kw.pop("group", "g1"))
    return Reservation(rid, group, start, start + hours * HOUR, model=model, count=count)


def gpu_res(rid: str, gpus: list[str], start: float = NOW, hours: float = 2, group: str = "g1",
            nodes: frozenset[str] = frozenset()) -> Reservation:  # fmt: skip
    return Reservation(
        rid, group, start, start + hours * HOUR, nodes=nodes, gpu_uuids=frozenset(gpus)
    )


EXISTING = (
    model_res("m3", 3, NOW, 2),  # 3 of the 4 x 3090, 12:00-14:00
    gpu_res("t0", [B[0]], NOW + HOUR, 2),  # one TITAN X, 13:00-15:00
)


@pytest.mark.parametrize(
    "case, new, words",
    [
        ("fits beside the others", model_res("new", 1, NOW, 2), None),
        ("after the others' windows", model_res("new", 4, NOW + 2 * HOUR, 1), None),
        ("the other TITAN X at the same time", gpu_res("new", [B[1]], NOW + HOUR), None),
        ("a changed reservation is not checked against itself", model_res("m3", 4, NOW, 2), None),
        ("ends before it starts", Reservation("new", "g1", NOW, NOW - 1, model=RTX3090, count=1),
         ["must end after it starts", "2026-11-24 12:00 UTC"]),
        ("both a model and GPUs", Reservation("new", "g1", NOW, NOW + 1, model=RTX3090, count=1,
                                              gpu_uuids=frozenset({A[0]})),
         ["either a GPU model and a count, or nodes and GPUs"]),
        ("nothing to reserve", Reservation("new", "g1", NOW, NOW + 1),
         ["Say what to reserve"]),
        ("an unknown node", gpu_res("new", [], nodes=frozenset({"zz"})),
         ["No node is called zz", "the nodes are a and b"]),
        ("an unknown GPU", gpu_res("new", ["GPU-zz"]), ["GPU-zz"]),
        ("a model the cluster lacks", model_res("new", 1, model="NVIDIA H100"),
         ["has no NVIDIA H100", f"it has {RTX3090} and {TITANX}"]),
        ("more GPUs of a model than exist", model_res("new", 5),
         [f"has 4 x {RTX3090} in all", "Ask for 4 or fewer"]),
        ("the same GPU in an overlapping window", gpu_res("new", [B[0]], NOW + 2 * HOUR),
         ["overlaps reservation t0 of group g1", "1 GPU of b", "another window or other GPUs"]),
        ("a whole node overlapping explicit GPUs", gpu_res("new", [], NOW + HOUR,
                                                           nodes=frozenset({"b"})),
         ["overlaps reservation t0"]),
        ("too many of a model at once", model_res("new", 2, NOW + HOUR, 2),
         ["From 2026-11-24 13:00 UTC", "reservation m3", f"would need 5 x {RTX3090}",
          "the cluster has 4"]),
        ("explicit GPUs of a model another reservation counts on", gpu_res("new", A[:2], NOW),
         [f"would need 5 x {RTX3090}"]),
    ],
)  # fmt: skip
def test_validate(case: str, new: Reservation, words: list[str] | None) -> None:
    got = validate(new, EXISTING, lab())
    if words is None:
        assert got is None, (case, got)
    else:
        assert got is not None, case
        for w in words:
            assert w in got, (case, got)


def test_capacity_is_checked_when_a_later_reservation_starts_inside_the_window() -> None:
    # 2 from 12:00 to 16:00; 2 more from 13:00; a new 1 from 11:00 to 14:00: 5 from 13:00
    existing = (model_res("x", 2, NOW, 4), model_res("y", 2, NOW + HOUR, 4))
    got = validate(model_res("new", 1, NOW - HOUR, 3), existing, lab())
    assert got is not None and "From 2026-11-24 13:00 UTC" in got


@pytest.mark.parametrize(
    "case, held, charges, count, expected",
    [
        ("free GPUs first, on the node with the most free", {"a": [A[0]]}, {}, 2, A[1:3]),
        ("then the group's own", {"a": A[:3]}, {A[1]: "g1", A[2]: "g2", A[0]: "g2"}, 2,
         [A[3], A[1]]),
        ("then others'", {"a": A}, {a: "g2" for a in A}, 2, A[:2]),
    ],
)  # fmt: skip
def test_assign_prefers_free_then_own_then_others(
    case: str, held: dict[str, list[str]], charges: dict[str, str], count: int, expected: list[str]
) -> None:
    uuids = [u for us in held.values() for u in us]
    r = model_res("r", count)
    got = assign([r], snap(lab(), uuids), {u: Charge(g, "x") for u, g in charges.items()}, NOW)
    assert got == {"r": tuple(expected)}, case


def test_assign_packs_onto_the_node_with_the_most_free_gpus() -> None:
    nodes = (node("a", 4), node("c", 4))
    # a has 1 free, c has 3 free: two GPUs come from c
    got = assign(
        [model_res("r", 2)], snap(nodes, ["GPU-a-0", "GPU-a-1", "GPU-a-2", "GPU-c-0"]), {}, NOW
    )
    assert got == {"r": ("GPU-c-1", "GPU-c-2")}


def test_explicit_reservations_keep_their_gpus_and_others_avoid_them() -> None:
    rs = [gpu_res("e", [A[0], A[1]], group="g2"), model_res("m", 2)]
    got = assign(rs, snap(lab()), {}, NOW + 1)
    assert got == {"e": (A[0], A[1]), "m": (A[2], A[3])}
    assert assign(rs, snap(lab()), {}, NOW + 3 * HOUR) == {}  # both over
    assert fenced(rs, got, "g1") == {A[0], A[1]}
    assert fenced(rs, got, "g2") == {A[2], A[3]}
    assert fenced(rs, got, "g3") == set(A)


def test_a_whole_node_reservation_takes_every_gpu_of_the_node() -> None:
    r = gpu_res("n", [], nodes=frozenset({"b"}))
    assert assign([r], snap(lab()), {}, NOW) == {"n": tuple(B)}


def test_conflicts_warn_before_and_stop_at_the_start() -> None:
    upcoming = gpu_res("soon", [A[0]], NOW + HOUR, group="g2")
    later = gpu_res("later", [A[1]], NOW + 5 * HOUR, group="g2")
    active = gpu_res("now", [B[0], B[1]], NOW - HOUR, group="g2")
    held = {A[0]: "ann/", A[1]: "ben/", B[0]: "cid/", B[1]: "dan/"}
    charges = {
        A[0]: Charge("g1", "ann"),
        A[1]: Charge("g1", "ben"),
        B[0]: Charge("g2", "cid"),  # the reservation's own group: no conflict
        # B[1]: no charge (an admin's hold): a conflict too
    }
    got = conflicts([upcoming, later, active], snap(lab(), held), charges, NOW, 2 * HOUR)
    assert [(c.reservation.id, c.holder, c.gpu_uuids, c.stop_now) for c in got] == [
        ("now", "dan/", (B[1],), True),
        ("soon", "ann/", (A[0],), False),
    ]
    assert got[0].sentence(NOW) == "Stopped: its GPU is reserved for group g2 until 13:00."
    assert got[1].sentence(NOW) == (
        "Its GPU is reserved for group g2 from 13:00 to 15:00: this server will be stopped "
        "at 13:00. Save your work before then."
    )


def test_the_spawn_page_notice_and_the_note_after_the_stop() -> None:
    """What a server placed on soon-reserved GPUs is told, and why it ended (the form)."""
    one = Conflict(gpu_res("soon", [A[0]], NOW + HOUR, group="g2"), "ann/", (A[0],), False)
    assert one.notice(NOW) == (
        "This GPU is reserved for group g2 from 13:00 to 15:00 UTC: your server will be "
        "stopped at 13:00. Save your work before then."
    )
    paris = ZoneInfo("Europe/Paris")
    assert "from 14:00 to 16:00 CET: your server will be stopped at 14:00." in one.notice(
        NOW, paris
    )
    tomorrow = gpu_res("t", A[:2], NOW + 20 * HOUR, group="g2")
    two = Conflict(tomorrow, "ann/", (A[0], A[1]), False)
    assert two.notice(NOW) == (
        "These GPUs are reserved for group g2 from Wed 25 Nov 08:00 to Wed 25 Nov 10:00 UTC: "
        "your server will be stopped at Wed 25 Nov 08:00. Save your work before then."
    )
    at = datetime(2026, 11, 24, 13, 0, 30, tzinfo=timezone.utc).timestamp()
    assert one.stopped_note("big", at) == (
        "Your server 'big' was stopped at 2026-11-24 13:00 UTC: its GPU is reserved for "
        "group g2 until 2026-11-24 15:00 UTC."
    )
    assert two.stopped_note("", at).startswith("Your server was stopped at 2026-11-24 13:00")
    assert "its GPUs are reserved for group g2 until 2026-11-25 10:00 UTC." in two.stopped_note(
        "", at
    )


@pytest.mark.parametrize(
    "case, reservation, horizon_h, line",
    [
        ("a model and count, soon", model_res("m", 2, NOW + HOUR, group="g2"), 24,
         f"2 x {RTX3090} (likely on a) for group g2, 13:00 to 15:00 UTC"),
        ("a model and count, now", model_res("m", 1, NOW - HOUR, group="g2"), 24,
         f"1 x {RTX3090} (on a) for group g2, now until 13:00 UTC"),
        ("a whole node, now", gpu_res("n", [], NOW - HOUR, group="g3", nodes=frozenset({"b"})),
         24, "all GPUs of b for group g3, now until 13:00 UTC"),
        ("one GPU", gpu_res("g", [A[3]], NOW + 2 * HOUR, group="g2"), 24,
         "GPU 3 of a for group g2, 14:00 to 16:00 UTC"),
        ("GPUs and a node", gpu_res("x", A[:2], NOW + HOUR, group="g2", nodes=frozenset({"b"})),
         24, "all GPUs of b and GPUs 0 and 1 of a for group g2, 13:00 to 15:00 UTC"),
        ("tomorrow, within the horizon", gpu_res("t", [A[0]], NOW + 20 * HOUR, group="g2"), 24,
         "GPU 0 of a for group g2, Wed 25 Nov 08:00 to Wed 25 Nov 10:00 UTC"),
        ("past the horizon", gpu_res("far", [A[0]], NOW + 30 * HOUR, group="g2"), 24, None),
        ("the horizon is a setting", gpu_res("far", [A[0]], NOW + 30 * HOUR, group="g2"), 48,
         "GPU 0 of a for group g2, Wed 25 Nov 18:00 to Wed 25 Nov 20:00 UTC"),
        ("over already", gpu_res("old", [A[0]], NOW - 3 * HOUR, group="g2"), 24, None),
        ("the user's own group", gpu_res("own", [A[0]], NOW + HOUR, group="g1"), 24, None),
        ("another group the user may charge", gpu_res("o", [A[0]], NOW, group="g4"), 24, None),
    ],
)  # fmt: skip
def test_the_form_lists_other_groups_reservations_now_and_soon(
    case: str, reservation: Reservation, horizon_h: float, line: str | None
) -> None:
    """For a user who may charge g1 or g4: the reservations that keep GPUs from them."""
    held = {A[0]: "ann/", A[1]: "ann/"}  # a model-and-count one prefers the free A[2], A[3]
    got = reserved_lines([reservation], snap(lab(), held), {}, {"g1", "g4"}, NOW, horizon_h * HOUR)
    assert got == ([line] if line else []), case


def test_the_form_lists_reservations_in_start_order() -> None:
    later = gpu_res("later", [A[1]], NOW + 3 * HOUR, group="g2")
    now = gpu_res("now", [B[0]], NOW - HOUR, group="g3")
    got = reserved_lines([later, now], snap(lab()), {}, {"g1"}, NOW, 24 * HOUR)
    assert [line.split(" for group ")[1][:2] for line in got] == ["g3", "g2"]


def test_a_running_server_is_told_in_its_owners_words() -> None:
    from jupyterhub_gpu.core.scheduling.reservations import Conflict

    r = Reservation("r1", "course", NOW + 1800, NOW + 7200, nodes=frozenset({"a"}))
    one = Conflict(r, "alice/big", ("GPU-1",), stop_now=False)
    two = Conflict(r, "alice/", ("GPU-1", "GPU-2"), stop_now=False)
    assert one.running_notice("big", NOW) == (
        "Your server 'big' is on a GPU reserved for group course from 12:30 to 14:00 UTC: "
        "it will be stopped at 12:30. Save your work before then."
    )
    assert two.running_notice("", NOW).startswith("Your default server is on GPUs reserved")
