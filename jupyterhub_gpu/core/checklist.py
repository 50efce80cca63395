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


@dataclass(frozen=True)
class CheckKind:
    """One check of the registry (:data:`CHECKS`): its name (a family's ends in ``*``:
    ``catalog *`` stands for ``catalog IMAGE``), the layer it checks (``check-node
    --only``'s group; the engine's run always), whether a failure keeps the hub's new
    servers off the node, what to do about a failure in general (each failed line says
    exactly), how the hub's log names it, and whether the hub runs it itself."""

    name: str
    layer: str
    blocking: bool
    fix: str
    words: str = ""
    hub: bool = False

    def covers(self, check: str) -> bool:
        if self.name.endswith("*"):
            return check.startswith(self.name[:-1])
        return check == self.name


#: Every check of ``check-node`` and of the hub's own node checks. Adding a check is one
#: entry here and one function returning its :class:`Check` lines (in core/nodecheck.py,
#: or core/sharing/ for the sharing ones), called by the layer's gathering in
#: edges/nodecheck.py; tests/unit/test_check_registry.py finds every name used.
CHECKS: tuple[CheckKind, ...] = (
    CheckKind("engine", "engine", False, "start the node's Docker engine and check docker_url"),
    CheckKind(
        "engine.tls", "engine", False, "run dockerd with --tlsverify on tcp:// (docs/nodes.md)"
    ),
    CheckKind("engine.plain-tcp", "engine", False, "close every plain-TCP Docker API of the node"),
    CheckKind(
        "user-network",
        "user-network",
        True,
        "recreate the user network with inter-container traffic off",
        "user network",
        True,
    ),
    CheckKind(
        "firewall", "firewall", True, "apply the node firewall (jupyterhub-gpu firewall)", "", True
    ),
    CheckKind(
        "firewall.probe",
        "firewall",
        True,
        "let the probe run as a non-root user on the user bridge",
        "firewall probe",
        True,
    ),
    CheckKind(
        "firewall.hub-api",
        "firewall",
        False,
        "let the user bridge reach the hub's API (docs/nodes.md)",
        "",
        True,
    ),
    CheckKind("gpu", "gpu", False, "fix the failed check it needs first"),
    CheckKind(
        "gpu.one", "gpu", False, "install the NVIDIA Container Toolkit and restart the engine"
    ),
    CheckKind(
        "gpu.none", "gpu", False, "set NVIDIA_VISIBLE_DEVICES=void for containers given no GPU"
    ),
    CheckKind(
        "gpu.nvidia-mps",
        "gpu",
        False,
        "run the MPS daemon on the hub's pipe directory (docs/sharing.md)",
    ),
    CheckKind(
        "agent", "agent", False, "start the node agent with its node's token (docs/agent.md)"
    ),
    CheckKind(
        "clock", "agent", False, "synchronise the node's clock (chrony or systemd-timesyncd)"
    ),
    CheckKind("home", "home", False, "make the shared home root reachable on the node"),
    CheckKind("catalog *", "catalog", False, "pull the catalog's image on the node"),
    CheckKind("nvml", "local", False, "install the NVIDIA driver and nvidia-ml-py on the node"),
    CheckKind("nvml.gpu*", "local", False, "check the GPU with nvidia-smi -q"),
    CheckKind(
        "certificates",
        "certificates",
        False,
        "renew each certificate named (jupyterhub-gpu certs renew, docs/nodes.md)",
    ),
    CheckKind("mps", "mps", False, "start the MPS control daemon (docs/sharing.md)"),
    CheckKind("mps.shm", "mps", False, "give the node a /dev/shm large enough for MPS"),
    CheckKind("mps.threads", "mps", False, "start the MPS daemon with its thread limit"),
    CheckKind("mps.gpu*", "mps", False, "start the MPS daemon with each GPU's memory limit"),
    CheckKind(
        "mps.nvidia-default",
        "mps",
        False,
        "run the MPS daemon on the hub's pipe directory (docs/sharing.md)",
    ),
)


def kind_of(check: str) -> CheckKind | None:
    """The registry's entry for the check named ``check`` (None: not registered)."""
    exact = [k for k in CHECKS if k.name == check]
    if exact:
        return exact[0]
    family = [k for k in CHECKS if k.covers(check)]
    return max(family, key=lambda k: len(k.name)) if family else None
