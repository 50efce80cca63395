"""A subprocess bounded in time, output and disk while it runs (``edges/builder/bounded``),
with small Python scripts standing in for pip."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from jupyterhub_gpu.edges.builder.bounded import folder_bytes, run_bounded
from tests.support.waiting import wait_until

pytestmark = pytest.mark.unit


def script(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_quick_run_keeps_the_end_of_its_output(tmp_path: Path) -> None:
    ran = run_bounded(
        script("import sys\nfor i in range(100000): print(i)\nsys.exit(3)"),
        os.environ,
        tmp_path,
        None,
        time.monotonic() + 60,
        keep=1000,
    )
    assert (ran.returncode, ran.over_size, ran.timed_out) == (3, False, False)
    assert len(ran.output) == 1000 and ran.output.endswith("99998\n99999\n")


def test_the_whole_process_group_is_killed_at_the_limit(tmp_path: Path) -> None:
    """pip's children go with it: a grandchild writing on is stopped too."""
    pids = tmp_path / "pids"
    code = f"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import time
with open({str(tmp_path / "watched" / "big")!r}, "wb") as f:
    while True:
        f.write(bytes(65536)); f.flush(); time.sleep(0.001)
'''])
open({str(pids)!r}, "w").write(str(child.pid))
time.sleep(3600)
"""
    (tmp_path / "watched").mkdir()
    ran = run_bounded(script(code), os.environ, tmp_path / "watched", 2**20, time.monotonic() + 60)
    assert ran.over_size and not ran.timed_out and ran.size > 2**20
    child = int(pids.read_text())

    def gone() -> bool:
        try:
            return Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    wait_until(gone, 10, "the grandchild killed")
    size = folder_bytes(tmp_path / "watched")
    assert size < 16 * 2**20


def test_the_deadline_kills_a_silent_process(tmp_path: Path) -> None:
    started = time.monotonic()
    sleeper = script("import time; time.sleep(3600)")
    ran = run_bounded(sleeper, os.environ, tmp_path, 10, started + 1)
    assert ran.timed_out and not ran.over_size and ran.returncode < 0
    assert time.monotonic() - started < 30


def test_a_run_that_passed_the_limit_between_two_measures_is_caught(tmp_path: Path) -> None:
    target = tmp_path / "f"
    code = f"open({str(target)!r}, 'wb').write(bytes(2**20))"
    ran = run_bounded(script(code), os.environ, tmp_path, 1000, time.monotonic() + 60)
    # it exited before a measure (0), or a measure caught it first (killed): over either way
    assert ran.returncode in (0, -9) and ran.over_size and ran.size == 2**20


def test_a_download_and_its_copy_count_once(tmp_path: Path) -> None:
    (tmp_path / "tmp" / "pip-unpack-x").mkdir(parents=True)
    (tmp_path / "tmp" / "pip-unpack-x" / "a.whl").write_bytes(bytes(3000))
    (tmp_path / "a.whl").write_bytes(bytes(1000))  # pip's copy, under way
    (tmp_path / "b.whl").write_bytes(bytes(500))
    (tmp_path / "link").symlink_to("/dev/zero")
    assert folder_bytes(tmp_path) == 3500
