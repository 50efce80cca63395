"""docs/install.md as steps a test runs: its fenced blocks, where each runs, its variables.

The guide marks every fenced block with ``<!-- on: hub|node|both|manual -->`` on the line
before it; its first block holds the site's values (``NAME=value`` lines), which every
later block uses. :func:`parse` reads the blocks with their line numbers in the file;
:func:`run_step` runs one block with bash (``set -euo pipefail``) after the variables
block, some of whose values are replaced (a sandbox's folders, test addresses), and
raises :class:`StepFailed` naming the line of the guide whose command failed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "install.md"
PLACES = ("hub", "node", "both", "manual")
MARK = re.compile(r"^<!-- on: (\w+) -->$")
#: the "Quick install" section's blocks (prepared servers): parse(..., mark=QUICK)
QUICK = re.compile(r"^<!-- quick: (\w+) -->$")
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=")
#: the trap's report of the failing command's line in the script
FAILED = re.compile(r"^install-guide-failed-line=(\d+)$", re.M)
#: bash's own report of an error that does not run the ERR trap (an unset variable)
BASH_LINE = re.compile(r"line (\d+): ")
#: what the script has before the variables block
HEADER = "set -euo pipefail\ntrap 'echo \"install-guide-failed-line=$LINENO\" >&2' ERR\n"
#: folders of a working tree that a checkout doesn't have
NOT_IN_A_CHECKOUT = {".venv", ".git", ".demo", "build", "dist", "artifacts", "__pycache__"}


class GuideError(ValueError):
    """The guide's text breaks its own rules (an unmarked block, no variables block)."""


class StepFailed(AssertionError):
    """A step of the guide failed; the message starts with ``docs/install.md:LINE``."""


@dataclass(frozen=True)
class Block:
    where: str  # hub, node, both, manual
    line: int  # the line (1-based) of the block's first line of text in the file
    text: str  # the block's lines, each ending with a newline

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def line_of(self, index: int) -> int:
        """The file's line number of the block's line ``index`` (1-based)."""
        return self.line + index - 1


def parse(text: str, name: str = "docs/install.md", mark_re: re.Pattern[str] = MARK) -> list[Block]:
    """Every fenced block, in order, with where it runs; a block without its mark, a
    mark without its block, an unknown place or an unclosed block is a GuideError.
    ``mark_re``: the full path's blocks (``on:``) or the quick path's (:data:`QUICK`);
    the other path's blocks are passed over."""
    other = QUICK if mark_re is MARK else MARK
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        mark = mark_re.match(lines[i])
        if mark and not (i + 1 < len(lines) and lines[i + 1].startswith("```")):
            raise GuideError(f"{name}:{i + 1}: a mark without a fenced block on the next line")
        if mark and mark.group(1) not in PLACES:
            raise GuideError(f"{name}:{i + 1}: on: {mark.group(1)}? one of {', '.join(PLACES)}")
        if not lines[i].startswith("```"):
            i += 1
            continue
        before = mark_re.match(lines[i - 1]) if i else None
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if before is None and i and other.match(lines[i - 1]) and end is not None:
            i = end + 1  # the other path's block
            continue
        if before is None:
            raise GuideError(
                f"{name}:{i + 1}: a fenced block without '<!-- on: hub|node|both|manual -->' "
                "on the line before it"
            )
        if end is None:
            raise GuideError(f"{name}:{i + 1}: a fenced block that is never closed")
        body = "".join(f"{line}\n" for line in lines[i + 1 : end])
        blocks.append(Block(before.group(1), i + 2, body))
        i = end + 1
    return blocks


def variables(blocks: list[Block], name: str = "docs/install.md") -> Block:
    """The first block: the site's values, for every machine (``on: both``), nothing but
    ``NAME=value`` lines and comments."""
    if not blocks or blocks[0].where != "both":
        raise GuideError(f"{name}: the first fenced block must be the variables, on: both")
    block = blocks[0]
    for n, line in enumerate(block.lines, 1):
        if line.strip() and not line.lstrip().startswith("#") and not ASSIGNMENT.match(line):
            raise GuideError(f"{name}:{block.line_of(n)}: not a NAME=value line: {line!r}")
    return block


def names(block: Block) -> list[str]:
    return [m.group(1) for m in map(ASSIGNMENT.match, block.lines) if m]


def with_values(block: Block, values: Mapping[str, str]) -> str:
    """The variables block with the values of ``values`` in place of the guide's (one line
    for one line: line numbers stay those of the guide)."""
    unknown = sorted(set(values) - set(names(block)))
    if unknown:
        raise GuideError(f"the guide's variables block has no {', '.join(unknown)}")
    out = []
    for line in block.lines:
        m = ASSIGNMENT.match(line)
        if m and m.group(1) in values:
            line = f"{m.group(1)}={shlex.quote(values[m.group(1)])}"
        out.append(line + "\n")
    return "".join(out)


def script(variables_block: Block, values: Mapping[str, str], step: Block) -> str:
    return HEADER + with_values(variables_block, values) + step.text


def guide_line(variables_block: Block, step: Block, script_line: int) -> int:
    """The line of the guide that a line of :func:`script` comes from."""
    header = HEADER.count("\n")
    count = len(variables_block.lines)
    if script_line > header + count:
        return step.line_of(script_line - header - count)
    if script_line > header:
        return variables_block.line_of(script_line - header)
    return step.line


def failed_line(variables_block: Block, step: Block, stderr: str) -> int:
    found = FAILED.findall(stderr) or BASH_LINE.findall(stderr)
    if not found:
        return step.line
    return guide_line(variables_block, step, int(found[-1]))


def run_step(
    variables_block: Block,
    values: Mapping[str, str],
    step: Block,
    *,
    machine: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    lines: list[str] | None = None,
    name: str = "docs/install.md",
    wrap: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``step`` with bash on ``machine`` (a name for messages); StepFailed names the
    guide's line when it fails. ``lines``: the guide's lines, to quote the failing one;
    ``wrap``: a command to run bash under (e.g. ``nsenter --net=...`` for a node)."""
    text = script(variables_block, values, step)
    r = subprocess.run(
        [*wrap, "bash", "-c", text],
        cwd=cwd,
        env=dict(env if env is not None else os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if r.returncode != 0:
        line = failed_line(variables_block, step, r.stderr)
        quoted = f": {lines[line - 1].strip()}" if lines and 0 < line <= len(lines) else ""
        raise StepFailed(
            f"{name}:{line}{quoted}\n(the step on: {step.where} at line {step.line}, run on "
            f"{machine}, exit status {r.returncode})\n--- stdout\n{r.stdout[-3000:]}"
            f"--- stderr\n{r.stderr[-3000:]}"
        )
    return r


def one_line(block: Block, index: int) -> Block:
    """Line ``index`` (0-based) of ``block`` as a block of its own, its line number kept."""
    return Block(block.where, block.line + index, block.lines[index] + "\n")


def commands(block: Block) -> list[str]:
    """The block's commands: its logical lines (continuations joined, a here-document
    part of its command), without comments, blank lines and a loop's closing ``done``."""
    found: list[str] = []
    pending = ""
    heredoc = ""
    for line in block.lines:
        if heredoc:
            if line.strip() == heredoc:
                heredoc = ""
            continue
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        command = pending + stripped
        pending = ""
        doc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", command)
        if doc:
            heredoc = doc.group(1)
        if command not in ("done", "fi", "}"):
            found.append(command)
    return found


def copy_checkout(dst: Path) -> Path:
    """The working tree as a checkout has it (no virtual environment, no build output)."""
    shutil.copytree(
        REPO,
        dst,
        symlinks=True,
        ignore=lambda d, found: [
            n for n in found if n in NOT_IN_A_CHECKOUT or n.endswith(".egg-info")
        ],
    )
    return dst
