"""What a person sees (pure): privacy, the spawn links, escaping, charts, history, usage,
the checks on what requests send, and the admins' notes to owners."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.accounting.report import Interval
from jupyterhub_gpu.core.dashboard.charts import bars, columns, downsample, nice_ceiling, sparkline
from jupyterhub_gpu.core.dashboard.history import History
from jupyterhub_gpu.core.dashboard.inputs import BadInput, clean_note, known_node, user_and_server
from jupyterhub_gpu.core.dashboard.payload import (
    ClusterPayload,
    GpuEntry,
    NodeEntry,
    ServerEntry,
)
from jupyterhub_gpu.core.dashboard.view import HIDDEN, Viewer, cluster_view, redact, spawn_link
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.services.dashboard.notes import messages_for, record_stop
from jupyterhub_gpu.services.dashboard.render import Page, Usage, render_live, render_page
from jupyterhub_gpu.services.dashboard.usage import summarize, usage_charts
from jupyterhub_gpu.wire.cluster import ServerInfo, build_payload, decode_payload, payload_json
from jupyterhub_gpu.wire.nodes_file import NodeSpec

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
RTX, A100 = "NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-40GB"
PAGE = Page("/hub/", "/services/gpu-dashboard/")
XSS = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


def raw_payload(**kw: Any) -> dict[str, Any]:
    """The hub's JSON (what ``GET /hub/api/gpu/cluster`` sends), with a queue and
    reservations: one for a user (none of the hub's are yet), two for groups."""
    cards = tuple(GPU(f"GPU-{i}", i, RTX, 24576, (8, 6), utilization_pct=5.0 * i) for i in range(4))
    nodes = (
        NodeState(NodeInventory("node-a", "550.54.15", cards)),
        NodeState(NodeInventory("node-b", "550.54.15", (GPU("GPU-b", 0, A100, 40960, (8, 0)),))),
    )
    holds = {"GPU-0": "alice/train", "GPU-1": f"mallory/{XSS}", "GPU-b": "bob/"}
    servers = [
        ServerInfo(
            "alice",
            "train",
            "node-a",
            ("GPU-0",),
            "demo",
            "Demo CUDA 12",
            NOW - timedelta(hours=2, minutes=5),
            NOW - timedelta(minutes=3),
            True,
        ),
        ServerInfo("mallory", XSS, "node-a", ("GPU-1",), "evil", XSS, NOW, NOW, True),
        ServerInfo("bob", "", "node-b", ("GPU-b",), "demo", "Demo", NOW, NOW, True),
        ServerInfo("carol", "cpu", "node-b", (), "demo-cpu", "CPU only", NOW, NOW, True),
    ]
    specs = [
        NodeSpec("node-a", "unix:///x", "10.0.0.1"),
        NodeSpec("node-b", "unix:///x", "10.0.0.2"),
    ]
    built = build_payload(ClusterSnapshot(nodes, holds), specs, servers, {}, now=NOW, **kw)
    queued = {"group": "", "models": None, "since": None, "estimate": None}
    built["queue"] = [
        {
            **queued,
            "user": "bob",
            "server": "big",
            "gpus": 4,
            "model": A100,
            "models": [A100],
            "position": 1,
            "since": "2026-01-01T11:30:00+00:00",
            "estimate": "about 2 h",
        },
        {**queued, "user": "alice", "server": "", "gpus": 1, "model": "any", "position": 2},
    ]
    reserved = {"group": "", "nodes": [], "gpus": [], "model": None, "count": 0}
    built["reservations"] = [
        {
            **reserved,
            "id": "r1",
            "user": "carol",
            "gpus": ["GPU-3"],
            "from": "2026-01-02 09:00",
            "to": "2026-01-02 17:00",
            "note": "thesis run",
        },
        {
            **reserved,
            "id": "r2",
            "group": "course-101",
            "nodes": ["node-b"],
            "from": "2026-01-03",
            "to": "2026-01-04",
        },
        {
            **reserved,
            "id": "r3",
            "group": "ml",
            "model": A100,
            "count": 2,
            "from": "2026-01-05",
            "to": "2026-01-06",
        },
    ]
    return built


def payload(**kw: Any) -> ClusterPayload:
    """:func:`raw_payload` as the dashboard reads it (its one decoder)."""
    return decode_payload(raw_payload(**kw))


def history_of(p: ClusterPayload, at: float = 1000.0) -> History:
    h = History(window=600, points=120)
    for k in range(10):
        h.record(p, at - 50 + 5 * k)
    return h


def page_html(viewer: Viewer, show_names: bool, **kw: Any) -> str:
    p = payload(**kw)
    view = cluster_view(redact(p, viewer, show_names), viewer, history_of(p), now=NOW)
    return render_page(view, PAGE, "xsrf-123", Usage())


# ---------------------------------------------------------------------- privacy
@pytest.mark.parametrize(
    ("viewer", "show_names", "sees_others"),
    [
        (Viewer("alice"), True, True),
        (Viewer("alice"), False, False),
        (Viewer("root", admin=True), False, True),
        (Viewer("root", admin=True), True, True),
    ],
)
def test_other_users_names_follow_the_privacy_setting(
    viewer: Viewer, show_names: bool, sees_others: bool
) -> None:
    p = payload()
    visible = json.dumps(payload_json(redact(p, viewer, show_names)))
    view = cluster_view(redact(p, viewer, show_names), viewer, history_of(p), now=NOW)
    html = render_page(view, PAGE, "x", Usage()) + render_live(view, PAGE, "x")
    for other in ("bob", "mallory", "carol"):
        assert (other in visible) == sees_others, other
        assert (other in html) == sees_others, other
    assert "alice/train" in html  # her own, or shown to all
    assert (HIDDEN in html) == (not sees_others)
    assert {s.user for s in p.servers} == {"alice", "bob", "carol", "mallory"}  # unchanged


def test_hidden_names_still_show_what_runs_where_and_the_counts() -> None:
    p = payload()
    view = cluster_view(redact(p, Viewer("alice"), False), Viewer("alice"), History(), now=NOW)
    gpus = {g.uuid: g for n in view.nodes for g in n.gpus}
    assert gpus["GPU-b"].holder is not None and gpus["GPU-b"].holder.label == HIDDEN
    assert gpus["GPU-b"].holder.image == "Demo" and gpus["GPU-b"].holder.user == ""
    assert gpus["GPU-0"].holder is not None and gpus["GPU-0"].holder.label == "alice/train (you)"
    assert [q["who"] for q in view.queue] == [HIDDEN, "alice"]
    assert view.reservations[0]["who"] == HIDDEN and view.reservations[0]["note"] == ""
    assert gpus["GPU-3"].reserved_for == HIDDEN
    assert [(r["who"], r["node"], r["gpus"]) for r in view.reservations[1:]] == [
        ("group course-101", "node-b", "all GPUs"),
        ("group ml", "any", f"2 x {A100}"),
    ]  # a group is no one's name
    assert gpus["GPU-b"].reserved_for == "group course-101"
    stoppable = {g.holder.label for g in gpus.values() if g.holder and g.holder.can_stop}
    assert stoppable == {"alice/train (you)"}  # a user stops only her own servers


def test_admins_get_every_action_a_user_only_her_own_stop() -> None:
    user = page_html(Viewer("alice"), True)
    admin = page_html(Viewer("root", admin=True), True)
    for html, has in ((user, False), (admin, True)):
        assert ('action="/services/gpu-dashboard/actions/drain"' in html) == has
    assert set(re.findall(r"actions/stop\?user=([^&\"]+)", user)) == {"alice"}
    assert len(set(re.findall(r"actions/stop\?user=([^&\"]+)", admin))) > 1
    assert 'href="/services/gpu-dashboard/actions/stop?user=alice&amp;server=train"' in admin
    assert 'name="_xsrf" value="xsrf-123"' in admin


# ---------------------------------------------------------------------- escaping
class Elements(HTMLParser):
    """Every element and attribute name a page has, and its scripts' sources."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.scripts: list[str | None] = []
        self.images: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes |= {name for name, _ in attrs}
        if tag == "script":
            self.scripts.append(dict(attrs).get("src"))
        if tag == "img":
            self.images.append(dict(attrs).get("src"))


def test_server_names_and_image_labels_are_escaped_everywhere() -> None:
    for viewer in (Viewer("root", admin=True), Viewer("alice")):
        html = page_html(viewer, True)
        assert "<script>alert(1)" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        found = Elements()
        found.feed(html)
        assert found.images == ["/hub/logo"]  # the hub's bar's logo, nothing injected
        assert not [a for a in found.attributes if a.startswith("on")]
        ours = [s for s in found.scripts if s and not s.startswith("/hub/static/")]
        assert ours == ["/services/gpu-dashboard/static/dashboard.js"]


# ---------------------------------------------------------------------- the cluster view
def test_free_gpus_stand_out_with_a_start_link_preselecting_their_model() -> None:
    p = payload()
    view = cluster_view(p, Viewer("dave"), history_of(p), now=NOW)
    a = view.nodes[0]
    assert [g.status for g in a.gpus] == ["held", "held", "free", "free"] and a.free == 2
    link = "/hub/spawn#gpu_model=NVIDIA%20GeForce%20RTX%203090"
    assert a.gpus[2].spawn_link == link and a.gpus[0].spawn_link is None
    assert [(m["label"], m["link"]) for m in view.models] == [
        ("A100-SXM4-40GB", None),
        ("RTX 3090", link),
    ]
    html = render_live(view, PAGE, "x")
    assert html.count("Start a server on this kind of GPU") == 3  # the model and two GPUs
    assert '<span class="jhgpu-util">5%</span>' in html
    assert 'class="jhgpu-gpu jhgpu-free"' in html


def test_holder_image_since_activity_and_gpu_idleness() -> None:
    p = payload()
    view = cluster_view(p, Viewer("dave"), history_of(p), now=NOW)
    alice = view.nodes[0].gpus[0].holder
    assert alice is not None
    assert (alice.label, alice.image, alice.state) == ("alice/train", "Demo CUDA 12", "running")
    assert alice.since == "2 h 05 min ago" and alice.since_iso == "2026-01-01T09:55:00Z"
    assert alice.since_utc == "2026-01-01 09:55 UTC"
    assert alice.activity == "3 min ago"
    assert alice.cull == "stops it only after it has been idle for a while; not measured yet"
    assert view.nodes[0].gpus[0].gpu_idle == "GPU under 10% for at least 45 s"  # 0 % since
    assert view.nodes[0].gpus[1].gpu_idle == "GPU under 10% for at least 45 s"  # 5 %
    assert view.nodes[0].gpus[2].gpu_idle == ""  # free: nobody to tell
    carol = view.nodes[1].cpu_servers
    assert [s.label for s in carol] == ["carol/cpu"]
    assert [q["wants"] for q in view.queue] == [f"4 GPU(s), {A100}", "1 GPU(s), any model"]
    assert view.queue[0]["waiting"] == "30 min ago" and view.queue[0]["estimate"] == "about 2 h"


@pytest.mark.parametrize(
    ("servers", "named", "limit", "expected"),
    [
        ([], False, 0, "/hub/spawn#gpu_model=M%201"),
        ([""], False, 0, None),
        ([""], True, 0, "/hub/spawn/d%C3%A9dou/gpu#gpu_model=M%201"),
        (["", "gpu", "gpu-2"], True, 0, "/hub/spawn/d%C3%A9dou/gpu-3#gpu_model=M%201"),
        (["", "gpu", "gpu-2"], True, 2, None),
    ],
)
def test_spawn_link_goes_where_the_viewer_can_start_a_server(
    servers: list[str], named: bool, limit: int, expected: str | None
) -> None:
    p = ClusterPayload(
        hub_prefix="/hub/",
        named_servers=named,
        named_server_limit=limit,
        servers=(
            *(ServerEntry(f"dédou/{s}", "dédou", s) for s in servers),
            ServerEntry("x/", "x", ""),
        ),
    )
    assert spawn_link(p, Viewer("dédou"), "M 1") == expected


def test_a_node_that_is_down_or_drained_says_so_and_admins_may_undrain() -> None:
    p = raw_payload()
    p["nodes"][1].update(state="drained", drained_by="admin", drain_note="PSU <b>swap</b>")
    p["nodes"][0].update(state="down")
    p["nodes"][0]["reachable"] = False
    view = cluster_view(decode_payload(p), Viewer("root", admin=True), History(), now=NOW)
    assert view.nodes[0].state_label.startswith("down")
    stale = view.nodes[0].gpus[1]  # 5 % and healthy when last read: not said as if now
    assert (stale.known, stale.health, stale.temperature) == (False, "unknown", "-")
    assert view.nodes[1].state_label == "drained by the admin: PSU <b>swap</b>"
    assert view.nodes[1].can_undrain and not view.nodes[1].can_drain and view.nodes[0].can_drain
    html = render_live(view, PAGE, "x")
    assert "PSU &lt;b&gt;swap&lt;/b&gt;" in html and 'value="undrain"' in html


def test_a_stale_view_says_since_when() -> None:
    p = raw_payload()
    p["fresh"] = False
    view = cluster_view(decode_payload(p), Viewer("dave"), History(), now=NOW)
    html = render_live(view, PAGE, "x", stale="The hub did not answer. The figures are from 11:59.")
    assert "not fresh" in html and "The figures are from 11:59." in html


# ---------------------------------------------------------------------- charts and history
def test_sparkline_maps_time_and_value_into_the_box() -> None:
    assert sparkline([(0.0, 0.0)], 10, 10) == ""
    points = sparkline(
        [(0.0, 0.0), (5.0, 50.0), (10.0, 100.0)], now=10, window=10, width=102, height=12
    )
    assert points == "1.0,11.0 51.0,6.0 101.0,1.0"
    clipped = sparkline([(-50.0, 250.0), (10.0, -5.0)], now=10, window=10, width=102, height=12)
    assert clipped == "1.0,1.0 101.0,11.0"


def test_downsample_keeps_spikes_and_short_series() -> None:
    series = [(float(t), 0.0) for t in range(100)]
    series[41] = (41.0, 95.0)
    small = downsample(series, 10)
    assert len(small) == 10 and max(v for _, v in small) == 95.0
    assert downsample(series[:5], 10) == series[:5]


def test_bars_and_columns_scale_to_the_largest_and_used_never_exceeds_allocated() -> None:
    rows, height = bars([("b", 10.0, 5.0), ("a", 40.0, 50.0)], width=200, row_height=20)
    assert [r.label for r in rows] == ["a", "b"] and height == 40
    assert rows[0].allocated_width == 200 and rows[0].used_width == 200
    assert rows[1].allocated_width == 50 and rows[1].efficiency_pct == 50
    cols, ticks = columns([("d1", 0.0, 0.0), ("d2", 7.0, 3.5)], width=100, height=100)
    assert (
        cols[1].allocated_height == 70
        and cols[1].used_height == 35
        and cols[0].allocated_height == 0
    )
    assert ticks == [(0.0, 100.0), (5.0, 50.0), (10.0, 0.0)]
    assert columns([("d", 0.0, 0.0)]) == ([columns([("d", 0.0, 0.0)])[0][0]], [])


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 0), (0.3, 0.5), (7, 10), (12, 20), (24, 25), (2600, 5000)]
)
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert nice_ceiling(value) == pytest.approx(ceiling)


def test_history_rings_forgets_and_measures_idleness() -> None:
    def at(value: float, up: bool = True) -> ClusterPayload:
        gpu = GpuEntry("G", utilization_pct=value)
        return ClusterPayload(nodes=(NodeEntry("n", reachable=up, gpus=(gpu,)),))

    h = History(window=60, points=5)
    for t, v in enumerate([50, 3, 2, 1, 0, 0]):
        h.record(at(v), 100 + 10 * t)
    assert [v for _, v in h.series("G", 150)] == [3, 2, 1, 0, 0]  # five points kept
    assert h.idle_for("G", 150) == 40  # under 10 % since t=110 (a lower bound)
    h.record(at(80, up=False), 160)  # a node that is down adds nothing
    assert h.idle_for("G", 160) == 50
    h.record(at(80), 170)
    assert h.idle_for("G", 170) is None
    spark, idle = h.drawn("G")
    assert spark.count(",") == 5 and idle is None
    h.record(ClusterPayload(), 300)  # not seen for longer than the window: forgotten
    assert len(h) == 0 and h.drawn("G") == ("", None)


# ---------------------------------------------------------------------- usage
def test_usage_by_group_model_day_and_the_viewers_own() -> None:
    def iv(user: str, group: str, model: str, start: str, hours: float, util: float) -> Interval:
        begin = datetime.fromisoformat(start)
        return Interval(user, group, model, "n", 1, begin, begin + timedelta(hours=hours), util)

    rows = [
        iv("alice", "vision", RTX, "2025-12-31T10:00", 4, 50),
        iv("bob", "", A100, "2025-12-31T22:00", 4, 100),  # crosses midnight
        iv("alice", "vision", A100, "2025-12-01T00:00", 2, 100),  # before the period
    ]
    now = NOW.replace(tzinfo=None)
    s = summarize(rows, now, days=3)
    assert s.start == datetime(2025, 12, 30)
    assert s.by_group == [("(no group)", 4.0, 4.0), ("vision", 4.0, 2.0)]
    assert s.by_model == [("A100-SXM4-40GB", 4.0, 4.0), ("RTX 3090", 4.0, 2.0)]
    assert s.per_day == [("12-30", 0.0, 0.0), ("12-31", 6.0, 4.0), ("01-01", 2.0, 2.0)]
    assert (s.allocated, s.used) == (8.0, 6.0)
    mine = summarize(rows, now, days=3, user="alice")
    assert mine.by_model == [("RTX 3090", 4.0, 2.0)] and mine.allocated == 4.0
    charts = usage_charts(s)
    html = render_page(
        cluster_view(payload(), Viewer("alice"), History(), now=NOW),
        PAGE,
        "x",
        Usage(charts, usage_charts(mine), "", 3),
    )
    assert "4.0 GPU-hours allocated, 2.0 used (50%)." in html
    assert 'id="jhgpu-chart-groups"' in html and "vision" in html


# ---------------------------------------------------------------------- input checks
@pytest.mark.parametrize(
    ("note", "result"),
    [
        (None, ""),
        ("  need the GPUs\r\nfor the course ", "need the GPUs\nfor the course"),
        ("x" * 501, "keep it to 500"),
        ("bell\x07", "control characters"),
        (42, "must be text"),
    ],
)
def test_clean_note(note: object, result: str) -> None:
    if result in ("", "need the GPUs\nfor the course"):
        assert clean_note(note) == result
    else:
        with pytest.raises(BadInput, match=result):
            clean_note(note)


@pytest.mark.parametrize("forged", ["node-z", "node-a ", "../node-a", "", None, "node-a\x00", 3])
def test_known_node_refuses_forged_names(forged: object) -> None:
    with pytest.raises(BadInput) as info:
        known_node(forged, {"node-a", "node-b"})
    assert info.value.status in (400, 404) and str(info.value).endswith(".")
    assert known_node("node-a", {"node-a"}) == "node-a"


@pytest.mark.parametrize(
    ("user", "server", "ok"),
    [
        ("alice", "", True),
        ("alice", "train", True),
        ("", "", False),
        (None, "", False),
        ("alice", "a/b", False),
        ("al\nice", "", False),
        ("a" * 300, "", False),
    ],
)
def test_user_and_server(user: object, server: object, ok: bool) -> None:
    if ok:
        assert user_and_server(user, server) == (user, server)
    else:
        with pytest.raises(BadInput):
            user_and_server(user, server)


# ---------------------------------------------------------------------- notes to owners
def test_an_admins_stop_note_reaches_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    record_stop(path, "alice", "train", "root", "the course needs the A100s", NOW)
    record_stop(path, "bob", "", "root", "", NOW - timedelta(days=8))
    assert messages_for(path, "alice", NOW) == [
        "Your server 'train' was stopped at 2026-01-01 12:00 UTC by an admin (root): the course "
        "needs the A100s"
    ]
    assert messages_for(path, "bob", NOW) == []  # older than a week
    assert messages_for(path, "carol", NOW) == [] and messages_for("", "alice", NOW) == []
    assert json.loads(path.read_text())["bob"][0]["server"] == ""


def test_the_prepullers_state_reaches_the_dashboard_page() -> None:
    from jupyterhub_gpu.wire.cluster import prepull_entries

    state = {
        "nodes": {
            "node-b": {"has": ["cpu"], "needs": ["torch"], "pulling": "torch", "percent": 40,
                       "last_error": None, "used_gib": 1.25, "budget_gib": 50.0},
            "node-a": {"has": ["cpu", "torch"], "needs": [], "pulling": None, "percent": 0,
                       "last_error": "Could not pull x on node node-a: manifest unknown.",
                       "used_gib": 9.0, "budget_gib": 50.0},
        }
    }  # fmt: skip
    raw = raw_payload()
    raw["prepull"] = prepull_entries(state)
    p = decode_payload(json.loads(json.dumps(raw)))
    assert [e.node for e in p.prepull] == ["node-a", "node-b"]
    assert payload_json(p)["prepull"] == raw["prepull"]  # the one shape, both ways
    assert "prepull" not in payload_json(decode_payload(raw_payload()))  # off: no key
    viewer = Viewer("alice")
    view = cluster_view(redact(p, viewer, False), viewer, History(), now=NOW)
    html = render_live(view, PAGE, "x")
    assert "Pre-pulled images" in html
    assert "torch (40%)" in html and "1.2 of 50.0 GiB" in html
    assert "manifest unknown" in html
    bad = {**raw, "prepull": [{**raw["prepull"][0], "percent": -1}]}
    with pytest.raises(ValueError, match=r"prepull\[0\]\.percent"):
        decode_payload(bad)
