"""The generated configuration reference matches the traits' help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def test_config_reference_is_fresh() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_config_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def _named_in_docs() -> list[tuple[str, str]]:
    """Every module path (``jupyterhub_gpu.a.b``) and file path (``jupyterhub_gpu/a/b.py``)
    that the README, the docs and the example configurations name."""
    import re

    files = [
        REPO / "README.md",
        REPO / "jupyterhub_config.py",
        *sorted((REPO / "docs").glob("*.md")),
    ]
    files.append(REPO / "scripts" / "demo" / "jupyterhub_config.py")
    found = []
    for f in files:
        text = f.read_text()
        if f.name == "upgrade.md":
            text = _without_removed_paths(text)
        found += [(f.name, m) for m in re.findall(r"jupyterhub_gpu(?:\.[A-Za-z_][\w]*)+", text)]
        found += [(f.name, m) for m in re.findall(r"jupyterhub_gpu/[\w/.]+\w", text)]
        for module, names in re.findall(r"from (jupyterhub_gpu[\w.]*) import \(?([\w, ]+)", text):
            found += [(f.name, f"{module}.{n.split()[0]}") for n in names.split(",") if n.strip()]
    return found


def _without_removed_paths(text: str) -> str:
    """upgrade.md's table of the import paths that went, its first column (the old paths,
    which must not exist: tests/unit/test_layers.py) left out."""
    import re

    head = "### Import paths that went"
    start = text.index(head)
    end = text.find("\n#", start + len(head))
    end = len(text) if end < 0 else end
    table = re.sub(r"^\|[^|\n]*\|", "| |", text[start:end], flags=re.MULTILINE)
    return text[:start] + table + text[end:]


def test_every_module_and_path_the_docs_name_exists() -> None:
    """A doc naming a module or file that moved fails here, not in an admin's hands."""
    import importlib

    missing = []
    for doc, name in _named_in_docs():
        if "/" in name:
            if not (REPO / name).exists():
                missing.append(f"{doc}: {name}")
            continue
        parts = name.split(".")
        for n in range(len(parts), 1, -1):  # a module, then attributes of it
            try:
                obj = importlib.import_module(".".join(parts[:n]))
            except ImportError:
                continue
            for attr in parts[n:]:
                obj = getattr(obj, attr, None)
            if obj is None:
                missing.append(f"{doc}: {name}")
            break
        else:
            missing.append(f"{doc}: {name}")
    assert missing == []


def test_the_firewall_example_in_nodes_md_applies_every_allow_when_pasted(tmp_path: Path) -> None:
    """The example is pasted into a shell as it is: every line of it must reach the
    script in one call (a comment after a backslash ends the command and drops the rest).
    The script is replaced by a stand-in that records its arguments (nothing is applied)."""
    import re

    text = (REPO / "docs" / "nodes.md").read_text()
    section = text[text.index("## The node firewall") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    allows = re.findall(r"--allow (\S+)", block.group(1))
    assert len(allows) >= 2
    calls = tmp_path / "calls"
    stand_in = tmp_path / "node-firewall.sh"
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    stand_in.chmod(0o755)
    pasted = block.group(1).replace("scripts/node-firewall.sh", str(stand_in))
    r = subprocess.run(["bash", "-c", pasted], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    (call,) = calls.read_text().splitlines()
    assert call.startswith("--bridge jhgpu-users"), call
    assert [a for a in allows if f"--allow {a}" not in call] == [], call
