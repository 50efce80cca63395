"""Plain data for the image catalog, and the CUDA rules it is checked against.

Nothing here does I/O. :mod:`.loader` turns the admin's YAML into a :class:`Catalog`;
:mod:`.compat` decides which nodes can run which entry.

CUDA rules (NVIDIA's CUDA compatibility guide; see ``docs/images.md``):

========  ======================  ===============================
CUDA      minimum driver (Linux)  lowest compute capability
========  ======================  ===============================
11.x      450.80.02               3.5 (Kepler GK110)
12.x      525.60.13               5.0 (Maxwell)
13.x      580                     7.5 (Turing)
========  ======================  ===============================
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from jupyterhub_gpu.core.inventory import parse_version

# CUDA major -> minimum Linux driver that runs any minor release of it (minor version
# compatibility). Forward-compatibility packages (data-centre GPUs only) are not assumed.
CUDA_MIN_DRIVER: Mapping[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580"}

# CUDA major -> the oldest GPU architecture its toolkit can still build for.
CUDA_MIN_COMPUTE_CAPABILITY: Mapping[int, tuple[int, int]] = {11: (3, 5), 12: (5, 0), 13: (7, 5)}

# an image reference: [registry[:port]/]path[:tag][@digest]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(
    r"^(?:(?P<registry>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?)/)?"
    rf"(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def cuda_major(cuda_version: str) -> int:
    """``"12.1"`` -> ``12``; raises ``ValueError`` on anything else."""
    return parse_version(cuda_version)[0]


def min_driver_for_cuda(cuda_version: str) -> str | None:
    """The minimum driver for an image built with ``cuda_version``, or ``None`` when
    no rule is known (an explicit ``min_driver`` is then required)."""
    return CUDA_MIN_DRIVER.get(cuda_major(cuda_version))


def driver_satisfies(driver_version: str, minimum: str) -> bool:
    """``True`` when ``driver_version`` >= ``minimum`` (dotted numeric versions)."""
    return parse_version(driver_version) >= parse_version(minimum)


def format_cc(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def format_cc_range(low: tuple[int, int] | None, high: tuple[int, int] | None) -> str:
    """A range for people: ``"7.5 to 12.0"``, ``">= 7.5"``, ``"<= 9.0"``, ``"any"``."""
    if low and high:
        return f"{format_cc(low)} to {format_cc(high)}"
    if low:
        return f">= {format_cc(low)}"
    if high:
        return f"<= {format_cc(high)}"
    return "any"


@dataclass(frozen=True)
class BuildSpec:
    """How ``images/build.py`` builds an entry: a Dockerfile under ``images/`` and its
    build arguments (``BASE_IMAGE``, ``FRAMEWORK_PIP``, ...)."""

    dockerfile: str
    args: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CatalogEntry:
    """One image users may choose.

    ``cuda_version`` is ``None`` for a CPU-only image. ``min_driver`` is always set for
    a CUDA image (derived from the CUDA version unless the admin gave a stricter one).
    ``groups`` empty means everyone may use it. ``custom`` marks an image outside the
    catalog that an admin pattern let in (nothing is known about its CUDA needs).
    """

    slug: str
    display_name: str
    framework: str
    framework_version: str
    cuda_version: str | None
    image: str
    min_driver: str | None = None
    min_compute_capability: tuple[int, int] | None = None
    max_compute_capability: tuple[int, int] | None = None
    description: str = ""
    groups: frozenset[str] = frozenset()
    build: BuildSpec | None = None
    custom: bool = False
    saved_from: str = ""  # a user's saved image (myimages/): the catalog slug it was built on
    saved_at: float | None = None  # when that image was saved (a POSIX time): the form's clock

    @property
    def cpu_only(self) -> bool:
        """A catalog image without CUDA: GPUs would be useless to it."""
        return self.cuda_version is None and not self.custom

    @property
    def cuda_label(self) -> str:
        if self.custom:
            return "custom image"
        return f"CUDA {self.cuda_version}" if self.cuda_version else "CPU only"

    @property
    def policy_slug(self) -> str:
        """The slug the admin's ``allowed_images`` patterns are matched against: a saved
        image is allowed where its base entry is."""
        return self.saved_from or self.slug

    def allowed_for(self, groups: Collection[str]) -> bool:
        """Whether a member of ``groups`` may use this image (no groups: everyone)."""
        return not self.groups or not self.groups.isdisjoint(groups)


@dataclass(frozen=True)
class Catalog:
    """The validated allow-list of images, in the admin's order.

    ``allowed_image_patterns`` (fnmatch, e.g. ``"registry.example.org/lab/*:*"``) is the
    admin's explicit opt-in for image references outside the catalog; empty by default.
    """

    entries: tuple[CatalogEntry, ...]
    allowed_image_patterns: tuple[str, ...] = ()
    source: str = "catalog"

    def __iter__(self) -> Iterator[CatalogEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, slug: str) -> CatalogEntry | None:
        for entry in self.entries:
            if entry.slug == slug:
                return entry
        return None

    @property
    def slugs(self) -> tuple[str, ...]:
        return tuple(e.slug for e in self.entries)

    def for_groups(self, groups: Collection[str]) -> tuple[CatalogEntry, ...]:
        """The entries a member of ``groups`` may use, in catalog order."""
        return tuple(e for e in self.entries if e.allowed_for(groups))
