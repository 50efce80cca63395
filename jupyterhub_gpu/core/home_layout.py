"""Where a user's home is (pure): on the hub's shared filesystem and in the container,
from the spawner's ``home_*`` settings and the user's identity."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jupyterhub_gpu.core import homes
from jupyterhub_gpu.core.identity import Identity, map_home


@dataclass(frozen=True)
class HomeLayout:
    """``GPUDockerSpawner.home_template``, ``home_from_directory``,
    ``home_directory_prefix`` and ``home_container_path``."""

    template: str
    from_directory: bool = True
    directory_prefix: str = "/home"
    container_path: str = "/home/{username}"

    def host(self, ident: Identity) -> Path | None:
        """The user's home on the shared filesystem (None without a template); refuses
        anything leaving the template's root (``UnsafePath``)."""
        if not self.template:
            return None
        root = homes.template_root(self.template)
        if self.from_directory and ident.home_directory:
            return map_home(
                ident.home_directory, ident.username, root, home_prefix=self.directory_prefix
            )
        return Path(homes.home_host_path(self.template, ident.username))

    def in_container(self, username: str) -> str:
        """Where the home is mounted in the container."""
        return self.container_path.format(username=homes.safe_path_component(username))


__all__ = ["HomeLayout"]
