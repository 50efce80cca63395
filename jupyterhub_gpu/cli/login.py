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

A hub whose certificate the site's own CA signed (``hub install`` makes one: docs/install.md)
is trusted once that CA is: imported into the system's store, or given with ``login --ca
FILE`` (a copy is stored beside the login, 0600, and trusted besides the system's store
for this hub only). A certificate this machine does not trust is said in one sentence
with that command, never as "no hub answered".
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import ssl
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

FILE_NAME = "login.json"
CA_NAME = "hub-ca.pem"
MAX_CA = 64 * 1024  # a CA bundle of a few certificates
MAX_TOKEN = 256
MAX_URL = 2048
TIMEOUT_S = 30.0
_TOKEN = re.compile(r"[A-Za-z0-9_\-.:]+")


@dataclass(frozen=True)
class Login:
    url: str  # the hub's address, like https://hub.example.org (no /hub/ at the end)
    token: str
    ca: str = ""  # a CA file trusted for this hub besides the system's store ("" none)

    @property
    def api(self) -> str:
        return f"{self.url}/hub/api"

    def context(self) -> ssl.SSLContext:
        """TLS for this hub: the system's store, and ``ca`` when given."""
        context = ssl.create_default_context()
        if self.ca:
            try:
                context.load_verify_locations(cafile=self.ca)
            except (OSError, ssl.SSLError):
                raise SystemExit(
                    f"The hub's CA file {self.ca} can't be read; run jupyterhub-gpu login "
                    "--ca FILE again with the site's CA certificate."
                ) from None
        return context


#: OpenSSL's verify codes that a CA file does not mend (X509_V_ERR_*)
CERT_EXPIRED, HOSTNAME_MISMATCH, IP_MISMATCH = 10, 62, 64


def untrusted(url: str, error: BaseException | None = None) -> str:
    """The sentence for a hub whose certificate this machine does not trust."""
    code = getattr(getattr(error, "reason", error), "verify_code", None)
    if code == CERT_EXPIRED:
        return (
            f"The hub at {url} has a certificate that has expired; tell your admin "
            "(jupyterhub-gpu certs renew public renews it)."
        )
    if code in (HOSTNAME_MISMATCH, IP_MISMATCH):
        return (
            f"The hub's certificate is not for the address {url}; use the address your "
            "admin gave you (the name in the certificate)."
        )
    return (
        f"The hub at {url} has a certificate this machine does not trust. If your site "
        "made it, ask your admin for the site's CA certificate (ca.pem) and run "
        "jupyterhub-gpu login --ca ca.pem."
    )


def is_untrusted(error: BaseException) -> bool:
    """Whether a request failed on the hub's certificate (not on the network)."""
    reason = getattr(error, "reason", error)
    return isinstance(reason, ssl.SSLCertVerificationError)


def read_ca(path: str) -> bytes:
    """A CA file as given to ``login --ca`` (PEM certificates, bounded); one sentence
    when it is not one."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CA + 1)
    except OSError:
        raise SystemExit(f"No file {path}: give the site's CA certificate (ca.pem).") from None
    if len(data) > MAX_CA or b"-----BEGIN CERTIFICATE-----" not in data:
        raise SystemExit(f"{path} is not a CA certificate (PEM); give the site's ca.pem.")
    try:
        ssl.create_default_context(cadata=data.decode("ascii"))
    except (ssl.SSLError, ValueError, UnicodeDecodeError):
        raise SystemExit(f"{path} is not a CA certificate (PEM); give the site's ca.pem.") from None
    return data


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


def _write_private(path: Path, data: bytes) -> None:
    # made 0600 from the start (never readable by others, not even for a moment); not
    # through edges/files' atomic writer, which needs the hub's install
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)


def save(login: Login, folder: Path, ca: bytes = b"") -> Path:
    """Store ``login`` in ``folder``/login.json (folder 0700, file 0600), and ``ca`` (a
    CA file's bytes, trusted for this hub) beside it."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / FILE_NAME
    body: dict[str, str] = {"url": login.url, "token": login.token}
    if ca:
        _write_private(folder / CA_NAME, ca)
        body["ca"] = str(folder / CA_NAME)
    else:
        (folder / CA_NAME).unlink(missing_ok=True)
    _write_private(path, (json.dumps(body) + "\n").encode())
    return path


def load(folder: Path) -> Login | None:
    """The stored login, or None when there is none (or it is not ours to read)."""
    try:
        raw = json.loads((folder / FILE_NAME).read_text())
        ca = str(raw.get("ca") or "")
        return Login(hub_url(str(raw["url"])), clean_token(str(raw["token"])), ca)
    except (OSError, ValueError, KeyError, TypeError, SystemExit):
        return None


def whose(login: Login) -> str:
    """The name of the token's owner, asked of the hub; a refusal is one sentence."""
    request = urllib.request.Request(
        f"{login.api}/user", headers={"Authorization": f"token {login.token}"}
    )
    context = login.context() if login.url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as r:
            body = json.loads(r.read(64 * 1024) or b"{}")
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise SystemExit(
                "The hub refused this token; make a new one on its token page (/hub/token)."
            ) from None
        raise SystemExit(f"The hub answered HTTP {e.code}; check its address.") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        if is_untrusted(e):
            raise SystemExit(untrusted(login.url, e)) from None
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
    p.add_argument(
        "--ca",
        metavar="FILE",
        help="the site's CA certificate (ca.pem), trusted for this hub besides the system's "
        "store: for a hub whose certificate the site's own CA signed",
    )
    p.add_argument("--forget", action="store_true", help="remove the stored login")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    folder = config_dir()
    if args.forget:
        (folder / FILE_NAME).unlink(missing_ok=True)
        (folder / CA_NAME).unlink(missing_ok=True)
        print("The stored login is removed.")
        return 0
    ca = read_ca(args.ca) if args.ca else b""
    url = hub_url(args.hub if args.hub else input("The hub's address: "))
    token = clean_token(getpass.getpass(f"A token from {url}/hub/token: "))
    with tempfile.TemporaryDirectory() as tmp:  # checked with the CA before it is stored
        given = Path(tmp) / CA_NAME
        given.write_bytes(ca)
        name = whose(Login(url, token, str(given) if ca else ""))
    path = save(Login(url, token), folder, ca)
    print(f"Logged in to {url} as {name}; stored in {path} (only you can read it).")
    return 0
