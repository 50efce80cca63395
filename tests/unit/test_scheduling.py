"""Unit tests of the queue's pure parts: fair share, priority order, quotas, wording.

The builders at the top are shared with the other ``test_scheduling_*`` files.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement import PlacementRequest
from jupyterhub_gpu.core.scheduling import (
    Allowed,
    Charge,
    ClusterState,
    GroupPolicy,
    Holdings,
    Policies,
    QueuedRequest,
    Quota,
    Refuse,
    SchedulerSettings,
    UsageItem,
    UsageTotals,
    Wait,
    advance,
    check_quota,
    decayed_usage,
    factor,
    group_standings,
    holdings_of,
    never_fits,
    prioritise,
)
from jupyterhub_gpu.core.scheduling.fairshare import decay
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.words import article, duration, ordinal

pytestmark = pytest.mark.unit

RTX3090 = "NVIDIA GeForce RTX 3090"
TITANX = "NVIDIA TITAN X (Pascal)"
A100 = "NVIDIA A100-SXM4-80GB"
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc).timestamp()
HOUR = 3600.0

# -- builders (shared) ---------------------------------------------------------------------


def node(name: str, n: int, model: str = RTX3090, schedulable: bool = True) -> NodeState:
    """``n`` GPUs of ``model``: ``GPU-<name>-<i>``."""
    mem, cc = {RTX3090: (24576, (8, 6)), TITANX: (12288, (6, 1)), A100: (81920, (8, 0))}[model]
    gpus = tuple(
        GPU(uuid=f"GPU-{name}-{i}", index=i, model=model, memory_mib=mem, compute_capability=cc)
        for i in range(n)
    )
    inv = NodeInventory(name=name, driver_version="550.54.15", gpus=gpus)
    return NodeState(inv, schedulable=schedulable)


def lab() -> tuple[NodeState, ...]:
    """``a``: 4 x RTX 3090, ``b``: 2 x TITAN X."""
    return (node("a", 4), node("b", 2, TITANX))


def snap(
    nodes: Iterable[NodeState], held: Mapping[str, str] | Iterable[str] = ()
) -> ClusterSnapshot:
    alloc = dict(held) if isinstance(held, Mapping) else {u: "someone/" for u in held}
    return ClusterSnapshot(tuple(nodes), alloc)


def req(
    rid: str,
    group: str = "g1",
    count: int = 1,
    models: Iterable[str] | None = None,
    at: float = NOW,
    user: str | None = None,
) -> QueuedRequest:
    allowed = frozenset(models) if models is not None else None
    return QueuedRequest(
        rid, user or f"u-{rid}", group, PlacementRequest(count, allowed_models=allowed), at
    )


def state(
    snapshot: ClusterSnapshot,
    now: float = NOW,
    charges: Mapping[str, Charge] | None = None,
    policies: Policies | None = None,
    usage: Mapping[str, float] | None = None,
    **kw: object,
) -> ClusterState:
    totals = UsageTotals(now, dict(usage)) if usage is not None else None
    return ClusterState(
        snapshot,
        now,
        dict(charges or {}),
        policies or Policies(),
        usage=totals,
        **kw,  # type: ignore[arg-type]
    )


# -- fair share ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "elapsed, half_life, expected",
    [(0, 10, 1.0), (10, 10, 0.5), (20, 10, 0.25), (-5, 10, 1.0), (5, 10, 2**-0.5)],
)
def test_decay_halves_every_half_life(elapsed: float, half_life: float, expected: float) -> None:
    assert decay(elapsed, half_life) == pytest.approx(expected)


@pytest.mark.parametrize(
    "usage, share, expected",
    [
        (0.0, 0.5, 1.0),  # used nothing
        (0.5, 0.5, 0.5),  # used exactly its share
        (1.0, 0.5, 0.25),  # used twice its share
        (0.2, 0.0, 0.0),  # no shares, some use
        (0.0, 0.0, 1.0),  # no shares, no use
    ],
)
def test_fairshare_factor(usage: float, share: float, expected: float) -> None:
    assert factor(usage, share) == pytest.approx(expected)


def test_decayed_usage_weights_models_and_decays_by_end_time() -> None:
    settings = SchedulerSettings(half_life_s=10 * HOUR, model_weights={A100: 2.0, TITANX: 0.5})
    items = [
        UsageItem("g1", "alice", A100, 10.0, NOW),  # 10 h x 2
        UsageItem("g1", "bob", TITANX, 10.0, NOW - 10 * HOUR),  # 10 h x 0.5, one half-life ago
        UsageItem("g2", "carol", RTX3090, 4.0, NOW + HOUR),  # ends "later": counts as now
    ]
    totals = decayed_usage(items, NOW, settings)
    assert totals.groups == pytest.approx({"g1": 22.5, "g2": 4.0})
    assert totals.users == pytest.approx(
        {("g1", "alice"): 20.0, ("g1", "bob"): 2.5, ("g2", "carol"): 4.0}
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_advancing_totals_equals_recomputing_the_history(seed: int) -> None:
    rng = random.Random(seed)
    settings = SchedulerSettings(half_life_s=5 * HOUR, model_weights={A100: 3.0})
    items = sorted(
        (
            UsageItem(rng.choice("xyz"), rng.choice("pq"), rng.choice([A100, TITANX]),
                      rng.uniform(0, 8), NOW + rng.uniform(0, 50 * HOUR))
            for _ in range(40)
        ),
        key=lambda i: i.ended_at,
    )  # fmt: skip
    totals = UsageTotals(NOW)
    for item in items:
        totals = advance(totals, [item], item.ended_at, settings)
    end = items[-1].ended_at + 3 * HOUR
    totals = advance(totals, [], end, settings)
    whole = decayed_usage(items, end, settings)
    assert totals.groups == pytest.approx(whole.groups)
    assert totals.users == pytest.approx(whole.users)


def test_usage_totals_do_not_go_back_in_time() -> None:
    with pytest.raises(ValueError, match="can't go back"):
        advance(UsageTotals(NOW), [], NOW - 1, SchedulerSettings())


@pytest.mark.parametrize(
    "usage, shares, expected",
    [
        # equal shares: g1 used 3/4 of all, g2 1/4, g3 nothing (configured)
        ({"g1": 3.0, "g2": 1.0}, {}, {"g1": 2 ** (-0.75 * 3), "g2": 2 ** (-0.25 * 3), "g3": 1.0}),
        # g1 has 3 of 5 shares: using 3/4 of all is close to its part
        ({"g1": 3.0, "g2": 1.0}, {"g1": 3.0}, {"g1": 2 ** (-0.75 / 0.6), "g2": 2 ** (-0.25 / 0.2)}),
        ({}, {}, {"g1": 1.0, "g2": 1.0, "g3": 1.0}),  # no history: everyone 1
    ],
)
def test_group_standings(
    usage: dict[str, float], shares: dict[str, float], expected: dict[str, float]
) -> None:
    names = ["g1", "g2", "g3"]
    policies = Policies(groups={g: GroupPolicy(shares=shares.get(g, 1.0)) for g in names})
    got = group_standings(UsageTotals(NOW, usage), policies, ())
    for g, f in expected.items():
        assert got[g].factor == pytest.approx(f), g
    assert sum(s.share for s in got.values()) == pytest.approx(1.0)


FAIR = SchedulerSettings(weight_user_fairshare=0.0, max_age_s=10 * HOUR)


@pytest.mark.parametrize(
    "case, settings, policies, usage, queue, expected",
    [
        (
            "the group that used less goes first, though it came later",
            FAIR, Policies(), {"heavy": 9.0, "light": 1.0},
            [req("h", "heavy", at=NOW - HOUR), req("l", "light", at=NOW)], ["l", "h"],
        ),
        (
            "a long wait overtakes the fair-share gap (age saturates at max_age)",
            FAIR, Policies(), {"heavy": 9.0, "light": 1.0},
            [req("h", "heavy", at=NOW - 10 * HOUR), req("l", "light", at=NOW)], ["h", "l"],
        ),
        (
            "with the age cap, two long waits are ordered by fair share",
            SchedulerSettings(max_age_s=HOUR), Policies(), {"heavy": 9.0, "light": 1.0},
            [req("h", "heavy", at=NOW - 20 * HOUR), req("l", "light", at=NOW - 2 * HOUR)],
            ["l", "h"],
        ),
        (
            "without it, the longer wait wins",
            SchedulerSettings(max_age_s=HOUR, age_cap=None), Policies(),
            {"heavy": 9.0, "light": 1.0},
            [req("h", "heavy", at=NOW - 20 * HOUR), req("l", "light", at=NOW - 2 * HOUR)],
            ["h", "l"],
        ),
        (
            "admin priority outweighs fair share",
            FAIR, Policies(groups={"heavy": GroupPolicy(priority=5)}), {"heavy": 9.0, "light": 1.0},
            [req("l", "light"), req("h", "heavy")], ["h", "l"],
        ),
        (
            "first come first served ignores usage",
            SchedulerSettings.fifo(), Policies(), {"heavy": 9.0, "light": 1.0},
            [req("l", "light", at=NOW), req("h", "heavy", at=NOW - 1)], ["h", "l"],
        ),
        (
            "ties go to the earlier request, then the id",
            FAIR, Policies(), {},
            [req("b", at=NOW), req("c", at=NOW - 5), req("a", at=NOW)], ["c", "a", "b"],
        ),
    ],
)  # fmt: skip
def test_priority_order(
    case: str,
    settings: SchedulerSettings,
    policies: Policies,
    usage: dict[str, float],
    queue: list[QueuedRequest],
    expected: list[str],
) -> None:
    ranked = prioritise(queue, state(snap(lab()), policies=policies, usage=usage), settings)
    assert [q.id for q, _ in ranked] == expected, case


def test_user_factor_orders_users_within_a_group() -> None:
    settings = SchedulerSettings(weight_fairshare=1.0, weight_user_fairshare=0.1)
    usage = UsageTotals(NOW, {"g1": 10.0}, {("g1", "ann"): 9.0, ("g1", "ben"): 1.0})
    queue = [req("1", user="ann", at=NOW - 60), req("2", user="ben")]
    st = ClusterState(snap(lab()), NOW, usage=usage)
    ranked = prioritise(queue, st, settings)
    assert [q.user for q, _ in ranked] == ["ben", "ann"]
    assert ranked[0][1].user_fairshare == pytest.approx(2 ** (-0.1 / 0.5))


def test_priority_parts_are_visible() -> None:
    settings = SchedulerSettings(max_age_s=HOUR)
    usage = {"g1": 1.0, "g2": 3.0}
    policies = Policies(groups={"g1": GroupPolicy(priority=1), "g2": GroupPolicy(priority=4)})
    ((_, parts),) = prioritise(
        [req("x", "g1", at=NOW - 12 * 60)],
        state(snap(lab()), policies=policies, usage=usage),
        settings,
    )
    assert (parts.group_share, parts.group_usage) == pytest.approx((0.5, 0.25))
    assert parts.fairshare == pytest.approx(0.5**0.5)
    assert (parts.admin, parts.age, parts.waited_s) == pytest.approx((0.25, 0.2, 720.0))
    expected = parts.fairshare + 0.1 * parts.user_fairshare + 0.25 + 0.2
    assert parts.priority == pytest.approx(expected)
    assert parts.sentence() == ""  # g1 used less than its share: nothing to explain
    heavy = replace(parts, group_usage=0.75)
    assert heavy.sentence() == (
        "Your group has used more than its share lately, so others go first."
    )  # plain words: no share numbers, no waiting time (which changes every round)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"half_life_s": 0}, "half_life_s"),
        ({"max_age_s": -1}, "max_age_s"),
        ({"weight_age": -1}, "weights must be >= 0"),
        ({"model_weights": {A100: -2}}, "weights must be >= 0"),
        ({"backfill_claims": -1}, "backfill_claims"),
    ],
)
def test_settings_are_checked(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SchedulerSettings(**kw)  # type: ignore[arg-type]


# -- quotas --------------------------------------------------------------------------------

MODELS = frozenset({RTX3090, TITANX})


def held(group: Mapping[str, int] | None = None, user: Mapping[str, int] | None = None) -> Holdings:
    return Holdings({"g1": dict(group or {})}, {"u-x": dict(user or {})})


def quota(max_gpus: int | None = None, **per_model: int) -> Quota:
    names = {"rtx": RTX3090, "titan": TITANX}
    return Quota(max_gpus, {names[k]: v for k, v in per_model.items()})


@pytest.mark.parametrize(
    "case, group_quota, user_quota, holdings, request_, verdict, words",
    [
        ("no quota", Quota(), Quota(), held({RTX3090: 9}), req("x", count=2), Allowed, []),
        ("room left", quota(4), Quota(), held({RTX3090: 3}), req("x"), Allowed, []),
        (
            "group full: waits, with the numbers",
            quota(4), Quota(), held({RTX3090: 2, TITANX: 1}), req("x", count=2), Wait,
            ["Group g1 holds 3 of 4 GPUs", "asks for 2", "until the group's servers free 1"],
        ),
        (
            "more than the group may ever hold: refused with the number",
            quota(4), Quota(), held(), req("x", count=6), Refuse,
            ["Group g1 may hold at most 4 GPUs at once", "asks for 6", "Ask for 4 or fewer"],
        ),
        (
            "a group with no GPUs at all",
            quota(0), Quota(), held(), req("x"), Refuse, ["at most 0 GPUs", "Ask an admin"],
        ),
        (
            "user full: waits, and says how to start sooner",
            Quota(), quota(2), held(user={TITANX: 2}), req("x"), Wait,
            ["You hold 2 of 2 GPUs", "Stop one of your servers"],
        ),
        (
            "pinned model at its cap: waits",
            quota(rtx=2), Quota(), held({RTX3090: 2}), req("x", models=[RTX3090]), Wait,
            [f"Group g1 holds 2 of 2 x {RTX3090}", "until those servers free"],
        ),
        (
            "pinned model over its cap for good: refused",
            quota(rtx=2), Quota(), held(), req("x", count=3, models=[RTX3090]), Refuse,
            [f"at most 2 x {RTX3090} at once", "Ask for 2 or fewer"],
        ),
        (
            "a forbidden model: refused",
            Quota(), quota(titan=0), held(), req("x", models=[TITANX]), Refuse,
            [f"You may hold at most 0 x {TITANX}", "Choose another GPU model"],
        ),
    ],
)  # fmt: skip
def test_quota_verdicts(
    case: str,
    group_quota: Quota,
    user_quota: Quota,
    holdings: Holdings,
    request_: QueuedRequest,
    verdict: type,
    words: list[str],
) -> None:
    item = QueuedRequest("x", "u-x", "g1", request_.request, NOW)
    policies = Policies(groups={"g1": GroupPolicy(quota=group_quota, user_quota=user_quota)})
    got = check_quota(item, holdings, policies, MODELS)
    assert isinstance(got, verdict), (case, got)
    if isinstance(got, Allowed):
        assert got.request == item.request
    else:
        for w in words:
            assert w in got.reason, (case, got.reason)


@pytest.mark.parametrize(
    "case, group_quota, holdings, count, models, expected",
    [
        ("any GPU, the 3090 cap reached: the TITAN X only", quota(rtx=2),
         {RTX3090: 2}, 1, None, {TITANX}),
        ("any GPU, asks more than the 3090 cap: the TITAN X only", quota(rtx=1),
         {}, 2, None, {TITANX}),
        ("two allowed models, one full", quota(titan=1), {TITANX: 1},
         1, [RTX3090, TITANX], {RTX3090}),
    ],
)  # fmt: skip
def test_per_model_quota_narrows_the_request(
    case: str,
    group_quota: Quota,
    holdings: dict[str, int],
    count: int,
    models: list[str] | None,
    expected: set[str],
) -> None:
    item = req("x", count=count, models=models)
    policies = Policies(groups={"g1": GroupPolicy(quota=group_quota)})
    got = check_quota(item, held(holdings), policies, MODELS)
    assert isinstance(got, Allowed), case
    assert got.request.allowed_models == frozenset(expected), case
    assert got.request.gpu_count == count


def test_a_users_own_quota_overrides_the_groups_per_user_quota() -> None:
    item = req("x", count=3)
    policies = Policies(
        groups={"g1": GroupPolicy(user_quota=Quota(2))}, users={item.user: Quota(4)}
    )
    got = check_quota(item, Holdings({}, {}), policies, MODELS)
    assert isinstance(got, Allowed)
    other = req("y", count=3)
    assert isinstance(check_quota(other, Holdings({}, {}), policies, MODELS), Refuse)


def test_holdings_count_charged_gpus_per_group_user_and_model() -> None:
    models = {"GPU-a-0": RTX3090, "GPU-a-1": RTX3090, "GPU-b-0": TITANX}
    charges = {
        "GPU-a-0": Charge("g1", "ann"),
        "GPU-a-1": Charge("g2", "ann"),
        "GPU-b-0": Charge("g1", "ben"),
        "GPU-gone": Charge("g1", "ben"),
    }
    h = holdings_of(charges, models)
    assert h.groups == {"g1": {RTX3090: 1, TITANX: 1, "": 1}, "g2": {RTX3090: 1}}
    assert h.users == {"ann": {RTX3090: 2}, "ben": {TITANX: 1, "": 1}}


@pytest.mark.parametrize(
    "case, nodes, request_, words",
    [
        ("a model nobody has", lab(), PlacementRequest(1, allowed_models=frozenset({A100})),
         [f"no working {A100}", "Choose another GPU model."]),
        ("more GPUs than any node has", lab(), PlacementRequest(5),
         ["No node has 5 x GPU", "at most 4 on one node", "Ask for at most 4 GPUs."]),
        ("fits once GPUs are free", lab(), PlacementRequest(4), None),
        ("its only node is drained: it may come back", (node("a", 4, schedulable=False),),
         PlacementRequest(1), None),
    ],
)  # fmt: skip
def test_never_fits(
    case: str, nodes: tuple[NodeState, ...], request_: PlacementRequest, words: list[str] | None
) -> None:
    got = never_fits(snap(nodes, [g.uuid for n in nodes for g in n.inventory.gpus]), request_)
    if words is None:
        assert got is None, case
    else:
        assert got is not None, case
        for w in words:
            assert w in got, (case, got)


# -- words ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, text", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                (13, "13th"), (21, "21st"), (22, "22nd"), (101, "101st"), (111, "111th")],
)  # fmt: skip
def test_ordinal(n: int, text: str) -> None:
    assert ordinal(n) == text


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0 s"), (-5, "0 s"), (59.4, "59 s"), (119.9, "119 s"), (125, "2 min"), (720, "12 min"),
     (3600, "1 h"), (3 * 3600 + 300, "3 h 05 min"), (2 * 86400 - 1, "47 h 59 min"),
     (7 * 86400, "7 days"), (3 * 86400 + 4 * 3600, "3 days 4 h")],
)  # fmt: skip
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    "noun, text", [("GPU", "a GPU"), (RTX3090, f"an {RTX3090}"), ("A100", "an A100"),
                   ("TITAN X", "a TITAN X"), ("RTX 3090", "an RTX 3090")],
)  # fmt: skip
def test_article(noun: str, text: str) -> None:
    assert article(noun) == text
