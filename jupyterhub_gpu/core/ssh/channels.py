"""What a session or a channel may open, decided over plain data: a ``direct-tcpip``
channel (``ssh -L``) within its bounds (:func:`forward_refusal`), a command that is
legacy scp (:func:`legacy_scp`), and the sentences a user reads about them.

Where a forwarded connection may go is not decided here: it is made from inside the
user's container, so the node firewall and the user bridge decide, as for her notebook."""

from __future__ import annotations

import shlex

#: a DNS name is at most 253 characters; an address literal fewer
MAX_HOST_CHARS = 255
#: ``direct-tcpip`` channels open at once on one connection (VS Code opens a handful)
MAX_FORWARDS = 32
#: sessions (shell, command, sftp) open at once on one connection
MAX_SESSIONS = 10
_HOST_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[]%")

SFTP_SERVER = "/usr/lib/openssh/sftp-server"
SFTP_MISSING = (
    "This server's image has no SFTP server (openssh-sftp-server): ask your administrator "
    "for an image with it, or copy files through JupyterLab."
)
LEGACY_SCP_MISSING = (
    "Legacy scp (scp -O) needs scp in your server's image, which it lacks: run scp "
    "without -O (it copies over SFTP)."
)
REMOTE_FORWARD_REFUSED = (
    "Remote forwarding (ssh -R) is not available through this gateway; use -L instead."
)
TOO_MANY_SESSIONS = f"At most {MAX_SESSIONS} sessions may be open on one connection."


def forward_refusal(
    host: str, port: int, open_now: int, max_open: int = MAX_FORWARDS
) -> str | None:
    """None when a ``direct-tcpip`` channel to ``host:port`` may be tried from inside the
    container, else the reason the client is told (``channel N: open failed: ...``)."""
    if open_now >= max_open:
        return f"at most {max_open} forwarded connections may be open at once"
    if not host or len(host) > MAX_HOST_CHARS or not set(host) <= _HOST_CHARS:
        return "not a host name or address"
    if host.startswith("-"):
        return "not a host name or address"
    if not 0 < port < 65536:
        return "not a port (1-65535)"
    return None


def legacy_scp(command: str) -> bool:
    """Whether ``command`` is what ``scp -O`` runs on the server (``scp -t``/``scp -f``)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if not words or words[0] != "scp":
        return False
    flags = [w for w in words[1:] if w.startswith("-") and not w.startswith("--")]
    return any(("t" in f[1:] or "f" in f[1:]) for f in flags)


def sftp_argv() -> list[str]:
    """The subsystem's process: the image's ``sftp-server``, or the sentence and status 1.
    A login shell execs it, as sshd's does: the image's profile gives the user her name
    (libnss_wrapper), without which sftp-server refuses to start."""
    check = (
        f'test -x {SFTP_SERVER} || {{ printf "%s\\r\\n" "$0" >&2; exit 1; }}; '
        f'exec bash -lc "exec {SFTP_SERVER}"'
    )
    return ["sh", "-c", check, SFTP_MISSING]


def legacy_scp_argv(command: str) -> list[str]:
    """``scp -t``/``-f`` run as sshd runs it, or the sentence when the image has no scp."""
    check = (
        'command -v scp >/dev/null 2>&1 || { printf "%s\\n" "$0" >&2; exit 1; }; exec bash -lc "$1"'
    )
    return ["sh", "-c", check, LEGACY_SCP_MISSING, command]


__all__ = [
    "LEGACY_SCP_MISSING",
    "MAX_FORWARDS",
    "MAX_HOST_CHARS",
    "MAX_SESSIONS",
    "REMOTE_FORWARD_REFUSED",
    "SFTP_MISSING",
    "SFTP_SERVER",
    "TOO_MANY_SESSIONS",
    "forward_refusal",
    "legacy_scp",
    "legacy_scp_argv",
    "sftp_argv",
]
