"""Authentication glue: LDAP without blocking the hub, OAuth claims, and user identity.

- :mod:`jupyterhub_gpu.auth.identity` (pure, plus two marked I/O helpers): auth_state ->
  :class:`Identity`, per-group policies, safe home mapping under the shared root.
- :mod:`jupyterhub_gpu.auth.ldap`: :class:`GPULDAPAuthenticator` (imports ldapauthenticator;
  import it only where that package is installed).
- :mod:`jupyterhub_gpu.auth.oauth`: identity and groups from OAuth/OIDC claims.
"""

from jupyterhub_gpu.auth.identity import (
    Identity,
    IdentityError,
    ensure_home,
    identity_from_auth_state,
    map_home,
    verify_home_path,
)

__all__ = [
    "Identity",
    "IdentityError",
    "ensure_home",
    "identity_from_auth_state",
    "map_home",
    "verify_home_path",
]
