"""Spawn progress: what the hub's spawn page shows while a server starts (pure parts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def pull_percent(events: Iterable[Mapping[str, Any]]) -> int | None:
    """Overall download percentage from a ``docker pull`` event stream so far.

    Each layer reports ``progressDetail: {current, total}`` while downloading; a layer
    that says "Download complete", "Pull complete" or "Already exists" counts as done.
    ``None`` until any layer has reported a size.
    """
    layers: dict[str, tuple[int, int]] = {}
    for event in events:
        layer = event.get("id")
        if not layer:
            continue
        status = str(event.get("status", ""))
        detail = event.get("progressDetail") or {}
        total = int(detail.get("total") or 0)
        current = int(detail.get("current") or 0)
        if status.startswith("Downloading") and total:
            layers[layer] = (min(current, total), total)
        elif status in {"Download complete", "Pull complete", "Already exists"} and layer in layers:
            layers[layer] = (layers[layer][1], layers[layer][1])
    if not layers:
        return None
    done = sum(c for c, _ in layers.values())
    total = sum(t for _, t in layers.values())
    return int(100 * done / total) if total else None


def gib(mib: int) -> str:
    value = mib / 1024
    return f"{value:.0f} GiB" if value >= 10 else f"{value:.1f} GiB"


def describe_gpus(node: str, gpus: Iterable[tuple[int, str, int]]) -> str:
    """ "node gpu-b, GPU 1 (RTX 3090, 24 GiB)" from (index, model, memory_mib) triples."""
    parts = [
        f"GPU {index} ({model.replace('NVIDIA ', '').replace('GeForce ', '')}, {gib(mem)})"
        for index, model, mem in gpus
    ]
    return f"node {node}, " + (", ".join(parts) if parts else "no GPU (CPU only)")
