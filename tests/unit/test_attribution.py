"""Attribution of GPU processes to containers and shares; share labels; over-memory."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.core.attribution.labels import (
    Share,
    ShareLabelError,
    parse_share,
    state_share,
)
from jupyterhub_gpu.core.attribution.memory import (
    Episode,
    MemoryPolicy,
    MemoryState,
    continued_episode,
    episodes_from_json,
    episodes_to_json,
    judge_memory,
    recent_episodes,
)
from jupyterhub_gpu.core.attribution.processes import (
    MAX_CGROUP_TEXT,
    Container,
    attribute,
    container_id_from_cgroup,
    share_reading,
)
from jupyterhub_gpu.core.inventory import GpuProcess
from jupyterhub_gpu.errors import ConfigError

pytestmark = pytest.mark.unit

A = "a1" * 32
B = "b2" * 32
C = "c3" * 32  # someone's own container, not ours
GPU0, GPU1 = "GPU-0000aaaa-0000", "GPU-1111bbbb-1111"
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def labels(
    alloc: str, gpus: str, share: str | None = None, mib: str | None = None
) -> dict[str, str]:
    out = {"jupyterhub-gpu.allocation": alloc, "jupyterhub-gpu.gpus": gpus}
    if share is not None:
        out["jupyterhub-gpu.share"] = share
    if mib is not None:
        out["jupyterhub-gpu.share_memory_mib"] = mib
    return out


# --- share labels ----------------------------------------------------------------------


def test_parse_share_whole_gpu_and_share() -> None:
    assert parse_share(labels("x", GPU0)) is None
    share = parse_share(labels("x", GPU0, "1/4", "6144"))
    assert share == Share(1, 4, 6144)
    assert share is not None and share.fraction == 0.25
    assert parse_share(labels("x", GPU0, "1/1", "10240")) == Share(1, 1, 10240)  # a MIG share


def test_state_share_reads_the_spawners_list() -> None:
    assert state_share({}) is None
    assert state_share({"share": [2, 4, 12288, "mps"]}) == Share(2, 4, 12288)
    for bad, needle in [
        ("1/4", "must be [count, of, memory_mib, mode]"),
        ([1, 4, 6144], "must be [count, of, memory_mib, mode]"),
        ([1, 4, "6144", "mps"], "whole numbers"),
        ([True, 4, 6144, "mps"], "whole numbers"),
        ([5, 4, 6144, "mps"], "1 <= K <= N"),
        ([1, 4, 0, "mps"], "1 to"),
    ]:
        with pytest.raises(ShareLabelError, match="share") as e:
            state_share({"share": bad})
        assert needle in str(e.value), (bad, str(e.value))


@pytest.mark.parametrize(
    ("share", "mib", "needle"),
    [
        ("1/4", None, "needs both"),
        (None, "6144", "needs both"),
        ("1:4", "6144", "'K/N'"),
        ("0/4", "6144", "1 <= K <= N"),
        ("5/4", "6144", "1 <= K <= N"),
        ("1/999", "6144", "N <= 64"),
        ("1/4", "6 GiB", "whole number of MiB"),
        ("1/4", "-1", "whole number of MiB"),
        ("1/4", "0", "1 to"),
        ("1/4", "9" * 200, "whole number of MiB"),
        ("1/4 ", "6144", "'K/N'"),
    ],
)
def test_parse_share_refuses_malformed_labels(
    share: str | None, mib: str | None, needle: str
) -> None:
    with pytest.raises(ShareLabelError, match=r"jupyterhub-gpu\.share") as e:
        parse_share(labels("x", GPU0, share, mib))
    assert needle in str(e.value)
    assert len(str(e.value)) < 300  # a long label is not quoted whole


# --- cgroup ------------------------------------------------------------------------------


def test_cgroup_parser_reads_only_the_bounded_prefix() -> None:
    padding = "1:cpu:/user.slice\n" * (MAX_CGROUP_TEXT // 18 + 1)
    assert container_id_from_cgroup(padding + f"0::/docker/{A}\n") is None
    assert container_id_from_cgroup(f"0::/system.slice/docker-{A}.scope\n" + padding) == A


# --- attribution --------------------------------------------------------------------------


def test_two_shares_on_one_gpu_each_get_only_their_processes() -> None:
    procs = {
        GPU0: [
            GpuProcess(100, A, 3000, 40.0),
            GpuProcess(101, A, 1000, 15.0),
            GpuProcess(200, B, 500, 0.0),
        ]
    }
    containers = [
        Container(A, labels("alloc-a", GPU0, "1/4", "6144")),
        Container(B, labels("alloc-b", GPU0, "2/4", "12288")),
    ]
    result = attribute(procs, containers)
    a, b = result.use_of(A, GPU0), result.use_of(B, GPU0)
    assert a is not None and b is not None
    assert (a.allocation, a.share, a.pids, a.memory_mib, a.utilization_pct) == (
        "alloc-a",
        Share(1, 4, 6144),
        (100, 101),
        4000,
        55.0,
    )
    assert (b.allocation, b.memory_mib, b.utilization_pct) == ("alloc-b", 500, 0.0)
    assert result.unattributed == ()
    assert result.busy_gpus() == frozenset()


def test_unattributed_processes_are_listed_with_their_reason_and_charge_nobody() -> None:
    procs = {
        GPU0: [GpuProcess(1, "", 800, 90.0), GpuProcess(2, C, 100, 5.0), GpuProcess(3, A, 10, 1.0)],
        GPU1: [GpuProcess(4, A, 2000, 70.0)],  # A's label names only GPU0
    }
    containers = [
        Container(A, labels("alloc-a", GPU0, "1/4", "6144")),
        Container(C, {"com.example": "x"}),  # not ours: no allocation label
    ]
    result = attribute(procs, containers)
    assert [(u.gpu, u.process.pid, u.reason) for u in result.unattributed] == [
        (GPU0, 1, "host"),
        (GPU0, 2, "foreign"),
        (GPU1, 4, "unfenced"),
    ]
    a = result.use_of(A, GPU0)
    assert a is not None and (a.memory_mib, a.utilization_pct) == (10, 1.0)
    assert result.use_of(A, GPU1) is None
    assert result.busy_gpus() == {GPU0, GPU1}


def test_unknown_readings_make_the_sum_unknown_and_utilisation_is_capped() -> None:
    procs = {GPU0: [GpuProcess(1, A, None, 80.0), GpuProcess(2, A, 10, 70.0)]}
    use = attribute(procs, [Container(A, labels("x", GPU0))]).use_of(A, GPU0)
    assert use is not None and use.memory_mib is None and use.utilization_pct == 100.0
    assert use.share is None  # a whole GPU


def test_malformed_share_labels_do_not_lose_the_container() -> None:
    procs = {GPU0: [GpuProcess(1, A, 10, 1.0)]}
    use = attribute(procs, [Container(A, labels("x", GPU0, "1/4", "lots"))]).use_of(A, GPU0)
    assert use is not None and use.share is None and "share_memory_mib" in use.share_error


# --- the culler's reading of a share -----------------------------------------------------


def test_share_reading_is_its_own_processes() -> None:
    procs = [GpuProcess(1, A, 4000, 0.0), GpuProcess(2, B, 9000, 95.0)]
    r = share_reading(procs, A, gpu_utilization_pct=95.0, gpu_memory_used_mib=13000.0)
    assert (r.utilization_pct, r.memory_used_mib, r.own) == (0.0, 4000.0, True)
    idle = share_reading(procs, "d" * 64, 95.0, 13000.0)  # no process of its own: idle
    assert (idle.utilization_pct, idle.memory_used_mib, idle.own) == (0.0, 0.0, True)


def test_share_reading_falls_back_to_the_whole_gpu_when_it_cannot_tell() -> None:
    old_agent = share_reading(None, A, 95.0, 13000.0)
    assert (old_agent.utilization_pct, old_agent.own) == (95.0, False)
    no_sample = share_reading([GpuProcess(1, A, 4000, None)], A, 60.0, 4000.0)
    assert (no_sample.utilization_pct, no_sample.own) == (60.0, False)


# --- over-memory ---------------------------------------------------------------------------


def test_memory_warn_policy_warns_and_never_stops() -> None:
    policy = MemoryPolicy()  # warn
    v = judge_memory(8000, 6144, None, T0, policy)
    assert v.state is MemoryState.OVER and v.over_since == T0
    assert "8000 MiB" in v.message and "6144 MiB" in v.message
    later = judge_memory(8000, 6144, v.over_since, T0 + timedelta(days=3), policy)
    assert later.state is MemoryState.OVER and later.over_since == T0


def test_memory_stop_policy_stops_only_after_the_grace() -> None:
    policy = MemoryPolicy(action="stop", grace=600)
    first = judge_memory(8000, 6144, None, T0, policy)
    assert first.state is MemoryState.OVER and "stopped in 10 min" in first.message
    before = judge_memory(8000, 6144, T0, T0 + timedelta(seconds=599), policy)
    assert before.state is MemoryState.OVER
    after = judge_memory(8000, 6144, T0, T0 + timedelta(seconds=600), policy)
    assert after.state is MemoryState.STOP and "10 min" in after.message
    back = judge_memory(6000, 6144, T0, T0 + timedelta(seconds=900), policy)
    assert back.state is MemoryState.OK and back.over_since is None


def test_memory_tolerance_unknown_and_off_are_never_over() -> None:
    stop = MemoryPolicy(action="stop", grace=0, tolerance_mib=64)
    assert judge_memory(6144 + 64, 6144, None, T0, stop).state is MemoryState.OK
    assert judge_memory(6144 + 65, 6144, None, T0, stop).state is MemoryState.STOP
    assert judge_memory(None, 6144, T0, T0 + timedelta(days=1), stop).state is MemoryState.OK
    off = MemoryPolicy(action="off")
    assert judge_memory(99999, 6144, None, T0, off).state is MemoryState.OK


@pytest.mark.parametrize("bad", [{"action": "kill"}, {"grace": -1}, {"tolerance_mib": True}])
def test_memory_policy_refuses_bad_settings(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="share memory policy"):
        MemoryPolicy(**bad)  # type: ignore[arg-type]


EPISODE = Episode(T0, T0 + timedelta(minutes=5), "GPU-a", "c" * 64, "2026-01-05T11:00:00Z")


def test_episodes_round_trip_and_go_on_only_for_the_same_server() -> None:
    now = T0 + timedelta(minutes=6)
    back = episodes_from_json(episodes_to_json({"bob/": EPISODE}), now)
    assert back == {"bob/": EPISODE}
    assert continued_episode(EPISODE, "GPU-a", "c" * 64, EPISODE.started) == T0
    assert continued_episode(EPISODE, "GPU-b", "c" * 64, EPISODE.started) is None
    assert continued_episode(EPISODE, "GPU-a", "d" * 64, EPISODE.started) is None
    assert continued_episode(EPISODE, "GPU-a", "c" * 64, "2026-01-05T11:30:00Z") is None
    assert continued_episode(None, "GPU-a", "c" * 64, EPISODE.started) is None


def test_an_episode_of_a_server_without_a_start_time_round_trips() -> None:
    """The culler passes "" when the hub gives no start time: saved, read back, and never
    a reason to throw away the other servers' episodes."""
    now = T0 + timedelta(minutes=6)
    bare = Episode(T0, T0 + timedelta(minutes=5), "GPU-b", "d" * 64, "")
    both = {"bob/": EPISODE, "eve/": bare}
    assert episodes_from_json(episodes_to_json(both), now) == both


def test_only_episodes_seen_shortly_before_a_restart_go_on() -> None:
    saved = {"bob/": EPISODE}
    assert recent_episodes(saved, EPISODE.seen + timedelta(seconds=300), 300) == saved
    assert recent_episodes(saved, EPISODE.seen + timedelta(seconds=301), 300) == {}
    assert recent_episodes(saved, EPISODE.seen - timedelta(seconds=1), 300) == {}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"since": "yesterday"}, "Invalid isoformat"),
        ({"since": "2026-01-05T12:00:00"}, "with its zone"),
        ({"seen": 5}, "seen must be a string"),
        ({"since": "2026-01-05T12:10:00+00:00"}, "not after now"),
        ({"container": "x" * 64}, "64 hex digits"),
        ({"gpu": "G" * 129}, "gpu must be a string of 1 to 128"),
        ({"started": None}, "started must be a string"),
        ({"started": "9" * 65}, "started must be a string of 0 to"),
        ({"started": "2026-01-05T12:01:00Z"}, "before the server started"),
    ],
)
def test_a_malformed_saved_episode_is_refused_with_its_reason(
    change: dict[str, object], why: str
) -> None:
    item = {**episodes_to_json({"bob/": EPISODE})["bob/"], **change}
    with pytest.raises(ValueError, match=why):
        episodes_from_json({"bob/": item}, T0 + timedelta(minutes=6))


def test_episodes_since_after_seen_and_wrong_shapes_are_refused() -> None:
    now = T0 + timedelta(minutes=6)
    item = episodes_to_json({"bob/": EPISODE})["bob/"]
    with pytest.raises(ValueError, match="is after seen"):
        episodes_from_json({"bob/": {**item, "since": item["seen"], "seen": item["since"]}}, now)
    with pytest.raises(ValueError, match="must be an object"):
        episodes_from_json({"bob/": [1]}, now)
    with pytest.raises(ValueError, match="must be an object, got str"):
        episodes_from_json("x", now)
    with pytest.raises(ValueError, match="server name is malformed"):
        episodes_from_json({"": item}, now)
