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


# -- suspend instead of stop (issue 35, item 4) --------------------------------------------


def test_a_restored_cull_frees_the_gap_less_the_checkpoint_and_forces_no_restart(
    cr: ModuleType,
) -> None:
    tl = session(cr, [(0, 600), (20_100, 20_400)], [(0, 900), (20_000, 21_000)], 30_000)
    costs = cr.SuspendCosts()  # 4 GiB: 113.6 s to write, 70 s to read back
    cull = cr.Cull(8_000, 20_000, restored=True, checkpoint_s=costs.checkpoint_s,
                   restore_s=costs.restore_s)  # fmt: skip
    m = cr.score(tl, [cull])
    assert (m.forced_restarts, m.restores, m.lost_state_gpu_minutes) == (0, 1, 0)
    assert m.freed_gpu_hours == pytest.approx((20_000 - 8_000 - 4 * 28.4) / H)
    assert m.freed_before_return_gpu_hours == m.freed_gpu_hours
    assert m.restore_wait_minutes == pytest.approx(4 * 17.5 / 60)
    # the same cull as a stop: a forced restart and the kernel's 10 GPU-minutes lost
    stop = cr.score(tl, [cr.Cull(8_000, 20_000)])
    assert (stop.forced_restarts, stop.restores, stop.lost_state_gpu_minutes) == (1, 0, 10.0)
    assert stop.freed_gpu_hours - m.freed_gpu_hours == pytest.approx(4 * 28.4 / H)


def test_a_failed_restore_is_a_forced_restart_with_its_lost_state(cr: ModuleType) -> None:
    tl = session(cr, [(0, 600), (20_100, 20_400)], [(0, 900), (20_000, 21_000)], 30_000)
    failed = cr.Cull(8_000, 20_000, restored=False, checkpoint_s=100.0, restore_s=70.0)
    m = cr.score(tl, [failed])
    assert (m.forced_restarts, m.restores, m.lost_state_gpu_minutes) == (1, 0, 10.0)
    assert m.restore_wait_minutes == pytest.approx(70 / 60)  # the user waited for it too
    # nobody came back: nothing restored, nothing waited for, freed to the end
    gone = cr.score(tl, [cr.Cull(8_000, None, checkpoint_s=100.0)])
    assert (gone.restores, gone.forced_restarts, gone.restore_wait_minutes) == (0, 0, 0)
    assert gone.freed_gpu_hours == pytest.approx((30_000 - 8_100 - 300) / H)


def test_suspend_at_the_first_idle_gap_restores_the_kernel_overnight(cr: ModuleType) -> None:
    """Work for an hour, home for the night, back 20 h later: suspended a timeout after
    the last activity (not 5 h later), restored at the return with its kernel, which
    still holds its GPU memory then (no work since the restore)."""
    tl = session(
        cr, [(600, 3_600), (20 * H + 600, 20 * H + 1_200)], [(0, 3_700), (20 * H, 21 * H)], 22 * H
    )
    policy = cr.first_gap_policy(1_800)
    assert (policy.gpu_held_idle, policy.gpu_loaded_idle, policy.gpu_pause_factor) == (0, 0, 0)
    costs = cr.SuspendCosts()
    cull, after = cr.replay(tl, lambda since: cr.Ours("s", policy, since), costs)
    assert 3_700 + 1_800 <= cull.at <= 3_700 + 1_800 + policy.gpu_window + cr.TICK_S
    assert (cull.returned, cull.restored) == (20 * H, True)
    # suspended again a timeout after the last visit; nobody comes back before the end
    assert after.at >= 21 * H + 1_800 and (after.returned, after.restored) == (None, False)
    m = cr.measure(tl, lambda since: cr.Ours("s", policy, since), 1_800, costs)
    assert (m.forced_restarts, m.restores, m.interrupted_gpu_minutes) == (0, 1, 0)
    work_starts = [w.start for w in tl.work]
    # after the restore the kernel (alive since 0) holds its memory before any new work;
    # after a restart the new kernel holds none until its first work
    restored = cr._derived_reading(tl, work_starts, 20 * H, 20 * H + 60, 0.0)
    restarted = cr._derived_reading(tl, work_starts, 20 * H, 20 * H + 60)
    assert restored == (0.0, tl.held_mib) and restarted == (0.0, 0.0)


def test_restore_failures_are_seeded_and_every_one_fails_at_rate_one(cr: ModuleType) -> None:
    tl = session(
        cr, [(600, 3_600), (20 * H + 600, 20 * H + 1_200)], [(0, 3_700), (20 * H, 21 * H)], 22 * H
    )
    policy = cr.first_gap_policy(1_800)
    always = cr.SuspendCosts(failure_rate=1.0)
    cull, _ = cr.replay(tl, lambda since: cr.Ours("s", policy, since), always)
    assert not cull.restored and cull.restore_s == always.restore_s
    assert cr.score(tl, [cull]).forced_restarts == 1
    half = cr.SuspendCosts(failure_rate=0.5, seed=3)
    draws = [half.fails("s", i) for i in range(200)]
    assert draws == [half.fails("s", i) for i in range(200)]  # the same for every policy
    assert 60 < sum(draws) < 140
    assert not any(cr.SuspendCosts().fails("s", i) for i in range(200))  # default: none fail


def test_kernel_work_suspends_a_cells_gap_but_waits_for_a_loop_outside_the_kernels(
    cr: ModuleType,
) -> None:
    """A serving loop started in a terminal pauses 2 h and resumes by itself: suspending
    it at the first idle gap interrupts it; the kernel-aware rule waits (the held wait,
    its GPU having computed outside any cell). The same work in cells is suspended at
    the first gap by both."""
    ws = (cr.Work(0, 600, 0), cr.Work(7_800, 8_400, 0))
    loop = cr.Timeline("s", 0.0, 30_000, ws, ((0, 60),))  # no cells: a terminal
    gap, held = cr.first_gap_policy(1_800), idleness.Policy(gpu_timeout=1_800)
    costs = cr.SuspendCosts()
    first = cr.measure(loop, lambda since: cr.Ours("s", gap, since), 1_800, costs)
    aware = cr.measure(loop, lambda since: cr.KernelWork("s", held, since), 1_800, costs)
    assert first.interrupted_gpu_minutes == pytest.approx(10.0)
    assert aware.interrupted_gpu_minutes == 0 and aware.culls == 1
    cells = session(cr, [(0, 600), (7_800, 8_400)], [(0, 60), (7_700, 8_500)], 30_000)
    (early, *_) = cr.replay(cells, lambda since: cr.KernelWork("s", held, since), costs)
    assert 2_400 <= early.at <= 2_400 + gap.gpu_window + cr.TICK_S and early.restored
