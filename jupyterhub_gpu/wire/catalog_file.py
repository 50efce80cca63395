"""Load and validate the image catalog YAML (``images/catalog.yaml`` by default).

Format (every field is described in ``docs/images.md``)::

    allowed_image_patterns: []            # optional admin opt-in (fnmatch) for other images
    images:
      - slug: pytorch-2.3-cuda12.1        # unique; what users and the API choose
        display_name: PyTorch 2.3 (CUDA 12.1)
        framework: pytorch
        framework_version: "2.3.1"        # quoted: YAML reads 2.10 as the number 2.1
        cuda_version: "12.1"              # null for a CPU-only image
        min_driver: "525.60.13"           # optional; derived from cuda_version, may be stricter
        compute_capabilities: {min: "5.0", max: "9.0"}   # optional; min defaults from CUDA
        image: jupyterhub-gpu/pytorch:2.3.1-cuda12.1
        description: PyTorch with torchvision; cuDNN 8.
        groups: []                        # optional; empty = everyone
        build:                            # optional; used by images/build.py
          dockerfile: pytorch/Dockerfile
          args: {BASE_IMAGE: "nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04"}

Every error is a :class:`~jupyterhub_gpu.errors.ConfigError` that names the file, the
entry (index and slug) and the field, and says what is expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyterhub_gpu.core.catalog.entries import (
    CUDA_MIN_COMPUTE_CAPABILITY,
    IMAGE_RE,
    BuildSpec,
    Catalog,
    CatalogEntry,
    cuda_major,
    driver_satisfies,
    format_cc,
    min_driver_for_cuda,
)
from jupyterhub_gpu.core.inventory import parse_compute_capability, parse_version
from jupyterhub_gpu.errors import ConfigError

SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")
_BUILD_ARG_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOP_FIELDS = {"images", "allowed_image_patterns"}
_REQUIRED = ("slug", "display_name", "framework", "framework_version", "cuda_version", "image")
_ENTRY_FIELDS = {
    *_REQUIRED,
    "min_driver",
    "compute_capabilities",
    "description",
    "groups",
    "build",
}


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _text(raw: Mapping[str, Any], key: str, where: str, example: str) -> str:
    value = raw.get(key)
    if isinstance(value, int | float):  # bool is an int too
        raise _fail(
            f"{where}.{key}",
            f"must be a quoted string such as {example!r}, got the number {value!r} "
            "(YAML reads 2.10 as 2.1)",
        )
    if not isinstance(value, str) or not value.strip():
        raise _fail(f"{where}.{key}", f"must be a non-empty string such as {example!r}")
    return value.strip()


def _version(raw: Mapping[str, Any], key: str, where: str, example: str, parts: int) -> str:
    text = _text(raw, key, where, example)
    try:
        numbers = parse_version(text)
    except ValueError:
        numbers = ()
    if not 2 <= len(numbers) <= parts:
        raise _fail(f"{where}.{key}", f"must be a dotted version such as {example!r}, got {text!r}")
    return text


def _image(raw: Mapping[str, Any], where: str) -> str:
    ref = _text(raw, "image", where, "registry.example.org/lab/pytorch:2.3.1-cuda12.1")
    match = IMAGE_RE.match(ref)
    if not match:
        raise _fail(f"{where}.image", f"must be a Docker image reference, got {ref!r}")
    if not match.group("tag") and not match.group("digest"):
        raise _fail(f"{where}.image", f"must name a tag or digest (traceable), got {ref!r}")
    if match.group("tag") == "latest" and not match.group("digest"):
        raise _fail(f"{where}.image", f"must pin a version tag or digest, not 'latest': {ref!r}")
    return ref


def _min_driver(raw: Mapping[str, Any], cuda: str | None, where: str) -> str | None:
    explicit = raw.get("min_driver")
    if cuda is None:
        if explicit is not None:
            raise _fail(
                f"{where}.min_driver", "must be absent for a CPU-only image (cuda_version: null)"
            )
        return None
    derived = min_driver_for_cuda(cuda)
    if explicit is None:
        if derived is None:
            raise _fail(
                f"{where}.min_driver",
                f"is required for CUDA {cuda}: there is no built-in rule for CUDA "
                f"{cuda_major(cuda)}.x (known: 11.x, 12.x, 13.x)",
            )
        return derived
    try:
        if not isinstance(explicit, str):
            raise ValueError(explicit)
        parse_version(explicit)
    except ValueError:
        raise _fail(
            f"{where}.min_driver", f"must be a quoted version such as '525.60.13', got {explicit!r}"
        ) from None
    if derived is not None and not driver_satisfies(str(explicit), derived):
        raise _fail(
            f"{where}.min_driver",
            f"may only be stricter than CUDA {cuda}'s minimum {derived}, got {explicit!r}",
        )
    return str(explicit)


def _cc(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        return parse_compute_capability(value)
    except (ValueError, TypeError):
        raise _fail(where, f"must be a compute capability such as '8.6', got {value!r}") from None


def _capabilities(
    raw: Mapping[str, Any], cuda: str | None, where: str
) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    where = f"{where}.compute_capabilities"
    value = raw.get("compute_capabilities")
    if cuda is None:
        if value is not None:
            raise _fail(where, "must be absent for a CPU-only image (cuda_version: null)")
        return None, None
    value = {} if value is None else value
    if not isinstance(value, Mapping) or not set(value) <= {"min", "max"}:
        raise _fail(
            where, "must be a mapping with 'min' and/or 'max', e.g. {min: '5.0', max: '9.0'}"
        )
    floor = CUDA_MIN_COMPUTE_CAPABILITY.get(cuda_major(cuda))
    low = _cc(value.get("min"), f"{where}.min") or floor
    high = _cc(value.get("max"), f"{where}.max")
    if floor and low and low < floor:
        raise _fail(
            f"{where}.min",
            f"CUDA {cuda} cannot build for compute capability below {format_cc(floor)}, "
            f"got {format_cc(low)}",
        )
    if low and high and low > high:
        raise _fail(where, f"min {format_cc(low)} is above max {format_cc(high)}")
    return low, high


def _str_list(value: Any, where: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _fail(where, f"must be a list of {what}")
    items = tuple(value)
    if not all(isinstance(v, str) and v.strip() and v == v.strip() for v in items):
        raise _fail(where, f"must be a list of non-empty {what} without surrounding spaces")
    return items


def _build(value: Any, where: str) -> BuildSpec | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not set(value) <= {"dockerfile", "args"}:
        raise _fail(where, "must be a mapping with 'dockerfile' and optional 'args'")
    dockerfile = value.get("dockerfile")
    if not isinstance(dockerfile, str) or not dockerfile.strip():
        raise _fail(
            f"{where}.dockerfile", "must be a path under images/, e.g. 'pytorch/Dockerfile'"
        )
    if dockerfile.startswith("/") or ".." in Path(dockerfile).parts:
        raise _fail(
            f"{where}.dockerfile", f"must be a relative path inside images/, got {dockerfile!r}"
        )
    args = value.get("args") or {}
    if not isinstance(args, Mapping):
        raise _fail(f"{where}.args", "must be a mapping of build argument names to strings")
    for key, arg in args.items():
        if not isinstance(key, str) or not _BUILD_ARG_RE.match(key):
            raise _fail(f"{where}.args", f"build argument names must be identifiers, got {key!r}")
        if not isinstance(arg, str):
            raise _fail(f"{where}.args.{key}", f"must be a quoted string, got {arg!r}")
    return BuildSpec(dockerfile=dockerfile, args=dict(args))


def _entry_head(raw: Any, where: str) -> tuple[str, str]:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"must be a mapping of image fields, got {type(raw).__name__}")
    slug = raw.get("slug")
    if not isinstance(slug, str) or not SLUG_RE.match(slug):
        raise _fail(
            f"{where}.slug",
            f"must be 1-64 lowercase letters, digits, '.', '_' or '-', got {slug!r}",
        )
    where = f"{where} ({slug})"
    unknown = set(raw) - _ENTRY_FIELDS
    if unknown:
        raise _fail(
            where, f"unknown field(s) {sorted(map(str, unknown))}; allowed: {sorted(_ENTRY_FIELDS)}"
        )
    for key in _REQUIRED:
        if key not in raw:
            raise _fail(
                f"{where}.{key}",
                "is required" + (" (null for CPU-only)" if key == "cuda_version" else ""),
            )
    return slug, where


def parse_entry(raw: Any, where: str) -> CatalogEntry:
    """Validate one catalog entry; ``where`` is e.g. ``"catalog.yaml: images[2]"``."""
    slug, where = _entry_head(raw, where)
    cuda = None if raw["cuda_version"] is None else _version(raw, "cuda_version", where, "12.1", 3)
    description = raw.get("description") or ""
    if not isinstance(description, str):
        raise _fail(f"{where}.description", "must be a string")
    low, high = _capabilities(raw, cuda, where)
    return CatalogEntry(
        slug=slug,
        display_name=_text(raw, "display_name", where, "PyTorch 2.3 (CUDA 12.1)"),
        framework=_text(raw, "framework", where, "pytorch"),
        framework_version=_text(raw, "framework_version", where, "2.3.1"),
        cuda_version=cuda,
        image=_image(raw, where),
        min_driver=_min_driver(raw, cuda, where),
        min_compute_capability=low,
        max_compute_capability=high,
        description=description.strip(),
        groups=frozenset(_str_list(raw.get("groups"), f"{where}.groups", "group names")),
        build=_build(raw.get("build"), f"{where}.build"),
    )


def parse_catalog(data: Any, source: str = "catalog") -> Catalog:
    """Validate a loaded YAML document and return the catalog."""
    if not isinstance(data, Mapping) or "images" not in data:
        raise _fail(source, "must be a mapping with an 'images' list")
    unknown = set(data) - _TOP_FIELDS
    if unknown:
        raise _fail(
            source,
            f"unknown top-level field(s) {sorted(map(str, unknown))}; "
            f"allowed: {sorted(_TOP_FIELDS)}",
        )
    raw_entries = data["images"]
    if isinstance(raw_entries, str) or not isinstance(raw_entries, Sequence) or not raw_entries:
        raise _fail(f"{source}: images", "must be a non-empty list of images")
    entries = tuple(parse_entry(e, f"{source}: images[{i}]") for i, e in enumerate(raw_entries))
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.slug in seen:
            raise _fail(
                f"{source}: images[{i}] ({entry.slug}).slug",
                f"must be unique; images[{seen[entry.slug]}] has the same slug",
            )
        seen[entry.slug] = i
    patterns = _str_list(
        data.get("allowed_image_patterns"), f"{source}: allowed_image_patterns", "fnmatch patterns"
    )
    return Catalog(entries=entries, allowed_image_patterns=patterns, source=source)


def default_catalog_path() -> Path:
    """The catalog that ships with the project: package data,
    ``jupyterhub_gpu/data/catalog.yaml`` (in a checkout a link to ``images/catalog.yaml``,
    the file images/build.py builds from; a wheel carries the file itself)."""
    return Path(__file__).resolve().parents[1] / "data" / "catalog.yaml"
