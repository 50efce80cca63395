"""The admin's sharing policy: which GPUs may be shared, into how many parts, how.

Written in ``jupyterhub_config.py`` as plain dicts (``c.GPUSharing.models`` and
``c.GPUSharing.nodes``) and parsed here, with a clear error for anything unknown::

    c.GPUSharing.models = {
        "NVIDIA GeForce RTX 3090": {"shares": 4, "mode": "mps", "memory_mib": 6144},
    }
    c.GPUSharing.nodes = {"gpu-03": {"shareable": False}}

A node's rule replaces its models' rules for every GPU of that node. A GPU with no rule
is not shared. Modes:

- ``time-slicing``: the servers take turns on the GPU; no memory isolation (the memory of
  a share is what placement counts, and what the agent watches).
- ``mps``: one MPS control daemon per GPU; the spawner sets each client's memory limit
  and thread percentage (docs/sharing.md says what a client can and cannot change).
- ``mig``: each MIG instance is listed by the inventory as a device of its own (its own
  UUID and memory); a share holds one instance whole, so ``shares`` must be 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.errors import ConfigError

MODES = ("time-slicing", "mps", "mig")
MAX_SHARES = 16
_RULE_KEYS = frozenset({"shareable", "shares", "mode", "memory_mib", "max_held"})


@dataclass(frozen=True)
class ShareRule:
    """How one kind of GPU is shared: into ``shares`` parts, each of ``memory_mib`` MiB
    (``None``: the GPU's memory divided equally), in ``mode``; one server holds at most
    ``max_held`` of them (``None``: the mode's default, :attr:`most_held`)."""

    shares: int
    mode: str = "time-slicing"
    memory_mib: int | None = None
    max_held: int | None = None

    def share_memory(self, gpu_memory_mib: int) -> int:
        """MiB of one share on a GPU of ``gpu_memory_mib``."""
        if self.memory_mib is not None:
            return self.memory_mib
        return gpu_memory_mib // self.shares

    def fits(self, gpu_memory_mib: int) -> bool:
        """Whether all the shares together fit the GPU's memory."""
        return self.share_memory(gpu_memory_mib) * self.shares <= gpu_memory_mib

    @property
    def most_held(self) -> int:
        """The most shares one server may hold: ``max_held`` when the admin set it, else 1
        in ``mps`` mode and ``shares - 1`` in the others (all ``N`` is the whole GPU, asked
        for as one). The form's check and the MPS daemon's limits use this: in ``mps``
        mode the daemon's default limits, the only ones a user cannot raise, are this many
        shares, so its default of 1 keeps every client to one share (docs/sharing.md)."""
        if self.max_held is not None:
            return self.max_held
        return 1 if self.mode == "mps" else self.shares - 1


@dataclass(frozen=True)
class Share:
    """``count`` shares held of the ``of`` a GPU is split into, ``memory_mib`` in all."""

    count: int
    of: int
    memory_mib: int
    mode: str

    @property
    def fraction(self) -> float:
        return self.count / self.of

    @property
    def label(self) -> str:
        """``"1/4"``: the container label's value."""
        return f"{self.count}/{self.of}"

    @property
    def thread_percentage(self) -> int:
        """MPS's active thread percentage for the ``count`` shares: ``100 * count / of``
        rounded down (so the shares of one GPU never add up to more than 100 %), at
        least 1 (never 0, which MPS would refuse), at most 100."""
        return min(100, max(1, (100 * self.count) // self.of))


@dataclass(frozen=True)
class SharingPolicy:
    """Rules per GPU model and per node (a node's replaces its models'); ``None`` in
    ``nodes`` turns sharing off on that node."""

    models: Mapping[str, ShareRule] = field(default_factory=dict)
    nodes: Mapping[str, ShareRule | None] = field(default_factory=dict)

    def __hash__(self) -> int:  # the mappings aren't hashable: hash their items
        return hash((tuple(sorted(self.models.items())), tuple(sorted(self.nodes.items()))))

    def rule(self, node: str, model: str) -> ShareRule | None:
        """The rule for a GPU of ``model`` on ``node``, or ``None`` if it is not shared."""
        if node in self.nodes:
            return self.nodes[node]
        return self.models.get(model)

    @property
    def enabled(self) -> bool:
        return any(r is not None for r in (*self.models.values(), *self.nodes.values()))


NO_SHARING = SharingPolicy()


_SHARE_RE = re.compile(r"([1-9][0-9]{0,2})/([1-9][0-9]{0,2})", re.ASCII)


def parse_share(text: object) -> tuple[int, int] | None:
    """``"1/4"`` -> ``(1, 4)``: the one reader of ``K/N`` (the form's choice, a
    container's share label, a saved episode). ``None`` for anything that is not exactly
    ``K/N`` in ASCII digits with no leading zero, at most 3 digits each, ``1 <= K <= N``
    (``"01/4"``, fullwidth or superscript digits, signs, spaces and a trailing newline
    are all refused; then a container is taken to hold its GPU whole: never an
    overcommit)."""
    if not isinstance(text, str) or not (match := _SHARE_RE.fullmatch(text)):
        return None
    count, of = int(match.group(1)), int(match.group(2))
    return (count, of) if count <= of else None


def share_of(rule: ShareRule, count: int, gpu_memory_mib: int) -> Share:
    """The :class:`Share` of ``count`` parts under ``rule`` on a GPU of that memory."""
    return Share(count, rule.shares, count * rule.share_memory(gpu_memory_mib), rule.mode)


def parse_rule(where: str, raw: Any) -> ShareRule | None:
    """One rule from config; ``None`` for ``{"shareable": False}``. ``ConfigError`` says
    what is wrong and how to write it."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}: a sharing rule is a dict such as {{'shares': 4, 'mode': 'mps'}}, got {raw!r}"
        )
    unknown = sorted(set(map(str, raw)) - _RULE_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; a sharing rule takes "
            f"{', '.join(sorted(_RULE_KEYS))}"
        )
    shareable = raw.get("shareable", True)
    if not isinstance(shareable, bool):
        raise ConfigError(f"{where}: shareable must be True or False, got {shareable!r}")
    if not shareable:
        extra = sorted(set(raw) - {"shareable"})
        if extra:
            raise ConfigError(f"{where}: shareable is False, so {', '.join(extra)} mean nothing")
        return None
    mode = raw.get("mode", "time-slicing")
    if mode not in MODES:
        raise ConfigError(f"{where}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    if "shares" not in raw:
        raise ConfigError(f"{where}: say into how many shares the GPU is split ('shares': 4)")
    shares = raw["shares"]
    low = 1 if mode == "mig" else 2
    high = 1 if mode == "mig" else MAX_SHARES
    if isinstance(shares, bool) or not isinstance(shares, int) or not low <= shares <= high:
        hint = "1 (one MIG instance per share)" if mode == "mig" else f"2 to {MAX_SHARES}"
        raise ConfigError(f"{where}: shares must be {hint} in mode {mode!r}, got {shares!r}")
    memory = raw.get("memory_mib")
    if memory is not None and (
        isinstance(memory, bool) or not isinstance(memory, int) or memory < 256
    ):
        raise ConfigError(f"{where}: memory_mib must be a whole number >= 256, got {memory!r}")
    most = raw.get("max_held")
    if most is not None and mode == "mig":
        raise ConfigError(f"{where}: max_held means nothing in mode 'mig' (one instance a share)")
    if most is not None and (
        isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= shares - 1
    ):
        raise ConfigError(
            f"{where}: max_held (the most shares one server may hold) must be 1 to "
            f"{shares - 1} for {shares} shares (all {shares} is a whole GPU), got {most!r}"
        )
    return ShareRule(shares, mode, memory, most)


def parse_policy(models: Mapping[str, Any], nodes: Mapping[str, Any]) -> SharingPolicy:
    """The policy from ``c.GPUSharing.models`` and ``.nodes``; ``ConfigError`` on bad input."""
    parsed_models: dict[str, ShareRule] = {}
    for model, raw in models.items():
        rule = parse_rule(f"GPUSharing.models[{model!r}]", raw)
        if rule is not None:
            parsed_models[str(model)] = rule
    parsed_nodes = {
        str(node): parse_rule(f"GPUSharing.nodes[{node!r}]", raw) for node, raw in nodes.items()
    }
    return SharingPolicy(parsed_models, parsed_nodes)
