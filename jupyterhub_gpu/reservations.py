"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.hub.extensions`."""

from jupyterhub_gpu.hub.extensions import configure_reservations as configure

__all__ = ["configure"]
