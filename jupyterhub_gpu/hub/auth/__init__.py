"""The authenticators, run inside the hub: LDAP without blocking the event loop
(:mod:`.ldap`) and identity from OAuth/OIDC claims (:mod:`.oauth`). Both fill the
``auth_state`` that :mod:`jupyterhub_gpu.core.identity` reads."""
