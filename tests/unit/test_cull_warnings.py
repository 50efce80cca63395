"""Tell before a cull (issues 35, 36): the pure warning decision, its words, its file."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyterhub_gpu.core.culling.idleness import (
    KernelsObservation,
    Policy,
    ServerObservation,
    Signal,
    earliest_cull,
    judge,
)
from jupyterhub_gpu.core.culling.warning import (
    LAB_TEXT_MAX,
    CullWarning,
    after_cull_words,
    freed_words,
    lab_warning_words,
    shortened,
    stopped_words,
    warn_step,
    warning_words,
    with_postponement,
)
from jupyterhub_gpu.core.words import duration
from jupyterhub_gpu.edges.files import load_cull_warnings, save_cull_warnings
from jupyterhub_gpu.edges.workspaces import open_notebooks
from jupyterhub_gpu.wire.cull_warnings import decode_cull_warnings, encode_cull_warnings
from jupyterhub_gpu.wire.lab_workspace import MAX_NOTEBOOKS, MAX_PATH, decode_open_notebooks

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
POLICY = Policy(timeout=3600, gpu_timeout=1800)
WARN = 600.0


def cpu_server(idle_min: float) -> ServerObservation:
    """A CPU-only server idle ``idle_min`` minutes at T0 (no kernel)."""
    last = T0 - timedelta(minutes=idle_min)
    return ServerObservation("alice", last, last, gpus={}, kernels=KernelsObservation())


def step(
    obs: ServerObservation,
    now: datetime,
    previous: CullWarning | None = None,
    postponable: bool = True,
) -> tuple[bool, Signal, CullWarning | None]:
    decision = judge(obs, POLICY, now)
    early = judge(obs, shortened(POLICY, WARN), now)
    deadline = earliest_cull(obs, POLICY, now)
    out, warning = warn_step(
        decision,
        early,
        previous,
        deadline=deadline.at if deadline and deadline.why == "idle" else None,
        idle_since=obs.last_activity or now,
        now=now,
        warn_before=WARN,
        postponable=postponable,
    )
    return out.cull, out.signal, warning


def test_shortened_takes_warn_before_off_every_wait_but_keeps_off_waits_off() -> None:
    p = shortened(Policy(timeout=3600, gpu_timeout=0, gpu_held_idle=300), 600)
    assert (p.timeout, p.gpu_timeout, p.gpu_held_idle) == (3000, 0, 1)
    assert p.max_age == Policy().max_age  # not an idle wait


def test_active_server_gets_no_warning() -> None:
    assert step(cpu_server(30), T0) == (False, Signal.HUB, None)


def test_warned_ten_minutes_ahead_then_culled_at_the_deadline() -> None:
    obs = cpu_server(50)  # 50 of 60 min idle: the shorter policy would cull
    cull, signal, warning = step(obs, T0)
    assert (cull, signal) == (False, Signal.HUB) and warning is not None
    assert warning.at == T0 + timedelta(minutes=10) and warning.issued == T0
    assert warning.idle_since == T0 - timedelta(minutes=50) and warning.postponable
    # a round later: still warned, same time, the first issue kept
    later = T0 + timedelta(minutes=2)
    cull, _, again = step(obs, later, warning)
    assert not cull and again is not None and again.issued == T0 and again.at == warning.at
    # at the deadline: culled, and the warning goes
    at = T0 + timedelta(minutes=10)
    assert step(obs, at, again)[0:1] == (True,) and step(obs, at, again)[2] is None


def test_an_idle_server_never_warned_is_warned_first_and_culled_warn_before_later() -> None:
    obs = cpu_server(90)  # already past its timeout, e.g. the culler just started
    cull, signal, warning = step(obs, T0)
    assert (cull, signal) == (False, Signal.WARNED) and warning is not None
    assert warning.at == T0 + timedelta(seconds=WARN)
    assert step(obs, T0 + timedelta(seconds=WARN - 1), warning)[0] is False
    assert step(obs, T0 + timedelta(seconds=WARN), warning)[0] is True


def test_activity_drops_the_warning() -> None:
    _, _, warning = step(cpu_server(55), T0)
    assert warning is not None
    busy = ServerObservation("alice", T0, T0 + timedelta(minutes=1), gpus={})
    assert step(busy, T0 + timedelta(minutes=2), warning) == (False, Signal.HUB, None)


def test_im_still_here_counts_as_activity_then() -> None:
    obs = cpu_server(55)
    pressed = T0 + timedelta(minutes=1)
    moved = with_postponement(obs, pressed)
    assert moved.last_activity == pressed
    assert with_postponement(obs, None) is obs
    assert with_postponement(moved, pressed - timedelta(hours=1)) is moved  # newer stays
    # no warning right after; warned again 50 min later, no button then
    assert step(moved, pressed + timedelta(minutes=5), postponable=False)[2] is None
    _, _, second = step(moved, pressed + timedelta(minutes=50), postponable=False)
    assert second is not None and not second.postponable
    assert second.at == pressed + timedelta(minutes=60)


def test_max_age_and_share_memory_are_not_warned_here() -> None:
    old = ServerObservation("alice", T0 - timedelta(days=8), T0, gpus={})
    assert step(old, T0) == (True, Signal.MAX_AGE, None)


def test_no_warning_when_off() -> None:
    obs = cpu_server(90)
    decision = judge(obs, POLICY, T0)
    out = warn_step(decision, decision, None, deadline=None, idle_since=T0, now=T0,
                    warn_before=0, postponable=True)  # fmt: skip
    assert out == (decision, None)


def test_the_words_a_student_reads() -> None:
    warning = CullWarning(
        T0 + timedelta(minutes=10), T0 - timedelta(minutes=50), T0, postponable=True
    )
    words = warning_words("", warning, T0)
    assert words.text == (
        "Your server will be stopped at 12:10 UTC because it has been idle for 50 min. "
        "Save your work, or press I'm still here to keep it."
    )
    assert words.said == "12:10 UTC" and words.postponable
    named = warning_words("big", CullWarning(warning.at, warning.idle_since, T0, False), T0)
    assert named.text.startswith("Your server 'big' will be stopped at 12:10 UTC")
    assert named.text.endswith("use it (run a cell, open a file) to keep it.")
    tomorrow = warning_words("", CullWarning(T0 + timedelta(days=1), T0, T0, False), T0)
    assert tomorrow.said == "Fri 02 Jan 12:00 UTC"


@pytest.mark.parametrize("suspend", [False, True])
@pytest.mark.parametrize("postponable", [True, False])
@pytest.mark.parametrize("idle", [timedelta(seconds=29), timedelta(hours=23, minutes=59),
                                  timedelta(days=6, hours=23)])  # fmt: skip
@pytest.mark.parametrize("ahead", [timedelta(minutes=10), timedelta(days=1)])
def test_the_words_in_jupyterlab_fit_its_notification(
    postponable: bool, idle: timedelta, ahead: timedelta, suspend: bool
) -> None:
    warning = CullWarning(T0 + ahead, T0 - idle, T0, postponable, suspend)
    words = lab_warning_words(warning, T0)
    # the browser writes the time in its own words: "Tue 25 Nov, 14:05 (local time)" at most
    shown = words.text.replace(words.said, "Tue 25 Nov, 14:05 (local time)")
    assert len(shown) <= LAB_TEXT_MAX, (len(shown), shown)
    assert words.said == warning_words("", warning, T0).said  # the same time, said once
    what = "suspends at" if suspend else "stops at"
    assert words.text.startswith(f"Idle for {duration(idle.total_seconds())}: this server {what}")
    if suspend:
        assert words.text.endswith(
            "Press I'm still here to keep it running."
            if postponable
            else "Run a cell or open a file to keep it running."
        )
        assert ", kernels kept." in words.text and "Save your work" not in words.text
    else:
        assert words.text.endswith(
            "press I'm still here to keep it." if postponable else "open a file) to keep it."
        )


def test_the_words_of_a_suspend_say_suspended_and_what_is_kept() -> None:
    """A server the culler will suspend: the words the hub uses after a suspend
    (core/suspend.py's suspended_words), nothing about losing work."""
    warning = CullWarning(T0 + timedelta(minutes=10), T0 - timedelta(minutes=50), T0, True, True)
    assert warning_words("", warning, T0).text == (
        "Your server will be suspended at 12:10 UTC because it has been idle for 50 min: "
        "start it again to resume where you left it, with your kernels and their variables. "
        "Press I'm still here to keep it running."
    )
    second = replace(warning, postponable=False)
    assert warning_words("big", second, T0).text.startswith("Your server 'big' will be suspended")
    assert warning_words("big", second, T0).text.endswith(
        "Run a cell or open a file to keep it running."
    )
    decision = judge(cpu_server(120), POLICY, T0)
    out, given = warn_step(decision, decision, None, deadline=None, idle_since=T0, now=T0,
                           warn_before=WARN, postponable=True, suspend=True)  # fmt: skip
    assert given is not None and given.suspend
    assert out.reason.startswith("warned, suspended at 12:10:00 UTC at the earliest: idle: ")


def test_the_words_after_a_cull() -> None:
    reason = (
        "idle: no hub activity for 1 h 02 min, kernels idle 1 h, 1 GPU under 10% for 40 min "
        "(timeout 30 min)"
    )
    words = stopped_words("", T0, reason, T0 + timedelta(hours=1))
    assert words.text == (
        "Your server was stopped at 12:00 UTC because it had been idle for 1 h 02 min (the "
        "limit is 30 min). Your files are kept: start it again when you need it."
    )
    # the culler's own line, as judge() writes it
    obs = cpu_server(61)
    line = judge(obs, POLICY, T0).reason
    assert stopped_words("", T0, line, T0).text.startswith(
        "Your server was stopped at 12:00 UTC because it had been idle for 1 h 01 min (the "
        "limit is 1 h)."
    ), line
    aged = stopped_words("big", T0, "running for 8 d, over the maximum age of 7 d", T0)
    assert aged.text.startswith("Your server 'big' was stopped at 12:00 UTC (running for 8 d")


def test_the_file_round_trips_and_skips_bad_entries(tmp_path: Path) -> None:
    w = CullWarning(T0 + timedelta(minutes=10), T0 - timedelta(minutes=50), T0, True)
    assert decode_cull_warnings(encode_cull_warnings({"alice/": w})) == {"alice/": w}
    s = replace(w, suspend=True)
    assert decode_cull_warnings(encode_cull_warnings({"alice/": s})) == {"alice/": s}
    # a file written before "suspend" reads as a stop; a "suspend" not true/false is skipped
    old = json.loads(encode_cull_warnings({"alice/": s, "bob/": s}))
    del old["alice/"]["suspend"]
    old["bob/"]["suspend"] = "yes"
    assert decode_cull_warnings(json.dumps(old)) == {"alice/": w}
    bad = b'{"alice/": {"at": "2026-01-01T12:00:00"}, "bob": {}, "x/": 3}'
    assert decode_cull_warnings(bad) == {} and decode_cull_warnings(b"[]") == {}
    path = tmp_path / "warnings.json"
    save_cull_warnings(path, {"alice/": w})
    assert load_cull_warnings(path) == {"alice/": w}
    assert load_cull_warnings(path, now=datetime.now(timezone.utc) + timedelta(hours=1)) == {}
    assert load_cull_warnings(tmp_path / "missing.json") == {}


def test_what_a_cull_freed_and_the_notebooks_that_were_open() -> None:
    assert freed_words(1, "NVIDIA GeForce RTX 3090", 2, 8) == (
        "1 GPU (RTX 3090), 2 CPUs and 8 GiB of memory"
    )
    assert freed_words(0, "", 0.5, 1) == "0.5 CPUs and 1 GiB of memory"
    assert after_cull_words("1 GPU (RTX 3090)", ["a.ipynb", "work/b.ipynb"]) == (
        "It gave 1 GPU (RTX 3090) back for others. Notebooks open then: a.ipynb and "
        "work/b.ipynb; JupyterLab opens them again, but their variables are gone: run them "
        "again."
    )
    assert after_cull_words("", []) == ""


def _workspace(*paths: str) -> str:
    data = {f"notebook:{p}": {"data": {"path": p, "factory": "Notebook"}} for p in paths}
    data["layout-restorer:data"] = {"main": {}}  # type: ignore[dict-item]
    return json.dumps({"data": data, "metadata": {"id": "default"}})


def test_the_workspace_file_is_decoded_bounded() -> None:
    assert decode_open_notebooks(_workspace("a.ipynb", "b.ipynb")) == ("a.ipynb", "b.ipynb")
    long = "x" * 500 + ".ipynb"
    (shown,) = decode_open_notebooks(_workspace(long))
    assert len(shown) == MAX_PATH and shown.endswith("…")
    many = decode_open_notebooks(_workspace(*(f"{i}.ipynb" for i in range(100))))
    assert len(many) == MAX_NOTEBOOKS
    assert decode_open_notebooks(_workspace("evil\x1b[2J.ipynb")) == ("evil[2J.ipynb",)
    for bad in (b"", b"[]", b'{"data": 3}', b"[" * 100000):
        assert decode_open_notebooks(bad) == ()


def test_the_workspace_is_read_without_following_links(tmp_path: Path) -> None:
    home = tmp_path / "alice"
    folder = home / ".jupyter" / "lab" / "workspaces"
    folder.mkdir(parents=True)
    (folder / "default-37a8.jupyterlab-workspace").write_text(_workspace("a.ipynb"))
    assert open_notebooks(home) == ("a.ipynb",)
    # a link to another user's workspace (the file, or a folder on the way) reads nothing
    bob = tmp_path / "bob" / ".jupyter" / "lab" / "workspaces"
    bob.mkdir(parents=True)
    (bob / "b.jupyterlab-workspace").write_text(_workspace("bobs-secret.ipynb"))
    (folder / "link.jupyterlab-workspace").symlink_to(bob / "b.jupyterlab-workspace")
    assert open_notebooks(home) == ("a.ipynb",)
    mallory = tmp_path / "mallory"
    (mallory / ".jupyter").mkdir(parents=True)
    (mallory / ".jupyter" / "lab").symlink_to(tmp_path / "bob" / ".jupyter" / "lab")
    assert open_notebooks(mallory) == ()
    assert open_notebooks(tmp_path / "nobody") == ()
