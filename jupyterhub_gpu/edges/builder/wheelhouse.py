"""Fetching a saved image's packages outside the build (an edge: runs ``pip download``).

The hub fetches the wheels from the site's index or mirror (:class:`IndexSettings`)
into a temporary folder, for the base image's Python (:class:`~.model.Target`: version,
ABI, manylinux platforms), with ``--no-deps`` (the plan pins everything the user's
environment added, and the base image has the rest) and ``--only-binary=:all:`` (a
build with no network can't fetch build back-ends for an sdist). The build then needs
no network at all. What the index serves is treated as hostile:

- each name is taken from one index (:mod:`jupyterhub_gpu.core.saving.indexes`: against
  dependency confusion): pip runs once per index, with that index only;
- pip runs bounded (:mod:`.bounded`): killed when the folder (its ``--dest`` and its
  ``TMPDIR``, no cache) passes the user's allowance, or at the deadline; its output is
  read bounded;
- each wheel's zip directory is checked before anything unpacks it
  (:func:`read_archives`, :mod:`jupyterhub_gpu.core.saving.archives`).

pip's failure is turned into a sentence that names the package (:func:`failure_message`).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from jupyterhub_gpu.core.saving.archives import (
    ArchiveBounds,
    WheelArchive,
    ZipEntry,
    check_archives,
    directory_refusal,
)
from jupyterhub_gpu.core.saving.data import (
    GLIBC_MINORS,
    FetchFailed,
    LimitReached,
    PipRequirement,
    Target,
)
from jupyterhub_gpu.core.saving.indexes import IndexPolicy, IndexRun, lookups, route, shown_index
from jupyterhub_gpu.core.saving.limits import Allowance, size_text
from jupyterhub_gpu.edges.builder.bounded import run_bounded
from jupyterhub_gpu.edges.builder.index_lookup import listed_pairs

#: The oldest glibc each manylinux architecture has wheels for (PEP 600).
_MANYLINUX_FLOOR = {"x86_64": 5, "i686": 5, "aarch64": 17, "ppc64le": 17, "s390x": 17}
#: a hard cap on :func:`platform_tags` (glibc 2.99 on x86_64 gives 98)
MAX_PLATFORM_TAGS = 128
_LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
_NOT_FOUND = re.compile(r"No matching distribution found for (\S+)")
_UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Read timed out",
    "ConnectTimeoutError",
    "ProxyError",
    "SSLError",
    "connection error",
)
_DENIED = re.compile(r"\b(401|403)\b.*(Client Error|Unauthorized|Forbidden)|HTTP error (401|403)")


@dataclass(frozen=True)
class IndexSettings:
    """Where the hub fetches packages: the admin's settings, passed to pip as options.

    ``index_url`` ``None``: pip's own configuration of the hub's environment (pip.conf,
    ``PIP_INDEX_URL``; not its extra indexes or find-links). ``extra_index_urls`` and
    ``index_for`` ((name or pattern, index URL) pairs): which index each name is taken
    from (:mod:`jupyterhub_gpu.core.saving.indexes`). ``no_index`` with ``find_links``: a
    fully offline mirror (folders of wheels); ``find_links`` are also searched beside
    each index otherwise. ``timeout_s`` bounds the whole download (the lookups and every
    pip run); ``socket_timeout_s`` and ``retries`` are pip's per connection."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    index_for: tuple[tuple[str, str], ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    trusted_hosts: tuple[str, ...] = ()
    cert: str | None = None
    timeout_s: float = 600.0
    socket_timeout_s: int = 15
    retries: int = 2


def platform_tags(target: Target) -> list[str]:
    """pip ``--platform`` values for ``target``: every manylinux its glibc runs, newest
    first (with the legacy aliases), or ``any`` (pure-Python wheels only) without glibc,
    or with a glibc outside :data:`GLIBC_MINORS` or under the machine's floor. Never more
    than :data:`MAX_PLATFORM_TAGS`, whatever ``target`` says (it comes from the image)."""
    floor = _MANYLINUX_FLOOR.get(target.machine)
    if target.glibc is None or floor is None or target.glibc[0] != 2:
        return ["any"]
    newest = target.glibc[1]
    if newest not in GLIBC_MINORS or newest < floor:
        return ["any"]
    tags: list[str] = []
    for minor in range(newest, floor - 1, -1):
        tags.append(f"manylinux_2_{minor}_{target.machine}")
        legacy = _LEGACY.get((2, minor))
        if legacy and (legacy != "manylinux2010" or target.machine in ("x86_64", "i686")):
            tags.append(f"{legacy}_{target.machine}")
        if len(tags) >= MAX_PLATFORM_TAGS:
            break
    return tags[:MAX_PLATFORM_TAGS]


def index_policy(index: IndexSettings) -> IndexPolicy:
    return IndexPolicy(index.index_url, index.extra_index_urls, index.index_for)


def download_argv(
    requirements: Sequence[PipRequirement],
    dest: Path,
    target: Target,
    index: IndexSettings,
    python: str = sys.executable,
    index_url: str | None = None,
) -> list[str]:
    """The ``pip download`` command line for one index, ``index_url`` (``None``: pip's
    configured index); requirements come after ``--`` (never options)."""
    major, minor = target.python
    argv = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir"]
    argv += ["--dest", str(dest), "--python-version", f"{major}.{minor}"]
    argv += ["--implementation", target.implementation]
    for abi in (f"{target.implementation}{major}{minor}", "abi3", "none"):
        argv += ["--abi", abi]
    for tag in platform_tags(target):
        argv += ["--platform", tag]
    argv += ["--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
    argv += ["--timeout", str(index.socket_timeout_s), "--retries", str(max(1, index.retries))]
    if index.no_index:
        argv.append("--no-index")
    elif index_url:
        argv += ["--index-url", index_url]
    for link in index.find_links:
        argv += ["--find-links", link]
    for host in index.trusted_hosts:
        argv += ["--trusted-host", host]
    if index.cert:
        argv += ["--cert", index.cert]
    return [*argv, "--", *(r.spec for r in requirements)]


def _where(target: Target) -> str:
    return f"Python {target.python_version} ({target.machine})"


def failure_message(
    output: str,
    requirements: Sequence[PipRequirement],
    target: Target,
    index_url: str | None = None,
) -> str:
    """A sentence for the user from pip's output (credentials in URLs removed);
    ``index_url``: the one index the run asked (``None``: the site's index)."""
    if any(marker in output for marker in _UNREACHABLE):
        return (
            "The site's package index could not be reached from the hub, so your "
            "packages could not be fetched; try again later or tell your admin."
        )
    if _DENIED.search(output):
        return (
            "The site's package index refused the hub's request (not authorised); tell your admin."
        )
    if "DO NOT MATCH THE HASHES" in output:
        return (
            "A package downloaded from the site's index did not match its published "
            "hash; tell your admin."
        )
    match = _NOT_FOUND.search(output)
    if match:
        spec = match.group(1)
        known = {r.name: r.spec for r in requirements}
        name = canonicalize_name(re.split(r"[=<>!~]", spec, maxsplit=1)[0])
        spec = known.get(name, spec[:80])
        where = "the site's index" if index_url is None else shown_index(index_url)
        return (
            f"Package {spec!r} was not found as a wheel for {_where(target)} in {where}; "
            "remove it from your environment or ask your admin."
        )
    last = [line for line in output.splitlines() if line.startswith("ERROR:")][-1:]
    detail = redact_line(last[0][6:].strip())[:200] if last else "no error message"
    return f"Fetching your packages failed ({detail}); tell your admin."


def redact_line(line: str) -> str:
    """``line`` with every ``scheme://user:password@`` made ``scheme://***@``."""
    return re.sub(r"(\w+://)[^/\s@]+@", r"\1***@", line)


def check_wheels(dest: Path, requirements: Sequence[PipRequirement]) -> list[Path]:
    """The wheels in ``dest``, exactly one per requirement and nothing else."""
    wanted = {(r.name, r.version): r for r in requirements}
    found: dict[tuple[str, str], Path] = {}
    for path in sorted(dest.iterdir()):
        try:
            name, version, _build, _tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            raise FetchFailed(
                f"pip left {path.name[:80]!r}, which is not a wheel, in the "
                "wheelhouse; tell your admin."
            ) from None
        key = (str(name), str(version))
        if key not in wanted or key in found or not path.is_file() or path.is_symlink():
            raise FetchFailed(
                f"pip left an unexpected file {path.name[:80]!r} in the "
                "wheelhouse; tell your admin."
            )
        found[key] = path
    missing = [wanted[k].spec for k in wanted if k not in found]
    if missing:
        raise FetchFailed(f"Package {missing[0]!r} was not fetched by pip; tell your admin.")
    return [found[k] for k in wanted]


#: the end of a zip's central directory, its zip64 locator, and its zip64 form
_END = struct.Struct("<4s4H2LH")
_LOCATOR64 = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")


def end_record(f: BinaryIO) -> tuple[int, int] | None:
    """A zip's declared entry count and central directory size, from its end record
    (zip64 too), found as :mod:`zipfile` finds it; ``None`` when there is none."""
    size = f.seek(0, os.SEEK_END)
    start = max(size - _END.size - 65535, 0)
    f.seek(start)
    tail = f.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _END.size > len(tail):
        return None
    _sig, _d, _dcd, _here, entries, directory, _offset, _comment = _END.unpack_from(tail, at)
    if entries != 0xFFFF and directory != 0xFFFFFFFF:
        return entries, directory
    locator = start + at - _LOCATOR64.size
    if locator < 0:
        return None
    f.seek(locator)
    sig, _disk, offset, _disks = _LOCATOR64.unpack(f.read(_LOCATOR64.size))
    f.seek(offset)
    record = f.read(_END64.size)
    if sig != b"PK\x06\x07" or len(record) < _END64.size:
        return None
    fields = _END64.unpack(record)
    return (fields[7], fields[8]) if fields[0] == b"PK\x06\x06" else None


def read_archive(path: Path, package: str, bounds: ArchiveBounds) -> WheelArchive:
    """``path``'s zip directory as plain data, parsed only when its end record is within
    ``bounds`` (the directory is read into memory whole); nothing is extracted."""
    try:
        with path.open("rb") as f:
            end = end_record(f)
            if end is None:
                return WheelArchive(package, path.name, problem="is not a valid zip")
            too_large = directory_refusal(*end, bounds)
            if too_large:
                return WheelArchive(package, path.name, problem=too_large)
            with zipfile.ZipFile(f) as z:
                entries = tuple(
                    ZipEntry(i.filename, i.compress_size, i.file_size) for i in z.infolist()
                )
    except (OSError, zipfile.BadZipFile, struct.error, ValueError, EOFError):
        return WheelArchive(package, path.name, problem="is not a valid zip")
    return WheelArchive(package, path.name, entries)


def read_archives(
    wheels: Sequence[Path], requirements: Sequence[PipRequirement], bounds: ArchiveBounds
) -> list[WheelArchive]:
    """The directories of ``wheels`` (one per requirement, in the same order)."""
    return [read_archive(w, r.spec, bounds) for w, r in zip(wheels, requirements, strict=True)]


def plan_runs(
    requirements: Sequence[PipRequirement], index: IndexSettings, deadline: float
) -> tuple[IndexRun, ...]:
    """The pip runs, one per index (:mod:`jupyterhub_gpu.core.saving.indexes`), after
    asking the extra indexes which names they list."""
    if index.no_index:
        return (IndexRun(None, tuple(requirements)),)
    policy = index_policy(index)
    listed = listed_pairs(
        lookups(requirements, policy),
        deadline,
        float(index.socket_timeout_s),
        verify=index.cert or True,
        trusted_hosts=index.trusted_hosts,
    )
    return route(requirements, policy, listed)


def _pip_env(tmp: Path) -> dict[str, str]:
    """pip's environment: the hub's, with its configured extra indexes and find-links off
    (the policy chooses the index; ``" "`` is pip's empty list: ``""`` would be ignored),
    and its temporary files in the watched folder."""
    return {
        **os.environ,
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_EXTRA_INDEX_URL": " ",
        "PIP_FIND_LINKS": " ",
        "TMPDIR": str(tmp),
    }


def _download(
    run: IndexRun,
    dest: Path,
    target: Target,
    index: IndexSettings,
    allowance: Allowance,
    deadline: float,
    python: str,
) -> None:
    argv = download_argv(run.requirements, dest, target, index, python, run.index)
    tmp = dest / ".pip-tmp"
    tmp.mkdir()
    try:
        ran = run_bounded(argv, _pip_env(tmp), dest, allowance.bytes, deadline)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if ran.over_size:
        raise LimitReached(
            f"Your packages are larger than {allowance.what}: the hub stopped fetching them "
            f"at {size_text(ran.size)}. Remove some packages and save again; nothing was saved."
        )
    if ran.timed_out:
        raise FetchFailed(
            f"Fetching your packages took more than {index.timeout_s:.0f} s; "
            "try again later or tell your admin."
        )
    if ran.returncode != 0:
        raise FetchFailed(failure_message(ran.output, run.requirements, target, run.index))


def fetch_wheels(
    requirements: Sequence[PipRequirement],
    dest: Path,
    target: Target,
    index: IndexSettings,
    allowance: Allowance | None = None,
    python: str = sys.executable,
    bounds: ArchiveBounds | None = None,
) -> list[Path]:
    """Download one wheel per requirement into the empty folder ``dest`` and check their
    zip directories (blocking: call it off the event loop); :class:`FetchFailed`,
    :class:`LimitReached` or :class:`InvalidPackage` with a sentence for the user.
    ``allowance`` bounds the download as it grows and the wheels' unpacked size."""
    allowance = allowance or Allowance(None)
    bounds = bounds or ArchiveBounds()
    deadline = time.monotonic() + index.timeout_s
    for run in plan_runs(requirements, index, deadline):
        _download(run, dest, target, index, allowance, deadline, python)
    wheels = check_wheels(dest, requirements)
    check_archives(read_archives(wheels, requirements, bounds), allowance, bounds)
    return wheels
