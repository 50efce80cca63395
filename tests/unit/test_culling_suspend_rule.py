"""The culler's rule when it suspends (issue 35, item 4; docs/culler.md "Suspend instead
of stop"): a server whose GPU work was its kernels' goes at the first idle gap, GPU work
outside the kernels keeps the memory-held waits, and a stop keeps every wait. Pure,
table-driven; the helpers are test_idleness.py's."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from jupyterhub_gpu.core.culling.idleness import (
    Deadline,
    GpuSummary,
    KernelsObservation,
    Policy,
    ServerObservation,
    Signal,
    earliest_cull,
    first_gap,
    judge,
    kernels_did_the_gpu_work,
    suspend_policy,
)
from jupyterhub_gpu.core.culling.warning import because_of
from tests.unit.test_idleness import NOW, POLICY, ago, gpu, kernels, server

pytestmark = pytest.mark.unit

#: the shipped waits: 30 min, a GPU that computed and still holds memory 5 h, one that
#: only loaded it 1 h (POLICY's pause factor 2, window 5 min)
SHIPPED = replace(POLICY, gpu_held_idle=5 * 3600.0, gpu_loaded_idle=3600.0)
WINDOW_MIN = POLICY.gpu_window / 60


def busy_gpu(busy: float | None, memory: float = 4096, active: float | None = None) -> GpuSummary:
    """A GPU last busy ``busy`` min ago (None: never since its server started), last active
    ``active`` min ago (default: then), still holding ``memory`` MiB."""
    last = active if active is not None else (480 if busy is None else busy)
    return replace(
        gpu(idle=last, observed=600),
        memory_used_mib=memory,
        last_busy_at=None if busy is None else ago(busy),
    )


def notebook(
    busy: float | None,
    kernel: float | None,
    *,
    hub: float = 480,
    memory: float = 4096,
    active: float | None = None,
) -> ServerObservation:
    """A server whose hub activity was ``hub`` min ago, with one idle kernel last active
    ``kernel`` min ago (None: no kernel) and one GPU (:func:`busy_gpu`)."""
    ks = kernels() if kernel is None else kernels(("idle", kernel))
    return server(
        last_activity=ago(hub),
        kernels=ks,
        gpus={"G": busy_gpu(busy, memory, active)},
    )


# -- the rule itself -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obs", "in_kernels"),
    [
        # a cell computed, ended 40 min ago: its GPU's last busy reading is the kernel's
        (notebook(busy=40, kernel=40), True),
        # the kernel's last message came up to one window before the last busy reading
        # (the mean's window): still the cell's work
        (notebook(busy=40, kernel=40 + WINDOW_MIN - 1), True),
        (notebook(busy=40, kernel=40 + WINDOW_MIN + 1), False),
        # the GPU computed 40 min ago, the kernels were last heard of 3 h ago: a process
        # outside them (a serving loop in a terminal)
        (notebook(busy=40, kernel=180), False),
        # a kernel that talked after the work (a cell printing its results): the work is its
        (notebook(busy=40, kernel=20), True),
        # no kernel at all, the GPU computed: outside the kernels
        (notebook(busy=40, kernel=None), False),
        # the GPU never computed in this server: nothing outside the kernels to protect
        (notebook(busy=None, kernel=None), True),
        # a GPU with no reading decides nothing: judged as a stop (and kept for it)
        (server(gpus={"G": None}, kernels=kernels(("idle", 40))), False),
        # two GPUs, one busy outside the kernels: the server waits for it
        (
            server(
                kernels=kernels(("idle", 40)),
                gpus={"G": busy_gpu(40), "H": busy_gpu(41, active=41)},
            ),
            True,
        ),
        (
            server(
                kernels=kernels(("idle", 180)),
                gpus={"G": busy_gpu(40), "H": busy_gpu(None)},
            ),
            False,
        ),
        # a CPU-only server: nothing on a GPU (judged the same either way)
        (server(gpus={}, kernels=kernels(("idle", 40))), True),
    ],
)
def test_whose_gpu_work_it_was(obs: ServerObservation, in_kernels: bool) -> None:
    assert kernels_did_the_gpu_work(obs, POLICY.gpu_window) is in_kernels


def test_only_the_kernels_own_activity_counts_not_the_servers() -> None:
    """``/api/status``'s last activity counts terminals too: a loop in a terminal writing
    output is not a kernel's work."""
    terminal = notebook(busy=40, kernel=None)
    terminal = replace(terminal, kernels=KernelsObservation((), ago(39)))
    assert kernels_did_the_gpu_work(terminal, POLICY.gpu_window) is False


def test_unread_kernels_are_unknown_and_each_caller_chooses() -> None:
    unread = notebook(busy=40, kernel=40)
    unread = replace(unread, kernels=None)
    assert kernels_did_the_gpu_work(unread, POLICY.gpu_window) is None
    assert suspend_policy(unread, SHIPPED, kernels_unknown=True) == first_gap(SHIPPED)
    assert suspend_policy(unread, SHIPPED, kernels_unknown=False) == SHIPPED


def test_first_gap_takes_off_the_waits_that_protect_a_process_and_nothing_else() -> None:
    gap = first_gap(SHIPPED)
    assert (gap.gpu_held_idle, gap.gpu_loaded_idle, gap.gpu_pause_factor) == (0, 0, 0)
    assert replace(gap, gpu_held_idle=5 * 3600.0, gpu_loaded_idle=3600.0, gpu_pause_factor=2.0) == (
        SHIPPED
    )


# -- judge(): suspend on and off ------------------------------------------------------------


@pytest.mark.parametrize(
    ("obs", "suspending", "stopping"),
    [
        # a cell's work 40 min ago, its memory still held: a stop waits 5 h, a suspend goes
        (notebook(busy=40, kernel=40), Signal.IDLE, Signal.GPU),
        # ... but not before the timeout: 20 min is not idle enough for either
        (notebook(busy=20, kernel=20), Signal.GPU, Signal.GPU),
        # work outside the kernels: the memory-held 5 h either way, then it goes
        (notebook(busy=40, kernel=180), Signal.GPU, Signal.GPU),
        (notebook(busy=299, kernel=480), Signal.GPU, Signal.GPU),
        (notebook(busy=301, kernel=480), Signal.IDLE, Signal.IDLE),
        # a model loaded by a kernel, never computed: the loaded wait (1 h) only for a stop
        (notebook(busy=None, kernel=40, active=40), Signal.IDLE, Signal.GPU),
        # a GPU that paused 60 min between two cells: a stop waits twice that, not a suspend
        (
            server(
                last_activity=ago(480),
                kernels=kernels(("idle", 40)),
                gpus={"G": replace(busy_gpu(40, memory=0), longest_pause_s=3600)},
            ),
            Signal.IDLE,
            Signal.GPU,
        ),
        # no GPU reading: kept for missing data, as today
        (
            server(gpus={"G": None}, kernels=kernels(("idle", 40))),
            Signal.GPU_MISSING,
            Signal.GPU_MISSING,
        ),
        # a busy kernel, hub activity: kept either way (a stop by its GPU's wait first)
        (
            replace(notebook(busy=40, kernel=40), kernels=kernels(("busy", 40))),
            Signal.KERNELS,
            Signal.GPU,
        ),
        (notebook(busy=40, kernel=40, hub=10), Signal.HUB, Signal.HUB),
    ],
)
def test_a_suspend_goes_at_the_first_gap_of_a_cells_work_a_stop_waits(
    obs: ServerObservation, suspending: Signal, stopping: Signal
) -> None:
    on = judge(obs, SHIPPED, NOW, suspending=True)
    off = judge(obs, SHIPPED, NOW)
    assert (on.signal, off.signal) == (suspending, stopping), (on.reason, off.reason)
    assert on.cull is (suspending is Signal.IDLE) and off.cull is (stopping is Signal.IDLE)
    assert judge(obs, SHIPPED, NOW, suspending=False) == off


def test_unread_kernels_are_asked_for_never_culled() -> None:
    """With suspend the judgement of a server whose kernels were not read asks for them
    (the culler reads them only then) where a stop is kept by its GPU's wait; it never
    culls for idleness on unread kernels."""
    obs = replace(notebook(busy=40, kernel=40), kernels=None)
    assert judge(obs, SHIPPED, NOW, suspending=True).signal is Signal.KERNELS_MISSING
    assert judge(obs, SHIPPED, NOW).signal is Signal.GPU
    # a server kept for something else is not asked: its hub activity keeps it either way
    recent = replace(obs, last_activity=ago(5))
    assert judge(recent, SHIPPED, NOW, suspending=True).signal is Signal.HUB


def test_the_reason_a_user_reads_after_an_early_suspend_is_true() -> None:
    """The hub's note ("suspended at 14:05 because it had been idle for ...") reads the
    culler's reason: it says how long the server had been idle, and the limit."""
    decision = judge(notebook(busy=40, kernel=40, hub=40), SHIPPED, NOW, suspending=True)
    assert decision.cull
    assert decision.reason == (
        "idle: no hub activity for 40 min, kernels idle 40 min, 1 GPU under 10% for 40 min "
        "(timeout 30 min)"
    )
    assert because_of(decision.reason) == (
        "because it had been idle for 40 min (the limit is 30 min)"
    )


def test_max_age_is_the_same_either_way() -> None:
    obs = replace(notebook(busy=1, kernel=1, hub=1), started=ago(8 * 60))
    aged = replace(SHIPPED, max_age=8 * 3600)
    assert judge(obs, aged, NOW, suspending=True) == judge(obs, aged, NOW)
    assert judge(obs, aged, NOW).signal is Signal.MAX_AGE


# -- earliest_cull(): the deadline the queue and the warning read ---------------------------


def test_the_earliest_cull_of_a_suspend_is_the_first_gap_once_the_kernels_are_read() -> None:
    cell = notebook(busy=10, kernel=10, hub=10)
    aged_off = replace(SHIPPED, max_age=0)
    gap_at = NOW + timedelta(minutes=20)
    held_at = NOW + timedelta(minutes=5 * 60 - 10)
    assert earliest_cull(cell, aged_off, NOW, suspending=True) == Deadline(gap_at, "idle")
    assert earliest_cull(cell, aged_off, NOW) == Deadline(held_at, "idle")
    # kernels unread (the culler reads them only once the rest is idle): the later one
    unread = replace(cell, kernels=None)
    assert earliest_cull(unread, aged_off, NOW, suspending=True) == Deadline(held_at, "idle")
    # work outside the kernels: the stop's
    loop = notebook(busy=10, kernel=180, hub=10)
    assert earliest_cull(loop, aged_off, NOW, suspending=True) == Deadline(held_at, "idle")


def test_the_shorter_policy_for_warnings_commutes_with_the_rule() -> None:
    """The culler warns with the same policy ``warn_before`` shorter: the suspend rule on
    the shortened policy is the shortened suspend rule."""
    from jupyterhub_gpu.core.culling.warning import shortened

    assert first_gap(shortened(SHIPPED, 600)) == shortened(first_gap(SHIPPED), 600)
    assert Policy() != first_gap(Policy())  # the shipped policy has waits to take off
