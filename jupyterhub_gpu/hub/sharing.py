"""``c.GPUSharing``: which GPUs may be shared between servers (issue 26, docs/sharing.md).

The settings are plain dicts, parsed and checked by the pure
:func:`~jupyterhub_gpu.core.sharing.parse_policy` when the hub builds its cluster (a
typo is a ``ConfigError`` at start, never a user's failed spawn).
"""

from __future__ import annotations

from typing import Any

from traitlets import Dict, Unicode, validate
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.core.sharing import SharingPolicy, parse_policy
from jupyterhub_gpu.core.sharing.mps import (
    DEFAULT_PIPE_DIRECTORY,
    DEFAULT_SHM_DIRECTORY,
    MpsPaths,
    check_directory,
    mps_paths,
)
from jupyterhub_gpu.core.sharing.policy import parse_rule


class GPUSharing(LoggingConfigurable):
    """Fractional GPUs: a server may hold a share of one GPU (``"1/4"``)."""

    models = Dict(
        config=True,
        help="""GPU model name (as the probe reports it) -> how it is shared.

        Each rule is a dict: ``shares`` (2 to 16; 1 in mode ``mig``), ``mode``
        (``time-slicing``, the default; ``mps``; ``mig``), ``memory_mib`` (per share;
        default the GPU's memory divided equally; all the shares must fit the card, else
        the rule is not used on it), ``max_held`` (the most shares one server may hold:
        1 to ``shares - 1``; default 1 in mode ``mps``, whose node daemon's limits must
        then be that many shares, and ``shares - 1`` in the others), or
        ``{"shareable": False}``. A model not listed is
        never shared. Default: ``{}`` (no sharing). Example::

            c.GPUSharing.models = {
                "NVIDIA GeForce RTX 3090": {"shares": 4, "mode": "mps"},
            }
        """,
    )
    nodes = Dict(
        config=True,
        help="""Node name -> a rule that replaces its models' rules for every GPU of the
        node (same keys as ``models``). Default: ``{}``. Example: turn sharing off on one
        node: ``c.GPUSharing.nodes = {"gpu-03": {"shareable": False}}``.
        """,
    )

    mps_pipe_directory = Unicode(
        DEFAULT_PIPE_DIRECTORY,
        config=True,
        help="""The MPS control daemon's pipe directory on every node
        (``CUDA_MPS_PIPE_DIRECTORY`` of the daemon, as the unit in docs/sharing.md sets it).
        A share container of a GPU in mode ``mps`` gets it mounted at the same path, and
        ``CUDA_MPS_PIPE_DIRECTORY`` set to it by the spawner (last, never from the user's
        options); every other server gets ``CUDA_MPS_PIPE_DIRECTORY`` naming a directory
        that does not exist. ``check-node --local`` checks the daemon there (docs/sharing.md).
        An absolute path of its own: never ``/``, ``/tmp``, ``/dev/shm`` or ``/run``, and
        never NVIDIA's default ``/tmp/nvidia-mps`` (or below it), which the NVIDIA
        Container Toolkit mounts into every GPU container and libcuda uses by default.
        Default: ``"/run/jupyterhub-gpu/mps"``.
        """,
    )
    mps_shm_directory = Unicode(
        DEFAULT_SHM_DIRECTORY,
        config=True,
        help="""A tmpfs of its own on every node that the MPS control daemon uses as its
        ``/dev/shm`` (MPS clients and their server share memory there: NVIDIA's device
        plugin gives clients the daemon's ``/dev/shm`` the same way). A share container of
        a GPU in mode ``mps`` gets it as its ``/dev/shm``; the host's own ``/dev/shm`` and
        IPC namespace are never given to a container. The daemon unit in docs/sharing.md
        mounts it. Default: ``"/run/jupyterhub-gpu/mps-shm"``.
        """,
    )

    @validate("mps_pipe_directory", "mps_shm_directory")
    def _check_directory(self, proposal: Any) -> str:
        return check_directory(f"GPUSharing.{proposal['trait'].name}", proposal["value"])

    @validate("models")
    def _check_models(self, proposal: Any) -> dict[str, Any]:
        for model, raw in proposal["value"].items():
            parse_rule(f"GPUSharing.models[{model!r}]", raw)
        return dict(proposal["value"])

    @validate("nodes")
    def _check_nodes(self, proposal: Any) -> dict[str, Any]:
        for node, raw in proposal["value"].items():
            parse_rule(f"GPUSharing.nodes[{node!r}]", raw)
        return dict(proposal["value"])

    @property
    def policy(self) -> SharingPolicy:
        return parse_policy(self.models, self.nodes)

    @property
    def mps(self) -> MpsPaths:
        """Where share containers of ``mps`` GPUs reach the node's MPS daemon."""
        return mps_paths(self.mps_pipe_directory, self.mps_shm_directory)
