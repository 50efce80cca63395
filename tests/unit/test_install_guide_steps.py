"""docs/install.md's steps as tests/integration/test_install_guide.py reads and runs them:
a failing command is reported by its line in the guide, and the guide keeps the rules
that let a test follow it (every block marked, one variables block, no site value
written outside it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import install_guide as guide

pytestmark = pytest.mark.unit

BROKEN = """\
# A guide

<!-- on: both -->
```sh
ETC=/etc/jupyterhub-gpu          # a comment
NODES="gpu-a=10.0.0.11 gpu-b=10.0.0.12"
```

Some words.

<!-- on: manual -->
```sh
systemctl restart docker
```

<!-- on: hub -->
```sh
mkdir -p "$ETC/x"
touch "$ETC/x/ok"
for n in $NODES; do
    test "${n%%=*}" != gpu-b
done
echo never
```

<!-- on: hub -->
```sh
echo "$NO_SUCH_VARIABLE"
```

<!-- on: hub -->
```sh
true
no-such-command --flag
```
"""


def _run(tmp_path: Path, step: int) -> None:
    blocks = guide.parse(BROKEN, "broken.md")
    variables = guide.variables(blocks, "broken.md")
    guide.run_step(
        variables,
        {"ETC": str(tmp_path / "etc")},
        blocks[step],
        machine="hub",
        cwd=tmp_path,
        lines=BROKEN.splitlines(),
        name="broken.md",
    )


def line_of(text: str) -> int:
    return BROKEN.splitlines().index(text) + 1


def test_the_blocks_their_places_and_lines() -> None:
    blocks = guide.parse(BROKEN)
    assert [b.where for b in blocks] == ["both", "manual", "hub", "hub", "hub"]
    assert blocks[0].line == line_of("ETC=/etc/jupyterhub-gpu          # a comment")
    assert blocks[2].lines[0] == 'mkdir -p "$ETC/x"'
    assert guide.names(guide.variables(blocks)) == ["ETC", "NODES"]


def test_a_failing_command_inside_a_loop_is_named_by_its_line(tmp_path: Path) -> None:
    with pytest.raises(guide.StepFailed) as failed:
        _run(tmp_path, 2)
    line = line_of('    test "${n%%=*}" != gpu-b')
    assert str(failed.value).startswith(f'broken.md:{line}: test "${{n%%=*}}" != gpu-b'), failed
    assert (tmp_path / "etc" / "x" / "ok").exists()  # the value given, not the guide's


def test_an_unset_variable_is_named_by_its_line(tmp_path: Path) -> None:
    with pytest.raises(guide.StepFailed) as failed:
        _run(tmp_path, 3)
    line = line_of('echo "$NO_SUCH_VARIABLE"')
    assert str(failed.value).startswith(f"broken.md:{line}:"), failed


def test_a_missing_command_is_named_by_its_line(tmp_path: Path) -> None:
    with pytest.raises(guide.StepFailed) as failed:
        _run(tmp_path, 4)
    message = str(failed.value)
    assert message.startswith(f"broken.md:{line_of('no-such-command --flag')}: no-such-command")
    assert "exit status 127" in message


def test_a_block_without_its_mark_is_refused() -> None:
    text = BROKEN.replace("<!-- on: manual -->\n", "")
    fence = text.splitlines().index("systemctl restart docker")  # the line before it, 1-based
    with pytest.raises(guide.GuideError, match=rf"^x.md:{fence}: a fenced block without"):
        guide.parse(text, "x.md")
    with pytest.raises(guide.GuideError, match="on: elsewhere"):
        guide.parse(BROKEN.replace("on: manual", "on: elsewhere"))


def test_a_value_the_guide_does_not_have_is_refused() -> None:
    variables = guide.variables(guide.parse(BROKEN))
    with pytest.raises(guide.GuideError, match="no VENV"):
        guide.with_values(variables, {"VENV": "/tmp/x"})


def test_commands_are_logical_lines() -> None:
    block = guide.Block(
        "hub", 1, "a \\\n  b\n# c\n\nfor x in 1; do\n  y\ndone\ncat <<EOF\nz\nEOF\nw\n"
    )
    assert guide.commands(block) == ["a b", "for x in 1; do", "y", "cat <<EOF", "w"]


# ------------------------------------------------------------------- docs/install.md
def test_the_install_guide_keeps_the_rules_its_test_follows() -> None:
    """Every block is marked; the first is the variables block; no runnable block writes
    a value of the variables block (a site folder, the version) instead of its variable,
    which a test could not replace."""
    blocks = guide.parse(guide.GUIDE.read_text())
    variables = guide.variables(blocks)
    values = {}
    for line in variables.lines:
        m = re.match(r"^(\w+)=(\S+)", line)
        if m and "$" not in m.group(2):
            values[m.group(1)] = m.group(2)
    literal = [
        v.strip("'\"")
        for k, v in values.items()
        if k in ("ETC", "STATE", "VENV", "SRC", "DIST", "BUNDLES", "VERSION", "HUB_IP")
    ]
    for block in blocks[1:]:
        for n, line in enumerate(block.lines, 1):
            for value in literal:
                assert value not in line, (
                    f"docs/install.md:{block.line_of(n)} writes {value} instead of its variable"
                )
    runnable = [b for b in blocks if b.where != "manual"]
    assert any(b.where == "hub" for b in runnable) and any(b.where == "node" for b in runnable)
    assert "check-config" in runnable[-1].text  # the test ends with the site checked
    assert sum(len(guide.commands(b)) for b in blocks[1:]) > 40
