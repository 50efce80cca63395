"""Read-only dataset mounts per group (pure).

Admins declare them as ``{group: [{"source": host path, "target": container path}]}``;
a user gets the mounts of every group they belong to, always read-only. Users can never
add mounts: the spawn options refuse any mount field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from jupyterhub_gpu.errors import ConfigError

_FORBIDDEN = ("docker.sock", "containerd.sock", "/proc", "/sys", "/dev", "/etc", "/var/run")


def _path(value: Any, where: str) -> PurePosixPath:
    if not isinstance(value, str) or "\0" in value:
        raise ConfigError(f"{where}: must be an absolute path, got {value!r}")
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts or str(path) == "/":
        raise ConfigError(f"{where}: must be an absolute path other than '/' without '..'")
    if any(str(path).startswith(f) or f in str(path) for f in _FORBIDDEN):
        raise ConfigError(f"{where}: {value} must not be a system path or a runtime socket")
    return path


def parse_group_mounts(
    raw: Mapping[str, Any], where: str = "group_mounts"
) -> dict[str, list[tuple[str, str]]]:
    """Validate the admin's table; returns group -> [(source, target)]."""
    out: dict[str, list[tuple[str, str]]] = {}
    for group, mounts in raw.items():
        if not isinstance(mounts, list):
            raise ConfigError(f"{where}[{group!r}]: must be a list of {{source, target}}")
        parsed = []
        for i, m in enumerate(mounts):
            w = f"{where}[{group!r}][{i}]"
            if not isinstance(m, Mapping) or set(m) != {"source", "target"}:
                raise ConfigError(f"{w}: must be a mapping with exactly 'source' and 'target'")
            parsed.append(
                (str(_path(m["source"], f"{w}.source")), str(_path(m["target"], f"{w}.target")))
            )
        out[str(group)] = parsed
    return out


def dataset_binds(
    table: Mapping[str, list[tuple[str, str]]], groups: Iterable[str]
) -> dict[str, dict[str, str]]:
    """Docker binds (read-only) for a member of ``groups``; the first group naming a target wins."""
    binds: dict[str, dict[str, str]] = {}
    targets: set[str] = set()
    for group in sorted(set(groups)):
        for source, target in table.get(group, []):
            if target in targets:
                continue
            targets.add(target)
            binds[source] = {"bind": target, "mode": "ro"}
    return binds
