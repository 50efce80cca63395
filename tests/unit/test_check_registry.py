"""Node checks live in one registry (core/checklist.py's CHECKS): each name is unique,
has a fix sentence, and is reached (some code of the package names it as a check), and
every check the package makes is registered."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jupyterhub_gpu
from jupyterhub_gpu.core import nodecheck
from jupyterhub_gpu.core.checklist import CHECKS, kind_of

pytestmark = pytest.mark.unit

PACKAGE = Path(jupyterhub_gpu.__file__).resolve().parent
REGISTRY = PACKAGE / "core" / "checklist.py"
MAKERS = ("Check", "not_run", "nvidia_pipe_check")


def _text(node: ast.expr) -> str | None:
    """A literal name, or an f-string's literal beginning (``catalog `` of f"catalog {x}")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def _names_in_package() -> tuple[set[str], set[str]]:
    """(names given to Check/not_run/nvidia_pipe_check as literals, every string literal
    and f-string beginning of the package outside the registry)."""
    made, strings = set(), set()
    for path in PACKAGE.rglob("*.py"):
        if path == REGISTRY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if called in MAKERS and len(node.args) >= 2:
                    name = _text(node.args[1])
                    if name is not None:
                        made.add(name)
            if isinstance(node, ast.Constant | ast.JoinedStr):
                text = _text(node)
                if text:
                    strings.add(text)
    return made, strings


def test_every_check_is_unique_and_has_a_fix_sentence() -> None:
    names = [k.name for k in CHECKS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for kind in CHECKS:
        assert kind.fix.strip() and kind.fix[0].islower() and "\n" not in kind.fix, kind
        assert kind.layer, kind


def test_every_check_the_package_makes_is_registered() -> None:
    made, _ = _names_in_package()
    assert made, "no check found: the scan is broken"
    assert sorted(n for n in made if kind_of(n) is None) == []


def test_every_registered_check_is_reached() -> None:
    """Each entry is named by some code of the package (a family by its beginning)."""
    _, strings = _names_in_package()
    unreached = [
        k.name
        for k in CHECKS
        if not any(k.covers(s) or (k.name.endswith("*") and s == k.name[:-1]) for s in strings)
    ]
    assert unreached == []


def test_the_hubs_sets_come_from_the_registry() -> None:
    assert {"user-network", "firewall"} == nodecheck.HUB_CHECKS
    assert {"firewall", "firewall.probe", "user-network"} == nodecheck.BLOCKING
    assert kind_of("catalog reg/torch:2") is not None and kind_of("mps.gpu0.mode") is not None
    assert kind_of("no-such-check") is None
