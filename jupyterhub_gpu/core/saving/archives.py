"""Is a fetched wheel safe to unpack? Decided from its zip directory alone. Pure.

A wheel is a zip the index's uploader wrote, so what it holds is the user's choice (or an
attacker's). Before the hub builds a context from the wheels, the edge reads each zip's
central directory (:mod:`jupyterhub_gpu.edges.builder.wheelhouse`; nothing is extracted)
and :func:`check_archives` refuses, naming the package:

- a wheel whose directory is out of bounds before it is even parsed
  (:func:`directory_refusal`: more than :attr:`ArchiveBounds.max_entries` entries, or a
  directory over :attr:`ArchiveBounds.max_directory_bytes`), or that is not a valid zip;
- an entry with an absolute path, a ``..`` part, a backslash or a NUL in its name;
- a zip bomb: a wheel or one entry that unpacks to more than
  :attr:`ArchiveBounds.ratio_from_bytes` at more than :attr:`ArchiveBounds.max_ratio`
  times its compressed size;
- wheels whose declared unpacked sizes add up to more than the user's allowance
  (:class:`~.limits.Allowance`): pip installs a wheel through ``zipfile``, which never
  writes more than an entry's declared size, so the declared sizes bound what the install
  writes on the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from jupyterhub_gpu.core.saving.data import InvalidPackage, LimitReached
from jupyterhub_gpu.core.saving.limits import Allowance, size_text


@dataclass(frozen=True)
class ArchiveBounds:
    """What a wheel may look like. Real wheels stay far inside: torch 2.3 has ~13,000
    entries and compresses its largest files 2-4 to 1."""

    max_entries: int = 200_000
    max_directory_bytes: int = 64 * 2**20
    max_ratio: float = 100.0
    ratio_from_bytes: int = 32 * 2**20


@dataclass(frozen=True)
class ZipEntry:
    """One member of a zip as its central directory declares it."""

    name: str
    compressed: int
    uncompressed: int


@dataclass(frozen=True)
class WheelArchive:
    """One fetched wheel: the requirement it was fetched for (``name==version``), its file
    name, and its entries; ``problem`` when the edge could not read a directory (then
    ``entries`` is empty): e.g. ``"is not a valid zip"``."""

    package: str
    file: str
    entries: tuple[ZipEntry, ...] = ()
    problem: str = ""

    @property
    def unpacked(self) -> int:
        return sum(e.uncompressed for e in self.entries)


def directory_refusal(entries: int, directory_bytes: int, bounds: ArchiveBounds) -> str:
    """Why a zip's end record (its declared entry count and directory size) must not be
    parsed at all, or ``""``: the directory is read into memory whole."""
    if entries > bounds.max_entries:
        return f"has {entries:,} files, more than the {bounds.max_entries:,} a wheel may have"
    if directory_bytes > bounds.max_directory_bytes:
        return (
            f"has a file list of {size_text(directory_bytes)}, more than the "
            f"{size_text(bounds.max_directory_bytes)} a wheel may have"
        )
    return ""


def unsafe_name(name: str) -> bool:
    """An entry name that could land outside the install folder, or that no tool treats
    alike: absolute, with a ``..`` part, a backslash, a drive letter or a NUL."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return True
    if len(name) > 1 and name[1] == ":":
        return True
    return ".." in PurePosixPath(name).parts


def _bomb(compressed: int, uncompressed: int, bounds: ArchiveBounds) -> bool:
    return uncompressed > bounds.ratio_from_bytes and uncompressed > bounds.max_ratio * max(
        compressed, 1
    )


def archive_refusal(archive: WheelArchive, bounds: ArchiveBounds) -> str:
    """Why this one wheel must not be unpacked, or ``""``."""
    if archive.problem:
        return archive.problem
    if len(archive.entries) > bounds.max_entries:
        return (
            f"has {len(archive.entries):,} files, more than the {bounds.max_entries:,} a "
            "wheel may have"
        )
    for entry in archive.entries:
        if unsafe_name(entry.name):
            return f"holds a file named {entry.name[:80]!r}, outside the folder it installs to"
        if entry.compressed < 0 or entry.uncompressed < 0:
            return "has a corrupt file list"
        if _bomb(entry.compressed, entry.uncompressed, bounds):
            return (
                f"would unpack {entry.name[:80]!r} to {size_text(entry.uncompressed)} from "
                f"{size_text(entry.compressed)} (a zip bomb)"
            )
    compressed = sum(e.compressed for e in archive.entries)
    if _bomb(compressed, archive.unpacked, bounds):
        return (
            f"would unpack to {size_text(archive.unpacked)} from {size_text(compressed)} "
            "(a zip bomb)"
        )
    return ""


def check_archives(
    archives: Sequence[WheelArchive], allowance: Allowance, bounds: ArchiveBounds
) -> None:
    """Raise :class:`InvalidPackage` for the first wheel that must not be unpacked, and
    :class:`LimitReached` when together they unpack to more than ``allowance``."""
    for archive in archives:
        why = archive_refusal(archive, bounds)
        if why:
            raise InvalidPackage(
                f"The wheel of {archive.package!r} from the site's index ({archive.file[:100]}) "
                f"{why}; it was not unpacked. Remove the package from your environment or "
                "ask your admin. Nothing was saved."
            )
    total = sum(a.unpacked for a in archives)
    if allowance.bytes is None or total <= allowance.bytes:
        return
    largest = max(archives, key=lambda a: a.unpacked)
    raise LimitReached(
        f"Your packages unpack to {size_text(total)}, more than {allowance.what} (the "
        f"largest is {largest.package!r}, {size_text(largest.unpacked)}); remove some "
        "packages and save again. Nothing was saved."
    )
