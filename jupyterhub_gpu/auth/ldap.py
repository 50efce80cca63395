"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.hub.auth.ldap`."""

from jupyterhub_gpu.hub.auth.ldap import GPULDAPAuthenticator

__all__ = ["GPULDAPAuthenticator"]
