"""The package's one atomic writer (edges/files.py): after a crash at any point the file is
the old one or the new one, whole, never a part; its mode is exact from the start; the
folder is flushed after the rename."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyterhub_gpu.edges import files
from jupyterhub_gpu.edges.files import write_atomic, write_json_atomic

pytestmark = pytest.mark.unit

OLD = b'{"old": true}\n'
NEW = b'{"new": "' + b"x" * 100_000 + b'"}\n'


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_the_whole_file_with_mode_0600_by_default(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    old = os.umask(0)  # the caller's umask decides nothing
    try:
        write_atomic(path, NEW)
    finally:
        os.umask(old)
    assert path.read_bytes() == NEW
    assert mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


@pytest.mark.parametrize("wanted", [0o600, 0o644, 0o640])
def test_the_mode_is_exact_and_set_before_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wanted: int
) -> None:
    """The temporary file already has its mode and all its bytes, flushed, when it is
    renamed: never a moment more open than asked, never a part renamed into place."""
    path = tmp_path / "f"
    path.write_bytes(OLD)
    path.chmod(0o666)
    seen: list[tuple[int, bytes]] = []
    real = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append((stat.S_IMODE(os.stat(src).st_mode), Path(src).read_bytes()))
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", replace)
    write_atomic(path, NEW, wanted)
    assert seen == [(wanted, NEW)]
    assert mode(path) == wanted and path.read_bytes() == NEW


@pytest.mark.parametrize("existed", [True, False])
def test_a_crash_between_write_and_rename_leaves_the_old_file_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existed: bool
) -> None:
    path = tmp_path / "drains.json"
    if existed:
        path.write_bytes(OLD)

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, NEW)
    if existed:
        assert path.read_bytes() == OLD  # whole, the old one
    else:
        assert not path.exists()  # absent, not empty or half
    assert [p.name for p in tmp_path.iterdir()] == (["drains.json"] if existed else [])


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(OLD)

    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(files.os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output error"):
        write_atomic(path, NEW)
    assert path.read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_a_process_killed_before_the_rename_leaves_the_old_file_whole(tmp_path: Path) -> None:
    """A real crash (the process ends at once, nothing cleaned up) just before the rename:
    the target is still the old file, whole; only a hidden temporary file is left."""
    path = tmp_path / "notes.json"
    path.write_bytes(OLD)
    script = textwrap.dedent(
        f"""
        import os
        from jupyterhub_gpu.edges import files
        files.os.replace = lambda src, dst: os._exit(9)
        files.write_atomic({str(path)!r}, b"x" * 1_000_000)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
    assert r.returncode == 9
    assert path.read_bytes() == OLD
    left = sorted(p.name for p in tmp_path.iterdir() if p != path)
    assert len(left) == 1 and left[0].startswith(".notes.json.")


def test_the_folder_is_flushed_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync on the file before the rename, then on its folder after it: the rename
    itself survives a power cut."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            assert (st.st_dev, st.st_ino) == (tmp_path.stat().st_dev, tmp_path.stat().st_ino)
            events.append("fsync folder")
        else:
            events.append("fsync file")
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "fsync", fsync)
    monkeypatch.setattr(files.os, "replace", replace)
    write_atomic(tmp_path / "f", NEW)
    assert events == ["fsync file", "rename", "fsync folder"]


def test_a_folder_that_cannot_be_flushed_still_gets_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some filesystems refuse fsync on a folder (EINVAL): the file is in place, the
    write is not reported as failed (a caller would otherwise think it unchanged)."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    write_atomic(tmp_path / "f", NEW)
    assert (tmp_path / "f").read_bytes() == NEW


def test_the_folder_must_exist_but_write_json_atomic_makes_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "f", NEW)
    write_json_atomic(tmp_path / "made" / "f.json", {"b": 1, "a": [2]}, mode=0o644)
    assert (tmp_path / "made" / "f.json").read_text() == '{\n "a": [\n  2\n ],\n "b": 1\n}'
    assert mode(tmp_path / "made" / "f.json") == 0o644


def test_no_other_module_writes_files_its_own_atomic_way() -> None:
    """One atomic writer in the package: nothing but edges/files.py makes a temporary file
    and renames it over another (issue 31: there were three)."""
    package = Path(files.__file__).resolve().parents[1]
    writers = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if "mkstemp" in p.read_text() or "os.replace(" in p.read_text()
    )
    assert writers == ["edges/files.py"]
