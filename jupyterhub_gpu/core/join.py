"""Joining a GPU node to a site with one command: the pure rules.

``jupyterhub-gpu node token`` on the hub makes a short-lived, single-use join token,
bound to one node name (or to the first name that uses it); only its SHA-256 is stored.
``jupyterhub-gpu node join`` on the node pins the site's CA by its SHA-256 fingerprint
(as kubeadm pins its CA's key hash), then trades the token and a certificate request for
the node's certificate and agent token. This module decides: whether a token is good
for a name now, what a fingerprint looks like, the join command, the closing line. The
I/O is in :mod:`jupyterhub_gpu.cli.node`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: a token as `node token` makes it: ``jhgpu-`` then 32 URL-safe characters
TOKEN_RE = re.compile(r"^jhgpu-[A-Za-z0-9_-]{32}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: the longest TTL a join token may have
MAX_TTL_S = 7 * 24 * 3600
_TTL_RE = re.compile(r"^(\d{1,6})([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class TokenRecord:
    """A stored join token: its SHA-256 (never the token), the node it is for ("" for
    any one name), when it expires and when it was used (epoch seconds; 0: not yet)."""

    digest: str
    node: str
    expires: float
    used: float = 0.0
    used_by: str = ""


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_ttl(text: str) -> int:
    """``30m``, ``1h``, ``2d`` as seconds; ValueError with a sentence otherwise."""
    m = _TTL_RE.match(text.strip())
    if not m:
        raise ValueError(f"--ttl wants a number and s, m, h or d (e.g. 1h), got {text!r}")
    seconds = int(m[1]) * _UNITS[m[2]]
    if not 60 <= seconds <= MAX_TTL_S:
        raise ValueError(f"--ttl must be between 1m and 7d, got {text!r}")
    return seconds


def token_problem(
    records: Sequence[TokenRecord], token: str, node: str, now: float
) -> tuple[int | None, str]:
    """(index of the record the token matches, "") when ``token`` may join ``node`` now;
    (None or the index, the sentence for the node's admin) when it may not."""
    if not TOKEN_RE.match(token):
        return None, (
            "this is not a join token; copy the whole command that `jupyterhub-gpu node "
            "token` printed on the hub"
        )
    digest = token_digest(token)
    for i, r in enumerate(records):
        if not hmac.compare_digest(r.digest, digest):
            continue
        if r.used:
            return i, (
                f"this join token was already used (by {r.used_by or 'a node'}); make a new "
                "one on the hub with `jupyterhub-gpu node token`"
            )
        if now >= r.expires:
            return i, (
                "this join token has expired; make a new one on the hub with "
                "`jupyterhub-gpu node token`"
            )
        if r.node and r.node != node:
            return i, (
                f"this join token is for the node {r.node}, not {node}; run the command on "
                f"{r.node}, or make a token for {node} on the hub with `jupyterhub-gpu node "
                f"token --node {node}`"
            )
        return i, ""
    return None, (
        "the hub does not know this join token; make a new one on the hub with "
        "`jupyterhub-gpu node token`"
    )


def pruned(
    records: Sequence[TokenRecord], now: float, keep_s: float = 7 * 86400
) -> list[TokenRecord]:
    """The records still worth keeping: unexpired ones, and used or expired ones for a
    week (so a late retry hears "already used", not "unknown")."""
    return [r for r in records if max(r.expires, r.used) + keep_s > now]


def normalize_fingerprint(text: str) -> str | None:
    """A SHA-256 fingerprint as 64 lower-case hex digits (``sha256:`` prefix and colons
    allowed), or None if it is not one."""
    t = text.strip().lower().removeprefix("sha256:").replace(":", "")
    return t if _HEX64.match(t) else None


def show_fingerprint(hexdigest: str) -> str:
    return f"sha256:{hexdigest}"


def join_command(venv_bin: str, hub: str, token: str, fingerprint: str, node: str = "") -> str:
    """The one line `node token` prints, to run on the node."""
    words = [
        f"{venv_bin}/jupyterhub-gpu", "node", "join", hub,
        "--token", token, "--ca-fingerprint", show_fingerprint(fingerprint),
    ]  # fmt: skip
    if node:
        words += ["--name", node]
    return shlex.join(words)


def gpu_summary(models: Sequence[str]) -> str:
    """``2 x RTX 3090`` (``, 1 x A100`` for a mixed node); ``no GPU`` for none."""
    if not models:
        return "no GPU"
    counts = Counter(m.removeprefix("NVIDIA ").removeprefix("GeForce ") for m in models)
    return ", ".join(f"{n} x {model}" for model, n in counts.items())


def joined_line(node: str, models: Sequence[str], failed: Sequence[str]) -> str:
    """The join's last line."""
    gpus = gpu_summary(models)
    if not failed:
        return f"{node} joined: {gpus}, all checks passed"
    return f"{node} joined: {gpus}, but {len(failed)} check(s) failed: {', '.join(failed)}"


def record_to_json(r: TokenRecord) -> dict[str, object]:
    return {"sha256": r.digest, "node": r.node, "expires": r.expires, "used": r.used,
            "used_by": r.used_by}  # fmt: skip


def record_from_json(raw: Mapping[str, object]) -> TokenRecord:
    def num(key: str) -> float:
        v = raw.get(key, 0)
        return float(v) if isinstance(v, int | float) else 0.0

    return TokenRecord(
        digest=str(raw.get("sha256", "")),
        node=str(raw.get("node", "") or ""),
        expires=num("expires"),
        used=num("used"),
        used_by=str(raw.get("used_by", "") or ""),
    )


#: the site registry's port on the hub's address (``registry install``): the nodes pull
#: the catalog's images there, over TLS with a certificate of the site's CA
REGISTRY_PORT = 5443
#: its push side, on the hub's loopback only (``images publish``)
REGISTRY_PUSH_PORT = 5444


def registry_address(hub: str) -> str:
    """``HOST:PORT`` of the site registry on the hub's address ``hub``, as image
    references and Docker's ``certs.d`` folder name it."""
    host = f"[{hub}]" if ":" in hub and not hub.startswith("[") else hub
    return f"{host}:{REGISTRY_PORT}"


def registry_trust(hub: str) -> str:
    """Where a node's Docker looks for the CA of the site registry on ``hub`` (Docker
    reads ``/etc/docker/certs.d/HOST:PORT/ca.crt`` at each pull): the path under ``/``."""
    return f"etc/docker/certs.d/{registry_address(hub)}/ca.crt"
