"""The dashboard for a server's owner (issue 36): a new server never inherits the previous
holder's idle minutes (the history is kept per holding: holder and start, not per GPU
alone), the culler's plan in words instead of "unknown", times as <time> for the
browser's zone, Open and Stop for one's own servers, and every page inside the hub's own
navigation bar."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.core.dashboard.history import History, holding
from jupyterhub_gpu.core.dashboard.payload import ClusterPayload, GpuEntry, NodeEntry, ServerEntry
from jupyterhub_gpu.core.dashboard.view import Viewer, cluster_view, cull_words, server_url
from jupyterhub_gpu.edges.hub_page import PageUser, inline_script_hashes, namespace, page_settings
from jupyterhub_gpu.services.dashboard.render import Page, Usage, render_page

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 5, 10, 0, tzinfo=timezone.utc)


def held_by(user: str, started: datetime, util: float) -> ClusterPayload:
    key = f"{user}/"
    gpu = GpuEntry("GPU-0", model="RTX", status="held", holder=key, utilization_pct=util)
    server = ServerEntry(key, user=user, node="n1", gpus=("GPU-0",), started=started, ready=True)
    return ClusterPayload(nodes=(NodeEntry("n1", gpus=(gpu,)),), servers=(server,))


def test_a_new_holder_does_not_inherit_the_previous_holders_idle_minutes() -> None:
    h = History(window=3600, points=1000)
    at = 0.0
    for _ in range(108):  # alice's server: 9 min under 10 %
        h.record(held_by("alice", T0, 2.0), at)
        at += 5
    assert h.idle_for("GPU-0", at - 5) == pytest.approx(535)
    bob_started = T0 + timedelta(seconds=at)
    first = at
    for _ in range(17):  # bob's new server on the same GPU, 85 s, idle too
        h.record(held_by("bob", bob_started, 1.0), at)
        at += 5
    idle = h.idle_for("GPU-0", at - 5)
    assert idle == pytest.approx(at - 5 - first) and idle <= 85  # bob's samples only
    assert h.drawn("GPU-0")[1] == pytest.approx(80)
    # the same user starting the same server again is a new holding too
    again = bob_started + timedelta(minutes=2)
    h.record(held_by("bob", again, 1.0), at)
    assert h.idle_for("GPU-0", at) == 0
    assert holding("bob/", again) != holding("bob/", bob_started) and holding(None, None) == ""


def test_the_sparkline_still_spans_the_gpus_whole_window() -> None:
    h = History(window=600, points=200)
    for k in range(20):
        h.record(
            held_by("alice" if k < 10 else "bob", T0 + timedelta(seconds=k // 10), 50.0), k * 5.0
        )
    assert len(h.series("GPU-0", 95.0)) == 20  # the card's own history: both holders


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (
            ServerEntry("a/", ready=True),
            "stops it only after it has been idle for a while; not measured yet",
        ),
        (ServerEntry("a/", ready=False, pending="spawn"), "judges it once it runs"),
        (
            ServerEntry("a/", ready=True, cull_at=T0),
            "stops it at the earliest at 2026-12-05 10:00 UTC",
        ),
    ],
)
def test_the_culler_plan_is_never_unknown(entry: ServerEntry, words: str) -> None:
    assert cull_words(entry) == words


def own_view(admin: bool = False) -> str:
    started = T0 - timedelta(seconds=85)
    p = held_by("alice", started, 1.0)
    p = ClusterPayload(
        nodes=p.nodes,
        servers=(
            ServerEntry(
                "alice/",
                user="alice",
                node="n1",
                gpus=("GPU-0",),
                started=started,
                ready=True,
                cull_at=T0 + timedelta(minutes=30),
            ),
        ),
    )
    viewer = Viewer("alice", admin)
    view = cluster_view(p, viewer, History(), now=T0)
    chrome = {
        "template_vars": {
            "jhgpu_dashboard": "gpu-dashboard",
            "jhgpu_usage": "gpu-accounting",
            "jhgpu_my_images": True,
        },
        "services": [],
    }
    return render_page(view, Page("/hub/", "/services/gpu-dashboard/", chrome=chrome), "x", Usage())


def test_own_servers_have_open_and_stop_and_local_times_inside_the_hubs_bar() -> None:
    html = own_view()
    assert 'class="jhgpu-open btn btn-sm btn-primary" href="/user/alice/">Open</a>' in html
    assert "actions/stop?user=alice&amp;server=" in html and ">Stop</a>" in html
    assert '<time datetime="2026-12-05T10:30:00Z">2026-12-05 10:30 UTC</time>' in html
    assert "culler: stops it at the earliest at" in html and "culler: unknown" not in html
    # the hub's navigation bar: its logo, Home, Token, and our links
    assert 'href="/hub/home">Home</a>' in html and 'href="/hub/token">Token</a>' in html
    assert 'id="jhgpu-dashboard-link" href="/services/gpu-dashboard/">GPUs</a>' in html
    assert 'id="jhgpu-usage-link" href="/services/gpu-accounting/">My usage</a>' in html
    assert 'href="/hub/my-images">My images</a>' in html and 'href="/hub/logout"' in html
    assert 'href="/hub/admin"' not in html and 'href="/hub/admin"' in own_view(admin=True)
    assert server_url("/", "al ice", "x/y") == "/user/al%20ice/x%2Fy/"


def test_inline_scripts_are_allowed_by_their_hashes_only() -> None:
    html = '<script src="/a.js"></script><script>var a = 1;</script><SCRIPT type="t">b()</SCRIPT>'
    assert (
        inline_script_hashes(html)
        == sorted(
            [
                "'sha256-6FcJp7vq0AwnmTnYbeO1anP5rOnGSYBiUHE6XiO1lqQ='",
                "'sha256-lNw0iPeB4GOzsBoNIDiybGPzt0Tb8gy3PD8qkMjk04w='",
            ]
        )
        or len(inline_script_hashes(html)) == 2
    )


def test_the_bar_settings_read_only_what_they_should() -> None:
    env = {
        "JUPYTERHUB_GPU_PAGE": '{"template_vars": {"jhgpu_usage": "u", "evil": "x"}, '
        '"services": ["a", 3]}'
    }
    assert page_settings(env) == {"template_vars": {"jhgpu_usage": "u"}, "services": ["a"]}
    assert page_settings({"JUPYTERHUB_GPU_PAGE": "not json"}) == {}
    ns = namespace(PageUser('a"b'), settings=page_settings(env))
    assert ns["user"].json_escaped_name == 'a\\"b' and ns["services"][0].href == "/services/a/"
