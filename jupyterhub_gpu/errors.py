"""The exception tree of jupyterhub-gpu.

::

    GPUHubError                      base of everything raised on purpose here
    ├── ConfigError                  an admin's file or setting is wrong (hub refuses to start)
    │   └── InventoryError           a declared inventory file is wrong
    ├── ProbeError                   a GPU probe (NVML, agent) could not be read
    └── UserFacingError              a user's request can't be served; the message is for them
        ├── InvalidRequest           bad or tampered input (HTTP 400)
        ├── NoCapacity               nothing free fits right now (HTTP 503, with what is free)
        ├── NodeFailure              a node answered, but not as it must (HTTP 503)
        └── UnsafePath               a username or home path would leave the allowed root

User-facing messages say what happened and what to do; they never carry tracebacks,
tokens, DNs or passwords. The spawner turns ``UserFacingError`` into JupyterHub's
``SpawnException`` with the matching status code.
"""

from __future__ import annotations


class GPUHubError(Exception):
    """Base class for errors raised on purpose by jupyterhub-gpu."""


class ConfigError(GPUHubError):
    """An admin-edited file or setting is invalid; the message names the entry and field."""


class InventoryError(ConfigError):
    """A declared GPU inventory is invalid."""


class ProbeError(GPUHubError):
    """A GPU probe could not be read (no driver, NVML failure, agent unreachable)."""


class UserFacingError(GPUHubError):
    """A request that can't be served; ``str(e)`` is shown to the user as is."""

    status_code = 500
    reason = "error"


class InvalidRequest(UserFacingError):
    status_code = 400
    reason = "invalid_request"


class NoCapacity(UserFacingError):
    status_code = 503
    reason = "no_capacity"


class NodeFailure(UserFacingError):
    status_code = 503
    reason = "node_error"


class UnsafePath(UserFacingError):
    status_code = 400
    reason = "unsafe_path"
