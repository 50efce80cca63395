"""What a user reads when their spawn is refused: one sentence, nothing else.

JupyterHub's ``SpawnException`` prints itself as ``429 SpawnException(reason=gpu_quota):
...`` and JupyterHub shows ``str(exception)`` on the spawn form ("Error: ..."), in the
progress stream's failed event ("Spawn failed: ...") and on the spawn-pending page,
unless the exception carries ``jupyterhub_message`` (and ``jupyterhub_html_message``),
which every one of those uses instead (``jupyterhub.utils.format_exception``). Every
refusal the package raises is made here, so the user reads the sentence alone (what
happened, what to do) and never a class name, a reason code or an HTTP status; the hub's
log keeps the long form (``str(e)``) for the admin, and the metrics the ``reason``.
"""

from __future__ import annotations

import html

from jupyterhub.spawner import SpawnException

from jupyterhub_gpu.errors import UserFacingError


def spawn_refusal(message: str, *, reason: str, status_code: int) -> SpawnException:
    """A ``SpawnException`` whose every rendering for the user is ``message`` alone: the
    JSON ``message`` of the REST answer, the spawn form's error, the progress page's
    failed event (as HTML, without JupyterHub's "Spawn failed:" prefix)."""
    e = SpawnException(message, reason=reason, status_code=status_code)
    e.jupyterhub_message = message
    e.jupyterhub_html_message = html.escape(message, quote=False)
    return e


def spawn_error(e: UserFacingError) -> SpawnException:
    """The refusal for one of the package's :class:`~jupyterhub_gpu.errors.UserFacingError`
    (its sentence, reason and status)."""
    return spawn_refusal(str(e), reason=e.reason, status_code=e.status_code)
