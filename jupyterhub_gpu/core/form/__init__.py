"""The spawn form: resource bounds, validation of spawn options, and rendering. Pure.

- :mod:`.resources`: admin defaults and per-group bounds -> a user's :class:`UserBounds`,
  Docker limits (CPU, memory, ``/dev/shm``, pids).
- :mod:`.quota`: how many GPUs a user may hold at once over all their servers.
- :mod:`.availability`: free/total GPUs per model ("RTX 3090: 2 of 4 free").
- :mod:`.validation`: form/API options -> :class:`SpawnOptions` or ``InvalidRequest``.
- :mod:`.render`: the Jinja template ``templates/spawn_form.html``.
"""

from jupyterhub_gpu.core.form.availability import (
    ModelAvailability,
    gpu_model_availability,
    short_model_name,
)
from jupyterhub_gpu.core.form.render import (
    initial_choices,
    render_form,
    spawn_form_html,
    visible_entries,
)
from jupyterhub_gpu.core.form.resources import (
    GroupBounds,
    ResourceLimits,
    ResourcePolicy,
    UserBounds,
    policy_from_config,
    resolve_bounds,
    resource_limits,
)
from jupyterhub_gpu.core.form.user_quota import (
    GPUQuotaExceeded,
    Holdings,
    UserQuota,
    holdings_of,
    quota_refusal,
)
from jupyterhub_gpu.core.form.validation import (
    OPTION_FIELDS,
    SpawnOptions,
    options_from_form,
    placement_request,
    resolve_entry,
    validate_options,
)

__all__ = [
    "OPTION_FIELDS",
    "GPUQuotaExceeded",
    "GroupBounds",
    "Holdings",
    "ModelAvailability",
    "ResourceLimits",
    "ResourcePolicy",
    "SpawnOptions",
    "UserBounds",
    "UserQuota",
    "gpu_model_availability",
    "holdings_of",
    "initial_choices",
    "options_from_form",
    "placement_request",
    "policy_from_config",
    "quota_refusal",
    "render_form",
    "resolve_bounds",
    "resolve_entry",
    "resource_limits",
    "short_model_name",
    "spawn_form_html",
    "validate_options",
    "visible_entries",
]
