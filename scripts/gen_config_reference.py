"""Write docs/config-reference.md from the help of every configurable trait we define.

.venv/bin/python scripts/gen_config_reference.py        # rewrite the file
.venv/bin/python scripts/gen_config_reference.py --check  # fail if it is stale
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

from traitlets import HasTraits

from jupyterhub_gpu.edges.agents import AgentClient
from jupyterhub_gpu.hub.auth.ldap import GPULDAPAuthenticator
from jupyterhub_gpu.hub.cluster_settings import GPUCluster
from jupyterhub_gpu.hub.jobs import GPUJobs
from jupyterhub_gpu.hub.prepull import PrePuller
from jupyterhub_gpu.hub.saved_images import SavedImages
from jupyterhub_gpu.hub.sharing import GPUSharing
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner
from jupyterhub_gpu.services.agent.app import GPUAgent
from jupyterhub_gpu.services.culler.app import GPUIdleCuller
from jupyterhub_gpu.services.dashboard.app import GPUDashboard

OUT = Path(__file__).resolve().parents[1] / "docs" / "config-reference.md"
CLASSES: list[type[HasTraits]] = [
    GPUDockerSpawner,
    GPUCluster,
    GPULDAPAuthenticator,
    AgentClient,
    GPUIdleCuller,
    GPUDashboard,
    GPUAgent,
    SavedImages,
    PrePuller,
    GPUSharing,
    GPUJobs,
]


def ours(cls: type[HasTraits], name: str) -> bool:
    """Whether trait ``name`` is defined by ``cls`` or by a class of this package it
    extends (GPUDockerSpawner's QueueingSpawnerMixin), not by an upstream base."""
    mine = [c for c in cls.__mro__ if c.__module__.partition(".")[0] == "jupyterhub_gpu"]
    return any(name in c.__dict__ for c in mine)


def section(cls: type[HasTraits]) -> str:
    lines = [f"## {cls.__name__}", "", inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0], ""]
    own = {k: t for k, t in cls.class_traits(config=True).items() if ours(cls, k)}
    for name, trait in sorted(own.items()):
        value = trait.default_value
        named = callable(value) and hasattr(value, "__qualname__")  # not its address
        default = (
            f"{value.__module__}.{value.__qualname__}" if named else trait.default_value_repr()
        )
        lines += [
            f"### `c.{cls.__name__}.{name}`",
            "",
            f"{type(trait).__name__}, default `{default}`",
            "",
            inspect.cleandoc(trait.help or "(no help)"),
            "",
        ]
    return "\n".join(lines)


def render() -> str:
    head = (
        "# Configuration reference\n\nGenerated from the traits' help by "
        "`scripts/gen_config_reference.py`; do not edit by hand.\n\n"
    )
    return head + "\n".join(section(c) for c in CLASSES)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run scripts/gen_config_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
