"""One line of a node's checklist (pure): what ``jupyterhub-gpu check-node``'s decisions
(:mod:`.nodecheck`) and the GPU sharing checks (:mod:`.sharing.mps`,
:mod:`.sharing.compute_mode`) each return, and what the command prints or writes as JSON.

Below both, so that :mod:`.sharing` reads no part of the core that reads it back
(``tests/unit/test_layers.py`` refuses a circle between core's parts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One line of the checklist."""

    node: str
    check: str  # e.g. "engine", "firewall"
    ok: bool
    detail: str  # what was seen
    fix: str = ""  # what to do when not ok

    def as_json(self) -> dict[str, Any]:
        return asdict(self)
