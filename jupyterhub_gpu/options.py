"""The GPU part of a server's options, from the spawn form or the REST API (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRequest

_KNOWN = {"gpus"}


@dataclass(frozen=True)
class GPUOptions:
    gpus: int


def _one(value: Any) -> Any:
    """Form data arrives as lists of strings; the REST API sends plain JSON values."""
    if isinstance(value, list):
        if len(value) != 1:
            raise InvalidRequest("Each option takes exactly one value.")
        return value[0]
    return value


def parse_gpu_count(value: Any, maximum: int) -> int:
    value = _one(value)
    if isinstance(value, bool):
        raise InvalidRequest(f"'gpus' must be a whole number from 0 to {maximum}, got {value!r}.")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or not 0 <= value <= maximum:
        raise InvalidRequest(f"'gpus' must be a whole number from 0 to {maximum}, got {value!r}.")
    return value


def parse_gpu_options(raw: Mapping[str, Any] | None, *, default: int, maximum: int) -> GPUOptions:
    """Validate ``raw`` strictly: unknown fields are refused, never ignored."""
    raw = raw or {}
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise InvalidRequest(
            f"Unknown option(s) {', '.join(map(repr, unknown))}; allowed: {sorted(_KNOWN)}."
        )
    return GPUOptions(gpus=parse_gpu_count(raw["gpus"], maximum) if "gpus" in raw else default)
