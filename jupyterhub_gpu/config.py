"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.hub.config`."""

from jupyterhub_gpu.hub.config import check_config

__all__ = ["check_config"]
