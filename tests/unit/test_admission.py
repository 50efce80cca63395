"""admission.py's pure rules: which group pays, and how long a group may wait in the queue
(the spawner's use of them: test_spawner_charge.py)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.scheduling import queue_settings
from jupyterhub_gpu.hub.admission import charge_group, group_wait, longest_wait

pytestmark = pytest.mark.unit

_, POLICIES = queue_settings(
    {
        "groups": {"ml-lab": {"max_queue_wait": 120}, "course": {"max_queue_wait": 0}, "x": {}},
        "default_group": {"max_queue_wait": 600},
    }
)


@pytest.mark.parametrize(
    "allowed, chosen, charged",
    [
        (("ml-lab", "vision"), None, "ml-lab"),  # the default: the first
        (("ml-lab", "vision"), "vision", "vision"),
        (("ml-lab", "vision"), "ops", "ml-lab"),  # not theirs to charge: the default
        ((), "ops", ""),  # in no group
        ((), None, ""),
    ],
)
def test_charge_group(allowed: tuple[str, ...], chosen: str | None, charged: str) -> None:
    assert charge_group(allowed, chosen) == charged


@pytest.mark.parametrize(
    "group, wait",
    [
        ("ml-lab", 120.0),  # its own
        ("course", 0.0),  # never waits
        ("x", 3600.0),  # listed without one: the hub's default
        ("other", 600.0),  # not listed: default_group's
    ],
)
def test_group_wait(group: str, wait: float) -> None:
    assert group_wait(POLICIES, group, 3600.0) == wait


def test_longest_wait_includes_the_default() -> None:
    assert longest_wait(POLICIES, 3600.0) == 3600.0
    assert longest_wait(POLICIES, 60.0) == 600.0
