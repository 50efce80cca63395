"""What the gateway writes in its log about a session, and the sentences a user reads.

A session's record holds no secret by construction: no password or token, no command line
(a command may carry one: ``ssh alice@hub 'TOKEN=... job'``), only whether it was a shell
or a command and, for a key, the key's fingerprint (public)."""

from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.core.ssh.logins import Login
from jupyterhub_gpu.core.words import duration


@dataclass(frozen=True)
class SessionRecord:
    """One SSH session: who, from where, how they proved it, which server it reached."""

    login: Login
    peer: str  # "203.0.113.7:51234"
    auth: str  # "publickey SHA256:..." or "token" (never the token)
    node: str
    container: str  # the container's id (12 characters are logged)
    kind: str  # "shell" (with a terminal), "command", "command+pty"


def _who(record: SessionRecord) -> str:
    return (
        f"user={record.login.user} server={record.login.server or '(default)'} "
        f"from={record.peer} auth={record.auth} node={record.node} "
        f"container={record.container[:12]} kind={record.kind}"
    )


def started_line(record: SessionRecord) -> str:
    return f"SSH session started: {_who(record)}"


def ended_line(record: SessionRecord, seconds: float, exit_status: int | None) -> str:
    status = "none" if exit_status is None else str(exit_status)
    return f"SSH session ended: {_who(record)} after {duration(seconds)} exit={status}"


def refused_line(login: str, peer: str, reason: str) -> str:
    """A refused login; ``login`` is the name as typed (bounded: it may be anything)."""
    shown = login if len(login) <= 64 else login[:64] + "..."
    return f"SSH login refused: login={shown!r} from={peer}: {reason}"


def spawn_url(hub_url: str, login: Login) -> str:
    """Where ``login``'s server is started in a browser."""
    base = hub_url.rstrip("/")
    if login.server:
        return f"{base}/hub/spawn/{login.user}/{login.server}"
    return f"{base}/hub/spawn"


def not_running(hub_url: str, login: Login, pending: bool, exists: bool = True) -> str:
    """The one sentence a user reads when her server can't take a session."""
    url = spawn_url(hub_url, login)
    if not exists:
        return f"You have no server named {login.server!r}: create it at {url}, then ssh again."
    which = f"Your server {login.server!r}" if login.server else "Your server"
    if pending:
        return f"{which} is starting or stopping: wait for it at {url}, then ssh again."
    return f"{which} is not running: start it at {url}, then ssh again."


def subsystem_refused(name: str) -> str:
    """The sentence for a subsystem other than ``sftp`` (``name`` is bounded: any bytes)."""
    shown = name if len(name) <= 32 else name[:32] + "..."
    return f"The {shown!r} subsystem is not available through this gateway; sftp is."


def starting_line(with_last_options: bool) -> str:
    """What a session says when the gateway starts her stopped default server."""
    how = "with the options of its last start" if with_last_options else "with the defaults"
    return f"Your server is not running: starting it {how} (Ctrl-C stops waiting)..."


def start_refused(hub_url: str, login: Login, message: str) -> str:
    """Her server could not be started from ssh: the hub's words (bounded), and where to."""
    shown = message.strip().rstrip(".")[:200] or "the hub refused"
    return f"Your server could not be started ({shown}): start it at {spawn_url(hub_url, login)}."


def server_stopped(hub_url: str, login: Login) -> str:
    """The sentence that ends a session whose server stopped under it."""
    which = f"Your server {login.server!r}" if login.server else "Your server"
    return f"{which} stopped, so this session ended: start it again at {spawn_url(hub_url, login)}."


__all__ = [
    "SessionRecord",
    "ended_line",
    "not_running",
    "refused_line",
    "server_stopped",
    "spawn_url",
    "start_refused",
    "started_line",
    "starting_line",
    "subsystem_refused",
]
