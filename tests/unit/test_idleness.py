"""The culler's pure judgement (``jupyterhub_gpu.services.culler``): table-driven, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.culling.idleness import (
    Deadline,
    GpuSummary,
    KernelObservation,
    KernelsObservation,
    Policy,
    ServerObservation,
    Signal,
    earliest_cull,
    fmt_duration,
    judge,
    resolve_policy,
    validate_overrides,
)
from jupyterhub_gpu.core.culling.tracker import GpuTracker
from jupyterhub_gpu.edges.files import load_deadlines, load_notes, save_deadlines, save_notes
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.cull_notes import CullNote, add_note, notes_for

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
POLICY = Policy(timeout=3600, gpu_timeout=1800, gpu_pause_factor=2.0, gpu_pause_cap=7200)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def gpu(
    idle: float | None = 120,
    observed: float = 240,
    util: float = 0.0,
    pause: float = 0.0,
    stale: float = 0.25,
    uuid: str = "GPU-aaaa",
    memory: float | None = 0.0,
) -> GpuSummary:
    """A GPU summary: last active ``idle`` min ago (None: never), observed for ``observed``
    min, newest reading ``stale`` min old, longest pause ``pause`` min, ``memory`` MiB in
    use (0: no process holds it)."""
    return GpuSummary(
        uuid=uuid,
        last_sample_at=ago(stale),
        observed_since=ago(observed),
        last_active_at=None if idle is None else ago(idle),
        utilization_pct=util,
        memory_used_mib=memory,
        longest_pause_s=pause * 60,
    )


def kernels(*states: tuple[str, float], status: float | None = None) -> KernelsObservation:
    """Kernels as (execution_state, minutes since last activity); ``status``: /api/status."""
    return KernelsObservation(
        tuple(KernelObservation(s, ago(m), f"k{i}") for i, (s, m) in enumerate(states)),
        None if status is None else ago(status),
    )


def server(**kw: Any) -> ServerObservation:
    base: dict[str, Any] = {
        "name": "alice",
        "started": ago(300),
        "last_activity": ago(120),
        "gpus": {"GPU-aaaa": gpu()},
        "kernels": kernels(("idle", 120)),
    }
    base.update(kw)
    return ServerObservation(**base)


CASES: list[tuple[str, ServerObservation, Policy, bool, Signal]] = [
    ("everything idle for 2h, GPU held", server(), POLICY, True, Signal.IDLE),
    ("CPU-only, idle 2h > 1h", server(gpus={}), POLICY, True, Signal.IDLE),
    ("CPU-only, idle 40m < 1h", server(gpus={}, last_activity=ago(40),
                                       kernels=kernels(("idle", 40))), POLICY, False, Signal.HUB),
    ("GPU server, idle 40m > 30m gpu_timeout",
     server(last_activity=ago(40), kernels=kernels(("idle", 40)), gpus={"GPU-aaaa": gpu(40)}),
     POLICY, True, Signal.IDLE),
    ("hub activity 10m ago", server(last_activity=ago(10)), POLICY, False, Signal.HUB),
    ("no last_activity: counts from start", server(last_activity=None, started=ago(20)),
     POLICY, False, Signal.HUB),
    ("no last_activity, started 5h ago", server(last_activity=None), POLICY, True, Signal.IDLE),
    ("no activity and no start time", server(last_activity=None, started=None),
     POLICY, False, Signal.HUB),
    ("a busy kernel, nobody watching", server(kernels=kernels(("idle", 200), ("busy", 150))),
     POLICY, False, Signal.KERNELS),
    ("a kernel starting", server(kernels=kernels(("starting", 200))), POLICY,
     False, Signal.KERNELS),
    ("a dead kernel is not work", server(kernels=kernels(("dead", 200))), POLICY,
     True, Signal.IDLE),
    ("kernel activity 5m ago", server(kernels=kernels(("idle", 5))), POLICY, False, Signal.KERNELS),
    ("terminal activity (api/status) 5m ago", server(kernels=kernels(("idle", 90), status=5)),
     POLICY, False, Signal.KERNELS),
    ("no kernels at all", server(kernels=KernelsObservation()), POLICY, True, Signal.IDLE),
    ("server did not answer", server(kernels=None), POLICY, False, Signal.KERNELS_MISSING),
    ("agent unreachable: no reading", server(gpus={"GPU-aaaa": None}), POLICY,
     False, Signal.GPU_MISSING),
    ("agent stopped answering 10m ago", server(gpus={"GPU-aaaa": gpu(stale=10)}), POLICY,
     False, Signal.GPU_MISSING),
    ("GPU assignment unknown", server(gpus=None), POLICY, False, Signal.GPU_MISSING),
    ("sustained GPU use, no busy kernel", server(gpus={"GPU-aaaa": gpu(idle=1, util=85)}),
     POLICY, False, Signal.GPU),
    ("GPU active 20m ago < 30m", server(gpus={"GPU-aaaa": gpu(idle=20)}), POLICY,
     False, Signal.GPU),
    ("GPU never active, observed only 10m (culler restarted)",
     server(gpus={"GPU-aaaa": gpu(idle=None, observed=10)}), POLICY, False, Signal.GPU),
    ("GPU never active, observed 3h", server(gpus={"GPU-aaaa": gpu(idle=None, observed=180)}),
     POLICY, True, Signal.IDLE),
    ("active 50m ago but unobserved since until 10m ago",
     server(gpus={"GPU-aaaa": gpu(idle=50, observed=10)}), POLICY, False, Signal.GPU),
    ("pauses of 25m seen: 40m idle is not enough (needs 50m)",
     server(gpus={"GPU-aaaa": gpu(idle=40, pause=25)}), POLICY, False, Signal.GPU),
    ("pauses of 25m seen: 55m idle is", server(gpus={"GPU-aaaa": gpu(idle=55, pause=25)}),
     POLICY, True, Signal.IDLE),
    ("pause wait is capped at 2h", server(gpus={"GPU-aaaa": gpu(idle=121, pause=300)}),
     POLICY, True, Signal.IDLE),
    ("pause wait off", server(gpus={"GPU-aaaa": gpu(idle=40, pause=25)}),
     replace(POLICY, gpu_pause_factor=0), True, Signal.IDLE),
    ("two GPUs, one busy",
     server(gpus={"GPU-aaaa": gpu(), "GPU-bbbb": gpu(idle=2, util=60, uuid="GPU-bbbb")}),
     POLICY, False, Signal.GPU),
    ("two GPUs, one missing", server(gpus={"GPU-aaaa": gpu(), "GPU-bbbb": None}),
     POLICY, False, Signal.GPU_MISSING),
    ("over max age, even while busy",
     server(kernels=kernels(("busy", 1)), last_activity=ago(1), gpus={"GPU-aaaa": None}),
     replace(POLICY, max_age=4 * 3600), True, Signal.MAX_AGE),
    ("under max age, idle anyway", server(), replace(POLICY, max_age=8 * 3600), True, Signal.IDLE),
    ("timeout 0: never by idleness", server(), replace(POLICY, gpu_timeout=0), False,
     Signal.DISABLED),
]  # fmt: skip


@pytest.mark.parametrize(("obs", "policy", "cull", "signal"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_judge(obs: ServerObservation, policy: Policy, cull: bool, signal: Signal) -> None:
    decision = judge(obs, policy, NOW)
    assert (decision.cull, decision.signal) == (cull, signal), decision.reason
    assert decision.reason and "\n" not in decision.reason


def test_reason_says_why() -> None:
    assert "1 kernel(s) busy" in judge(server(kernels=kernels(("busy", 1))), POLICY, NOW).reason
    cull = judge(server(), POLICY, NOW)
    assert cull.reason.startswith("idle: no hub activity for 2 h")
    assert "under 10% for 2 h" in cull.reason
    assert "GPU-aaaa" in judge(server(gpus={"GPU-aaaa": None}), POLICY, NOW).reason


# -- what a server says about itself is its user's claim: max_age bounds it ---------------

FUTURE = -600.0  # minutes "ago": a timestamp ten hours ahead, as a lying server may send
CLAIMS: dict[str, ServerObservation] = {
    "busy kernels": server(kernels=kernels(("busy", 0), ("starting", 0))),
    "kernel and server activity now": server(kernels=kernels(("idle", 0), status=0)),
    "activity in the future": server(kernels=kernels(("idle", FUTURE), status=FUTURE),
                                     last_activity=ago(FUTURE)),
    "hub activity now (posted with its own token)": server(last_activity=ago(0)),
    "its GPU kept busy": server(gpus={"GPU-aaaa": gpu(idle=0, util=95, memory=20000)}),
    "its kernels unreadable": server(kernels=None),
    "everything at once": server(kernels=kernels(("busy", 0), status=0), last_activity=ago(0),
                                 gpus={"GPU-aaaa": gpu(idle=0, util=95, memory=20000)}),
}  # fmt: skip


@pytest.mark.parametrize("claim", CLAIMS.values(), ids=CLAIMS.keys())
def test_what_a_server_says_never_outlasts_max_age(claim: ServerObservation) -> None:
    """Each claim keeps a server under the default policy until ``max_age`` (7 days, on
    by default), not a minute longer; a group may turn the limit off."""
    policy = Policy()
    assert policy.max_age == 7 * 86400
    young = replace(claim, started=NOW - timedelta(days=7) + timedelta(minutes=1))
    old = replace(claim, started=NOW - timedelta(days=7))
    assert not judge(young, policy, NOW).cull
    decision = judge(old, policy, NOW)
    assert (decision.cull, decision.signal) == (True, Signal.MAX_AGE)
    assert decision.reason == "running for 7 days, over the maximum age of 7 days"
    assert not judge(old, replace(policy, max_age=0), NOW).cull


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (59, "59 s"),
        (125, "2 min"),
        (4000, "1 h 06 min"),
        (90061, "25 h 01 min"),
        (-5, "0 s"),
        (29.9, "29 s"),
        (7 * 86400, "7 days"),
    ],
)
def test_fmt_duration(seconds: float, text: str) -> None:
    assert fmt_duration(seconds) == text


# -- the GPU tracker ----------------------------------------------------------------------


def tracker(**kw: Any) -> GpuTracker:
    opts = {"threshold": 10.0, "window": 300.0, "memory_change": 1024.0, "max_gap": 180.0}
    opts.update(kw)
    return GpuTracker("GPU-aaaa", **opts)


def feed(t: GpuTracker, utils: Sequence[float], start: datetime, every: float = 60.0,
         memory: float | None = 4096.0) -> list[bool]:  # fmt: skip
    return [t.add(start + timedelta(seconds=i * every), u, memory) for i, u in enumerate(utils)]


@pytest.mark.parametrize(
    ("utils", "active"),
    [
        ([0, 0, 0, 0, 0, 0], [False] * 6),
        ([0, 0, 0, 30, 0, 0], [False] * 6),  # a blip: 30/5 = 6% over the window
        ([0, 0, 60, 0, 0, 0], [False, False, True, True, True, True]),  # 60/5 = 12%
        ([0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 0, 0], [False] * 6 + [True] * 5 + [False]),
        ([20, 20, 20, 20, 20, 20], [True] * 6),  # sustained, however low the kernel's state
        ([9, 9, 9, 9, 9, 9], [False] * 6),  # just under the threshold
    ],
)
def test_tracker_sustained_mean(utils: Sequence[float], active: list[bool]) -> None:
    assert feed(tracker(), utils, ago(60)) == active


def test_tracker_memory_moving_is_activity() -> None:
    t = tracker()
    assert not t.add(ago(3), 0, 4096)
    assert t.add(ago(2), 0, 8192)  # a process allocated 4 GiB
    assert not t.add(ago(1), 0, 8192)  # holding memory is not activity
    s = t.summary()
    assert s is not None and s.last_active_at == ago(2)


def test_tracker_summary_and_pauses() -> None:
    t = tracker()
    assert t.summary() is None
    utils = [80] * 3 + [0] * 30 + [80] * 3 + [0] * 20
    feed(t, utils, ago(len(utils) - 1))
    s = t.summary()
    assert s is not None
    assert s.observed_since == ago(len(utils) - 1) and s.last_sample_at == NOW
    # the mean stays >= 10% for 4 minutes after the last 80% reading
    assert s.last_active_at == ago(20 - 4)
    assert s.longest_pause_s == pytest.approx((30 + 1 - 4) * 60)
    decision = judge(server(gpus={"GPU-aaaa": s}), replace(POLICY, gpu_timeout=600), NOW)
    assert decision.signal is Signal.GPU  # 16 min idle < 2 x 27 min pause


def test_tracker_gap_breaks_observation_and_old_readings_are_ignored() -> None:
    t = tracker()
    feed(t, [50, 50], ago(30))
    assert not t.add(ago(30), 0, None)  # not newer than the last reading
    t.add(ago(10), 0, None)  # 19 minutes without readings
    s = t.summary()
    assert s is not None and s.observed_since == ago(10) and s.last_active_at == ago(29)
    decision = judge(server(gpus={"GPU-aaaa": s}), POLICY, ago(9.5))
    assert decision.signal is Signal.GPU and "observed for only 30 s" in decision.reason


def test_tracker_survives_a_restart() -> None:
    t = tracker()
    feed(t, [0, 70, 0, 0], ago(3), memory=2048)
    copy = tracker()
    copy.restore(t.to_dict())
    assert copy.summary() == t.summary()
    assert copy.add(NOW + timedelta(minutes=1), 0, 2048) == t.add(
        NOW + timedelta(minutes=1), 0, 2048
    )
    with pytest.raises((KeyError, ValueError, TypeError)):
        tracker().restore({"samples": "nonsense"})


# -- policies and group overrides ---------------------------------------------------------

OVERRIDES = {
    "20-students": {"groups": ["students"], "policy_override": {"gpu_timeout": 900}},
    "10-staff": {"groups": ["staff"], "policy_override": {"gpu_timeout": 7200, "max_age": 0}},
}


@pytest.mark.parametrize(
    ("groups", "gpu_timeout"),
    [([], 1800), (["staff"], 7200), (["students"], 900), (["staff", "students"], 900)],
)
def test_resolve_policy_in_sorted_order(groups: list[str], gpu_timeout: float) -> None:
    checked = validate_overrides(OVERRIDES)
    assert resolve_policy(POLICY, checked, groups).gpu_timeout == gpu_timeout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "must be a dict"),
        ({"x": {"groups": ["a"]}}, "exactly the keys"),
        ({"x": {"groups": "staff", "policy_override": {}}}, "list of group names"),
        ({"x": {"groups": ["a"], "policy_override": {"gpu_threshold": 5}}}, "can't override"),
        ({"x": {"groups": ["a"], "policy_override": {"timeout": -1}}}, "timeout must be"),
        ({"x": {"groups": ["a"], "policy_override": {"timeout": "1h"}}}, "timeout must be"),
    ],
)
def test_bad_overrides_name_the_entry(overrides: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_overrides(overrides)


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ConfigError, match="gpu_window"):
        Policy(gpu_window=0)


# -- cull notes ---------------------------------------------------------------------------


def test_notes_round_trip_and_trim(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    assert load_notes(path) == {}
    notes: dict[str, list[dict[str, str]]] = {}
    for i in range(7):
        notes = add_note(notes, CullNote("alice", "", ago(70 - i), f"reason {i}"), keep=5)
    notes = add_note(notes, CullNote("bob", "train", ago(1), "idle"))
    save_notes(path, notes)
    loaded = load_notes(path)
    assert [n.reason for n in notes_for(loaded, "alice")] == [f"reason {i}" for i in range(2, 7)]
    assert [n.reason for n in notes_for(loaded, "alice", since=ago(66))] == ["reason 5", "reason 6"]
    (bob,) = notes_for(loaded, "bob")
    assert bob.message() == (
        "Your server 'train' was stopped at 2026-01-01 11:59 UTC to free its resources: idle."
    )
    path.write_text("{not json")
    assert load_notes(path) == {}


def test_notes_compare_and_tell_times_in_utc() -> None:
    """A naive ``since`` (the hub's database keeps naive UTC) or a naive or non-UTC time in
    the file neither raises nor shifts the note; the message always says UTC."""
    cest = timezone(timedelta(hours=2))
    notes = {
        "alice": [
            {"server": "", "at": "2026-01-01T11:00:00", "reason": "naive"},
            {"server": "", "at": "2026-01-01T13:30:00+02:00", "reason": "cest"},
            {"server": "", "at": 17, "reason": "bad"},
            "nonsense",
        ]
    }
    assert [n.reason for n in notes_for(notes, "alice")] == ["naive", "cest"]  # type: ignore[arg-type]
    naive_since = datetime(2026, 1, 1, 11, 15)
    (late,) = notes_for(notes, "alice", since=naive_since)  # type: ignore[arg-type]
    assert late.reason == "cest" and late.at == ago(30)
    note = CullNote("alice", "", datetime(2026, 1, 1, 13, 59, tzinfo=cest), "idle")
    assert (
        note.message()
        == "Your server was stopped at 2026-01-01 11:59 UTC to free its resources: idle."
    )


# -- the memory-held rules: a process that still holds its GPU ------------------------------


def held(
    busy: float | None, memory: float | None = 4096, active: float | None = None
) -> ServerObservation:
    """A server idle for 8 h by hub and kernels whose GPU was last busy (one reading >= the
    threshold) ``busy`` min ago (None: never in this server), last active (window mean or
    memory moving) ``active`` min ago (default: when last busy, else 8 h ago), and holds
    ``memory`` MiB."""
    if active is None:
        active = 480 if busy is None else busy
    summary = replace(
        gpu(idle=active, observed=600),
        memory_used_mib=memory,
        last_busy_at=None if busy is None else ago(busy),
    )
    return server(last_activity=ago(480), kernels=kernels(("idle", 480)), gpus={"G": summary})


SHIPPED = replace(POLICY, gpu_held_idle=Policy().gpu_held_idle)


@pytest.mark.parametrize(
    ("obs", "policy", "cull"),
    [
        # busy before, memory held (a paused loop, or a forgotten kernel): 5 h by default
        (held(busy=40), SHIPPED, False),
        (held(busy=299), SHIPPED, False),
        (held(busy=301), SHIPPED, True),  # no backward-looking rule waits forever
        (held(busy=40, memory=512), SHIPPED, True),  # memory released: the process is gone
        (held(busy=40, memory=None), SHIPPED, True),  # memory unknown: the timeout alone
        (held(busy=40), replace(SHIPPED, gpu_held_idle=0), True),  # off
        (held(busy=40, active=20), replace(SHIPPED, gpu_held_idle=0), False),  # active
        (held(busy=150), replace(SHIPPED, gpu_held_idle=2 * 3600), True),  # a site's 2 h
        # never busy in this server, memory held (a model loaded): 1 h after its last activity
        (held(busy=None, active=40), SHIPPED, False),
        (held(busy=None, active=59), SHIPPED, False),
        (held(busy=None, active=61), SHIPPED, True),
        (held(busy=None, active=40, memory=512), SHIPPED, True),  # nothing loaded
        (held(busy=None, active=40), replace(SHIPPED, gpu_loaded_idle=0), True),  # off
        (held(busy=None, active=40), replace(SHIPPED, gpu_loaded_idle=0.5 * 3600), True),
    ],
)
def test_memory_held_gpus_wait_longer(obs: ServerObservation, policy: Policy, cull: bool) -> None:
    decision = judge(obs, policy, NOW)
    assert decision.cull is cull, decision.reason
    assert decision.signal is (Signal.IDLE if cull else Signal.GPU)


def test_memory_held_waits_never_shorten_the_timeout() -> None:
    """The waits are floors: with a 6 h gpu_timeout, a loaded GPU idle for 2 h stays."""
    policy = replace(SHIPPED, gpu_timeout=6 * 3600)
    assert not judge(held(busy=None, active=120), policy, NOW).cull
    assert judge(held(busy=None, active=370), policy, NOW).cull
    assert not judge(held(busy=320), policy, NOW).cull


def test_memory_held_reason_names_the_wait() -> None:
    decision = judge(held(busy=None, active=40), SHIPPED, NOW)
    assert decision.reason == "GPU G active 40 min ago, needs 1 h idle (now 0%)"


def test_tracker_last_busy_at_counts_single_readings_of_this_server() -> None:
    t = tracker()
    feed(t, [0, 0, 0, 0], ago(14))
    assert not t.add(ago(10), 25, 4096)  # one reading at 25%: the 5-min mean is 5%
    t.add(ago(9), 0, 4096)
    s = t.summary()
    assert s is not None and s.last_active_at is None and s.last_busy_at == ago(10)
    copy = tracker()
    copy.restore(t.to_dict())
    assert copy.summary() == s
    old = t.to_dict()
    del old["last_busy_at"]  # a state file from before the rule
    copy.restore(old)
    assert copy.summary() == replace(s, last_busy_at=None)
    t.forget_before(ago(5))  # a new server holds the GPU
    s = t.summary()
    assert s is not None and s.last_busy_at is None


# ---------------------------------------------------------------------- earliest cull
NO_AGE = replace(POLICY, max_age=0)
AGED = replace(POLICY, max_age=8 * 3600)
MIN = timedelta(minutes=1)


@pytest.mark.parametrize(
    "obs, policy, at, why",
    [
        # hub activity 10 min ago, GPU active 5 min ago: the GPU's 30 min decides
        (server(last_activity=ago(10), gpus={"G": gpu(idle=5)}), NO_AGE, NOW + 25 * MIN, "idle"),
        # hub activity is the later bound: 30 min after it
        (server(last_activity=ago(2), gpus={"G": gpu(idle=20)}), NO_AGE, NOW + 28 * MIN, "idle"),
        # a GPU with a 40-min pause in its past must stay idle 80 min
        (
            server(last_activity=ago(60), gpus={"G": gpu(idle=10, pause=40)}),
            NO_AGE,
            NOW + 70 * MIN,
            "idle",
        ),
        # CPU-only: the 1 h timeout after hub activity
        (server(last_activity=ago(50), gpus={}), NO_AGE, NOW + 10 * MIN, "idle"),
        # max_age comes first: started 7 h 50 min ago, 8 h max
        (
            server(started=ago(470), last_activity=ago(1), gpus={"G": gpu(idle=1)}),
            AGED,
            NOW + 10 * MIN,
            "max_age",
        ),
        # already past its idle deadline (kept for a kernel, say): now
        (server(last_activity=ago(200), gpus={"G": gpu(idle=100)}), NO_AGE, NOW, "idle"),
    ],
)
def test_earliest_cull(obs: ServerObservation, policy: Policy, at: datetime, why: str) -> None:
    assert earliest_cull(obs, policy, NOW) == Deadline(at, why)


@pytest.mark.parametrize(
    "obs, policy",
    [
        (server(gpus={"G": None}), NO_AGE),  # an unread GPU: nothing is known
        (server(gpus=None), NO_AGE),  # assignment unknown
        (server(), replace(NO_AGE, gpu_timeout=0)),  # idle culling off, no max_age
    ],
)
def test_no_earliest_cull_when_nothing_bounds_it(obs: ServerObservation, policy: Policy) -> None:
    assert earliest_cull(obs, policy, NOW) is None


def test_deadlines_round_trip_and_what_reads_as_unknown(tmp_path: Path) -> None:
    path = tmp_path / "deadlines.json"
    save_deadlines(path, {"alice/": Deadline(NOW, "idle"), "bob/x": None})
    assert load_deadlines(path, now=datetime.now(timezone.utc)) == {"alice/": Deadline(NOW, "idle")}
    # a culler that stopped writing says nothing
    assert load_deadlines(path, now=datetime.now(timezone.utc) + timedelta(hours=1)) == {}
    at = "2026-01-01T12:00:00+00:00"
    path.write_text(
        '{"carol/": {"at": "2026-01-01T12:00:00", "why": "idle"}, '  # no time zone
        f'"dave/": {{"at": "{at}", "why": "whim"}}, "erin": {{"at": "{at}", "why": "idle"}}, '
        f'"fay/": {{"at": "{at}", "why": "max_age"}}, "x": 1}}'
    )
    assert load_deadlines(path) == {"fay/": Deadline(NOW, "max_age")}
    path.write_text("not json")
    assert load_deadlines(path) == {} and load_deadlines(tmp_path / "missing.json") == {}
