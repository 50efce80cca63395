"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.hub.spawner`."""

from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

__all__ = ["GPUDockerSpawner"]
