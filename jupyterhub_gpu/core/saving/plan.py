"""From a home's records to what a saved image contains. Pure.

Every captured Python package becomes ``canonical-name==version`` (validated by
:mod:`.validate`), fetched later from the site's index. Left out, each with a sentence
the user sees (:class:`~.model.Skipped`): packages of an installer the admin doesn't
accept, installs from a folder, a VCS or an editable checkout, URLs outside the admin's
allowed indexes, names or versions that are not valid, the packages the image must keep
(:attr:`~.model.BuilderPolicy.protected`), and conda packages that are not Python
distributions. Packages the base image already has in the same version are dropped
silently; another version of one is installed over it (:attr:`~.model.Plan.replaces`).
"""

from __future__ import annotations

from collections.abc import Iterable

from jupyterhub_gpu.core.saving.data import (
    BuilderPolicy,
    CondaRecord,
    HomeRecords,
    InvalidPackage,
    PipRecord,
    PipRequirement,
    Plan,
    Skipped,
    Target,
    shown,
)
from jupyterhub_gpu.core.saving.validate import apt_names, pip_requirement, url_under

#: conda packages that make up a Python runtime itself; the image has its own Python.
CONDA_RUNTIME = frozenset(
    {
        "python",
        "python_abi",
        "pip",
        "setuptools",
        "wheel",
        "_libgcc_mutex",
        "_openmp_mutex",
        "bzip2",
        "ca-certificates",
        "ld_impl_linux-64",
        "ld_impl_linux-aarch64",
        "libffi",
        "libgcc",
        "libgcc-ng",
        "libgomp",
        "libstdcxx",
        "libstdcxx-ng",
        "libuuid",
        "libnsl",
        "libsqlite",
        "libxcrypt",
        "libexpat",
        "liblzma",
        "libmpdec",
        "libzlib",
        "ncurses",
        "openssl",
        "readline",
        "sqlite",
        "tk",
        "tzdata",
        "xz",
        "zlib",
        "expat",
        "libedit",
    }
)

_SOURCE_REASONS = {
    "editable": "is an editable install of a folder; install a released version from the "
    "site's index ('pip install --user NAME==VERSION') to save it",
    "directory": "was installed from a folder; install a released version from the site's "
    "index to save it",
    "vcs": "was installed from a version-control URL; install a released version from the "
    "site's index to save it",
    "archive": "was installed from a URL that is not one of this hub's package indexes; "
    "install it from the site's index to save it",
    "unknown": "has an unreadable record of where it was installed from; reinstall it from "
    "the site's index",
}


def _label(record: PipRecord) -> str:
    return f"{record.name[:60]!r} {record.version[:30]!r} in {record.location}"


def _pip_one(record: PipRecord, policy: BuilderPolicy) -> PipRequirement | Skipped:
    """One record -> a requirement, or why it is left out."""
    try:
        req = pip_requirement(record.name, record.version)
    except InvalidPackage as e:
        return Skipped(_label(record), str(e))
    what = f"{req.spec} in {record.location}"
    if record.installer not in policy.installers:
        who = repr(record.installer[:30]) if record.installer else "an unknown tool"
        return Skipped(
            what, f"was installed by {who}, not by pip or conda; reinstall it with pip to save it"
        )
    if record.source and not (
        record.source == "archive" and url_under(record.url, policy.allowed_index_urls)
    ):
        return Skipped(what, _SOURCE_REASONS.get(record.source, _SOURCE_REASONS["unknown"]))
    if req.name in policy.protected:
        return Skipped(
            what,
            f"the image keeps its own {req.name} (the hub and the image's "
            "tools depend on that version)",
        )
    return req


def _merge(found: list[tuple[PipRequirement, str]]) -> list[PipRequirement]:
    """One requirement per name; two versions of one name is the user's choice to make."""
    chosen: dict[str, tuple[PipRequirement, str]] = {}
    for req, where in found:
        old = chosen.get(req.name)
        if old is not None and old[0].version != req.version:
            raise InvalidPackage(
                f"Package {req.name!r} is installed twice: {old[0].version} in {old[1]} and "
                f"{req.version} in {where}. Remove one of them, or save one environment at "
                "a time, and try again."
            )
        chosen.setdefault(req.name, (req, where))
    return [req for req, _ in chosen.values()]


def _conda_left_out(records: Iterable[CondaRecord]) -> list[Skipped]:
    skipped: list[Skipped] = []
    runtime = 0
    for r in records:
        if r.python_dists:
            continue  # its dist-info is among the pip records (INSTALLER: conda)
        if r.name in CONDA_RUNTIME:
            runtime += 1
            continue
        skipped.append(
            Skipped(
                f"conda package {r.name[:60]!r} {r.version[:30]!r} in {shown(r.env.split('/'))}",
                "is not a Python package; saved images hold Python packages (and the Debian "
                "packages your admin allows), not conda's libraries",
            )
        )
    if runtime:
        skipped.append(
            Skipped(
                f"{runtime} conda package(s) of the Python runtime (python, openssl, ...)",
                "the image has its own Python",
            )
        )
    return skipped


def plan_save(
    records: HomeRecords,
    policy: BuilderPolicy,
    target: Target,
    apt: Iterable[str] = (),
) -> Plan:
    """What a saved image adds to ``target`` (its base), from a home's ``records`` and the
    Debian packages ``apt`` the user asked for (each on the admin's allow-list).

    Raises :class:`InvalidPackage` for a Debian package not on the list, for one Python
    package in two versions, and above ``policy.max_packages``."""
    found: list[tuple[PipRequirement, str]] = []
    skipped: list[Skipped] = list(records.skipped)
    for record in records.pip:
        result = _pip_one(record, policy)
        if isinstance(result, Skipped):
            skipped.append(result)
        else:
            found.append((result, record.location))
    base = dict(target.installed)
    pip: list[PipRequirement] = []
    replaces: list[str] = []
    for req in _merge(found):
        if base.get(req.name) == req.version:
            continue
        if req.name in base:
            replaces.append(req.name)
        pip.append(req)
    if len(pip) > policy.max_packages:
        raise InvalidPackage(
            f"Your environment adds {len(pip)} Python packages; a saved image may add at most "
            f"{policy.max_packages}. Remove some, or ask your admin."
        )
    skipped += _conda_left_out(records.conda)
    return Plan(
        pip=tuple(sorted(pip, key=lambda r: r.name)),
        apt=apt_names(apt, policy.apt_allowlist),
        replaces=tuple(sorted(replaces)),
        skipped=tuple(skipped),
    )
