"""The package's layers, as written in each top folder's ``__init__`` docstring and in
docs/architecture.md, checked on every import of every module (``TYPE_CHECKING`` and
function-level imports included): no import upward, none into another service, no import
circle (between modules, nor between the parts of a layer: ``core/sharing/`` and
``core/inventory.py`` are two parts of ``core``), no I/O library in the pure core, no file
I/O in ``wire/`` (it only encodes and decodes; ``edges/files.py`` reads and writes), and no
module that only re-exports another one (the old paths that did are gone)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "jupyterhub_gpu"
P = "jupyterhub_gpu"

# layer -> the layers it may import (besides itself); errors imports nothing of ours
MAY_IMPORT: Mapping[str, frozenset[str]] = {
    "errors": frozenset(),
    "core": frozenset({"errors"}),
    "wire": frozenset({"errors", "core"}),
    "edges": frozenset({"errors", "core", "wire"}),
    "hub": frozenset({"errors", "core", "wire", "edges"}),
    "services": frozenset({"errors", "core", "wire", "edges"}),
    "cli": frozenset({"errors", "core", "wire", "edges"}),
}
# the old paths that only re-exported the new modules; removed (docs/upgrade.md), and
# never to come back: nothing was released under them
REMOVED_PATHS = (
    "spawner",
    "config",
    "reservations",
    "auth",
    "auth.ldap",
    "auth.oauth",
    "agent",
    "culler",
    "dashboard",
    "dashboard.hub",
    "myimages",
    "accounting",
    "accounting.service",
)
# what the pure core must never import (I/O: engines, databases, HTTP, the hub, NVML)
NOT_IN_CORE = frozenset(
    {
        "docker",
        "sqlalchemy",
        "alembic",
        "httpx",
        "requests",
        "tornado",
        "jupyterhub",
        "ldap3",
        "ldapauthenticator",
        "oauthenticator",
        "pynvml",
        "prometheus_client",
        "subprocess",
        "socket",
        "urllib.request",
        "http.client",
        "asyncio",
        "asyncssh",
    }
)
# the one exception: a Docker *type* (plain data) for the container spec
CORE_MAY_USE = frozenset({"docker.types"})


# wire/ only encodes and decodes: what would read or write a file there (issue 31)
FILE_MODULES = frozenset({"tempfile", "shutil", "fcntl", "glob"})
# Path (and file object) methods that touch the disk; `replace`/`rename` only as Path's
# one-argument form (str.replace takes two, datetime.replace keywords)
FILE_METHODS = frozenset(
    {
        "open",
        "read_text",
        "write_text",
        "read_bytes",
        "write_bytes",
        "unlink",
        "mkdir",
        "rmdir",
        "touch",
        "chmod",
        "stat",
        "lstat",
        "exists",
        "is_file",
        "is_dir",
        "iterdir",
        "glob",
        "rglob",
        "symlink_to",
        "hardlink_to",
        "readlink",
    }
)
MOVES = frozenset({"replace", "rename"})
# os: only the environment and pure path names are allowed in wire/
OS_ALLOWED = frozenset({"environ", "getenv", "fspath", "fsencode", "fsdecode", "sep", "PathLike"})
OS_PATH_ALLOWED = frozenset({"join", "basename", "dirname", "splitext", "split", "normpath"})
# calls that open a file, or read or write a file object rather than text
FILE_OBJECT_CALLS = frozenset({"json.load", "json.dump", "io.open", "codecs.open", "builtins.open"})
FILE_BUILTINS = frozenset({"open"})


def _dotted(node: ast.expr) -> str:
    """``os.path.exists`` for that attribute chain; '' for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def file_io(path: Path, name: str) -> list[str]:
    """Every place ``path`` would read or write a file: ``open()``, a Path method that
    touches the disk, an ``os`` file call, json.load/dump on a file, ``tempfile``,
    ``shutil`` and the like, as ``module:line: what``."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[str] = []
    for node in ast.walk(tree):
        found = ""
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name.split(".")[0] in FILE_MODULES]
            found = f"imports {', '.join(bad)}" if bad else ""
        elif isinstance(node, ast.ImportFrom) and not node.level:
            top = (node.module or "").split(".")[0]
            if top in FILE_MODULES:
                found = f"imports from {node.module}"
            elif node.module == "os":
                bad = [a.name for a in node.names if a.name not in OS_ALLOWED]
                found = f"imports {', '.join(bad)} from os" if bad else ""
            elif node.module == "os.path":
                bad = [a.name for a in node.names if a.name not in OS_PATH_ALLOWED]
                found = f"imports {', '.join(bad)} from os.path" if bad else ""
        elif isinstance(node, ast.Call):
            func = node.func
            dotted = _dotted(func)
            if isinstance(func, ast.Name) and func.id in FILE_BUILTINS:
                found = f"{func.id}()"
            elif dotted in FILE_OBJECT_CALLS:
                found = f"{dotted}() on a file"
            elif dotted.startswith("os.path."):
                if dotted.split(".", 2)[2] not in OS_PATH_ALLOWED:
                    found = f"{dotted}()"
            elif dotted.startswith("os.") and dotted.split(".")[1] not in OS_ALLOWED:
                found = f"{dotted}()"
            elif isinstance(func, ast.Attribute) and func.attr in FILE_METHODS:
                found = f".{func.attr}()"
            elif (
                isinstance(func, ast.Attribute)
                and func.attr in MOVES
                and len(node.args) == 1
                and not node.keywords
            ):
                found = f".{func.attr}() (a file moved)"
        if found:
            out.append(f"{name}:{getattr(node, 'lineno', 0)}: {found}")
    return out


def file_io_in_wire(root: Path) -> list[str]:
    """Every file read or write in ``wire/``; it only encodes and decodes."""
    return [
        problem
        for name, path in modules_of(root).items()
        if layer_of(name) == "wire"
        for problem in file_io(path, name)
    ]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports (absolute names), with line numbers."""
    tree = ast.parse(path.read_text(), str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            # `from pkg import name`: the module `pkg.name` when there is one, else `pkg`
            found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
    return found


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def service_of(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "services" else ""


def existing(modules: Iterable[str], target: str) -> str | None:
    """``target`` if it is one of ours, else its longest prefix that is (``from a.b import
    c`` where c is a name, not a module)."""
    known = set(modules)
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def modules_of(root: Path) -> dict[str, Path]:
    return {
        module_name(p, root): p for p in sorted(root.rglob("*.py")) if "migrations" not in p.parts
    }


def part_of(module: str) -> str:
    """The part of its layer a module belongs to: ``jupyterhub_gpu.core.sharing`` for
    ``core/sharing/mps.py``, ``jupyterhub_gpu.core.inventory`` for ``core/inventory.py``;
    '' for a layer's own ``__init__`` and for the package root."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 else ""


def problems(root: Path) -> list[str]:
    """Every import that breaks the rules, as ``module:line -> target: why``, then the
    import circles between modules and between the parts of a layer."""
    modules = modules_of(root)
    out: list[str] = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    # part -> parts of the same layer it imports, and the imports that make each arrow
    parts: dict[str, set[str]] = {}
    arrows: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        layer = layer_of(name)
        seen: set[tuple[int, str]] = set()
        for line, target in imports_of(path, name):
            ours_or_target = existing(modules, target) or target.split(".")[0]
            if (line, ours_or_target) in seen:
                continue
            seen.add((line, ours_or_target))
            where = f"{name}:{line} -> {ours_or_target}"
            if not target.startswith(P + ".") and target != P:
                top = target.split(".")[0]
                if (
                    layer == "core"
                    and (top in NOT_IN_CORE or target in NOT_IN_CORE)
                    and not any(target.startswith(ok) for ok in CORE_MAY_USE)
                ):
                    out.append(f"{where}: the pure core does no I/O")
                continue
            ours = existing(modules, target)
            if ours is None or ours == name:
                continue
            if ours == P:
                continue  # the package itself (its version)
            graph[name].add(ours)
            theirs = layer_of(ours)
            mine, its = part_of(name), part_of(ours)
            if mine and its and mine != its and theirs == layer:
                parts.setdefault(mine, set()).add(its)
                arrows.setdefault((mine, its), []).append(f"{name}:{line}")
            if name == P:
                continue
            if theirs != layer and theirs not in MAY_IMPORT.get(layer, frozenset()):
                out.append(f"{where}: {layer or 'the package root'} may not import {theirs}")
            elif (
                layer == "services"
                and service_of(ours) not in ("", "base")
                and (service_of(ours) != service_of(name))
            ):
                out.append(f"{where}: a service never imports another service")
    out += [f"circle: {' -> '.join(c)}" for c in circles(graph)]
    for c in circles(parts):
        why = "; ".join(
            f"{a} -> {b} ({', '.join(arrows[a, b])})" for a in c for b in c if (a, b) in arrows
        )
        out.append(f"circle between parts: {' -> '.join(c)}: {why}")
    return out


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import circles (Tarjan's strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_breaks_the_layers() -> None:
    assert problems(PACKAGE) == []


def test_wire_does_no_file_io() -> None:
    """wire/ only encodes and decodes (issue 31): reading and writing files is
    edges/files.py's and edges/adminfiles.py's, with the one atomic writer."""
    assert file_io_in_wire(PACKAGE) == []


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("def f(p):\n    return open(p).read()\n", "open()"),
        ("from pathlib import Path\n\ndef f(p):\n    return Path(p).read_text()\n", ".read_text()"),
        ("def f(p, b):\n    p.write_bytes(b)\n", ".write_bytes()"),
        ("def f(p):\n    p.unlink(missing_ok=True)\n", ".unlink()"),
        ("def f(p):\n    p.parent.mkdir(parents=True)\n", ".mkdir()"),
        ("def f(p):\n    with p.open('rb') as f:\n        return f.read()\n", ".open()"),
        ("def f(p):\n    return p.stat().st_mtime\n", ".stat()"),
        ("def f(a, b):\n    a.replace(b)\n", ".replace() (a file moved)"),
        ("def f(a, b):\n    a.rename(b)\n", ".rename() (a file moved)"),
        ("import os\n\ndef f(a, b):\n    os.replace(a, b)\n", "os.replace()"),
        ("import os\n\ndef f(fd):\n    os.fsync(fd)\n", "os.fsync()"),
        ("import os\n\ndef f(p):\n    return os.path.exists(p)\n", "os.path.exists()"),
        ("from os import fdopen\n", "imports fdopen from os"),
        ("import tempfile\n", "imports tempfile"),
        ("import shutil\n", "imports shutil"),
        ("from tempfile import mkstemp\n", "imports from tempfile"),
        ("import json\n\ndef f(d, fh):\n    json.dump(d, fh)\n", "json.dump() on a file"),
    ],
)
def test_planted_file_io_in_wire_is_caught(tmp_path: Path, source: str, what: str) -> None:
    """The checker on a copy of the package with one file read or write added to wire/."""
    import shutil

    copy = tmp_path / P
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = set(file_io_in_wire(copy))
    (copy / "wire" / "planted.py").write_text(source)
    found = sorted(set(file_io_in_wire(copy)) - before)
    assert len(found) == 1 and found[0].startswith(f"{P}.wire.planted:"), found
    assert found[0].endswith(f": {what}"), found


def test_pure_text_and_time_calls_in_wire_are_not_file_io(tmp_path: Path) -> None:
    """``str.replace(a, b)``, ``datetime.replace(tzinfo=...)``, ``os.environ`` and
    ``json.loads``/``dumps`` are what a decoder does, not file I/O."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import json\nimport os\nfrom datetime import timezone\n\n"
        "def f(s, t):\n"
        "    t = t.replace(tzinfo=timezone.utc)\n"
        "    s = s.replace('a', 'b')\n"
        "    return json.loads(json.dumps([s, os.environ.get('X', '')])), t\n"
    )
    assert file_io(planted, "planted") == []


def test_every_top_folder_is_a_layer_with_its_rule_written() -> None:
    """A newcomer reads the architecture from the tree: every folder at the top is a
    layer, and its ``__init__`` says what it may import; ``data/`` holds
    the package's data files (the shipped catalog) and no code."""
    assert not list((PACKAGE / "data").rglob("*.py"))
    for folder in sorted(
        p for p in PACKAGE.iterdir() if p.is_dir() and p.name not in ("__pycache__", "data")
    ):
        assert folder.name in MAY_IMPORT, folder.name
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        assert "Imports:" in doc, f"{folder.name}/__init__.py does not say what it imports"
    root_modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert root_modules == {"errors"}, root_modules


def test_the_architecture_tree_names_every_module_of_the_layers() -> None:
    """docs/architecture.md draws the tree a newcomer reads: each module and subpackage
    directly under a layer's folder is named in it (a module added later, unnamed there,
    leaves the map behind the tree)."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    tree = doc.split("```", 2)[1]  # the first code block: the tree
    # each layer's part of the tree: from its "  layer/" line to the next layer's
    parts = re.split(r"^  (?=[a-z]+/ )", tree, flags=re.MULTILINE)
    section = {m[1]: part for part in parts if (m := re.match(r"([a-z]+)/ ", part))}
    unnamed = [
        f"{layer}/{p.name}"
        for layer in sorted(MAY_IMPORT)
        if (PACKAGE / layer).is_dir()
        for p in sorted((PACKAGE / layer).iterdir())
        if not p.name.startswith("__")
        and (p.suffix == ".py" or (p / "__init__.py").exists())
        and not re.search(rf"\b{re.escape(p.stem)}\b", section.get(layer, ""))
    ]
    assert sorted(section) == ["cli", "core", "data", "edges", "hub", "services", "wire"]
    assert unnamed == []


def re_exports(root: Path) -> list[str]:
    """The modules that only re-export other modules of ours: a body of nothing but a
    docstring, imports, ``__all__`` and ``main()`` (or one that says it is kept for old
    paths). A package's ``__init__`` handing on its own modules' names
    (``core/catalog/__init__.py``) and a ``__main__`` running its own package's ``main``
    are not re-exports."""
    modules = modules_of(root)
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        doc = (ast.get_docstring(tree) or "").lower()
        if "old path" in doc or "kept for existing" in doc or "kept for old" in doc:
            found.append(f"{name}: says it is kept for an old path")
            continue
        body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
        imports = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
        if not imports or not all(
            isinstance(n, (ast.Import, ast.ImportFrom)) or _hands_on(n) for n in body
        ):
            continue
        # what an __init__ or a __main__ may hand on: its own package's modules
        own = {"__init__.py": name, "__main__.py": name.rpartition(".")[0]}.get(path.name)
        outside = sorted(
            ours
            for _, target in imports_of(path, name)
            if (ours := existing(modules, target)) is not None
            and ours != P
            and (own is None or not ours.startswith(own + "."))
        )
        if outside:
            found.append(f"{name}: only re-exports {', '.join(outside)}; import that instead")
    return found


def _hands_on(node: ast.stmt) -> bool:
    """``__all__ = [...]``, ``main()`` or ``if __name__ == "__main__": main()``."""
    if isinstance(node, ast.Assign):
        return [getattr(t, "id", "") for t in node.targets] == ["__all__"]
    if isinstance(node, ast.Expr):
        return ast.unparse(node.value) == "main()"
    return isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"


def test_no_module_only_re_exports_another() -> None:
    """No module stands in for another under a second path (issue 31): code, tests and
    configurations name the module where the code is."""
    assert re_exports(PACKAGE) == []


def test_the_removed_old_paths_stay_removed() -> None:
    """The old paths docs/upgrade.md lists as gone are neither modules nor folders."""
    back = [
        old
        for old in REMOVED_PATHS
        if (PACKAGE / (old.replace(".", "/") + ".py")).exists()
        or (PACKAGE / old.replace(".", "/")).exists()
    ]
    assert back == []
    upgrade = (PACKAGE.parent / "docs" / "upgrade.md").read_text()
    assert [old for old in REMOVED_PATHS if not re.search(rf"\b{P}\.{old}\b", upgrade)] == []


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("spawner.py", "from jupyterhub_gpu.hub.spawner import GPUDockerSpawner\n"),
        (
            "hub/old_auth.py",
            '"""Re-exported."""\n\nfrom jupyterhub_gpu.hub.auth.ldap import GPULDAPAuthenticator'
            '\n\n__all__ = ["GPULDAPAuthenticator"]\n',
        ),
        ("cli/agent.py", "from jupyterhub_gpu.services.agent.app import main\n\nmain()\n"),
        ("hub/kept.py", '"""Old path, kept for existing configurations."""\n'),
    ],
)
def test_a_planted_re_export_is_caught(tmp_path: Path, where: str, source: str) -> None:
    import shutil

    copy = tmp_path / P
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / where).write_text(source)
    name = module_name(copy / where, copy)
    assert [f.split(":")[0] for f in re_exports(copy)] == [name]


@pytest.mark.parametrize(
    ("where", "source", "why"),
    [
        (
            "core/planted.py",
            "from jupyterhub_gpu.hub.cluster import Cluster\n",
            "core may not import hub",
        ),
        ("core/planted.py", "import docker\n", "the pure core does no I/O"),
        ("core/planted.py", "from sqlalchemy import select\n", "the pure core does no I/O"),
        ("wire/planted.py", "from jupyterhub_gpu.edges import nvml\n", "wire may not import edges"),
        (
            "edges/planted.py",
            "from jupyterhub_gpu.hub import spawner\n",
            "edges may not import hub",
        ),
        (
            "services/culler/planted.py",
            "from jupyterhub_gpu.services.dashboard import app\n",
            "a service never imports another service",
        ),
        (
            "services/culler/planted.py",
            "from jupyterhub_gpu.hub import ledger\n",
            "services may not import hub",
        ),
        (
            "cli/planted.py",
            "from jupyterhub_gpu.hub.runtime import HubRuntime\n",
            "cli may not import hub",
        ),
        (
            "core/planted.py",
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            "    from jupyterhub_gpu.edges import agents\n",
            "core may not import edges",
        ),
        (
            "core/planted.py",
            "def f():\n    from jupyterhub_gpu.services.culler import client\n",
            "core may not import services",
        ),
    ],
)
def test_a_planted_forbidden_import_is_caught(
    tmp_path: Path, where: str, source: str, why: str
) -> None:
    """The checker on a copy of the package with one forbidden import added."""
    import shutil

    copy = tmp_path / P
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = set(problems(copy))  # test_no_import_breaks_the_layers says what they are
    planted = copy / where
    planted.write_text(source)
    found = sorted(set(problems(copy)) - before)
    assert len(found) == 1 and why in found[0], found


def test_a_planted_circle_is_caught(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / P
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "core" / "planted_a.py").write_text("from jupyterhub_gpu.core import planted_b\n")
    (copy / "core" / "planted_b.py").write_text("from jupyterhub_gpu.core import planted_a\n")
    before = set(problems(PACKAGE))
    assert sorted(set(problems(copy)) - before) == [
        "circle between parts: jupyterhub_gpu.core.planted_a -> jupyterhub_gpu.core.planted_b: "
        "jupyterhub_gpu.core.planted_a -> jupyterhub_gpu.core.planted_b "
        "(jupyterhub_gpu.core.planted_a:1); "
        "jupyterhub_gpu.core.planted_b -> jupyterhub_gpu.core.planted_a "
        "(jupyterhub_gpu.core.planted_b:1)",
        "circle: jupyterhub_gpu.core.planted_a -> jupyterhub_gpu.core.planted_b",
    ]


def test_a_planted_circle_between_parts_is_caught(tmp_path: Path) -> None:
    """No two modules import each other, yet two parts of the core do: a module of
    ``core/sharing/`` imports ``core/inventory.py``, which imports another module of
    ``core/sharing/`` (the arrows issue 31 removed)."""
    import shutil

    copy = tmp_path / P
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "core" / "planted.py").write_text(
        "from jupyterhub_gpu.core.sharing.policy import SharingPolicy\n"
    )
    (copy / "core" / "sharing" / "planted.py").write_text(
        "from jupyterhub_gpu.core.planted import SharingPolicy\n"
    )
    found = sorted(set(problems(copy)) - set(problems(PACKAGE)))
    assert found == [
        "circle between parts: jupyterhub_gpu.core.planted -> jupyterhub_gpu.core.sharing: "
        "jupyterhub_gpu.core.planted -> jupyterhub_gpu.core.sharing "
        "(jupyterhub_gpu.core.planted:1); "
        "jupyterhub_gpu.core.sharing -> jupyterhub_gpu.core.planted "
        "(jupyterhub_gpu.core.sharing.planted:1)"
    ]


@pytest.mark.parametrize("module", ["agent", "culler", "dashboard", "usage"])
def test_the_service_commands_run(module: str) -> None:
    """``python -m jupyterhub_gpu.services.culler`` (and the others the hub's
    ``configure_*`` and sites' configurations name) start the service: asked for its
    help, it answers."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", f"jupyterhub_gpu.services.{module}", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in (r.stdout + r.stderr).lower() or "--" in r.stdout


def test_test_modules_have_unique_basenames() -> None:
    """tests/unit and tests/integration are not packages: pytest imports their modules by
    basename, and two of one name stop the whole run at collection (a fresh clone's CI)."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted(tests.rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(tests)} and {path.relative_to(tests)}")
        seen.setdefault(path.name, path)
    assert not clashes, clashes


# -- no god objects: every class of the package stays small enough to hold in one head ------
MAX_CLASS_LINES = 700
MAX_CLASS_METHODS = 40


def oversized_classes(root: Path) -> list[str]:
    """Each class under ``root`` over :data:`MAX_CLASS_LINES` lines (its ``class`` line to
    its last) or :data:`MAX_CLASS_METHODS` methods (functions defined in its body), with
    its numbers."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
            if lines > MAX_CLASS_LINES or methods > MAX_CLASS_METHODS:
                where = path.relative_to(root)
                found.append(f"{where}: class {node.name}: {lines} lines, {methods} methods")
    return found


def test_no_class_is_over_700_lines_or_40_methods() -> None:
    assert oversized_classes(PACKAGE) == []


def test_an_oversized_class_is_named_with_its_numbers(tmp_path: Path) -> None:
    methods = "".join(f"    def m{i}(self) -> None:\n        pass\n" for i in range(41))
    (tmp_path / "big.py").write_text(f"class Big:\n{methods}\nclass Small:\n    x = 1\n")
    long_body = "".join(f"    x{i} = {i}\n" for i in range(700))
    (tmp_path / "long.py").write_text(f"class Long:\n{long_body}")
    assert oversized_classes(tmp_path) == [
        "big.py: class Big: 83 lines, 41 methods",
        "long.py: class Long: 701 lines, 0 methods",
    ]
