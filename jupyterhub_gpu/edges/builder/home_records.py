"""What a user added to their environment, from pip's and conda's own records (an edge).

Reads, below the user's home on the hub's side of the shared filesystem:

- ``~/.local/lib/pythonX.Y/site-packages/*.dist-info`` (``pip install --user``): each
  folder's ``METADATA`` (``Name``, ``Version``), ``INSTALLER``, ``REQUESTED`` and PEP 610's
  ``direct_url.json`` (a URL, local folder, VCS or editable install);
- conda environments in the usual places (:data:`CONDA_ROOTS`): ``conda-meta/*.json``
  and the environment's own ``lib/pythonX.Y/site-packages``.

The home belongs to the user, who may have filled it with traps: symbolic links to the
hub's files, FIFOs that block a reader, huge files, millions of entries, JSON that parses
into millions of objects or nests past the parser's depth. Every path is opened one
component at a time relative to the home with ``O_NOFOLLOW`` (no link is ever followed,
and a link swapped in mid-read can't redirect it), at fixed depths (nothing is walked
recursively); files are read only when they are regular, up to a size cap; listings, the
packages read, the total bytes read and the JSON items parsed are capped; a folder is
opened, not listed, to learn that it exists or is empty; and all of it runs against a
deadline (:data:`READ_SECONDS`, :data:`LIST_SECONDS`). What can't be read is reported as
:class:`~.model.Skipped`, never raised; only a read past its deadline raises
:class:`~jupyterhub_gpu.errors.SaveError`, with a sentence for the user.

What the hub trusts of these records: only a list of names and versions to fetch from the
site's index (each validated by :mod:`~jupyterhub_gpu.core.saving.validate`, at most
``BuilderPolicy.max_packages`` of them). A record costs its writer nothing (a fake
``METADATA`` naming a large package is a few bytes of their quota), so no size is taken
from it: what a user is charged is what the build actually added, measured on the node.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.saving.data import CondaRecord, HomeRecords, PipRecord, Skipped, shown
from jupyterhub_gpu.errors import SaveError

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
MAX_DISTS_TOTAL = 10_000  #: dist-info folders read from one home in all
MAX_OTHER_PYTHONS = 3  #: folders of other Python versions looked into (to report them)
MAX_ENVS = 100  #: conda environments listed
MAX_ENV_CANDIDATES = 200  #: folders below `<root>/envs` looked into, in all
METADATA_HEAD = 64 * 1024  #: bytes of METADATA read (Name and Version are at the top)
SMALL_FILE = 64 * 1024  #: INSTALLER, direct_url.json
CONDA_RECORD_MAX = 32 * 1024 * 1024  #: one conda-meta JSON (its file list can be long)
#: items (``,``, ``[``, ``{``) of one JSON file parsed; each costs the hub ~60 bytes or
#: more once parsed, so 3 MiB of ``[],`` would be 64 MiB (a real conda record of 20,000
#: files has about 150,000)
MAX_JSON_ITEMS = 400_000
MAX_SKIPPED = 200  #: notes on what was left out (then one line says how many more)
READ_BUDGET = 256 * 1024 * 1024  #: bytes read from one home in all
READ_SECONDS = 60.0  #: reading a home's records for a save (then the save fails)
LIST_SECONDS = 5.0  #: listing a home's conda environments (then what was found so far)

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_PYDIR = re.compile(r"^python(\d)\.(\d{1,2})$", re.ASCII)
#: the environment names offered and opened: plain, short (conda refuses '/', ' ', ':', '#')
_ENV_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,99}", re.ASCII)
_DIST_IN_FILES = re.compile(r"^lib/python\d\.\d{1,2}/site-packages/([^/]+\.dist-info)/METADATA$")


class _Tree:
    """Reads below one root folder without following symbolic links, within a budget of
    bytes, of dist-info folders and of time (``seconds``: then :class:`SaveError`)."""

    def __init__(self, root: Path, seconds: float, budget: int | None = None) -> None:
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.budget = READ_BUDGET if budget is None else budget
        self.dists = MAX_DISTS_TOTAL  # dist-info folders left to read
        self.deadline = time.monotonic() + seconds

    def close(self) -> None:
        os.close(self.fd)

    def tick(self) -> None:
        """Raise :class:`SaveError` past the deadline (called before every open and
        every 256 entries listed: a slow file server, or a home of millions of entries)."""
        if time.monotonic() > self.deadline:
            raise SaveError(
                f"Reading what you installed took longer than {READ_SECONDS:g} s: your home "
                "holds too many files where pip and conda keep their records, or answers too "
                "slowly. Remove environments and packages you no longer use, or choose fewer "
                "conda environments, and save again."
            )

    def _dir(self, parts: Sequence[str]) -> int:
        self.tick()
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
                    if len(entries) % 256 == 255:
                        self.tick()
                    entries.append((entry.name, entry.is_dir(follow_symlinks=False)))
            return sorted(entries)
        except OSError:
            return None
        finally:
            os.close(fd)

    def is_dir(self, parts: Sequence[str]) -> bool:
        """Whether ``parts`` is a folder (opened, not listed; never through a link)."""
        try:
            os.close(self._dir(parts))
        except OSError:
            return False
        return True

    def has_entries(self, parts: Sequence[str]) -> bool:
        """Whether the folder ``parts`` holds anything (one entry read, not all)."""
        try:
            fd = self._dir(parts)
        except OSError:
            return False
        try:
            with os.scandir(fd) as it:
                return next(iter(it), None) is not None
        except OSError:
            return False
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


def parse_json(data: bytes) -> Any:
    """``data`` as JSON, or ``None`` when it is not JSON, holds over
    :data:`MAX_JSON_ITEMS` items (counted in the bytes, before anything is parsed) or
    nests deeper than the parser goes (``json`` raises ``RecursionError`` for that)."""
    if data.count(b",") + data.count(b"[") + data.count(b"{") > MAX_JSON_ITEMS:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


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
    doc = parse_json(data)
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
            if tree.dists <= 0:
                skipped.append(
                    Skipped(
                        shown(site),
                        f"is past the first {MAX_DISTS_TOTAL} packages your home holds (over "
                        f"{MAX_DISTS_TOTAL} packages in all); the rest were not read",
                    )
                )
                break
            tree.dists -= 1
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
    others = 0
    for version, name in python_dirs(tree, [*prefix, "lib"]):
        site = [*prefix, "lib", name, "site-packages"]
        if version != python:
            if others == MAX_OTHER_PYTHONS:
                skipped.append(
                    Skipped(
                        shown([*prefix, "lib"]),
                        f"has folders for more than {MAX_OTHER_PYTHONS} other Python versions; "
                        f"only those of Python {wanted} are part of this image",
                    )
                )
            others += 1
            if others <= MAX_OTHER_PYTHONS and tree.has_entries(site):
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
    return tree.is_dir([*parts, "conda-meta"])


def is_env_path(env: str) -> bool:
    """Whether ``env`` has the shape of an environment :func:`list_conda_envs` offers: one
    of :data:`CONDA_ROOTS`, or ``<root>/envs/<plain name>``."""
    root, sep, name = env.rpartition("/envs/")
    if not sep:
        return env in CONDA_ROOTS
    return root in CONDA_ROOTS and _ENV_NAME.fullmatch(name) is not None


def conda_envs_in(tree: _Tree, found: list[str]) -> None:
    """The conda environments below the tree's root, as ``/``-joined relative paths,
    appended to ``found`` (kept when the deadline stops the walk), at most
    :data:`MAX_ENVS`, looking into at most :data:`MAX_ENV_CANDIDATES` folders below the
    roots' ``envs``; environments not named plainly are left out."""
    candidates = MAX_ENV_CANDIDATES
    for root in CONDA_ROOTS:
        parts = root.split("/")
        if len(found) < MAX_ENVS and _is_env(tree, parts):
            found.append(root)
        for name, is_dir in tree.listdir([*parts, "envs"]) or []:
            env = f"{root}/envs/{name}"
            if not (is_dir and is_env_path(env)):
                continue
            if len(found) >= MAX_ENVS or candidates <= 0:
                return
            candidates -= 1
            if _is_env(tree, [*parts, "envs", name]):
                found.append(env)


def conda_record(data: bytes, filename: str, env: str) -> CondaRecord | None:
    """One ``conda-meta`` JSON: name, version, build from the file (or its name)."""
    doc = parse_json(data)
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
    """The conda environments in ``home`` (home-relative), for the user to choose from: at
    most :data:`MAX_ENVS`, and those found within :data:`LIST_SECONDS`."""
    found: list[str] = []
    tree = _Tree(home, LIST_SECONDS)
    try:
        conda_envs_in(tree, found)
    except SaveError:
        pass  # what was found in time (a home this slow offers no more)
    finally:
        tree.close()
    return tuple(found)


def read_home(home: Path, python: tuple[int, int], conda_envs: Iterable[str] = ()) -> HomeRecords:
    """pip's records of ``~/.local`` for ``python`` (the image's ``(major, minor)``), and
    pip's and conda's records of each environment in ``conda_envs`` (of the shape
    :func:`list_conda_envs` offers; any other name is skipped, never opened).

    Raises :class:`SaveError` when the reading takes over :data:`READ_SECONDS`."""
    tree = _Tree(home, READ_SECONDS)
    try:
        return _read_home(tree, python, conda_envs)
    finally:
        tree.close()


def _read_home(tree: _Tree, python: tuple[int, int], conda_envs: Iterable[str]) -> HomeRecords:
    pip, skipped = _python_sites(tree, [".local"], python)
    conda: list[CondaRecord] = []
    for env in dict.fromkeys(conda_envs):
        if not (is_env_path(env) and _is_env(tree, env.split("/"))):
            skipped.append(Skipped(ascii(env)[:80], "is not a conda environment in your home"))
            continue
        found, missed = _python_sites(tree, env.split("/"), python)
        records, missed_meta = read_conda_env(tree, env)
        pip += found
        conda += records
        skipped += missed + missed_meta
    if len(skipped) > MAX_SKIPPED:
        more = len(skipped) - MAX_SKIPPED
        skipped[MAX_SKIPPED:] = [
            Skipped(f"{more} more things in your home", "were left out for such reasons too")
        ]
    return HomeRecords(tuple(pip), tuple(conda), tuple(skipped))
