"""The idle culler's terms in the spawn form (issue 36: what a student looks for, the idle
policy among it): the words (core/culling/terms.py), the file the culler writes and the
hub reads (wire/cull_policy.py), a user's terms by her groups as the culler resolves them,
the culler writing it each round, and the form showing it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.culling.terms import IdleTerms, idle_terms_words
from jupyterhub_gpu.edges.files import load_cull_policy
from jupyterhub_gpu.wire.cull_policy import CullPolicy, decode_cull_policy, encode_cull_policy
from tests.unit.test_culler_service import T0, World, make_culler

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> World:
    return World()

H, D = 3600.0, 86400.0
SHIPPED = IdleTerms(timeout_s=2 * H, gpu_timeout_s=0.5 * H, max_age_s=7 * D)


@pytest.mark.parametrize(
    "terms, warn, suspend, words",
    [
        (SHIPPED, 600, False,
         "Idle servers stop after at least 30 min with a GPU, 2 h without. You are warned "
         "10 min before. Your files are kept. Any server stops after 7 days."),
        (IdleTerms(H, H, 0), 0, True,
         "Idle servers are suspended after at least 1 h. Starting your server again resumes "
         "your kernels where you left them."),
        (IdleTerms(0, 0.5 * H, 0), 300, False,
         "Idle servers with a GPU stop after at least 30 min; others run on. You are warned "
         "5 min before. Your files are kept."),
        (IdleTerms(0, 0, 2 * D), 600, False,
         "Idle servers run on. Any server stops after 2 days."),
    ],
)  # fmt: skip
def test_the_terms_in_a_students_words(
    terms: IdleTerms, warn: float, suspend: bool, words: str
) -> None:
    assert idle_terms_words(terms, warn, suspend) == words


STAFF = {"10-staff": {"groups": ["staff"], "policy_override": {"gpu_timeout": 4 * H}}}
LONG = {"20-long": {"groups": ["long"], "policy_override": {"max_age": 0, "gpu_window": 60}}}


def test_a_users_terms_are_her_groups_as_the_culler_resolves_them() -> None:
    policy = CullPolicy(SHIPPED, 600, False, {"zoe": IdleTerms(H, H, H)}, {**STAFF, **LONG})
    back = decode_cull_policy(encode_cull_policy(policy))
    assert back is not None and back.default == SHIPPED and back.warn_before_s == 600
    assert back.terms_for("alice") == SHIPPED
    assert back.terms_for("grace", ["staff"]).gpu_timeout_s == 4 * H
    both = back.terms_for("kim", ["long", "staff"])  # later keys win, each its own terms
    assert (both.gpu_timeout_s, both.max_age_s) == (4 * H, 0)
    assert back.terms_for("zoe", ["staff"]) == IdleTerms(H, H, H)  # as the culler resolved
    # only the terms a user is told travel: gpu_window is the culler's own business
    raw = json.loads(encode_cull_policy(policy))
    assert raw["overrides"]["20-long"]["policy_override"] == {"max_age": 0}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"default": {"timeout": -1, "gpu_timeout": 1, "max_age": 1}, "warn_before": 0}',
        '{"default": {"timeout": 1e300, "gpu_timeout": 1, "max_age": 1}, "warn_before": 0}',
        '{"default": {"timeout": true, "gpu_timeout": 1, "max_age": 1}, "warn_before": 0}',
        '{"default": {"timeout": 1, "gpu_timeout": 1, "max_age": 1}, "warn_before": "x"}',
        '{"default": {"timeout": 1, "gpu_timeout": 1, "max_age": 1}, "warn_before": 0, '
        '"suspend": "yes"}',
    ],
)
def test_a_file_that_is_not_the_cullers_says_nothing(text: str) -> None:
    assert decode_cull_policy(text) is None


def test_bad_entries_are_skipped_never_believed() -> None:
    good = {"timeout": 60, "gpu_timeout": 60, "max_age": 60}
    text = json.dumps({
        "default": {"timeout": 7200, "gpu_timeout": 1800, "max_age": 0}, "warn_before": 600,
        "users": {"ok": good, "bad": {"timeout": -5}, "x" * 300: good},
        "overrides": {"1": {"groups": "staff", "policy_override": {"gpu_timeout": 1}}},
    })  # fmt: skip
    policy = decode_cull_policy(text)
    assert policy is not None and set(policy.users) == {"ok"}
    assert policy.overrides == {}  # a malformed override: every group reads the default
    assert policy.terms_for("someone", ["staff"]).gpu_timeout_s == 1800


async def test_each_round_writes_the_terms_the_culler_runs_with(
    world: World, tmp_path: Path
) -> None:
    path = tmp_path / "policy.json"
    culler = make_culler(world, tmp_path, warn_before=600.0, policy_file=str(path))
    await culler.cull_once(now=T0)
    policy = load_cull_policy(path)
    assert policy is not None and policy.warn_before_s == 600 and not policy.suspend
    base = culler.base_policy()
    assert policy.default == IdleTerms(base.timeout, base.gpu_timeout, base.max_age)
    assert policy.terms_for("grace", ["staff"]).gpu_timeout_s == 4 * H  # make_culler's
    # overrides as a function: each running user's terms, as resolved this round
    def overrides(user: dict[str, Any]) -> dict[str, Any]:
        return {"x": {"groups": ["everyone"] if user["name"] == "bob" else [],
                      "policy_override": {"gpu_timeout": 0}}}  # fmt: skip

    (bob,) = [u for u in world.users if u["name"] == "bob"]
    bob["groups"] = ["everyone"]
    culler = make_culler(world, tmp_path, group_overrides=overrides, policy_file=str(path))
    await culler.cull_once(now=T0)
    policy = load_cull_policy(path)
    assert policy is not None and policy.users["bob"].gpu_timeout_s == 0
    assert "alice" not in policy.users  # the default's: not repeated
    # a user the function was not asked about (no running server): not known, not the default
    assert policy.per_user and policy.terms_for("nobody-running", ["staff"]) is None


def test_the_form_says_the_terms(tmp_path: Path) -> None:
    from jupyterhub_gpu.hub.spawn_form import _idle_terms

    path = tmp_path / "policy.json"
    path.write_bytes(encode_cull_policy(CullPolicy(SHIPPED, 600, False, {}, STAFF)))
    site = type("Site", (), {"cull_policy_file": str(path)})()
    assert _idle_terms(site, "alice", ["students"]).startswith(
        "Idle servers stop after at least 30 min with a GPU, 2 h without."
    )
    assert _idle_terms(site, "grace", ["staff"]).startswith(
        "Idle servers stop after at least 4 h with a GPU, 2 h without."
    )
    assert _idle_terms(type("Site", (), {"cull_policy_file": ""})(), "alice", []) == ""
    path.write_text("{}")  # not the culler's: nothing said
    assert _idle_terms(site, "alice", []) == ""


def test_a_terms_file_that_would_break_the_form_says_nothing(tmp_path: Path) -> None:
    """Deeply nested JSON, and an override of float("inf") (which the culler's own
    validation lets through): the form says nothing, or says "never", and never fails."""
    from jupyterhub_gpu.hub.spawn_form import _idle_terms

    path = tmp_path / "policy.json"
    site = type("Site", (), {"cull_policy_file": str(path)})()
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert _idle_terms(site, "alice", []) == ""
    endless = {"1": {"groups": ["long"], "policy_override": {"max_age": float("inf")}}}
    path.write_bytes(encode_cull_policy(CullPolicy(SHIPPED, 600, False, {}, endless)))
    words = _idle_terms(site, "kim", ["long"])
    assert words.startswith("Idle servers stop after at least 30 min") and "Any server" not in words
