"""Fetching a saved image's packages outside the build (an edge: runs ``pip download``).

The hub fetches the wheels from the site's index or mirror (:class:`IndexSettings`)
into a temporary folder, for the base image's Python (:class:`~.model.Target`: version,
ABI, manylinux platforms), with ``--no-deps`` (the plan pins everything the user's
environment added, and the base image has the rest) and ``--only-binary=:all:`` (a
build with no network can't fetch build back-ends for an sdist). The build then needs
no network at all. pip runs as a subprocess with a time limit; its failure is turned
into a sentence that names the package (:func:`failure_message`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from jupyterhub_gpu.core.saving.data import GLIBC_MINORS, FetchFailed, PipRequirement, Target

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
    ``PIP_INDEX_URL``). ``no_index`` with ``find_links``: a fully offline mirror (folders
    of wheels). ``timeout_s`` bounds the whole download; ``socket_timeout_s`` and
    ``retries`` are pip's per connection."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
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


def download_argv(
    requirements: Sequence[PipRequirement],
    dest: Path,
    target: Target,
    index: IndexSettings,
    python: str = sys.executable,
) -> list[str]:
    """The ``pip download`` command line; requirements come after ``--`` (never options)."""
    major, minor = target.python
    argv = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
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
    elif index.index_url:
        argv += ["--index-url", index.index_url]
    for url in index.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in index.find_links:
        argv += ["--find-links", link]
    for host in index.trusted_hosts:
        argv += ["--trusted-host", host]
    if index.cert:
        argv += ["--cert", index.cert]
    return [*argv, "--", *(r.spec for r in requirements)]


def _where(target: Target) -> str:
    return f"Python {target.python_version} ({target.machine})"


def failure_message(output: str, requirements: Sequence[PipRequirement], target: Target) -> str:
    """A sentence for the user from pip's output (credentials in URLs removed)."""
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
        return (
            f"Package {spec!r} was not found as a wheel for {_where(target)} in the "
            "site's index; remove it from your environment or ask your admin."
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


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def fetch_wheels(
    requirements: Sequence[PipRequirement],
    dest: Path,
    target: Target,
    index: IndexSettings,
    run: Runner = subprocess.run,
    python: str = sys.executable,
) -> list[Path]:
    """Download one wheel per requirement into the empty folder ``dest`` (blocking: call
    it off the event loop); :class:`FetchFailed` with a sentence for the user."""
    argv = download_argv(requirements, dest, target, index, python)
    env = {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    try:
        done = run(
            argv,
            capture_output=True,
            text=True,
            timeout=index.timeout_s,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise FetchFailed(
            f"Fetching your packages took more than {index.timeout_s:.0f} s; "
            "try again later or tell your admin."
        ) from None
    if done.returncode != 0:
        raise FetchFailed(failure_message(f"{done.stdout}\n{done.stderr}", requirements, target))
    return check_wheels(dest, requirements)
