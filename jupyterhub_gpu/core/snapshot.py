"""The whole cluster at one instant, as placement and the queue read it (pure): each
node's state (:mod:`.inventory`), the GPUs the hub's ledger holds, whole or in shares, and
the admin's sharing policy (:mod:`.sharing.policy`).

It sits above both: :mod:`.inventory` is plain node data that :mod:`.sharing` reads, so
the snapshot, which needs the policy, cannot live there (no circle between core's parts,
``tests/unit/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.sharing.policy import NO_SHARING, SharingPolicy


@dataclass(frozen=True)
class ClusterSnapshot:
    """The whole cluster at one instant.

    ``allocations`` maps GPU uuid -> holder (an opaque id such as ``"alice/"``) for
    every GPU the hub's ledger has handed out; ``our_containers`` holds the ids of
    containers the hub started, so a GPU process in any other container is foreign.

    A GPU held by shares (issue 26) is in ``allocations`` as :data:`SHARED` (taken for
    every whole request) and in ``shares``: uuid -> the parts held on it. ``sharing`` is
    the admin's policy (which GPUs may be shared, into how many parts).
    """

    nodes: tuple[NodeState, ...]
    allocations: Mapping[str, str] = field(default_factory=dict)
    our_containers: frozenset[str] = frozenset()
    shares: Mapping[str, int] = field(default_factory=dict)
    sharing: SharingPolicy = NO_SHARING


SHARED = "shared:"  # the holder of a GPU held by shares in ``ClusterSnapshot.allocations``
