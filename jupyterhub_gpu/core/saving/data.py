"""Plain data of "save my environment as an image", and the errors it raises. No I/O.

The flow (issue 14, ``docs/my-images.md``)::

    records.py    user's home -> PipRecord / CondaRecord          (edge: reads files safely)
    probe.py      base image -> Target (its Python)                (edge: runs the base once)
    plan.py       records + BuilderPolicy + Target -> Plan         (pure: what is captured)
    indexes.py    Plan.pip + IndexPolicy -> one index per name     (pure: dependency confusion)
    wheelhouse.py Plan.pip + Target -> a folder of wheels          (edge: pip download, hub)
    archives.py   wheels' zip directories -> refusal or nothing    (pure: sizes, zip bombs)
    recipe.py     base image + Plan -> Dockerfile text, labels     (pure)
    context.py    Dockerfile + wheels -> tar build context         (edge: temp file)
    build.py      context -> image on a node's engine -> registry  (edge: docker-py APIClient)
    stream.py     the engine's JSON stream -> progress, failures   (pure)
    limits.py     saved images + Limits -> refusal or nothing      (pure)

Errors (all :class:`~jupyterhub_gpu.errors.UserFacingError`; the message is for the user)::

    SaveError                 base of everything a save can fail with
    ├── InvalidPackage        a package name, version or source can't be captured (400)
    ├── LimitReached          the user's count or size limit (403)
    ├── FetchFailed           pip could not fetch a package outside the build (502)
    └── BuildFailed           the build or the push failed (502); nothing is left behind
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jupyterhub_gpu.errors import BuildFailed as BuildFailed
from jupyterhub_gpu.errors import FetchFailed as FetchFailed
from jupyterhub_gpu.errors import InvalidPackage as InvalidPackage
from jupyterhub_gpu.errors import LimitReached as LimitReached
from jupyterhub_gpu.errors import SaveError as SaveError


@dataclass(frozen=True)
class PipRecord:
    """One distribution as pip's own records (``*.dist-info``) describe it, unvalidated.

    ``source`` comes from PEP 610's ``direct_url.json``: ``""`` when pip installed from an
    index (no such file), else ``"archive"``, ``"vcs"``, ``"directory"`` or ``"editable"``;
    ``url`` is that file's URL (empty for index installs). ``location`` is the folder the
    record was found in, relative to the home (for messages)."""

    name: str
    version: str
    installer: str
    location: str
    source: str = ""
    url: str = ""
    requested: bool = False


@dataclass(frozen=True)
class CondaRecord:
    """One package of a conda environment (``conda-meta/<name>-<version>-<build>.json``).

    ``python_dists`` are the ``*.dist-info`` folder names the package installed (from the
    record's ``files`` list): a conda package with one is a Python distribution that pip
    can fetch under its own name; one without (a C library, CUDA) is not captured."""

    name: str
    version: str
    build: str
    channel: str
    env: str
    python_dists: tuple[str, ...] = ()


@dataclass(frozen=True)
class PipRequirement:
    """A validated, pinned requirement: PEP 503 name and PEP 440 version (normalised)."""

    name: str
    version: str

    @property
    def spec(self) -> str:
        """``"name==version"``: the only requirement form that ever reaches pip."""
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Skipped:
    """Something in the user's environment that will not be in the image, and why."""

    what: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """What a saved image will contain on top of its base, and what it leaves out."""

    pip: tuple[PipRequirement, ...] = ()
    apt: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()  # base distributions the image installs another version of
    skipped: tuple[Skipped, ...] = ()

    @property
    def packages(self) -> tuple[str, ...]:
        """The list the image's labels carry: ``pip:name==version`` and ``apt:name``."""
        return tuple(f"pip:{r.spec}" for r in self.pip) + tuple(f"apt:{n}" for n in self.apt)

    @property
    def empty(self) -> bool:
        return not self.pip and not self.apt


@dataclass(frozen=True)
class BuilderPolicy:
    """The admin's rules for what a saved image may contain.

    ``allowed_index_urls``: URL prefixes of package indexes a direct-URL install
    (``pip install https://.../pkg.whl``) may come from; such a package is then fetched
    by name and version like any other. Empty (default): direct-URL installs are refused.
    ``protected``: distributions a saved image must never replace (the hub's JupyterHub
    version must stay the base's; pip and its tools stay as the image has them)."""

    apt_allowlist: frozenset[str] = frozenset()
    allowed_index_urls: tuple[str, ...] = ()
    installers: frozenset[str] = frozenset({"pip", "uv", "conda"})
    protected: frozenset[str] = frozenset(
        {"jupyterhub", "pip", "setuptools", "wheel", "distribute", "conda", "mamba"}
    )
    max_packages: int = 500


#: What a base image's probe may report (:mod:`.probe` refuses anything else; the image
#: is the user's, so its answer is untrusted). glibc: 2.5 (manylinux1, the oldest glibc any
#: wheel names) to 2.99 (2.42 came out in 2025, two a year); Python 3.8 (the probe needs
#: ``importlib.metadata``) to 3.99.
GLIBC_MINORS = range(5, 100)
PYTHON_MINORS = range(8, 100)


@dataclass(frozen=True)
class Target:
    """The Python of the base image that wheels must fit (from :mod:`.probe`).

    ``python``: ``(3, 11)``; ``machine``: ``"x86_64"`` or ``"aarch64"``; ``glibc``:
    ``(2, 35)``, or ``None`` for a musl or unknown libc (then only pure-Python wheels)."""

    python: tuple[int, int]
    machine: str
    glibc: tuple[int, int] | None
    implementation: str = "cp"
    python_path: str = "/opt/venv/bin/python"
    prefix: str = "/opt/venv"  # sys.prefix of that Python: a virtual environment
    installed: tuple[tuple[str, str], ...] = ()  # (canonical name, version) in the base

    @property
    def python_version(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"


@dataclass(frozen=True)
class Progress:
    """One progress event of a save, for the user: ``percent`` is ``None`` when unknown."""

    phase: str  # "fetch", "build", "push", "done"
    message: str
    percent: int | None = None


@dataclass(frozen=True)
class SavedImage:
    """An image a user saved: ``reference`` is ``registry/repo:tag``, ``digest`` the
    registry's ``sha256:...`` (pulled by ``repo@digest``: :attr:`pinned`). ``shared_with``
    is one of the owner's groups, or ``None`` (private); it is the hub's record, not an
    image label (labels can't change after the build)."""

    owner: str
    name: str
    base_slug: str
    base_image: str
    reference: str
    packages: tuple[str, ...]
    size_bytes: int
    created: datetime
    digest: str = ""
    shared_with: str | None = None
    skipped: tuple[Skipped, ...] = field(default=(), compare=False)

    def visible_to(self, user: str, groups: Collection[str]) -> bool:
        """The owner always; a member of ``shared_with`` when it is shared."""
        return user == self.owner or (self.shared_with is not None and self.shared_with in groups)

    @property
    def pinned(self) -> str:
        """``repository@digest`` (the tag dropped: a tag can be moved, a digest names
        the content) when the digest is known: what a spawn pulls and runs."""
        if not self.digest:
            return self.reference
        repository, _, tag = self.reference.rpartition(":")
        name = repository if repository and "/" not in tag else self.reference
        return f"{name}@{self.digest}"


@dataclass(frozen=True)
class HomeRecords:
    """What :mod:`.records` found in a home: pip's records (of ``~/.local`` and of the
    conda environments asked for), conda's records, and what it could not read."""

    pip: tuple[PipRecord, ...] = ()
    conda: tuple[CondaRecord, ...] = ()
    skipped: tuple[Skipped, ...] = ()


def shown(parts: Sequence[str]) -> str:
    """A home-relative path for messages: ``~/a/b``, escaped when not plain ASCII."""
    text = "~/" + "/".join(parts)
    if len(text) > 120:
        text = text[:117] + "..."
    return text if text.isascii() and text.isprintable() else ascii(text)
