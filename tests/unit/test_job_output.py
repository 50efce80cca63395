"""``job logs`` reads the job's own output file, from an offset, bounded, and never
follows a symlink the user put anywhere on the way (issue 32)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyterhub_gpu.edges.job_output import read_output

pytestmark = pytest.mark.unit


def test_reads_from_an_offset_bounded(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "7").mkdir(parents=True)
    (tmp_path / "jobs" / "7" / "output.log").write_bytes(b"hello world\n")
    uid = os.getuid()
    assert read_output(tmp_path, "7", uid, 0, 5) == b"hello"
    assert read_output(tmp_path, "7", uid, 6, 100) == b"world\n"
    assert read_output(tmp_path, "7", uid, 100, 100) == b""
    assert read_output(tmp_path, "8", uid, 0, 100) == b""  # none yet
    assert read_output(tmp_path, "7", uid + 1, 0, 100) == b""  # not the job's own file
    assert read_output(tmp_path, "../7", uid, 0, 100) == b""


def test_reads_the_end_bounded(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "7").mkdir(parents=True)
    (tmp_path / "jobs" / "7" / "output.log").write_bytes(b"hello world\n")
    uid = os.getuid()
    assert read_output(tmp_path, "7", uid, 0, 6, tail=True) == b"world\n"
    assert read_output(tmp_path, "7", uid, 0, 100, tail=True) == b"hello world\n"
    assert read_output(tmp_path, "7", uid + 1, 0, 6, tail=True) == b""


def test_never_follows_a_symlink(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    home = tmp_path / "home"
    (home / "jobs" / "1").mkdir(parents=True)
    (home / "jobs" / "1" / "output.log").symlink_to(secret)
    (home / "jobs" / "2").symlink_to(tmp_path)  # a folder on the way
    (tmp_path / "output.log").write_text("root's\n")
    uid = os.getuid()
    assert read_output(home, "1", uid, 0, 100) == b""
    assert read_output(home, "2", uid, 0, 100) == b""
