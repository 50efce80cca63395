"""Sharing one GPU (issue 26): the admin's policy, and placing shares (pure core)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement import NoFit, Placement, PlacementRequest, place
from jupyterhub_gpu.core.scheduling import (
    ClusterState,
    QueuedRequest,
    Release,
    SchedulerSettings,
    estimates,
    schedule,
)
from jupyterhub_gpu.core.scheduling.state import GroupPolicy, Policies, Quota
from jupyterhub_gpu.core.sharing import Share, ShareRule, SharingPolicy, parse_policy
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.errors import ConfigError

pytestmark = pytest.mark.unit

RTX3090 = "NVIDIA GeForce RTX 3090"
TITANX = "NVIDIA TITAN X (Pascal)"
A100 = "NVIDIA A100-SXM4-80GB"
MEM = {RTX3090: 24576, TITANX: 12288, A100: 81920}
CC = {RTX3090: (8, 6), TITANX: (6, 1), A100: (8, 0)}


def node(name: str, model: str, count: int) -> NodeState:
    gpus = tuple(GPU(f"{name}-{i}", i, model, MEM[model], CC[model]) for i in range(count))
    return NodeState(NodeInventory(name, "550.54.15", gpus))


POLICY = parse_policy(
    {RTX3090: {"shares": 4, "mode": "mps", "max_held": 3}, TITANX: {"shares": 2}},
    {"big": {"shareable": False}},
)
NODES = (
    node("n1", RTX3090, 2),
    node("n2", RTX3090, 4),
    node("t1", TITANX, 1),
    node("big", RTX3090, 2),
)


def snap(
    alloc: Mapping[str, str] | None = None,
    shares: Mapping[str, int] | None = None,
    policy: SharingPolicy = POLICY,
    nodes: tuple[NodeState, ...] = NODES,
) -> ClusterSnapshot:
    return ClusterSnapshot(nodes, dict(alloc or {}), shares=dict(shares or {}), sharing=policy)


# -- policy --------------------------------------------------------------------------------


def test_policy_rules_by_model_and_node() -> None:
    assert POLICY.rule("n1", RTX3090) == ShareRule(4, "mps", max_held=3)
    assert POLICY.rule("big", RTX3090) is None  # the node's rule replaces the model's
    assert POLICY.rule("n1", A100) is None  # no rule: not shared
    assert ShareRule(4).share_memory(24576) == 6144
    assert not ShareRule(4, memory_mib=8192).fits(24576)


@pytest.mark.parametrize(
    ("models", "nodes", "message"),
    [
        ({RTX3090: {"shares": 4, "colour": "red"}}, {}, "unknown key(s) colour"),
        ({RTX3090: {"shares": 4, "mode": "vgpu"}}, {}, "mode must be one of"),
        ({RTX3090: {"mode": "mps"}}, {}, "into how many shares"),
        ({RTX3090: {"shares": 1}}, {}, "shares must be 2 to 16"),
        ({RTX3090: {"shares": 99}}, {}, "shares must be 2 to 16"),
        ({RTX3090: {"shares": 2, "mode": "mig"}}, {}, "1 (one MIG instance per share)"),
        ({RTX3090: {"shares": 4, "memory_mib": 12}}, {}, "memory_mib must be"),
        ({RTX3090: {"shares": True}}, {}, "shares must be"),
        ({RTX3090: 4}, {}, "a sharing rule is a dict"),
        ({}, {"n1": {"shareable": "no"}}, "shareable must be True or False"),
        ({}, {"n1": {"shareable": False, "shares": 4}}, "mean nothing"),
    ],
)
def test_bad_policies_are_refused_with_a_clear_message(
    models: dict[str, object], nodes: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(models, nodes)
    assert message in str(caught.value)


def test_share_sizes() -> None:
    share = Share(1, 4, 6144, "mps")
    assert (share.label, share.fraction, share.thread_percentage) == ("1/4", 0.25, 25)


# -- placement -----------------------------------------------------------------------------


def share(count: int = 1, **kw: object) -> PlacementRequest:
    return PlacementRequest(1, shares=count, **kw)  # type: ignore[arg-type]


def test_a_share_opens_the_weakest_free_shareable_gpu() -> None:
    result = place(snap(), share())
    assert isinstance(result, Placement)
    assert (result.node, result.gpu_uuids) == ("t1", ("t1-0",))  # TITAN X: the weakest
    assert result.share == Share(1, 2, 6144, "time-slicing")


def test_a_share_opens_where_one_whole_gpu_would_go_keeping_each_class_fair_share() -> None:
    # 2 TITAN X (one held by a TITAN X-only user) and 4 RTX 3090 (one held): an "any GPU"
    # share opens an RTX 3090 as one whole GPU would, and leaves the last TITAN X to the
    # requests that can use only it (rule 3: the cross-class fair share, not "the node
    # with the fewest free GPUs", which would open the last TITAN X)
    nodes = (node("t2", TITANX, 2), node("n2", RTX3090, 4))
    alloc = {"t2-0": "pinned/", "n2-0": "alice/"}
    whole = place(snap(alloc, nodes=nodes), PlacementRequest(1))
    result = place(snap(alloc, nodes=nodes), share())
    assert isinstance(whole, Placement) and isinstance(result, Placement)
    assert result.node == whole.node == "n2"
    assert result.gpu_uuids[0] != "n2-0" and result.share == Share(1, 4, 6144, "mps")
    # a share that only a TITAN X may hold still takes the last one
    pinned = place(snap(alloc, nodes=nodes), share(allowed_models=frozenset({TITANX})))
    assert isinstance(pinned, Placement) and pinned.gpu_uuids == ("t2-1",)


def test_a_share_opens_on_the_fullest_node_of_its_class() -> None:
    # the class's node with the fewest free GPUs; a whole free node of 4 is broken last
    nodes = (node("n1", RTX3090, 2), node("n2", RTX3090, 4))
    result = place(snap({"n1-0": "alice/"}, nodes=nodes), share())
    assert isinstance(result, Placement) and result.gpu_uuids == ("n1-1",)
    # in the class chosen, a whole free node is opened last
    nodes = (node("n2", RTX3090, 4), node("n1", RTX3090, 2))
    result = place(snap({}, nodes=nodes), share())
    assert isinstance(result, Placement) and result.node == "n1"


def test_shares_pack_onto_a_shared_gpu_best_fit() -> None:
    # n2-0 has 3 of 4 parts held, n1-0 has 1: a 1-part request fills n2-0 (best fit)
    alloc = {"n2-0": SHARED, "n1-0": SHARED, "t1-0": "bob/"}
    result = place(snap(alloc, {"n2-0": 3, "n1-0": 1}), share())
    assert isinstance(result, Placement) and result.gpu_uuids == ("n2-0",)
    # two parts do not fit n2-0 (1 left): n1-0 takes them
    result = place(snap(alloc, {"n2-0": 3, "n1-0": 1}), share(2))
    assert isinstance(result, Placement) and result.gpu_uuids == ("n1-0",)
    assert result.share == Share(2, 4, 12288, "mps")


def test_a_share_never_goes_on_a_whole_held_gpu_nor_beyond_its_shares() -> None:
    held = {u: "alice/" for u in ("n1-0", "n1-1", "n2-0", "n2-1", "n2-2", "t1-0")}
    alloc = {**held, "n2-3": SHARED}
    result = place(snap(alloc, {"n2-3": 4}), share())
    assert isinstance(result, NoFit)
    assert "No GPU has room" in result.reason
    # a whole request never gets the shared GPU (big's GPUs are free: it takes one)
    whole = place(snap(alloc, {"n2-3": 1}), PlacementRequest(1))
    assert isinstance(whole, Placement) and whole.gpu_uuids[0].startswith("big-")


def test_whole_requests_never_get_a_partly_shared_gpu() -> None:
    nodes = (node("n1", RTX3090, 1),)
    result = place(snap({"n1-0": SHARED}, {"n1-0": 1}, nodes=nodes), PlacementRequest(1))
    assert isinstance(result, NoFit)


def test_unshareable_or_too_big_share_requests_are_refused() -> None:
    result = place(snap(), share(3, allowed_models=frozenset({TITANX})))
    assert isinstance(result, NoFit) and "may be shared" in result.reason
    assert isinstance(place(snap(), share(1, allowed_models=frozenset({A100}))), NoFit)
    # 3 shares of an RTX 3090 are 18 GiB: 20 GiB asked is too much
    assert isinstance(place(snap(), share(3, min_memory_mib=20 * 1024)), NoFit)
    assert isinstance(place(snap(policy=SharingPolicy()), share()), NoFit)


def test_a_rule_that_overcommits_memory_is_never_used() -> None:
    policy = parse_policy({RTX3090: {"shares": 4, "memory_mib": 8192}}, {})
    assert isinstance(place(snap(policy=policy), share(allowed_models=frozenset({RTX3090}))), NoFit)


def test_a_malformed_share_request_is_an_error() -> None:
    with pytest.raises(ValueError, match="shares >= 1 of one GPU"):
        place(snap(), PlacementRequest(2, shares=1))


# -- the queue decision --------------------------------------------------------------------


def _queued(i: int, user: str, request: PlacementRequest) -> QueuedRequest:
    return QueuedRequest(str(i), user, "lab", request, float(i))


def test_one_queue_decision_packs_shares_and_never_overfills_a_gpu() -> None:
    nodes = (node("n1", RTX3090, 1),)
    policy = parse_policy({RTX3090: {"shares": 4}}, {})
    queue = [_queued(i, f"u{i}", share(1, share_of=4)) for i in range(5)]
    queue.append(_queued(9, "w", PlacementRequest(1)))
    state = ClusterState(ClusterSnapshot(nodes, {}, sharing=policy), now=100.0)
    decision = schedule(queue, state, SchedulerSettings.fifo(True))
    started = [s.placement for s in decision.starts]
    assert [p.gpu_uuids for p in started] == [("n1-0",)] * 4  # four quarters, one GPU
    assert {s.request.id for s in decision.waiting} == {"4", "9"}  # the fifth and the whole


def test_quotas_count_a_share_as_its_fraction() -> None:
    nodes = (node("n1", RTX3090, 2),)
    policy = parse_policy({RTX3090: {"shares": 4}}, {})
    snapshot = ClusterSnapshot(nodes, {}, sharing=policy)
    one_gpu = Policies(default=GroupPolicy(user_quota=Quota(max_gpus=1)))
    queue = [_queued(i, "ann", share(1, share_of=4)) for i in range(5)]
    decision = schedule(queue, ClusterState(snapshot, 100.0, policies=one_gpu))
    assert len(decision.starts) == 4  # 4 x 0.25 = her one GPU
    (waiting,) = decision.waiting
    assert waiting.for_quota and "1 of 1 GPU allowed" in waiting.reason


def test_a_waiting_share_gets_an_estimate() -> None:
    """The estimate's replays keep the snapshot's shares and sharing policy: a share
    that waits for a full cluster gets the time of the next release, not nothing."""
    full = {g.uuid: "x" for n in NODES for g in n.inventory.gpus}
    queue = [QueuedRequest("a", "u", "g", PlacementRequest(1, shares=1), 0.0)]
    release = Release("n1", ("n1-0",), 100.0, "alice's server ends")
    got = estimates(queue, ClusterState(snap(full), now=10.0), [release])
    assert got["a"].at == 100.0 and got["a"].why == "alice's server ends"


def test_no_server_is_placed_on_more_shares_than_its_gpus_rule_lets_one_hold() -> None:
    """``max_held`` is the node's rule's, not only the form's: with RTX 3090s time-sliced
    in 4 (up to 3 a server) but n2's shared by MPS (1 a server, the daemon's limit), 3
    quarters go to n1 and never to n2, and 2 quarters of an n2-only cluster are refused."""
    policy = parse_policy(
        {RTX3090: {"shares": 4}}, {"n2": {"shares": 4, "mode": "mps"}, "big": {"shareable": False}}
    )
    result = place(snap(policy=policy), share(3))
    assert isinstance(result, Placement) and result.node == "n1", result
    assert result.share == Share(3, 4, 18432, "time-slicing")
    only_n2 = (node("n2", RTX3090, 4),)
    refused = place(snap(policy=policy, nodes=only_n2), share(2))
    assert isinstance(refused, NoFit) and "Choose a whole GPU, or fewer shares" in refused.reason
    one = place(snap(policy=policy, nodes=only_n2), share(1))
    assert isinstance(one, Placement) and one.share == Share(1, 4, 6144, "mps")
