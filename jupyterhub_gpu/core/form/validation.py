"""Server-side validation of spawn options, from the form or the REST API. Pure.

Every spawn goes through :func:`validate_options`; anything it does not like raises
:class:`~jupyterhub_gpu.errors.InvalidRequest` (HTTP 400) with one sentence for the
user, before anything is started or reserved. Only seven options exist (see
:data:`OPTION_FIELDS`); environment variables, mounts, users, commands and image
references are refused by name, everything else as unknown. ``charge_group`` chooses
which of the user's chargeable groups pays (Slurm's account): not a privilege, since
only a group the user may charge is accepted (any other ``group*`` key is still refused
as a privilege, and ``group`` or ``account`` are told to use ``charge_group``).

Form data (``dict[str, list[str]]`` from tornado) first goes through
:func:`options_from_form`, which only converts types; the REST API's JSON goes to
:func:`validate_options` directly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.core.catalog.compat import (
    custom_entry,
    entry_to_request_constraints,
    image_allowed_by_patterns,
)
from jupyterhub_gpu.core.catalog.entries import IMAGE_RE, Catalog, CatalogEntry
from jupyterhub_gpu.core.form.availability import ModelAvailability, short_model_name
from jupyterhub_gpu.core.form.resources import UserBounds
from jupyterhub_gpu.core.form.shares import check_share
from jupyterhub_gpu.core.placement.locality import wanted
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.core.sharing.policy import NO_SHARING, SharingPolicy, parse_share
from jupyterhub_gpu.errors import InvalidRequest

OPTION_FIELDS = (
    "image",
    "gpu_count",
    "gpu_model",
    "min_gpu_memory_gib",
    "cpu",
    "mem_gib",
    "charge_group",
    "gpu_share",
)
ANY_MODEL = "any"

_INT_RE = re.compile(r"^[+-]?[0-9]{1,9}$")
_FLOAT_RE = re.compile(r"^[+-]?(?:[0-9]{1,9}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?$")
_FLOAT_FIELDS = ("min_gpu_memory_gib", "cpu", "mem_gib")

# (key prefixes or names, what the user is told). Checked on the lower-cased key.
_SMUGGLED: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        (
            "env", "environ", "home", "path", "ld_", "nvidia", "cuda_visible", "jupyter",
            "pythonpath",
        ),
        "setting environment variables ({key}) is not allowed: the hub sets the server's "
        "environment",
    ),
    (
        ("volume", "mount", "bind", "tmpfs", "device", "gpus", "gpu_ids", "gpu_uuid"),
        "mounting volumes or choosing devices ({key}) is not allowed: the hub mounts your home and "
        "assigns GPUs itself",
    ),
    (
        ("user", "uid", "gid", "group", "privileged", "cap_", "security", "root", "sudo"),
        "choosing the user or privileges ({key}) is not allowed: your server always runs as your "
        "own account",
    ),
    (
        ("cmd", "command", "arg", "entrypoint", "default_url", "notebook_dir", "working_dir"),
        "setting the command or its arguments ({key}) is not allowed: the image's command is fixed",
    ),
    (
        ("image_", "docker", "repo", "tag", "digest", "registry", "container_image"),
        "image references ({key}) are not accepted: choose an image by its catalog name in the "
        "'image' option",
    ),
    (
        ("host", "network", "runtime", "ipc", "pid", "port", "shm", "mem_limit", "cpu_limit",
         "nano_cpus", "limit", "label", "extra", "node", "name", "ulimit", "sysctl"),
        "container settings ({key}) are not allowed: the hub sets them from your choices and the "
        "admin's limits",
    ),
)  # fmt: skip


# Likely mistakes for the real option names: told which name to use.
_ALIASES = {
    "gpus": "gpu_count",
    "gpu": "gpu_count",
    "num_gpus": "gpu_count",
    "model": "gpu_model",
    "gpu_type": "gpu_model",
    "gpu_memory": "min_gpu_memory_gib",
    "cpus": "cpu",
    "mem": "mem_gib",
    "memory": "mem_gib",
    "mem_limit": "mem_gib",
    "cpu_limit": "cpu",
    # told the real name rather than refused as a privilege ("group*" keys are, below)
    "group": "charge_group",
    "account": "charge_group",
}


@dataclass(frozen=True)
class SpawnOptions:
    """A validated, normalised spawn request.

    ``image`` is a catalog slug (or, with ``custom_image``, a reference an admin pattern
    allowed). ``gpu_model`` is the probe's full model name, ``None`` for any. With
    ``gpu_count == 0`` the model is ``None`` and the memory floor 0. ``charge_group`` is
    the group the server is charged to (the user's choice, else the first they may
    charge; ``None`` for a user with no group to charge).
    """

    image: str
    gpu_count: int
    gpu_model: str | None
    min_gpu_memory_gib: float
    cpu: float
    mem_gib: float
    custom_image: bool = False
    charge_group: str | None = None
    gpu_share: str = ""  # "K/N": a share of one GPU of gpu_model (issue 26); "" whole

    def as_user_options(self) -> dict[str, Any]:
        """JSON-able ``user_options``; :func:`validate_options` accepts it unchanged."""
        options: dict[str, Any] = {
            "image": self.image,
            "gpu_count": self.gpu_count,
            "gpu_model": self.gpu_model or ANY_MODEL,
            "min_gpu_memory_gib": self.min_gpu_memory_gib,
            "cpu": self.cpu,
            "mem_gib": self.mem_gib,
        }
        if self.charge_group is not None:
            options["charge_group"] = self.charge_group
        if self.gpu_share:
            options["gpu_share"] = self.gpu_share
        return options


def _sentence(text: str) -> InvalidRequest:
    return InvalidRequest(text[0].upper() + text[1:] + ("" if text.endswith(".") else "."))


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _num(x: float) -> str:
    return f"{x:g}"


# ---------------------------------------------------------------- form -> raw dict


def options_from_form(formdata: Mapping[str, Any]) -> dict[str, Any]:
    """Turn tornado form data (``{name: [value, ...]}``) into a raw options dict.

    Type conversion only: single values are unwrapped and stripped, numbers parsed
    where they parse, empty fields dropped (defaults apply), ``_xsrf`` dropped.
    Repeated fields stay lists and unknown fields stay, for :func:`validate_options`
    to refuse.
    """
    raw: dict[str, Any] = {}
    for key, values in formdata.items():
        if key == "_xsrf":
            continue
        value: Any = values
        if isinstance(values, list | tuple) and len(values) == 1:
            value = values[0]
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str):
            value = value.strip()
            if value == "":
                continue
            if key == "gpu_count" and _INT_RE.match(value):
                value = int(value)
            elif key in _FLOAT_FIELDS and _FLOAT_RE.match(value):
                value = float(value)
        raw[key] = value
    return raw


# ---------------------------------------------------------------- field checks


def _check_keys(raw: Mapping[Any, Any]) -> None:
    bad = sorted((str(k) for k in raw if k not in OPTION_FIELDS), key=str)
    for key in bad:
        if key.lower() in _ALIASES:
            raise _sentence(f"unknown option {_show(key)}; use '{_ALIASES[key.lower()]}' instead")
    for key in bad:
        low = key.lower().replace("-", "_").lstrip("_")
        for prefixes, message in _SMUGGLED:
            if low.startswith(prefixes):
                raise _sentence(message.format(key=_show(key)))
    if bad:
        raise _sentence(
            f"unknown option {_show(bad[0])}; the allowed options are "
            f"{', '.join(OPTION_FIELDS[:-1])} and {OPTION_FIELDS[-1]}"
        )


def whole_number(value: Any) -> int | None:
    """An int, an integral float or a decimal string -> int; anything else -> None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT_RE.match(value.strip()):
        return int(value.strip())
    return None


def finite_number(value: Any) -> float | None:
    """A finite int, float or decimal string -> float; NaN, inf, bools, junk -> None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str) and _FLOAT_RE.match(value.strip()):
        number = float(value.strip())
    else:
        return None
    return number if math.isfinite(number) else None


def _single(raw: Mapping[str, Any], key: str) -> Any:
    value = raw.get(key)
    if isinstance(value, list | tuple | dict | set):
        raise _sentence(f"the option '{key}' must be a single value, got {_show(value)}")
    return value


def _check_image(value: Any, catalog: Catalog, bounds: UserBounds) -> CatalogEntry:
    if value is None:
        for candidate in catalog.for_groups(bounds.groups):
            if bounds.image_allowed(candidate.policy_slug):
                return candidate
        raise _sentence("no image in the catalog is available to your groups; ask an admin")
    if not isinstance(value, str):
        raise _sentence(
            f"the image must be a catalog name such as {catalog.slugs[0]!r}, got {_show(value)}"
        )
    entry = catalog.get(value)
    if entry is not None:
        if not (entry.allowed_for(bounds.groups) and bounds.image_allowed(entry.policy_slug)):
            raise _sentence(
                f"the image {_show(value)} is not available to your groups; choose another image"
            )
        return entry
    if (
        catalog.allowed_image_patterns
        and bounds.allowed_images is None
        and IMAGE_RE.match(value)
        and image_allowed_by_patterns(value, catalog.allowed_image_patterns)
    ):
        return custom_entry(value)
    raise _sentence(
        f"the image {_show(value)} is not in the image catalog; choose one of the images offered"
    )


def _check_gpu_count(value: Any, entry: CatalogEntry, bounds: UserBounds) -> int:
    if value is None:
        return 0 if entry.cpu_only else bounds.default_gpu_count
    count = whole_number(value)
    if count is None or count < 0:
        raise _sentence(
            f"the GPU count must be a whole number from 0 to {bounds.max_gpus}; got {_show(value)}"
        )
    if count > bounds.max_gpus:
        raise _sentence(
            f"you may use at most {bounds.max_gpus} GPU(s) per server; you asked for {count}"
        )
    if count and entry.cpu_only:
        raise _sentence(
            f"the image {entry.display_name!r} is CPU-only; choose 0 GPUs or an image with CUDA"
        )
    return count


def _allowed_labels(models: Sequence[ModelAvailability], bounds: UserBounds) -> str:
    labels = [m.label for m in models if bounds.model_allowed(m.model)]
    return ", ".join(labels) if labels else "none"


def _check_gpu_model(
    value: Any, models: Sequence[ModelAvailability], bounds: UserBounds
) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", ANY_MODEL)):
        return None
    if not isinstance(value, str):
        raise _sentence(f"the GPU model must be a model name or 'any', got {_show(value)}")
    name = value.strip()
    match = next((m for m in models if m.model == name), None) or next(
        (m for m in models if m.label.lower() == short_model_name(name).lower()), None
    )
    if match is None:
        raise _sentence(
            f"unknown GPU model {_show(value)}; "
            f"choose 'any' or one of: {_allowed_labels(models, bounds)}"
        )
    if not bounds.model_allowed(match.model):
        raise _sentence(
            f"your groups may not use {match.label} GPUs; choose 'any' or one of: "
            f"{_allowed_labels(models, bounds)}"
        )
    return match.model


def _check_gpu_memory(
    value: Any, models: Sequence[ModelAvailability], bounds: UserBounds, model: str | None
) -> float:
    if value is None:
        return 0.0
    number = finite_number(value)
    if number is None or number < 0:
        raise _sentence(
            f"the minimum GPU memory must be a number of GiB, 0 or more; got {_show(value)}"
        )
    chosen = next((m for m in models if m.model == model), None)
    if chosen is not None and number * 1024 > chosen.memory_mib:
        raise _sentence(
            f"the {chosen.label} has {_num(chosen.memory_mib / 1024)} GiB of memory; "
            f"you asked for at least {_num(number)} GiB"
        )
    largest = max((m.memory_mib for m in models if bounds.model_allowed(m.model)), default=0)
    if number * 1024 > largest:
        raise _sentence(
            f"no GPU you may use has {_num(number)} GiB of memory; "
            f"the largest has {_num(largest / 1024)} GiB"
        )
    return number


def _check_bounded(
    value: Any, default: float, low: float, high: float, what: str, unit: str
) -> float:
    if value is None:
        return default
    number = finite_number(value)
    if number is None or number < low:
        raise _sentence(
            f"the {what} must be a number from {_num(low)} to {_num(high)}; got {_show(value)}"
        )
    if number > high:
        raise _sentence(
            f"you may use at most {_num(high)} {unit} per server; you asked for {_num(number)}"
        )
    return number


def _either(names: Sequence[str]) -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _check_charge_group(value: Any, bounds: UserBounds, charge_groups: Sequence[str]) -> str | None:
    """The group the server is charged to: ``value`` if the user may charge it, the first
    of ``charge_groups`` (the default) when it is missing."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return charge_groups[0] if charge_groups else None
    if not isinstance(value, str):
        example = f" such as {charge_groups[0]!r}" if charge_groups else ""
        raise _sentence(f"the charge group must be a group name{example}, got {_show(value)}")
    name = value.strip()
    if name in charge_groups:
        return name
    if not charge_groups:
        raise _sentence(
            f"you have no group to charge, so you can't choose {_show(name)}; "
            "leave the charge group out"
        )
    choose = f"choose {_either(charge_groups)}"
    if name not in bounds.groups:
        raise _sentence(f"you are not a member of group {_show(name)}; {choose}")
    raise _sentence(
        f"servers can't be charged to group {_show(name)} (the site sets no GPU policy for "
        f"it); {choose}"
    )


# ---------------------------------------------------------------- entry points


def validate_options(
    raw: Any,
    *,
    catalog: Catalog,
    bounds: UserBounds,
    models: Sequence[ModelAvailability],
    charge_groups: Sequence[str] = (),
    sharing: SharingPolicy = NO_SHARING,
) -> SpawnOptions:
    """Validate raw spawn options (form or API) for one user; raise ``InvalidRequest``.

    ``bounds`` comes from :func:`~jupyterhub_gpu.core.form.resources.resolve_bounds` (it
    carries the user's groups); ``models`` are the GPU models in the cluster (from
    :func:`~jupyterhub_gpu.core.form.availability.gpu_model_availability`);
    ``charge_groups`` the groups the user may charge, the default first
    (:func:`~jupyterhub_gpu.core.accounting.records.chargeable_groups`). Missing options
    take the user's defaults; ``{}`` (an API spawn without options) is valid.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise _sentence("spawn options must be a JSON object of option names to values")
    _check_keys(raw)
    entry = _check_image(_single(raw, "image"), catalog, bounds)
    count = _check_gpu_count(_single(raw, "gpu_count"), entry, bounds)
    model = _check_gpu_model(_single(raw, "gpu_model"), models, bounds)
    memory = _check_gpu_memory(_single(raw, "min_gpu_memory_gib"), models, bounds, model)
    cpu = _check_bounded(
        _single(raw, "cpu"), bounds.default_cpu, bounds.min_cpu, bounds.max_cpu, "CPU count", "CPUs"
    )
    mem = _check_bounded(
        _single(raw, "mem_gib"),
        bounds.default_mem_gib,
        bounds.min_mem_gib,
        bounds.max_mem_gib,
        "memory in GiB",
        "GiB of memory",
    )
    charged = _check_charge_group(_single(raw, "charge_group"), bounds, charge_groups)
    share = check_share(_single(raw, "gpu_share"), count, model, sharing)
    return SpawnOptions(
        image=entry.image if entry.custom else entry.slug,
        gpu_count=count,
        gpu_model=model if count else None,
        min_gpu_memory_gib=memory if count else 0.0,
        cpu=cpu,
        mem_gib=mem,
        custom_image=entry.custom,
        charge_group=charged,
        gpu_share=share,
    )


def resolve_entry(catalog: Catalog, options: SpawnOptions) -> CatalogEntry:
    """The catalog entry (image reference, CUDA facts) of validated options."""
    if options.custom_image:
        return custom_entry(options.image)
    entry = catalog.get(options.image)
    if entry is None:  # the catalog changed since validation
        raise _sentence(f"the image {_show(options.image)} is no longer in the image catalog")
    return entry


def placement_request(
    options: SpawnOptions, entry: CatalogEntry, bounds: UserBounds, models: Iterable[str]
) -> PlacementRequest:
    """The :class:`PlacementRequest` for validated options; "any model" becomes the
    models the user's groups may use (``models``: every model name in the cluster); the
    image's identities let placement prefer a node that holds it."""
    if options.gpu_model is not None:
        allowed: frozenset[str] | None = frozenset({options.gpu_model})
    elif bounds.allowed_models is None:
        allowed = None
    else:
        allowed = frozenset(m for m in models if bounds.model_allowed(m))
    # without GPUs the image's driver and architecture needs don't restrict the node
    constraints = entry_to_request_constraints(entry if options.gpu_count else _NO_GPU_ENTRY)
    shares, share_of = parse_share(options.gpu_share) or (0, 0)
    return PlacementRequest(
        gpu_count=options.gpu_count,
        min_memory_mib=math.ceil(options.min_gpu_memory_gib * 1024),
        allowed_models=allowed,
        **constraints,
        image=wanted(entry.image),  # a saved image's entry runs its repo@digest
        shares=shares,
        share_of=share_of,
    )


_NO_GPU_ENTRY = custom_entry("none:none")
