"""The exception tree of jupyterhub-gpu: every exception class of the package is here.

The modules that raise a class import it from here (and so still export it). Each line
says when the class is raised and who reads its message: *user* (the spawn page, or the
answer to their own request, as is), *admin* (an admin's page, API answer, command or
the log), *asker* (whoever made the request), *nobody* (caught inside the package and
turned into another error). A builtin base in brackets is kept for code that catches it.

::

    GPUHubError                       base of everything raised on purpose here
    ├── ConfigError                   admin: a file or setting is wrong; the hub won't start
    │   └── InventoryError            admin: a declared inventory file is wrong
    ├── ProbeError                    admin: a GPU probe (NVML, agent) could not be read
    ├── NodeError                     admin: a call to a node's engine failed (``node``; log)
    │   ├── NodeUnreachable           admin: the engine did not answer (connection, TLS)
    │   │   └── NodeTimedOut [TimeoutError]  admin: no answer in the call's time
    │   └── NodeRefused               admin: it answered with an error (``status_code``)
    │       └── NotOnNode             nobody: no such container, image or network (404)
    ├── AccountingUnavailable         admin: the accounting database can't be used
    ├── ReportError [ValueError]      asker: bad usage-report arguments (CLI, HTTP 400)
    ├── BadReservation [ValueError]   admin: not a reservation body (HTTP 400)
    ├── BadInput [ValueError]         admin: dashboard input refused (``status``: 400, 404)
    ├── HubError                      admin: a dashboard call to the hub failed (``status``)
    ├── BadPayload [ValueError]       nobody: a malformed cluster payload; becomes HubError
    ├── UnknownGPU [LookupError]      admin: a live update names no GPU of the node (404)
    ├── ShareLabelError [ValueError]  admin: a share's labels or state are malformed (log)
    ├── ComputeModeError [ValueError]  nobody: bad nvidia-smi modes; a failed check
    ├── MustQueue                     user: nothing fits now, the spawn waits; ``reason`` shown
    ├── QueueFull                     user: too many of their spawns wait already (HTTP 429)
    ├── QueueTimeout                  user: the wait ran out (HTTP 503, reworded, ``where``)
    ├── QueueRefused                  user: the request can never start (HTTP 503)
    ├── _BadNumber [ValueError]       nobody: a bad agent number; becomes ProbeError
    ├── _StreamError                  nobody: a pull stream error; becomes ImageUnavailable
    ├── _MailLoginFailed              nobody: the SMTP login refused; a culler log line
    ├── PullYielded                   nobody: a pre-pull stopped for a spawn's pull; retried
    ├── ExecFailed                    admin: the SSH gateway's docker exec failed (log)
    ├── KeysRefused                   admin: a user's authorized_keys can't be trusted (log)
    ├── SuspendFailed                 admin: a checkpoint or restore failed (the reason; 503)
    │   └── SuspendRefused            admin: the hub will not suspend that server (409; stopped)
    └── UserFacingError               user: a request can't be served; message shown as is
        ├── InvalidRequest            user: bad or tampered input (HTTP 400)
        ├── NoCapacity                user: nothing free fits now (HTTP 503, says what is free)
        ├── NodeFailure               user: a node answered, but not as it must (HTTP 503)
        ├── UnsafePath                user: a username or home path leaves the root (HTTP 400)
        ├── NameTooLong               user: a name made from theirs is too long (HTTP 400)
        ├── IdentityError             user: no usable POSIX identity (HTTP 403, login page)
        ├── GPUQuotaExceeded          user: they hold all the GPUs they may (HTTP 429)
        ├── ImageUnavailable          user: the node could not pull the image (HTTP 503)
        └── SaveError                 user: saving an environment failed (HTTP 500)
            ├── InvalidPackage        user: a package that can't be captured, or none (400)
            ├── LimitReached          user: their count, size or name limit (HTTP 403)
            ├── FetchFailed           user: pip could not fetch a package (HTTP 502)
            ├── BuildFailed           user: building or pushing the image failed (HTTP 502)
            ├── RegistryError         user: the registry would not delete (HTTP 502)
            ├── SavingOff             user: saving is not set up on this hub (HTTP 503)
            ├── SaveBusy              user: a save of theirs is still running (HTTP 409)
            ├── StoreDown             user: the saved-images database is down (HTTP 503)
            ├── NotYourGroup          user: sharing with a group not theirs (HTTP 400)
            └── NotFound              user: they have no saved image of that name (HTTP 404)

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


class NodeError(GPUHubError):
    """A call to a node's Docker engine failed. Raised only by
    :func:`jupyterhub_gpu.edges.node_errors.node_error`, the one place where docker-py's,
    requests' and the OS's exceptions become ours (httpx's ``_exceptions.py`` is the
    model); the third-party exception is its ``__cause__``. Never read as "the server is
    gone": only :class:`NotOnNode` says that something is not there."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(message)
        self.node = node


class NodeUnreachable(NodeError):
    """The node's engine did not answer (refused connection, TLS failure, broken socket):
    it says nothing about what runs there."""


class NodeTimedOut(NodeUnreachable, TimeoutError):
    """The node's engine did not answer within the call's time."""


class NodeRefused(NodeError):
    """The node's engine answered, with an error; ``status_code`` is its HTTP status
    (None when unknown) and ``explanation`` its own words (someone else's text: log it
    through ``core.words.one_line``)."""

    def __init__(
        self, node: str, message: str, status_code: int | None = None, explanation: str = ""
    ) -> None:
        super().__init__(node, message)
        self.status_code = status_code
        self.explanation = explanation or message


class NotOnNode(NodeRefused):
    """The engine has no such container, image or network (HTTP 404)."""


class AccountingUnavailable(GPUHubError):
    """The accounting database can't be reached or used; the message names it without its
    password and says what to check."""


class ReportError(GPUHubError, ValueError):
    """Bad report arguments; the message says what to change."""


class BadReservation(GPUHubError, ValueError):
    """A request body that is not a reservation; the message says what to fix."""


class BadInput(GPUHubError, ValueError):
    """Input the dashboard refuses; the message says what to change (400, or 404 for a
    name that does not exist)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class HubError(GPUHubError):
    """A hub call that failed; ``str()`` is a sentence for people, ``status`` the HTTP
    status to answer with."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


class BadPayload(GPUHubError, ValueError):
    """The hub's cluster payload is not what :func:`~.wire.cluster.decode_payload` reads;
    the message names the field (``nodes[0].gpus[1].status``)."""


class UnknownGPU(GPUHubError, LookupError):
    """A live update names a GPU this node does not have."""


class ShareLabelError(GPUHubError, ValueError):
    """A container's share labels (or a server's share in its spawner state) are malformed;
    the message names the label and the form it must have. The server is then judged as a
    whole GPU."""


class MustQueue(GPUHubError):
    """Nothing fits now (or others wait first): the spawn joins the queue; ``reason`` says
    why in a sentence."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class QueueTimeout(GPUHubError):
    """The wait ran out before GPUs freed up; ``where`` is the last position sentence."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


class QueueFull(GPUHubError):
    """The user already has ``max_per_user`` spawns waiting."""


class QueueRefused(GPUHubError):
    """The request can never start (more GPUs than any node has, a quota's maximum)."""


class ComputeModeError(GPUHubError, ValueError):
    """nvidia-smi's compute-mode answer is not the ``uuid, mode`` lines asked for; the
    message says which line. ``check-node --local`` turns it into a failed check."""


class _BadNumber(GPUHubError, ValueError):
    pass


class _StreamError(GPUHubError):
    """An error reported inside a ``docker pull`` event stream."""


class _MailLoginFailed(GPUHubError):
    """The SMTP server refused the culler's login, or hung up on it (edges/mail.py turns
    it into one log line naming the user, never the password)."""


class PullYielded(GPUHubError):
    """The pre-puller's pull stopped because a spawn started pulling on that node; it is
    tried again at a later round."""


class ExecFailed(GPUHubError):
    """The engine could not run an SSH session's process; the message says what happened."""


class KeysRefused(GPUHubError):
    """The user's authorized_keys can't be trusted or read; the message says why (for the
    gateway's log, never for the client)."""


class SuspendFailed(GPUHubError):
    """A container could not be checkpointed or restored (edges/suspend.py); the message
    says why (the engine's reason). The suspend API answers 503 with it."""


class SuspendRefused(SuspendFailed):
    """The hub will not suspend a server (suspend is off, its node's engine has no
    checkpoints, it holds too much memory, it is not running): the suspend API answers
    409 with the sentence, and the culler stops the server instead."""


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


class NameTooLong(UserFacingError):
    """A container name or path made from the user's or server's name is too long."""

    status_code = 400
    reason = "name_too_long"


class IdentityError(UserFacingError):
    """The account has no usable POSIX identity (no uid, root, a system uid).

    The message is shown to the user on the login page; it names the problem and says
    that an administrator must fix the account.
    """

    status_code = 403
    reason = "no_identity"


class GPUQuotaExceeded(UserFacingError):
    """The user already holds as many GPUs as their bounds allow (HTTP 429)."""

    status_code = 429
    reason = "gpu_quota"


class ImageUnavailable(UserFacingError):
    """The node could not get the image; the message names the image, node and cause.
    ``cause``: what went wrong, for the code that reacts to it (``jupyterhub_gpu.core.
    progress``: ``missing``, ``registry``, ``disk``, ``other``; ``stalled``, ``timeout``)."""

    status_code = 503
    reason = "image"

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


class SaveError(UserFacingError):
    """Saving an environment failed; ``str(e)`` says why and what to do."""

    status_code = 500
    reason = "save_failed"


class InvalidPackage(SaveError):
    status_code = 400
    reason = "invalid_package"


class LimitReached(SaveError):
    status_code = 403
    reason = "image_limit"


class FetchFailed(SaveError):
    status_code = 502
    reason = "fetch_failed"


class BuildFailed(SaveError):
    status_code = 502
    reason = "build_failed"


class RegistryError(SaveError):
    status_code = 502
    reason = "registry"


class SavingOff(SaveError):
    status_code = 503
    reason = "saving_off"


class SaveBusy(SaveError):
    status_code = 409
    reason = "save_running"


class StoreDown(SaveError):
    status_code = 503
    reason = "database"


class NotYourGroup(SaveError):
    status_code = 400
    reason = "not_your_group"


class NotFound(SaveError):
    status_code = 404
    reason = "not_found"
