"""Who shares which GPU on the dashboard (issue 26): the shares in the cluster payload
(encoded, decoded, refused when inconsistent, redacted), read from the hub's ledger and
spawners, and shown on the page with every name escaped."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.dashboard.history import History
from jupyterhub_gpu.core.dashboard.payload import GpuEntry, ShareEntry
from jupyterhub_gpu.core.dashboard.view import (
    HIDDEN,
    Viewer,
    cluster_view,
    redact,
    share_words,
)
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.sharing.policy import Share, ShareRule, SharingPolicy
from jupyterhub_gpu.core.snapshot import SHARED, ClusterSnapshot
from jupyterhub_gpu.errors import BadPayload
from jupyterhub_gpu.hub.api.cluster import SnapshotCache, server_info, share_holds
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.services.dashboard.render import Page, render_live
from jupyterhub_gpu.wire.cluster import (
    ServerInfo,
    ShareInfo,
    build_payload,
    decode_payload,
    payload_json,
)
from jupyterhub_gpu.wire.nodes_file import NodeSpec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
RTX = "NVIDIA GeForce RTX 3090"
PAGE = Page("/hub/", "/services/gpu-dashboard/")
XSS = '"><img src=x onerror=alert(1)>'  # a user name (JupyterHub refuses only "/" in them)
POLICY = SharingPolicy(models={RTX: ShareRule(4)})  # 4 x 6 GiB on a 24 GiB card


def _server(user: str, gpu: str, mib: int | None) -> ServerInfo:
    started = NOW - timedelta(hours=1)
    return ServerInfo(
        user, "", "node-a", (gpu,), "demo", "Demo", started, NOW, True, None, None, mib
    )


def built(shares: dict[str, list[ShareInfo]] | None = None) -> dict[str, Any]:
    """node-a: GPU 0 held whole by carol, GPU 2 shared 2 of 4 by alice and a hostile
    user, GPU 1 and 3 free."""
    cards = tuple(GPU(f"GPU-{i}", i, RTX, 24576, (8, 6)) for i in range(4))
    node = NodeState(NodeInventory("node-a", "550.54.15", cards))
    snapshot = ClusterSnapshot(
        (node,), allocations={"GPU-0": "carol/", "GPU-2": SHARED}, sharing=POLICY
    )
    if shares is None:
        shares = {
            "GPU-2": [
                ShareInfo(f"{XSS}/", 1, 4, memory_mib=None),  # its size from the policy
                ShareInfo("alice/", 1, 4, memory_mib=6144),
            ]
        }
    servers = [
        _server("alice", "GPU-2", 6144),
        _server("carol", "GPU-0", None),
        _server(XSS, "GPU-2", 6144),
    ]
    specs = [NodeSpec("node-a", "unix:///x", "10.0.0.1")]
    return build_payload(snapshot, specs, servers, {}, now=NOW, shares=shares)


def gpus_of(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["uuid"]: g for n in raw["nodes"] for g in n["gpus"]}


# ---------------------------------------------------------------------- the payload
def test_a_shared_gpu_carries_its_split_and_every_holder_and_comes_back_the_same() -> None:
    raw = built()
    gpus = gpus_of(raw)
    shared = gpus["GPU-2"]
    assert (shared["status"], shared["holder"], shared["orphan"]) == ("held", None, False)
    assert (shared["share_of"], shared["shares_held"]) == (4, 2)
    assert shared["shares"] == [
        {
            "holder": f"{XSS}/",
            "user": XSS,
            "server": "",
            "count": 1,
            "fraction": 0.25,
            "memory_mib": 6144,
            "orphan": False,
        },
        {
            "holder": "alice/",
            "user": "alice",
            "server": "",
            "count": 1,
            "fraction": 0.25,
            "memory_mib": 6144,
            "orphan": False,
        },
    ]
    # GPUs not held by shares carry none of the keys (a payload as before shares)
    for uuid in ("GPU-0", "GPU-1", "GPU-3"):
        assert not {"share_of", "shares_held", "shares"} & set(gpus[uuid]), uuid
    assert gpus["GPU-0"]["holder"] == "carol/"

    sent = json.dumps(raw)
    payload = decode_payload(json.loads(sent))
    assert json.dumps(payload_json(payload)) == sent  # key order and all
    g2 = payload.nodes[0].gpus[2]
    assert (g2.share_of, g2.shares_held) == (4, 2)
    assert [(s.user, s.server, s.fraction, s.memory_mib) for s in g2.shares] == [
        (XSS, "", 0.25, 6144),
        ("alice", "", 0.25, 6144),
    ]
    assert payload.nodes[0].gpus[0].share_of == 0 and payload.nodes[0].gpus[0].shares == ()


def test_a_share_of_unknown_size_is_the_gpus_memory_split_evenly() -> None:
    """An orphan's share (its spawner is gone) under a policy that no longer splits the
    card that way: its part of the card's memory."""
    raw = built({"GPU-2": [ShareInfo("zed/old", 3, 8, memory_mib=None, orphan=True)]})
    (share,) = gpus_of(raw)["GPU-2"]["shares"]
    assert (share["memory_mib"], share["fraction"], share["orphan"]) == (9216, 0.375, True)
    assert (share["user"], share["server"]) == ("zed", "old")


def _change(raw: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    shared = out["nodes"][0]["gpus"][2]
    if key.startswith("shares.1."):
        shared["shares"][1][key.removeprefix("shares.1.")] = value
    else:
        shared[key] = value
    return out


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("share_of", 0, "gpus[2].share_of must be an integer >= 1"),
        ("shares_held", 3, "gpus[2].shares_held must be the shares' counts' sum, at most 4"),
        ("shares", {}, "gpus[2].shares must be a list"),
        ("shares.1.count", 5, "gpus[2].shares[1].count and fraction must be K and K/4"),
        ("shares.1.fraction", 0.5, "gpus[2].shares[1].count and fraction must be K and K/4"),
        ("shares.1.fraction", 2, "gpus[2].shares[1].fraction must be a finite number"),
        ("shares.1.user", None, "gpus[2].shares[1].user must be a string"),
        ("shares.1.memory_mib", -1, "gpus[2].shares[1].memory_mib must be an integer >= 0"),
        ("shares.1.orphan", "no", "gpus[2].shares[1].orphan must be true or false"),
    ],
)
def test_an_inconsistent_share_is_refused_with_the_field_named(
    key: str, value: Any, named: str
) -> None:
    with pytest.raises(BadPayload) as refused:
        decode_payload(_change(built(), key, value))
    assert named in str(refused.value)


def test_a_payload_of_a_hub_before_shares_reads_as_not_shared() -> None:
    raw = built()
    for key in ("share_of", "shares_held", "shares"):
        del raw["nodes"][0]["gpus"][2][key]
    g2 = decode_payload(raw).nodes[0].gpus[2]
    assert (g2.share_of, g2.shares, g2.status) == (0, (), "held")


def test_other_holders_of_a_share_are_redacted_when_names_are_hidden() -> None:
    payload = decode_payload(built())
    visible = payload_json(redact(payload, Viewer("alice"), show_names=False))
    shares = gpus_of(visible)["GPU-2"]["shares"]
    assert shares[0] == {
        "holder": "",
        "user": "",
        "server": "",
        "count": 1,
        "fraction": 0.25,
        "memory_mib": 6144,
        "orphan": False,
        "hidden": True,
    }
    assert shares[1]["user"] == "alice" and "hidden" not in shares[1]
    assert "alert" not in json.dumps(visible)
    assert redact(payload, Viewer("root", admin=True), show_names=False) is payload


# ---------------------------------------------------------------------- the page
def view_html(viewer: Viewer, show_names: bool = True) -> str:
    payload = decode_payload(built())
    view = cluster_view(
        redact(payload, viewer, show_names), viewer, History(window=600, points=120), now=NOW
    )
    return render_live(view, PAGE, "xsrf")


def test_the_page_says_a_gpu_is_shared_and_by_whom() -> None:
    payload = decode_payload(built())
    view = cluster_view(payload, Viewer("alice"), History(window=600, points=120), now=NOW)
    g2 = view.nodes[0].gpus[2]
    assert (g2.status_label, g2.shared, g2.holder) == ("shared", "shared 2 of 4", None)
    assert [(s.label, s.part, s.memory) for s in g2.shares] == [
        (XSS, "1/4", "6.0 GiB"),
        ("alice (you)", "1/4", "6.0 GiB"),
    ]
    assert g2.shares[1].server is not None and g2.shares[1].server.image == "Demo"
    html = render_live(view, PAGE, "xsrf")
    assert "shared 2 of 4:" in html
    assert '<span class="jhgpu-holder">alice (you)</span> (1/4, 6.0 GiB)' in html
    assert view.nodes[0].gpus[0].holder is not None and not view.nodes[0].gpus[0].shares


def test_a_hostile_holders_name_is_escaped_and_admins_may_stop_each_share() -> None:
    html = view_html(Viewer("root", admin=True))
    assert XSS not in html and "<img" not in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert html.count('class="jhgpu-stop-link"') == 3  # two shares and carol's whole GPU
    assert "user=alice&amp;server=" in html


def test_a_viewer_who_may_not_see_names_sees_another_user_on_the_share() -> None:
    html = view_html(Viewer("alice"), show_names=False)
    assert f'<span class="jhgpu-holder">{HIDDEN}</span> (1/4, 6.0 GiB)' in html
    assert "alert" not in html
    # her own share's server has its Stop link; nobody else's
    assert html.count('class="jhgpu-stop-link"') == html.count(
        'jhgpu-stop-link" href="/services/gpu-dashboard/actions/stop?user=alice&amp;'
    )


def own_servers_html(html: str) -> str:
    """The "Your servers" section of a rendered live fragment ("" when there is none)."""
    if 'aria-label="Your servers"' not in html:
        return ""
    return html.split('aria-label="Your servers"', 1)[1].split("</section>", 1)[0]


def test_a_share_in_words_says_its_part_its_gpu_and_its_memory() -> None:
    gpu = GpuEntry("GPU-2", index=2, model=RTX, label="RTX 3090")
    assert share_words(ShareEntry("alice/", count=1, of=4, memory_mib=6144), gpu) == (
        "1 of 4 shares of GPU 2 (RTX 3090), 6.0 GiB"
    )
    assert share_words(ShareEntry("bob/", count=3, of=8, memory_mib=12288), gpu) == (
        "3 of 8 shares of GPU 2 (RTX 3090), 12 GiB"
    )
    mig = GpuEntry("MIG-1", index=0, model="NVIDIA A100 MIG 1g.10gb")  # no short label
    assert share_words(ShareEntry("c/", count=1, of=1, memory_mib=10240), mig) == (
        "1 of 1 share of GPU 0 (NVIDIA A100 MIG 1g.10gb), 10 GiB"
    )


def test_the_viewers_own_servers_say_which_hold_a_share_and_which_whole_gpus() -> None:
    payload = decode_payload(built())
    history = History(window=600, points=120)
    (alice,) = cluster_view(payload, Viewer("alice"), history, now=NOW).own_servers
    assert alice.share == "1 of 4 shares of GPU 2 (RTX 3090), 6.0 GiB"
    (carol,) = cluster_view(payload, Viewer("carol"), history, now=NOW).own_servers
    assert carol.share == ""  # GPU 0, whole
    # a share whose server was let go of is not said of a server (it has none)
    orphaned = decode_payload(built({"GPU-2": [ShareInfo("alice/", 1, 4, 6144, orphan=True)]}))
    (alice,) = cluster_view(orphaned, Viewer("alice"), history, now=NOW).own_servers
    assert alice.share == ""


def test_your_servers_shows_the_share_of_a_share_holder_and_not_of_a_whole_gpu() -> None:
    own = own_servers_html(view_html(Viewer("alice"), show_names=False))
    assert "alice (you)" in own
    assert '<span class="jhgpu-own-share">1 of 4 shares of GPU 2 (RTX 3090), 6.0 GiB</span>' in own
    own = own_servers_html(view_html(Viewer("carol"), show_names=False))
    assert "carol (you)" in own
    assert "jhgpu-own-share" not in own and "shares of GPU" not in own
    # the hostile user's own list: its name escaped, its share said
    own = own_servers_html(view_html(Viewer(XSS), show_names=False))
    assert "<img" not in own and "&#34;&gt;&lt;img src=x onerror=alert(1)&gt; (you)" in own
    assert "1 of 4 shares of GPU 2 (RTX 3090), 6.0 GiB" in own


def test_a_hostile_gpu_label_in_a_share_is_escaped() -> None:
    raw = built()
    raw["nodes"][0]["gpus"][2]["label"] = XSS
    view = cluster_view(
        decode_payload(raw), Viewer("alice"), History(window=600, points=120), now=NOW
    )
    own = own_servers_html(render_live(view, PAGE, "xsrf"))
    assert "<img" not in own
    assert "of GPU 2 (&#34;&gt;&lt;img src=x onerror=alert(1)&gt;), 6.0 GiB" in own


# ---------------------------------------------------------------------- the hub's side
def test_the_hub_reads_shares_from_the_ledger_and_sizes_from_the_spawners() -> None:
    ledger = GPULedger()
    ledger.reserve("carol/", "node-a", ["GPU-0"])
    ledger.reserve_share("alice/", "node-a", "GPU-2", (1, 4), "a1")
    ledger.reserve_share("bob/train", "node-a", "GPU-2", (2, 4), "b1")
    ledger.orphan("bob/train")
    spawner = SimpleNamespace(
        user_options={"image": "demo"},
        node_name="node-a",
        gpu_uuids=["GPU-2"],
        orm_spawner=None,
        ready=True,
        pending=None,
        share=Share(1, 4, 6144, "mps"),
        catalog=None,
    )
    alice = server_info("alice", "", spawner, _no_images())
    assert alice.share_memory_mib == 6144
    held = share_holds(ledger, [alice])
    assert set(held) == {"GPU-2"}
    assert sorted(held["GPU-2"], key=lambda s: s.holder) == [
        ShareInfo("alice/", 1, 4, memory_mib=6144, orphan=False),
        ShareInfo("bob/train", 2, 4, memory_mib=None, orphan=True),
    ]


def _no_images() -> Any:
    from jupyterhub_gpu.hub.api.cluster import _Images

    return _Images()


async def test_a_gpu_held_by_shares_is_not_an_orphan_of_the_cache() -> None:
    ledger = GPULedger()
    ledger.reserve("carol/", "node-a", ["GPU-0"])
    ledger.reserve("dave/", "node-a", ["GPU-1"])
    ledger.orphan("dave/")
    ledger.reserve_share("alice/", "node-a", "GPU-2", (1, 4))

    class Cluster:
        def __init__(self) -> None:
            self.ledger = ledger

        async def snapshot(self) -> ClusterSnapshot:
            return ClusterSnapshot(nodes=())

        def last_nodes(self) -> tuple[NodeState, ...]:
            return ()

    _, _, orphans = await SnapshotCache().get(Cluster())  # type: ignore[arg-type]
    assert orphans == frozenset({"GPU-1"})
