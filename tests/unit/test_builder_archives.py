"""A wheel's zip directory, checked before anything unpacks it: the pure decision
(:mod:`jupyterhub_gpu.core.saving.archives`) and the edge that reads the directory
(``wheelhouse.read_archive``, ``end_record``; nothing is extracted)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from jupyterhub_gpu.core.saving.archives import (
    ArchiveBounds,
    WheelArchive,
    ZipEntry,
    archive_refusal,
    check_archives,
    directory_refusal,
    unsafe_name,
)
from jupyterhub_gpu.core.saving.data import InvalidPackage, LimitReached
from jupyterhub_gpu.core.saving.limits import Allowance
from jupyterhub_gpu.edges.builder.wheelhouse import end_record, read_archive

pytestmark = pytest.mark.unit
MIB = 2**20
BOUNDS = ArchiveBounds()


def wheel(*entries: tuple[str, int, int], package: str = "pkg==1.0") -> WheelArchive:
    return WheelArchive(package, "pkg-1.0-py3-none-any.whl", tuple(ZipEntry(*e) for e in entries))


@pytest.mark.parametrize(
    ("archive", "why"),
    [
        (wheel(("pkg/__init__.py", 10, 20), ("pkg/lib.so", 30 * MIB, 90 * MIB)), ""),
        (wheel(("pkg/zeros", 40 * 1024, 40 * MIB)), "would unpack 'pkg/zeros' to 40 MiB from"),
        (wheel(("pkg/small", 1024, 31 * MIB)), ""),  # 31 MiB: under the ratio's floor
        (  # many entries, each under the floor, a bomb together
            wheel(*[(f"pkg/{i}", 100 * 1024, 16 * MIB) for i in range(4)]),
            "would unpack to 64 MiB from 400 KiB (a zip bomb)",
        ),
        (wheel(("../evil.py", 1, 1)), "holds a file named '../evil.py'"),
        (wheel(("pkg/../../x", 1, 1)), "outside the folder"),
        (wheel(("/etc/cron.d/x", 1, 1)), "outside the folder"),
        (wheel(("C:/x", 1, 1)), "outside the folder"),
        (wheel(("pkg\\..\\x", 1, 1)), "outside the folder"),
        (wheel(("pkg/x", -1, 1)), "corrupt"),
        (WheelArchive("pkg==1.0", "f.whl", problem="is not a valid zip"), "is not a valid zip"),
    ],
)
def test_what_a_wheel_may_not_be(archive: WheelArchive, why: str) -> None:
    refusal = archive_refusal(archive, BOUNDS)
    assert (why in refusal) if why else refusal == ""


def test_entry_count_and_directory_size_bounds() -> None:
    assert directory_refusal(200_000, 50 * MIB, BOUNDS) == ""
    assert "200,001 files, more than the 200,000" in directory_refusal(200_001, 1, BOUNDS)
    assert "file list of 65 MiB" in directory_refusal(10, 65 * MIB, BOUNDS)
    many = WheelArchive("p==1", "p.whl", tuple(ZipEntry(f"p/{i}", 1, 1) for i in range(11)))
    assert "11 files" in archive_refusal(many, ArchiveBounds(max_entries=10))


@pytest.mark.parametrize("name", ["a/b", "a/..b", "pkg-1.0.dist-info/RECORD", "a/./b"])
def test_plain_names_are_safe(name: str) -> None:
    assert not unsafe_name(name)


def test_the_sum_of_unpacked_sizes_against_the_allowance() -> None:
    small = wheel(("a", 1 * MIB, 3 * MIB), package="a==1")
    large = wheel(("b", 2 * MIB, 6 * MIB), package="b==2")
    check_archives([small, large], Allowance(9 * MIB, "x"), BOUNDS)
    check_archives([small, large], Allowance(None), BOUNDS)
    with pytest.raises(LimitReached) as failure:
        check_archives([small, large], Allowance(8 * MIB, "the limit of 8.0 MiB"), BOUNDS)
    assert str(failure.value) == (
        "Your packages unpack to 9.0 MiB, more than the limit of 8.0 MiB (the largest is "
        "'b==2', 6.0 MiB); remove some packages and save again. Nothing was saved."
    )
    bad = wheel(("../x", 1, 1), package="evil==6.6.6")
    with pytest.raises(InvalidPackage, match=r"^The wheel of 'evil==6\.6\.6' from the site"):
        check_archives([small, bad], Allowance(None), BOUNDS)


def test_the_edge_reads_a_wheels_directory_without_extracting(tmp_path: Path) -> None:
    path = tmp_path / "p-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("p/__init__.py", "x = 1\n" * 1000)
        z.writestr("../escape.py", "")
    archive = read_archive(path, "p==1.0", BOUNDS)
    assert archive.entries[0] == ZipEntry("p/__init__.py", archive.entries[0].compressed, 6000)
    assert archive.entries[1].name == "../escape.py"
    assert "outside the folder" in archive_refusal(archive, BOUNDS)


@pytest.mark.parametrize(
    "content", [b"", b"PK", b"not a zip at all" * 100, b"PK\x05\x06" + b"\xff" * 18]
)
def test_what_is_not_a_zip(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "p-1.0-py3-none-any.whl"
    path.write_bytes(content)
    archive = read_archive(path, "p==1.0", BOUNDS)
    assert archive == WheelArchive("p==1.0", path.name, problem="is not a valid zip")


def test_a_directory_too_large_is_not_parsed(tmp_path: Path) -> None:
    path = tmp_path / "p-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(2000):
            z.writestr(f"p/{i}", "")
    archive = read_archive(path, "p==1.0", ArchiveBounds(max_entries=1000))
    assert archive.entries == ()
    assert archive.problem == "has 2,000 files, more than the 1,000 a wheel may have"
    with path.open("rb") as f:
        entries, size = end_record(f)  # type: ignore[misc]
    assert entries == 2000 and 0 < size < path.stat().st_size


def test_the_zip64_end_record_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:  # more than 65,535 entries: zip64's end record
        for i in range(70_000):
            z.writestr(zipfile.ZipInfo(f"{i}"), b"")
    with path.open("rb") as f:
        record = end_record(f)
    assert record is not None and record[0] == 70_000
    archive = read_archive(path, "p==1.0", ArchiveBounds(max_entries=65_000))
    assert archive.problem.startswith("has 70,000 files")
