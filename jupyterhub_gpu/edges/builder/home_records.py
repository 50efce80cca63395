"""What a user added to their environment, from pip's and conda's own records (an edge).

Reads, below the user's home on the hub's side of the shared filesystem:

- ``~/.local/lib/pythonX.Y/site-packages/*.dist-info`` (``pip install --user``): each
  folder's ``METADATA`` (``Name``, ``Version``), ``INSTALLER``, ``REQUESTED`` and PEP 610's
  ``direct_url.json`` (a URL, local folder, VCS or editable install);
- conda environments in the usual places (:data:`CONDA_ROOTS`): ``conda-meta/*.json``
  and the environment's own ``lib/pythonX.Y/site-packages``.

The home belongs to the user, who may have filled it with traps: symbolic links to the
hub's files, FIFOs that block a reader, huge files, millions of entries. Every path is
opened one component at a time relative to the home with ``O_NOFOLLOW`` (no link is ever
followed, and a link swapped in mid-read can't redirect it), files are read only when
they are regular, up to a size cap, and listings and the total bytes read are capped.
What can't be read is reported as :class:`~.model.Skipped`, never raised.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.saving.data import CondaRecord, HomeRecords, PipRecord, Skipped, shown

#: Where conda environments live in a home: each root is an environment when it has
#: ``conda-meta``, and so is each ``<root>/envs/<name>`` that has one.
CONDA_ROOTS: tuple[str, ...] = (
    ".conda",
    "miniconda3",
    "anaconda3",
    "miniforge3",
    "mambaforge",
    "micromamba",
    ".local/share/mamba",
)
MAX_LISTING = 20_000  #: entries read from one folder
MAX_DISTS = 5_000  #: dist-info folders or conda records per environment
METADATA_HEAD = 256 * 1024  #: bytes of METADATA read (Name and Version are at the top)
SMALL_FILE = 64 * 1024  #: INSTALLER, direct_url.json
CONDA_RECORD_MAX = 32 * 1024 * 1024  #: one conda-meta JSON (its file list can be long)
READ_BUDGET = 512 * 1024 * 1024  #: bytes read from one home in all

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_PYDIR = re.compile(r"^python(\d)\.(\d{1,2})$", re.ASCII)
_DIST_IN_FILES = re.compile(r"^lib/python\d\.\d{1,2}/site-packages/([^/]+\.dist-info)/METADATA$")


class _Tree:
    """Reads below one root folder without following symbolic links, within a budget."""

    def __init__(self, root: Path, budget: int | None = None) -> None:
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.budget = READ_BUDGET if budget is None else budget

    def close(self) -> None:
        os.close(self.fd)

    def _dir(self, parts: Sequence[str]) -> int:
        fd = os.dup(self.fd)
        try:
            for part in parts:
                if part in ("", ".", "..") or "/" in part:
                    raise FileNotFoundError(part)
                new = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = new
        except BaseException:
            os.close(fd)
            raise
        return fd

    def listdir(self, parts: Sequence[str]) -> list[tuple[str, bool]] | None:
        """``(name, is_folder)`` below ``parts`` (links are neither followed nor folders),
        at most :data:`MAX_LISTING`; ``None`` when it is missing or not a folder."""
        try:
            fd = self._dir(parts)
        except OSError:
            return None
        try:
            entries: list[tuple[str, bool]] = []
            with os.scandir(fd) as it:
                for entry in it:
                    if len(entries) >= MAX_LISTING:
                        break
                    entries.append((entry.name, entry.is_dir(follow_symlinks=False)))
            return sorted(entries)
        except OSError:
            return None
        finally:
            os.close(fd)

    def read(self, parts: Sequence[str], limit: int, whole: bool = True) -> bytes | None:
        """The file's bytes; ``None`` when missing, a link, not a regular file, over
        ``limit`` bytes (when ``whole``; else its first ``limit`` bytes) or over budget."""
        try:
            parent = self._dir(parts[:-1])
        except OSError:
            return None
        try:
            fd = os.open(parts[-1], _FILE, dir_fd=parent)
        except OSError:
            return None
        finally:
            os.close(parent)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or (whole and info.st_size > limit):
                return None
            want = min(limit, info.st_size)
            if want > self.budget:
                return None
            data = _read_all(fd, want + 1)
            self.budget -= len(data)
            return data[:limit] if not whole or len(data) <= limit else None
        except OSError:
            return None
        finally:
            os.close(fd)

    def is_file(self, parts: Sequence[str]) -> bool:
        try:
            parent = self._dir(parts[:-1])
        except OSError:
            return False
        try:
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            return stat.S_ISREG(info.st_mode)
        except OSError:
            return False
        finally:
            os.close(parent)


def _read_all(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def metadata_fields(head: bytes) -> tuple[str, str] | None:
    """``(Name, Version)`` from the header block of a ``METADATA`` file, or ``None``."""
    text = head.decode("utf-8", "replace")
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    if "Name" in found and "Version" in found:
        return found["Name"], found["Version"]
    return None


def direct_url_source(data: bytes | None) -> tuple[str, str]:
    """``(source, url)`` from PEP 610's ``direct_url.json``: ``("", "")`` without one,
    ``("unknown", "")`` for one that can't be read."""
    if data is None:
        return "", ""
    try:
        doc = json.loads(data)
    except ValueError:
        return "unknown", ""
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str):
        return "unknown", ""
    url = doc["url"]
    if isinstance(doc.get("vcs_info"), dict):
        return "vcs", url
    dir_info = doc.get("dir_info")
    if isinstance(dir_info, dict):
        return ("editable" if dir_info.get("editable") is True else "directory"), url
    if isinstance(doc.get("archive_info"), dict):
        return "archive", url
    return "unknown", url


def _dist_info(tree: _Tree, site: Sequence[str], folder: str) -> PipRecord | Skipped:
    where = [*site, folder]
    head = tree.read([*where, "METADATA"], METADATA_HEAD, whole=False)
    fields = metadata_fields(head) if head is not None else None
    if fields is None:
        return Skipped(shown(where), "has no readable METADATA (Name and Version); reinstall it")
    installer = tree.read([*where, "INSTALLER"], SMALL_FILE)
    has_direct = tree.is_file([*where, "direct_url.json"])
    source, url = direct_url_source(
        tree.read([*where, "direct_url.json"], SMALL_FILE) if has_direct else None
    )
    if has_direct and not source:
        source = "unknown"
    return PipRecord(
        name=fields[0],
        version=fields[1],
        installer=installer.decode("utf-8", "replace").strip() if installer else "",
        location=shown(site),
        source=source,
        url=url,
        requested=tree.is_file([*where, "REQUESTED"]),
    )


def read_site_packages(tree: _Tree, site: Sequence[str]) -> tuple[list[PipRecord], list[Skipped]]:
    """pip's records of one ``site-packages`` folder below the tree's root."""
    records: list[PipRecord] = []
    skipped: list[Skipped] = []
    entries = tree.listdir(site) or []
    if len(entries) >= MAX_LISTING:
        skipped.append(Skipped(shown(site), f"has over {MAX_LISTING} entries; only some were read"))
    dists = 0
    for name, is_dir in entries:
        if name.endswith(".dist-info"):
            if not is_dir:
                skipped.append(Skipped(shown([*site, name]), "is a link or not a folder; ignored"))
                continue
            dists += 1
            if dists > MAX_DISTS:
                skipped.append(
                    Skipped(shown(site), f"has over {MAX_DISTS} packages; the rest were not read")
                )
                break
            found = _dist_info(tree, site, name)
            if isinstance(found, PipRecord):
                records.append(found)
            else:
                skipped.append(found)
        elif name.endswith((".egg-info", ".egg-link", ".egg")):
            skipped.append(
                Skipped(
                    shown([*site, name]),
                    "was installed without pip's records (setup.py or an editable install); "
                    "reinstall it with 'pip install --user NAME' from the site's index",
                )
            )
    return records, skipped


def python_dirs(tree: _Tree, lib: Sequence[str]) -> list[tuple[tuple[int, int], str]]:
    """The ``pythonX.Y`` folders below ``lib``, with their versions."""
    found = []
    for name, is_dir in tree.listdir(lib) or []:
        match = _PYDIR.fullmatch(name)
        if match and is_dir:
            found.append(((int(match.group(1)), int(match.group(2))), name))
    return found


def _python_sites(
    tree: _Tree, prefix: Sequence[str], python: tuple[int, int]
) -> tuple[list[PipRecord], list[Skipped]]:
    records: list[PipRecord] = []
    skipped: list[Skipped] = []
    wanted = f"{python[0]}.{python[1]}"
    for version, name in python_dirs(tree, [*prefix, "lib"]):
        site = [*prefix, "lib", name, "site-packages"]
        if version != python:
            if tree.listdir(site):
                skipped.append(
                    Skipped(
                        shown(site),
                        f"holds packages for Python {version[0]}.{version[1]}; this image runs "
                        f"Python {wanted}, so they are not part of it",
                    )
                )
            continue
        found, missed = read_site_packages(tree, site)
        records += found
        skipped += missed
    return records, skipped


def _is_env(tree: _Tree, parts: Sequence[str]) -> bool:
    return tree.listdir([*parts, "conda-meta"]) is not None


def conda_envs_in(tree: _Tree) -> list[str]:
    """The conda environments below the tree's root, as ``/``-joined relative paths."""
    envs: list[str] = []
    for root in CONDA_ROOTS:
        parts = root.split("/")
        if _is_env(tree, parts):
            envs.append(root)
        for name, is_dir in tree.listdir([*parts, "envs"]) or []:
            if is_dir and not name.startswith(".") and _is_env(tree, [*parts, "envs", name]):
                envs.append(f"{root}/envs/{name}")
    return envs


def conda_record(data: bytes, filename: str, env: str) -> CondaRecord | None:
    """One ``conda-meta`` JSON: name, version, build from the file (or its name)."""
    try:
        doc: Any = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    stem = filename[: -len(".json")]
    parts = stem.rsplit("-", 2)  # conda versions and builds have no '-'
    fallback = parts if len(parts) == 3 else ["", "", ""]
    values = [doc.get(k, d) for k, d in zip(("name", "version", "build"), fallback, strict=True)]
    channel = doc.get("channel", "")
    if not all(isinstance(v, str) and v for v in values) or not isinstance(channel, str):
        return None
    files = doc.get("files")
    dists: list[str] = []
    if isinstance(files, list):
        for item in files:
            match = _DIST_IN_FILES.fullmatch(item) if isinstance(item, str) else None
            if match:
                dists.append(match.group(1))
    return CondaRecord(values[0], values[1], values[2], channel, env, tuple(dists))


def read_conda_env(tree: _Tree, env: str) -> tuple[list[CondaRecord], list[Skipped]]:
    records: list[CondaRecord] = []
    skipped: list[Skipped] = []
    meta = [*env.split("/"), "conda-meta"]
    names = [n for n, is_dir in tree.listdir(meta) or [] if n.endswith(".json") and not is_dir]
    if len(names) > MAX_DISTS:
        skipped.append(
            Skipped(shown(meta), f"has over {MAX_DISTS} records; the rest were not read")
        )
    for name in names[:MAX_DISTS]:
        data = tree.read([*meta, name], CONDA_RECORD_MAX)
        record = conda_record(data, name, env) if data is not None else None
        if record is None:
            skipped.append(Skipped(shown([*meta, name]), "is not a readable conda record"))
        else:
            records.append(record)
    return records, skipped


def list_conda_envs(home: Path) -> tuple[str, ...]:
    """The conda environments in ``home`` (home-relative), for the user to choose from."""
    tree = _Tree(home)
    try:
        return tuple(conda_envs_in(tree))
    finally:
        tree.close()


def read_home(home: Path, python: tuple[int, int], conda_envs: Iterable[str] = ()) -> HomeRecords:
    """pip's records of ``~/.local`` for ``python`` (the image's ``(major, minor)``), and
    pip's and conda's records of each environment in ``conda_envs`` (names from
    :func:`list_conda_envs`; any other name is skipped, never opened)."""
    tree = _Tree(home)
    try:
        pip, skipped = _python_sites(tree, [".local"], python)
        conda: list[CondaRecord] = []
        known = set(conda_envs_in(tree))
        for env in dict.fromkeys(conda_envs):
            if env not in known:
                skipped.append(Skipped(ascii(env)[:80], "is not a conda environment in your home"))
                continue
            found, missed = _python_sites(tree, env.split("/"), python)
            records, missed_meta = read_conda_env(tree, env)
            pip += found
            conda += records
            skipped += missed + missed_meta
        return HomeRecords(tuple(pip), tuple(conda), tuple(skipped))
    finally:
        tree.close()
