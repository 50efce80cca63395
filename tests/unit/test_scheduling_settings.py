"""Unit tests of ``queue_settings``: the admin's ``queue_policy`` dict to the queue's data."""

from __future__ import annotations

import math
from typing import Any

import pytest

from jupyterhub_gpu.core.scheduling import (
    GroupPolicy,
    Policies,
    Quota,
    SchedulerSettings,
    queue_settings,
)
from jupyterhub_gpu.errors import ConfigError

pytestmark = pytest.mark.unit

WHERE = "GPUDockerSpawner.queue_policy"
A100 = "NVIDIA A100-SXM4-40GB"
TITAN = "NVIDIA GeForce GTX TITAN X"
QW = f"{WHERE}.groups.ml-lab.max_queue_wait"

FULL: dict[str, Any] = {
    "half_life_hours": 168,
    "model_weights": {A100: 3.0, TITAN: 0.5},
    "weights": {"fairshare": 2.0, "user_fairshare": 0.2, "admin": 0.5, "age": 0},
    "max_age_hours": 2,
    "backfill": False,
    "reservation_notice_hours": 12,
    "groups": {
        "ml-lab": {
            "priority": 10,
            "shares": 2,
            "max_gpus": 8,
            "max_gpus_per_model": {A100: 2},
            "user_max_gpus": 4,
            "user_max_gpus_per_model": {A100: 1, TITAN: 0},
            "max_queue_wait": 600,
        },
        "vision": {"shares": 0.5},
    },
    "default_group": {"priority": 1, "max_gpus": None, "user_max_gpus": 2},
    "users": {"alice": {"max_gpus": 2, "max_gpus_per_model": {A100: 0}}, "bob": {}},
}


def test_full_example_maps_to_the_dataclasses() -> None:
    settings, policies = queue_settings(FULL)
    assert settings == SchedulerSettings(
        half_life_s=168 * 3600.0,
        model_weights={A100: 3.0, TITAN: 0.5},
        weight_fairshare=2.0,
        weight_user_fairshare=0.2,
        weight_admin=0.5,
        weight_age=0.0,
        max_age_s=7200.0,
        backfill=False,
        reservation_notice_s=12 * 3600.0,
    )
    assert policies == Policies(
        groups={
            "ml-lab": GroupPolicy(
                priority=10.0,
                shares=2.0,
                quota=Quota(8, {A100: 2}),
                user_quota=Quota(4, {A100: 1, TITAN: 0}),
                max_queue_wait_s=600.0,
            ),
            "vision": GroupPolicy(shares=0.5),
        },
        default=GroupPolicy(priority=1.0, user_quota=Quota(2)),
        users={"alice": Quota(2, {A100: 0}), "bob": Quota()},
    )
    assert isinstance(policies.groups["ml-lab"].priority, float)


@pytest.mark.parametrize("raw", [None, {}])
def test_nothing_gives_the_defaults(raw: dict[str, Any] | None) -> None:
    assert queue_settings(raw) == (SchedulerSettings(), Policies())


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"weights": {"age": 0.0}}, SchedulerSettings(weight_age=0.0)),
        ({"max_age_hours": math.inf}, SchedulerSettings(max_age_s=math.inf)),
        ({"half_life_hours": 0.5}, SchedulerSettings(half_life_s=1800.0)),
        ({"backfill": True}, SchedulerSettings()),
        ({"reservation_notice_hours": 2}, SchedulerSettings(reservation_notice_s=7200.0)),
        ({"reservation_notice_hours": 0}, SchedulerSettings(reservation_notice_s=0.0)),
    ],
)
def test_partial_settings_keep_the_other_defaults(
    raw: dict[str, Any], expected: SchedulerSettings
) -> None:
    assert queue_settings(raw) == (expected, Policies())


BAD: list[tuple[Any, str, str]] = [
    # (raw, the path named, what the message says is expected)
    ("fast", WHERE, "expected a mapping"),
    ({"half_life": 168}, f"{WHERE}.half_life", "unknown key; known: backfill"),
    ({"weights": {"qos": 1}}, f"{WHERE}.weights.qos", "unknown key; known: admin, age"),
    (
        {"groups": {"ml-lab": {"max_gpu": 8}}},
        f"{WHERE}.groups.ml-lab.max_gpu",
        "unknown key; known: max_gpus, max_gpus_per_model",
    ),
    ({"default_group": {"share": 2}}, f"{WHERE}.default_group.share", "unknown key"),
    ({"users": {"alice": {"priority": 1}}}, f"{WHERE}.users.alice.priority", "unknown key"),
    ({"half_life_hours": 0}, f"{WHERE}.half_life_hours", "expected a finite number > 0"),
    ({"half_life_hours": -1}, f"{WHERE}.half_life_hours", "> 0"),
    ({"half_life_hours": math.inf}, f"{WHERE}.half_life_hours", "finite number > 0"),
    ({"half_life_hours": "168"}, f"{WHERE}.half_life_hours", "expected a finite number"),
    ({"max_age_hours": 0}, f"{WHERE}.max_age_hours", "expected a number > 0"),
    ({"max_age_hours": math.nan}, f"{WHERE}.max_age_hours", "expected a number > 0"),
    ({"model_weights": {A100: -1}}, f"{WHERE}.model_weights.{A100}", "number >= 0"),
    ({"model_weights": {A100: True}}, f"{WHERE}.model_weights.{A100}", "number >= 0"),
    ({"model_weights": [A100]}, f"{WHERE}.model_weights", "expected a mapping"),
    ({"model_weights": {"": 1.0}}, f"{WHERE}.model_weights", "non-empty strings"),
    ({"weights": {"admin": -0.5}}, f"{WHERE}.weights.admin", "number >= 0"),
    ({"weights": {"fairshare": None}}, f"{WHERE}.weights.fairshare", "number >= 0"),
    ({"weights": 1.0}, f"{WHERE}.weights", "expected a mapping with keys admin"),
    ({"backfill": "yes"}, f"{WHERE}.backfill", "expected true or false"),
    ({"backfill": 1}, f"{WHERE}.backfill", "expected true or false"),
    ({"groups": ["ml-lab"]}, f"{WHERE}.groups", "expected a mapping"),
    ({"groups": {"ml-lab": 10}}, f"{WHERE}.groups.ml-lab", "expected a mapping with keys"),
    ({"groups": {1: {}}}, f"{WHERE}.groups", "non-empty strings"),
    ({"groups": {"ml-lab": {"priority": -1}}}, f"{WHERE}.groups.ml-lab.priority", ">= 0"),
    ({"groups": {"ml-lab": {"priority": True}}}, f"{WHERE}.groups.ml-lab.priority", ">= 0"),
    ({"groups": {"ml-lab": {"shares": "2"}}}, f"{WHERE}.groups.ml-lab.shares", ">= 0"),
    (
        {"groups": {"ml-lab": {"max_gpus": 2.5}}},
        f"{WHERE}.groups.ml-lab.max_gpus",
        "expected a whole number of GPUs >= 0",
    ),
    ({"groups": {"ml-lab": {"max_gpus": -1}}}, f"{WHERE}.groups.ml-lab.max_gpus", "whole"),
    ({"groups": {"ml-lab": {"max_gpus": True}}}, f"{WHERE}.groups.ml-lab.max_gpus", "whole"),
    (
        {"groups": {"ml-lab": {"max_gpus_per_model": {A100: 2.0}}}},
        f"{WHERE}.groups.ml-lab.max_gpus_per_model.{A100}",
        "whole number of GPUs",
    ),
    (
        {"groups": {"ml-lab": {"user_max_gpus": "4"}}},
        f"{WHERE}.groups.ml-lab.user_max_gpus",
        "whole number of GPUs",
    ),
    (
        {"default_group": {"user_max_gpus_per_model": {A100: -2}}},
        f"{WHERE}.default_group.user_max_gpus_per_model.{A100}",
        "whole number of GPUs",
    ),
    (
        {"default_group": {"user_max_gpus_per_model": 2}},
        f"{WHERE}.default_group.user_max_gpus_per_model",
        "expected a mapping of name to value",
    ),
    ({"users": {"alice": 2}}, f"{WHERE}.users.alice", "expected a mapping with keys max_gpus"),
    (
        {"users": {"alice": {"max_gpus_per_model": {A100: None}}}},
        f"{WHERE}.users.alice.max_gpus_per_model.{A100}",
        "whole number of GPUs",
    ),
    ({"groups": {"ml-lab": {"max_queue_wait": -1}}}, QW, ">= 0"),
    ({"groups": {"ml-lab": {"max_queue_wait": "1h"}}}, QW, ">= 0"),
    ({"groups": {"ml-lab": {"max_queue_wait": True}}}, QW, ">= 0"),
    ({"groups": {"ml-lab": {"max_queue_wait": math.inf}}}, QW, "finite number >= 0"),
    ({"groups": {"ml-lab": {"max_queue_wait": None}}}, QW, ">= 0"),
    (
        {"default_group": {"max_wait": 60}},
        f"{WHERE}.default_group.max_wait",
        "unknown key; known: max_gpus, max_gpus_per_model, max_queue_wait",
    ),
    ({"users": {"bob": {"max_queue_wait": 60}}}, f"{WHERE}.users.bob.max_queue_wait", "unknown"),
    ({"max_queue_wait": 60}, f"{WHERE}.max_queue_wait", "unknown key"),  # per group only
    ({"reservation_notice_hours": -1}, f"{WHERE}.reservation_notice_hours", "finite number >= 0"),
    ({"reservation_notice_hours": "24"}, f"{WHERE}.reservation_notice_hours", ">= 0"),
]


@pytest.mark.parametrize(
    ("groups", "default_group", "waits"),
    [
        ({}, {}, {"ml-lab": None, "other": None}),  # the spawner's max_queue_wait for all
        ({"ml-lab": {"max_queue_wait": 7200}}, {}, {"ml-lab": 7200.0, "other": None}),
        ({"ml-lab": {"max_queue_wait": 0}}, {}, {"ml-lab": 0.0, "other": None}),  # never wait
        ({"ml-lab": {}}, {"max_queue_wait": 60}, {"ml-lab": None, "other": 60.0}),
        (
            {"ml-lab": {"max_queue_wait": 0.5}},
            {"max_queue_wait": 0},
            {"ml-lab": 0.5, "other": 0.0},
        ),
    ],
)
def test_a_group_may_have_its_own_queue_wait(
    groups: dict[str, Any], default_group: dict[str, Any], waits: dict[str, float | None]
) -> None:
    """``max_queue_wait`` per group (seconds; 0: refused at once), ``default_group``'s for
    the groups not listed; missing: None, the spawner's trait applies."""
    raw: dict[str, Any] = {"groups": groups}
    if default_group:
        raw["default_group"] = default_group
    settings, policies = queue_settings(raw)
    assert settings == SchedulerSettings()
    assert {g: policies.group(g).max_queue_wait_s for g in waits} == waits


@pytest.mark.parametrize(("raw", "path", "expected"), BAD)
def test_bad_input_names_the_entry_and_what_is_expected(raw: Any, path: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        queue_settings(raw)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message


def test_where_prefixes_every_path() -> None:
    with pytest.raises(ConfigError, match=r"^c\.queue\.users\.bob\.max_gpus: "):
        queue_settings({"users": {"bob": {"max_gpus": -3}}}, where="c.queue")


def test_timezone_names_the_zone_of_clock_times() -> None:
    from zoneinfo import ZoneInfo

    from jupyterhub_gpu.core.words import clock, zone

    settings, _ = queue_settings({"timezone": "Europe/Paris"})
    assert settings.timezone == ZoneInfo("Europe/Paris")
    winter = 1796112000.0  # 2026-12-01 08:00 UTC
    assert clock(winter, winter, settings.timezone) == "09:00"
    assert zone(winter, settings.timezone) == "CET"
    assert queue_settings({"timezone": " UTC "})[0].timezone == ZoneInfo("UTC")


@pytest.mark.parametrize("raw", ["Europe/Pari", "", 1, "../etc/passwd", None])
def test_an_unknown_timezone_is_refused_with_a_hint(raw: object) -> None:
    with pytest.raises(ConfigError) as e:
        queue_settings({"timezone": raw})
    assert str(e.value).startswith(f"{WHERE}.timezone: ")
    assert "Europe/Paris" in str(e.value)
