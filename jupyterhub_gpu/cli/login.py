"""``jupyterhub-gpu login``: remember the hub's address and a token from its token page,
for ``jupyterhub-gpu job`` on a laptop (docs/jobs.md). Standard library only (the base
install).

It asks the hub's address and the token (not echoed), checks them with the hub (``GET
/hub/api/user``: whose token it is), and only then stores them in
``$XDG_CONFIG_HOME/jupyterhub-gpu/login.json`` (default ``~/.config/jupyterhub-gpu/``),
the folder mode 0700 and the file 0600 (from its creation). Bad input or a
refused token: one sentence (``SystemExit``, as the other commands), nothing stored.
``job`` uses them when the environment has no ``JUPYTERHUB_API_TOKEN``; ``login
--forget`` removes them.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

FILE_NAME = "login.json"
MAX_TOKEN = 256
MAX_URL = 2048
TIMEOUT_S = 30.0
_TOKEN = re.compile(r"[A-Za-z0-9_\-.:]+")


@dataclass(frozen=True)
class Login:
    url: str  # the hub's address, like https://hub.example.org (no /hub/ at the end)
    token: str

    @property
    def api(self) -> str:
        return f"{self.url}/hub/api"


def config_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "~", ".config")
    return Path(os.path.expanduser(base)) / "jupyterhub-gpu"


def hub_url(text: str) -> str:
    """The hub's address as people paste it (``hub.example.org``, ``https://hub/hub/home``)
    made ``https://hub.example.org``; a bad one is one sentence."""
    raw = text.strip()
    if not raw or len(raw) > MAX_URL or any(c.isspace() for c in raw):
        raise SystemExit("Give the hub's address, like https://hub.example.org.")
    if "://" not in raw:
        raw = "https://" + raw
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit("Give the hub's address, like https://hub.example.org.")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise SystemExit("Give the hub's address alone, without a query or a password.")
    path = parts.path.rstrip("/")
    hub_at = path.find("/hub")
    if hub_at >= 0 and (len(path) == hub_at + 4 or path[hub_at + 4] == "/"):
        path = path[:hub_at]  # .../hub/token, .../hub/home: the hub is above /hub
    return f"{parts.scheme}://{parts.netloc}{path}"


def clean_token(text: str) -> str:
    token = text.strip()
    if not token:
        raise SystemExit("Paste a token from the hub's token page (/hub/token).")
    if len(token) > MAX_TOKEN or not _TOKEN.fullmatch(token):
        raise SystemExit("That is not a hub token; copy it again from the hub's token page.")
    return token


def save(login: Login, folder: Path) -> Path:
    """Store ``login`` in ``folder``/login.json (folder 0700, file 0600)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / FILE_NAME
    body = json.dumps({"url": login.url, "token": login.token}) + "\n"
    # made 0600 from the start (never readable by others, not even for a moment); not
    # through edges/files' atomic writer, which needs the hub's install
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(body)
    return path


def load(folder: Path) -> Login | None:
    """The stored login, or None when there is none (or it is not ours to read)."""
    try:
        raw = json.loads((folder / FILE_NAME).read_text())
        return Login(hub_url(str(raw["url"])), clean_token(str(raw["token"])))
    except (OSError, ValueError, KeyError, TypeError, SystemExit):
        return None


def whose(login: Login) -> str:
    """The name of the token's owner, asked of the hub; a refusal is one sentence."""
    request = urllib.request.Request(
        f"{login.api}/user", headers={"Authorization": f"token {login.token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as r:
            body = json.loads(r.read(64 * 1024) or b"{}")
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise SystemExit(
                "The hub refused this token; make a new one on its token page (/hub/token)."
            ) from None
        raise SystemExit(f"The hub answered HTTP {e.code}; check its address.") from None
    except (urllib.error.URLError, OSError, ValueError):
        raise SystemExit(f"No hub answered at {login.url}; check its address.") from None
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name:
        raise SystemExit(f"No hub answered at {login.url}; check its address.")
    return name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu login",
        description="Remember the hub's address and a token of its token page, for "
        "jupyterhub-gpu job.",
    )
    p.add_argument("--hub", help="the hub's address (asked when not given)")
    p.add_argument("--forget", action="store_true", help="remove the stored login")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    folder = config_dir()
    if args.forget:
        (folder / FILE_NAME).unlink(missing_ok=True)
        print("The stored login is removed.")
        return 0
    url = hub_url(args.hub if args.hub else input("The hub's address: "))
    token = clean_token(getpass.getpass(f"A token from {url}/hub/token: "))
    login = Login(url, token)
    name = whose(login)
    path = save(login, folder)
    print(f"Logged in to {url} as {name}; stored in {path} (only you can read it).")
    return 0
