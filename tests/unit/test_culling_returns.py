"""The returning-user accounting of benchmarks/culling_returns.py (issue 35), on hand-made
sessions. The benchmark itself is run by hand."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from jupyterhub_gpu.core.culling import idleness, tracker

pytestmark = pytest.mark.unit

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
H = 3600.0


@pytest.fixture(scope="module")
def cr() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("culling_returns")
    finally:
        sys.path.remove(str(BENCHMARKS))


def session(
    cr: ModuleType,
    work: list[tuple[float, float]],
    visits: list[tuple[float, float]],
    end: float,
    *,
    cells: bool = True,
) -> object:
    ws = tuple(cr.Work(a, z, a) for a, z in work)
    return cr.Timeline("s", 0.0, end, ws, tuple(visits), tuple(work) if cells else ())


def test_a_cull_followed_by_a_return_is_one_forced_restart_and_frees_exactly_the_gap(
    cr: ModuleType,
) -> None:
    tl = session(cr, [(0, 600), (20_100, 20_400)], [(0, 900), (20_000, 21_000)], 30_000)
    m = cr.score(tl, [cr.Cull(8_000, 20_000)])
    assert m.forced_restarts == 1
    assert m.freed_gpu_hours == pytest.approx((20_000 - 8_000) / H)
    assert m.freed_before_return_gpu_hours == pytest.approx((20_000 - 8_000) / H)
    assert m.interrupted_gpu_minutes == 0
    assert m.lost_state_gpu_minutes == pytest.approx(10.0)  # the 600 s of work in the kernel


def test_a_cull_nobody_comes_back_to_frees_until_the_end_without_a_restart(cr: ModuleType) -> None:
    tl = session(cr, [(0, 600)], [(0, 900)], 30_000)
    m = cr.score(tl, [cr.Cull(8_000, None)])
    assert (m.forced_restarts, m.interrupted_gpu_minutes) == (0, 0)
    assert m.freed_gpu_hours == pytest.approx(22_000 / H)
    assert m.freed_before_return_gpu_hours == 0


def test_work_running_at_the_cull_counts_interrupted_minutes_not_freed_hours(
    cr: ModuleType,
) -> None:
    tl = session(cr, [(0, 3_600)], [(0, 60)], 7_200)
    m = cr.score(tl, [cr.Cull(1_800, None)])
    assert m.interrupted_gpu_minutes == pytest.approx(30.0)
    assert m.freed_gpu_hours == pytest.approx((7_200 - 3_600) / H)


def test_a_process_launched_before_the_cull_that_resumes_after_it_was_interrupted(
    cr: ModuleType,
) -> None:
    # an inference loop launched at 0 pauses, and resumes at 5000 in the same process
    ws = (cr.Work(0, 600, 0), cr.Work(5_000, 5_600, 0))
    tl = cr.Timeline("s", 0.0, 9_000, ws, ((0, 60),))
    assert cr.score(tl, [cr.Cull(3_000, None)]).interrupted_gpu_minutes == pytest.approx(10.0)


def test_oracles_on_a_hand_made_session(cr: ModuleType) -> None:
    tl = session(cr, [(1_000, 2_000), (5_000, 6_000)], [(0, 6_100)], 20_000)
    grace = 1_800
    assert cr.idle_gaps(tl) == [(0, 1_000), (2_000, 5_000), (6_000, 20_000)]
    assert cr.oracle_after_last(tl, grace) == pytest.approx((20_000 - 6_000 - grace) / H)
    # the first gap is shorter than the grace: nothing; the others less the grace
    assert cr.oracle_all_gaps(tl, grace) == pytest.approx((3_000 - grace + 14_000 - grace) / H)


def test_the_user_returns_at_the_next_visit_or_at_once_when_present(cr: ModuleType) -> None:
    tl = session(cr, [], [(0, 100), (500, 900)], 2_000)
    assert cr.next_return(tl, 200) == 500
    assert cr.next_return(tl, 600) == 600
    assert cr.next_return(tl, 950) is None


def test_the_benchmark_decides_with_the_products_own_judge_and_tracker(cr: ModuleType) -> None:
    assert cr.judge is idleness.judge
    assert cr.GpuTracker is tracker.GpuTracker


def test_replay_with_the_product_restarts_a_notebook_left_overnight(cr: ModuleType) -> None:
    """Work for an hour, home for the night, back 20 h later: the product's judge culls
    once (the held-memory wait, 5 h after the last activity), the user's return is a
    forced restart, nothing running is interrupted, and the freed time ends at the return."""
    tl = session(
        cr, [(600, 3_600), (20 * H + 600, 20 * H + 1_200)], [(0, 3_700), (20 * H, 21 * H)], 22 * H
    )
    policy = idleness.Policy()
    culls = cr.replay(tl, lambda since: cr.Ours("s", policy, since))
    assert len(culls) == 1
    (cull,) = culls
    # idle from the work's end (the window's mean falls under the threshold within a window)
    earliest = 3_600 + policy.gpu_held_idle
    assert earliest <= cull.at <= earliest + policy.gpu_window + cr.TICK_S
    assert cull.returned == 20 * H
    m = cr.measure(tl, lambda since: cr.Ours("s", policy, since), policy.gpu_timeout)
    assert (m.forced_restarts, m.interrupted_gpu_minutes) == (1, 0)
    assert m.freed_gpu_hours == pytest.approx((20 * H - cull.at) / H)


def test_replay_never_culls_a_running_cell_under_the_product(cr: ModuleType) -> None:
    # a 10-hour training in a cell, the user away the whole time
    tl = session(cr, [(600, 10 * H)], [(0, 700)], 11 * H)
    policy = idleness.Policy()
    culls = cr.replay(tl, lambda since: cr.Ours("s", policy, since))
    assert all(c.at >= 10 * H for c in culls)
    # the HTTP-only rule stops it while it runs
    stock = cr.replay(tl, lambda since: cr.Stock(policy.gpu_timeout))
    assert cr.score(tl, stock).interrupted_gpu_minutes > 0
