"""Spawn progress: what the hub's spawn page shows while a server starts (pure parts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class PullProgress:
    """Overall download percentage of a ``docker pull`` event stream, one event at a time.

    Each layer reports ``progressDetail: {current, total}`` while downloading; a layer
    that says "Download complete", "Pull complete" or "Already exists" counts as done.
    :attr:`percent` is ``None`` until any layer has reported a size.
    """

    def __init__(self) -> None:
        self._layers: dict[str, tuple[int, int]] = {}
        self._done = 0
        self._total = 0

    def add(self, event: Mapping[str, Any]) -> int | None:
        """Fold one event in; returns :attr:`percent`."""
        layer = event.get("id")
        if layer:
            status = str(event.get("status", ""))
            detail = event.get("progressDetail") or {}
            total = int(detail.get("total") or 0)
            old = self._layers.get(layer)
            new = old
            if status.startswith("Downloading") and total:
                new = (min(int(detail.get("current") or 0), total), total)
            elif status in _LAYER_DONE and old is not None:
                new = (old[1], old[1])
            if new != old and new is not None:
                before = old or (0, 0)
                self._done += new[0] - before[0]
                self._total += new[1] - before[1]
                self._layers[layer] = new
        return self.percent

    @property
    def percent(self) -> int | None:
        return int(100 * self._done / self._total) if self._total else None


_LAYER_DONE = frozenset({"Download complete", "Pull complete", "Already exists"})


def pull_error(event: Mapping[str, Any]) -> str | None:
    """The error a ``docker pull`` stream reports in-band (the stream itself succeeds)."""
    detail = event.get("errorDetail")
    message = event.get("error") or (detail.get("message") if isinstance(detail, dict) else None)
    return str(message) if message else None


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
