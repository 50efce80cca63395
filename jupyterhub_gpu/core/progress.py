"""Spawn progress: what the hub's spawn page shows while a server starts (pure parts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jupyterhub_gpu.core.words import duration, one_line


class PullProgress:
    """Progress of a ``docker pull`` event stream, folded one event at a time.

    A pull has two phases per layer: downloading (``Downloading`` events with
    ``progressDetail: {current, total}``, then "Download complete") and unpacking
    (``Extracting`` events, counted in the same compressed bytes, then "Pull complete").
    On a fast registry the download is over in seconds and unpacking a large image takes
    most of the time, so both are counted: :attr:`percent` is their mean, by bytes.
    Layers the node already has ("Already exists") are not counted. Every percentage is
    ``None`` until a layer has reported a size.
    """

    def __init__(self) -> None:
        self._layers: dict[str, tuple[int, int, int]] = {}  # id -> size, downloaded, unpacked
        self._size = self._downloaded = self._unpacked = 0

    def add(self, event: Mapping[str, Any]) -> int | None:
        """Fold one event in; returns :attr:`percent`."""
        layer = event.get("id")
        if not layer:
            return self.percent
        status = str(event.get("status", ""))
        detail = event.get("progressDetail") or {}
        total = int(detail.get("total") or 0)
        current = int(detail.get("current") or 0)
        old = self._layers.get(layer)
        size, down, unpacked = old or (0, 0, 0)
        if status.startswith("Downloading") and total:
            size = max(size, total)
            down = min(current, size)
        elif status.startswith("Extracting") and total:
            size = max(size, total)
            down, unpacked = size, min(current, size)  # unpacking starts once downloaded
        elif status == "Download complete" and old is not None:
            down = size
        elif status == "Pull complete" and old is not None:
            down = unpacked = size
        else:
            return self.percent
        before = old or (0, 0, 0)
        self._size += size - before[0]
        self._downloaded += down - before[1]
        self._unpacked += unpacked - before[2]
        self._layers[layer] = (size, down, unpacked)
        return self.percent

    def _share(self, done: int) -> int | None:
        return int(100 * done / self._size) if self._size else None

    @property
    def percent(self) -> int | None:
        """The whole pull: downloading and unpacking weigh the same."""
        return int(50 * (self._downloaded + self._unpacked) / self._size) if self._size else None

    @property
    def downloaded(self) -> int | None:
        return self._share(self._downloaded)

    @property
    def unpacked(self) -> int | None:
        return self._share(self._unpacked)

    @property
    def done_bytes(self) -> int:
        """Bytes downloaded plus bytes unpacked: what grows while the pull makes progress."""
        return self._downloaded + self._unpacked

    def message(self, image: str, node: str, percent: int, elapsed: float | None = None) -> str:
        """What the spawn page shows at ``percent`` (a 5% step of :attr:`percent`): the
        phases, the compressed bytes the layers weigh, and, ``elapsed`` seconds into the
        pull, about how long is left at the pace so far (:func:`time_left`)."""
        left = time_left(percent, elapsed) if elapsed is not None else None
        eta = f"; about {duration(left)} left" if left is not None else ""
        return (
            f"Pulling {image} on node {node}: {percent}% "
            f"(downloaded {self.downloaded or 0}% of {size_words(self._size)}, "
            f"unpacked {self.unpacked or 0}%{eta})"
        )


def time_left(percent: int, elapsed: float) -> float | None:
    """Seconds left at the pace so far, once there is a pace to go by (5% and 2 s in);
    ``None`` before, and at 100%. An estimate: layers whose size the engine has not
    reported yet are not counted, so it may grow."""
    if percent < 5 or percent >= 100 or elapsed < 2:
        return None
    return elapsed * (100 - percent) / percent


def size_words(size_bytes: int) -> str:
    """``6.2 GB``, ``14 GB``, ``850 MB``, ``12 kB``, ``400 bytes`` (decimal units, as
    registries and disks count)."""
    if size_bytes >= 10**10:
        return f"{size_bytes / 10**9:.0f} GB"
    if size_bytes >= 10**9:
        return f"{size_bytes / 10**9:.1f} GB"
    if size_bytes >= 10**6:
        return f"{size_bytes // 10**6} MB"
    if size_bytes >= 10**3:
        return f"{size_bytes // 10**3} kB"
    return f"{max(size_bytes, 0)} bytes"


def pull_error(event: Mapping[str, Any]) -> str | None:
    """The error a ``docker pull`` stream reports in-band (the stream itself succeeds)."""
    detail = event.get("errorDetail")
    message = event.get("error") or (detail.get("message") if isinstance(detail, dict) else None)
    return str(message) if message else None


#: a failed pull's cause (:func:`pull_failure`): the registry lacks the image, the
#: registry did not answer, the node's disk filled up, the node does not trust the
#: registry's TLS certificate, or anything else the engine said
MISSING, REGISTRY_DOWN, DISK_FULL, OTHER = "missing", "registry", "disk", "other"
UNTRUSTED = "untrusted"

_DISK_FULL = ("no space left on device", "disk quota exceeded")
_MISSING = ("manifest unknown", "not found", "repository does not exist", "pull access denied",
            "name unknown", "unauthorized")  # fmt: skip
_DOWN = ("connection refused", "no such host", "i/o timeout", "connection reset",
         "no route to host", "network is unreachable", "tls handshake timeout",
         "server misbehaving", "503 service unavailable", "502 bad gateway",
         "504 gateway timeout", "unexpected eof", "client.timeout exceeded")  # fmt: skip


_UNTRUSTED = (
    "x509: certificate signed by unknown authority",
    "x509: certificate is valid for",
    "x509: certificate is not valid for",
    "tls: failed to verify certificate",
)


def pull_failure_cause(why: str) -> str:
    """What the engine's error text ``why`` says went wrong with a pull (see above)."""
    text = why.lower()
    if any(s in text for s in _DISK_FULL):
        return DISK_FULL
    if any(s in text for s in _UNTRUSTED):
        return UNTRUSTED
    if any(s in text for s in _MISSING):
        return MISSING
    if any(s in text for s in _DOWN):
        return REGISTRY_DOWN
    return OTHER


def registry_of(image: str) -> str:
    """The registry ``image`` is pulled from (Docker Hub when it names none)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return "Docker Hub"


def pull_failure(image: str, node: str, why: str) -> tuple[str, str]:
    """(cause, the sentence for the user and the log) of a pull the engine refused or
    abandoned, from its error text ``why`` (the registry's words, often: shown on one
    line, :func:`~jupyterhub_gpu.core.words.one_line`)."""
    cause = pull_failure_cause(why)
    why = one_line(why.strip())
    head = f"Could not pull {image} on node {node}"
    if cause == DISK_FULL:
        return cause, (
            f"{head}: the node's disk is full (no space left on device). Try again later; "
            f"ask an admin to free space on node {node} (unused images: docker image prune) "
            "or to lower the pre-puller's disk budget."
        )
    if cause == UNTRUSTED:
        registry = registry_of(image)
        short = why.rstrip(". ").rsplit("x509: ", 1)[-1]
        return cause, (
            f"{head}: the node does not trust the TLS certificate of the registry {registry} "
            f"({short}). Ask an admin to put that registry's CA in "
            f"/etc/docker/certs.d/{registry}/ca.crt on node {node} (for the site's own "
            "registry, running `jupyterhub-gpu node join` there again does it)."
        )
    if cause == REGISTRY_DOWN:
        short = why.rstrip(". ").rsplit(": ", 1)[-1]
        return cause, (
            f"{head}: its registry {registry_of(image)} did not answer ({short}). It may be "
            "down: try again later; if it keeps happening, ask an admin to check the registry."
        )
    return cause, (
        f"{head}: {why.rstrip('. ')}. Ask an admin to check this image's catalog entry and "
        "its registry."
    )


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
