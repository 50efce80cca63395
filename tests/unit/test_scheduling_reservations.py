"""Unit tests of reservations: validation, which GPUs, fencing, conflicts (share holders
included, issue 26)."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.core.placement import Placement, PlacementRequest, place
from jupyterhub_gpu.core.scheduling import (
    Charge,
    ClusterState,
    Conflict,
    Decision,
    QueuedRequest,
    Reservation,
    assign,
    conflicts,
    fenced,
    reserved_lines,
    schedule,
    validate,
)
from jupyterhub_gpu.core.sharing import parse_policy
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
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


# -- shares (issue 26): a share holder is a holder ------------------------------------------

SHARES_OF = {A[0]: 2, A[1]: 1}  # parts held on each shared GPU
SHARED_CHARGES = {
    f"{A[0]}#ann/": Charge("g1", "ann", 0.25),
    f"{A[0]}#eve/": Charge("g2", "eve", 0.25),  # the reservation's own group: kept
    f"{A[1]}#cid/": Charge("", "cid", 0.25),  # charged to no group: another group's
}


def shared_snap(whole: dict[str, str] | None = None, marked: bool = True) -> ClusterSnapshot:
    """lab() with A[0] and A[1] held by shares (``marked``: as SHARED in the allocations,
    as the ledger has them; else only in ``shares``) and ``whole`` held whole."""
    alloc = {u: SHARED for u in SHARES_OF} if marked else {}
    return ClusterSnapshot(lab(), {**alloc, **(whole or {})}, shares=dict(SHARES_OF))


@pytest.mark.parametrize("marked", [True, False])
@pytest.mark.parametrize(
    "case, start, stop_now",
    [("active: stopped now", NOW - HOUR, True), ("within the horizon: warned", NOW + HOUR, False)],
)
def test_share_holders_of_other_groups_are_stopped_or_warned_like_whole_holders(
    case: str, start: float, stop_now: bool, marked: bool
) -> None:
    """A[0] and A[1] are reserved for g2; on them ann (g1) and cid (no group) hold shares,
    eve (g2) holds one too, dan (g1) holds A[2] whole, outside the reservation."""
    r = gpu_res("r", A[:2], start, group="g2")
    charges = {**SHARED_CHARGES, A[2]: Charge("g1", "dan")}
    snapshot = shared_snap({A[2]: "dan/"}, marked)
    got = conflicts([r], snapshot, charges, NOW, 2 * HOUR)
    assert [(c.holder, c.gpu_uuids, c.stop_now) for c in got] == [
        ("ann/", (A[0],), stop_now),
        ("cid/", (A[1],), stop_now),
    ], case
    assert got[0].sentence(NOW).startswith("Stopped: its GPU is" if stop_now else "Its GPU is")


def test_a_reserved_gpu_shared_by_the_reservation_s_own_group_is_no_conflict() -> None:
    r = gpu_res("r", [A[0]], NOW - HOUR, group="g1")
    charges = {f"{A[0]}#ann/": Charge("g1", "ann", 0.5), f"{A[0]}#bo/": Charge("g1", "bo", 0.5)}
    snapshot = ClusterSnapshot(lab(), {A[0]: SHARED}, shares={A[0]: 2})
    assert conflicts([r], snapshot, charges, NOW, 2 * HOUR) == []


@pytest.mark.parametrize("marked", [True, False])
@pytest.mark.parametrize(
    "count, expected",
    [
        (1, [A[3]]),  # the free GPU
        (2, [A[3], A[2]]),  # then the one only g1's shares are on (its own)
        (4, [A[3], A[2], A[0], A[1]]),  # then others': shared by g2 (A[0]), held whole (A[1])
    ],
)
def test_assign_treats_a_shared_gpu_as_held_by_its_share_holders_groups(
    count: int, expected: list[str], marked: bool
) -> None:
    """A[0] is shared by g1 and g2 (others' for g1), A[1] held whole by g2, A[2] shared by
    g1 alone, A[3] free: a shared GPU is never taken as free."""
    alloc = {A[0]: SHARED, A[2]: SHARED} if marked else {}
    snapshot = ClusterSnapshot(lab(), {**alloc, A[1]: "bob/"}, shares={A[0]: 2, A[2]: 1})
    charges = {
        f"{A[0]}#ann/": Charge("g1", "ann", 0.25),
        f"{A[0]}#eve/": Charge("g2", "eve", 0.25),
        A[1]: Charge("g2", "bob"),
        f"{A[2]}#cid/": Charge("g1", "cid", 0.25),
    }
    got = assign([model_res("r", count, group="g1")], snapshot, charges, NOW)
    assert got == {"r": tuple(expected)}


def test_assign_prefers_the_node_whose_gpus_are_free_over_one_whose_gpu_is_shared() -> None:
    nodes = (node("a", 1), node("c", 1))
    snapshot = ClusterSnapshot(nodes, {}, shares={"GPU-a-0": 1})  # a's GPU: a share on it
    charges = {"GPU-a-0#ann/": Charge("g1", "ann", 0.25)}
    r = model_res("r", 1, NOW + HOUR, group="g2")
    assert assign([r], snapshot, charges, NOW + HOUR) == {"r": ("GPU-c-0",)}
    assert reserved_lines([r], snapshot, charges, {"g1"}, NOW, 24 * HOUR) == [
        f"1 x {RTX3090} (likely on c) for group g2, 13:00 to 15:00 UTC"
    ]


def test_the_form_lists_a_reservation_on_shared_gpus_like_any_other() -> None:
    r = gpu_res("r", A[:2], NOW - HOUR, group="g2")
    got = reserved_lines([r], shared_snap(), SHARED_CHARGES, {"g1"}, NOW, 24 * HOUR)
    assert got == ["GPUs 0 and 1 of a for group g2, now until 13:00 UTC"]


SHARING = parse_policy({RTX3090: {"shares": 4}}, {})


def test_an_active_reservation_keeps_new_shares_of_other_groups_off_its_gpus() -> None:
    """Node a's A[0] is shared (1 part, g2's), the other 3090s are held whole: only A[0]
    could take a share. It is reserved for g2 now: a g1 share waits, a g2 share joins."""
    whole = {u: "x/" for u in A[1:]}
    snapshot = ClusterSnapshot(lab(), {A[0]: SHARED, **whole}, shares={A[0]: 1}, sharing=SHARING)
    charges = {f"{A[0]}#eve/": Charge("g2", "eve", 0.25)}
    rs = (gpu_res("r", [A[0]], NOW - HOUR, group="g2"),)

    def decide(group: str, now: float = NOW) -> Decision:
        item = QueuedRequest("s", "s", group, PlacementRequest(1, shares=1,
                             allowed_models=frozenset({RTX3090})), now)  # fmt: skip
        return schedule([item], ClusterState(snapshot, now, charges=charges, reservations=rs))

    assert decide("g1").starts == ()
    assert [s.placement.gpu_uuids for s in decide("g2").starts] == [(A[0],)]
    # once the reservation is over, the g1 share joins too
    assert [s.placement.gpu_uuids for s in decide("g1", NOW + 2 * HOUR).starts] == [(A[0],)]


def test_fencing_outside_the_queue_hides_a_shared_gpu_from_new_shares() -> None:
    """What a spawn placed at once (no queue) sees: a free or shared fenced GPU is taken,
    a whole hold keeps its holder."""
    from jupyterhub_gpu.core.scheduling.reservations import hide  # new with this test

    snapshot = ClusterSnapshot(
        lab(), {A[0]: SHARED, A[1]: "bob/"}, shares={A[0]: 1}, sharing=SHARING
    )
    seen = hide(snapshot, {A[0], A[1], A[2]})
    assert {u: seen.allocations.get(u) for u in A} == {
        A[0]: "reserved",
        A[1]: "bob/",
        A[2]: "reserved",
        A[3]: None,
    }
    assert snapshot.allocations == {A[0]: SHARED, A[1]: "bob/"}  # the original is kept
    share = PlacementRequest(1, shares=1, allowed_models=frozenset({RTX3090}))
    got = place(seen, share)
    assert isinstance(got, Placement) and got.gpu_uuids == (A[3],)
    assert hide(snapshot, ()) is snapshot
