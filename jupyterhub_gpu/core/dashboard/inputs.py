"""What the dashboard accepts from a request, checked (pure). One module for the hub's API
and the service's actions, so both refuse the same things with the same sentences."""

from __future__ import annotations

from collections.abc import Collection

from jupyterhub_gpu.errors import BadInput

MAX_NOTE = 500
MAX_NAME = 255


def _shown(text: str) -> str:
    """A short, printable rendering of untrusted text for an error sentence."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[:40])
    return repr(clean + ("..." if len(text) > 40 else ""))


def clean_note(value: object) -> str:
    """An admin's note (to a server's owner, or about a drained node): stripped, at most
    :data:`MAX_NOTE` characters, no control characters but newlines."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadInput("The note must be text.")
    note = value.replace("\r\n", "\n").strip()
    if len(note) > MAX_NOTE:
        raise BadInput(f"The note is {len(note)} characters long; keep it to {MAX_NOTE}.")
    if any(not ch.isprintable() and ch != "\n" for ch in note):
        raise BadInput("The note has control characters; write plain text.")
    return note


def known_node(value: object, nodes: Collection[str]) -> str:
    """``value`` if it names one of ``nodes``; forged or mistyped names are refused (404)."""
    if not isinstance(value, str) or not value:
        raise BadInput("Say which node: the form's 'node' field is missing.")
    if value not in nodes:
        raise BadInput(
            f"There is no node {_shown(value)} in the cluster; reload the dashboard and use "
            "its buttons.",
            status=404,
        )
    return value


def user_and_server(user: object, server: object) -> tuple[str, str]:
    """A user name and a server name ("" for the default server) fit for a hub API path."""
    if not isinstance(user, str) or not user or len(user) > MAX_NAME:
        raise BadInput("Say whose server: the form's 'user' field is missing or too long.")
    if not isinstance(server, str) or len(server) > MAX_NAME or "/" in server:
        raise BadInput("The server name is not valid; reload the dashboard and use its buttons.")
    if any(not ch.isprintable() for ch in user + server):
        raise BadInput("User and server names have no control characters.")
    return user, server
