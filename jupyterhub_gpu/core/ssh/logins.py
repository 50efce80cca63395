"""What an SSH login name names: ``alice`` is alice's default server, ``alice.NAME`` her
server NAME.

A user name may itself hold dots (``jane.doe``), so a login is read as every way it can be
split, the whole name (a default server) first, then at each dot from the right (the
longest user name first); the gateway takes the first whose user exists
(:func:`login_candidates`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from jupyterhub_gpu.errors import BadInput

#: what an SSH login may hold: JupyterHub's usual user names and server names, a dot between
_LOGIN_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,127}$")


@dataclass(frozen=True)
class Login:
    """A user and one of her servers ("" is the default server)."""

    user: str
    server: str = ""

    @property
    def label(self) -> str:
        """``alice`` or ``alice/NAME``, as logs and messages name a server."""
        return f"{self.user}/{self.server}" if self.server else self.user


def login_candidates(login: str) -> list[Login]:
    """Every reading of ``login``, the likeliest first; :class:`BadInput` for a name no
    user could have (empty, too long, a character outside ``A-Z a-z 0-9 _ . @ + -``, or a
    dot at either end)."""
    if not _LOGIN_RE.match(login) or login.endswith(".") or ".." in login:
        raise BadInput(
            "That login is not a user name: use your hub user name, or USER.SERVER for "
            "a named server."
        )
    out = [Login(login)]
    at = len(login)
    while (at := login.rfind(".", 0, at)) > 0:
        out.append(Login(login[:at], login[at + 1 :]))
    return out


__all__ = ["Login", "login_candidates"]
