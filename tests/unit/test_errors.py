"""One exception tree: every exception class of the package is defined in
``jupyterhub_gpu.errors``, derives from ``GPUHubError``, and is drawn in that module's
docstring under its own parent (with its builtin bases in brackets)."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

import jupyterhub_gpu
from jupyterhub_gpu import errors
from jupyterhub_gpu.errors import GPUHubError

pytestmark = pytest.mark.unit

P = "jupyterhub_gpu"
PACKAGE = Path(jupyterhub_gpu.__file__).resolve().parent
# not imported: alembic's scripts, and ``python -m`` entry points (they run on import);
# their source is searched for exception classes instead
NOT_IMPORTED = (f"{P}.edges.accounting.migrations",)
BUILTIN_ERRORS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)
# a tree line: "    GPUHubError   ...", "    ├── ConfigError   ...",
# "    │   └── InventoryError   ...", "    ├── BadInput [ValueError]   ..."
TREE_LINE = re.compile(
    r"^ {4}(?P<lead>[│├└─ ]*)(?P<name>_?[A-Za-z]\w*)(?: \[(?P<builtins>[\w, ]+)\])?(?: {2,}|$)"
)


def _skipped(name: str) -> bool:
    return name.startswith(NOT_IMPORTED) or name.rsplit(".", 1)[-1] == "__main__"


def _modules() -> Iterator[ModuleType]:
    """Every module of the package, imported (a module that fails to import fails)."""
    yield jupyterhub_gpu
    for info in pkgutil.walk_packages(jupyterhub_gpu.__path__, f"{P}."):
        if not _skipped(info.name):
            yield importlib.import_module(info.name)


def _all_subclasses(cls: type[BaseException]) -> Iterator[type[BaseException]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def package_exceptions() -> set[type[BaseException]]:
    """Every exception class defined by the package: those its modules hold, and any
    other subclass of ``BaseException`` whose ``__module__`` is ours."""
    found: set[type[BaseException]] = set()
    for module in _modules():
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException):
                found.add(value)
    found.update(_all_subclasses(BaseException))
    return {c for c in found if c.__module__ == P or c.__module__.startswith(f"{P}.")}


def drawn_tree(doc: str) -> dict[str, tuple[str | None, frozenset[str]]]:
    """The docstring's tree (the block after its ``::``): class name -> (parent name or
    None, builtin bases shown in brackets)."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.rstrip().endswith("::")), None)
    assert start is not None, "the docstring draws no tree (no '::' block)"
    block = lines[start + 1 :]
    while block and not block[0].strip():
        block.pop(0)
    tree: dict[str, tuple[str | None, frozenset[str]]] = {}
    stack: list[str] = []
    for line in block:
        if not line.strip():
            break
        m = TREE_LINE.match(line)
        assert m, f"not a tree line: {line!r}"
        depth = len(m["lead"]) // 4
        assert depth <= len(stack), f"a tree line without its parent: {line!r}"
        assert m["name"] not in tree, f"{m['name']} is drawn twice"
        del stack[depth:]
        shown = frozenset(b.strip() for b in (m["builtins"] or "").split(",") if b.strip())
        tree[m["name"]] = (stack[-1] if stack else None, shown)
        stack.append(m["name"])
    return tree


def problems(classes: Iterable[type[BaseException]], doc: str) -> list[str]:
    """What is wrong with ``classes`` against the rule and the tree drawn in ``doc``."""
    tree = drawn_tree(doc)
    found: list[str] = []
    names: set[str] = set()
    for cls in sorted(classes, key=lambda c: (c.__module__, c.__qualname__)):
        where = f"{cls.__module__}.{cls.__qualname__}"
        names.add(cls.__qualname__)
        if cls.__module__ != errors.__name__:
            found.append(f"{where}: define it in {errors.__name__} (and import it here)")
        if not issubclass(cls, GPUHubError):
            found.append(f"{where}: derive it from GPUHubError")
        if cls.__qualname__ not in tree:
            found.append(f"{where}: draw it in the tree of {errors.__name__}'s docstring")
            continue
        parent, shown = tree[cls.__qualname__]
        ours = [b for b in cls.__bases__ if b.__module__.startswith(P)]
        want_parent = ours[0].__qualname__ if ours else None
        if cls is not GPUHubError and parent != want_parent:
            found.append(f"{where}: the tree draws it under {parent}, not {want_parent}")
        want_shown = frozenset(
            b.__name__
            for b in cls.__bases__
            if b.__module__ == "builtins" and b.__name__ in BUILTIN_ERRORS
        )
        if cls is not GPUHubError and shown != want_shown:
            found.append(
                f"{where}: the tree shows builtin bases {sorted(shown)}, not {sorted(want_shown)}"
            )
    for name in sorted(set(tree) - names):
        found.append(f"the tree of {errors.__name__} draws {name}, which is no exception")
    return found


def _unimported_sources() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        dotted = ".".join((P, *path.relative_to(PACKAGE).with_suffix("").parts))
        if _skipped(dotted):
            yield path


def test_every_exception_is_in_the_tree() -> None:
    classes = package_exceptions()
    assert GPUHubError in classes
    assert len(classes) > 30  # the walk did find the package's classes
    assert problems(classes, errors.__doc__ or "") == []


def test_modules_not_imported_define_no_exception() -> None:
    """``__main__`` modules and migrations are read, not imported: no class there may
    derive from a builtin exception or one of ours."""
    ours = {name for name, v in vars(errors).items() if isinstance(v, type)}
    found = []
    for path in _unimported_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
                if bases & (BUILTIN_ERRORS | ours):
                    found.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert found == []


def test_tree_drawing_is_parsed() -> None:
    tree = drawn_tree(errors.__doc__ or "")
    assert tree["GPUHubError"] == (None, frozenset())
    assert tree["InventoryError"] == ("ConfigError", frozenset())
    assert tree["BadInput"] == ("GPUHubError", frozenset({"ValueError"}))
    assert tree["NotFound"] == ("SaveError", frozenset())


def test_a_stray_exception_is_caught() -> None:
    """The check fails for a class defined elsewhere, outside the tree, off GPUHubError."""

    class Stray(ValueError):
        pass

    found = problems({*package_exceptions(), Stray}, errors.__doc__ or "")
    assert any("Stray: define it in" in p for p in found)
    assert any("Stray: derive it from GPUHubError" in p for p in found)
    assert any("Stray: draw it in the tree" in p for p in found)


def test_a_misdrawn_tree_is_caught() -> None:
    doc = (errors.__doc__ or "").replace("    ├── QueueFull ", "        ├── QueueFull")
    found = problems(package_exceptions(), doc)
    assert any("QueueFull: the tree draws it under" in p for p in found)
