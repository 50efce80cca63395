"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.hub.auth.oauth`."""

from jupyterhub_gpu.hub.auth.oauth import make_identity_hook, make_reconcile_hook

__all__ = ["make_identity_hook", "make_reconcile_hook"]
