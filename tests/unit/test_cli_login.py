"""``jupyterhub-gpu login`` (cli/login.py): the address as people paste it, the token
checked with a hub (a real HTTP server here) before anything is stored, the file mode
0600 in a folder 0700, and ``job`` using it when the environment has no token."""

from __future__ import annotations

import json
import os
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jupyterhub_gpu.cli.certs import issue, make_ca
from jupyterhub_gpu.cli.login import (
    CA_NAME,
    FILE_NAME,
    Login,
    clean_token,
    config_dir,
    hub_url,
    load,
    save,
)

pytestmark = pytest.mark.unit

GOOD = "a1b2c3d4e5f6"


class _Hub(BaseHTTPRequestHandler):
    """A hub's ``/hub/api/user`` and ``/hub/api/gpu/jobs`` for the token GOOD (alice)."""

    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization", "")))
        if self.headers.get("Authorization") != f"token {GOOD}":
            self.send_response(403)
            self.end_headers()
            self.wfile.write(b'{"status": 403, "message": "Forbidden"}')
            return
        body = {"name": "alice"} if self.path == "/hub/api/user" else {"jobs": []}
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hub.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_address_as_people_paste_it() -> None:
    assert hub_url("hub.example.org") == "https://hub.example.org"
    assert hub_url(" https://hub.example.org/hub/token ") == "https://hub.example.org"
    assert hub_url("http://lab:8000/jupyter/hub/home") == "http://lab:8000/jupyter"
    assert hub_url("https://hub.example.org/hubble/") == "https://hub.example.org/hubble"
    for bad in ("", "ftp://hub", "https://", "https://u:p@hub", "https://hub?x=1", "a b"):
        with pytest.raises(SystemExit, match="hub's address"):
            hub_url(bad)
    assert clean_token(f"  {GOOD}\n") == GOOD
    for bad in ("", "x" * 300, "abc def", "tok<en>"):
        with pytest.raises(SystemExit, match="token"):
            clean_token(bad)


def test_stored_mode_0600_in_a_folder_0700_and_read_back(tmp_path: Path) -> None:
    folder = tmp_path / "cfg" / "jupyterhub-gpu"
    path = save(Login("https://hub.example.org", GOOD), folder)
    assert path == folder / FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert load(folder) == Login("https://hub.example.org", GOOD)
    path.chmod(0o644)  # loosened by someone: the next login makes it 0600 again
    save(Login("https://other.example.org", GOOD), folder)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load(folder) == Login("https://other.example.org", GOOD)
    path.write_text("{not json")
    assert load(folder) is None
    assert load(tmp_path / "none") is None
    assert config_dir({"HOME": "/home/a"}) == Path("/home/a/.config/jupyterhub-gpu")
    assert config_dir({"HOME": "/h", "XDG_CONFIG_HOME": "/x"}) == Path("/x/jupyterhub-gpu")


def _cli(args: list[str], home: Path, stdin: str = "", **env: str) -> subprocess.CompletedProcess:
    code = (
        "import sys, getpass; getpass.getpass = lambda prompt='': input(prompt); "
        "from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))"
    )  # getpass reads the terminal; here the token comes on stdin like the address
    environ = {"HOME": str(home), "PATH": "/usr/bin:/bin", **env}
    if "PYTHONPATH" in os.environ:  # this tree first, as the tests run
        environ["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run(
        [sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True,
        env=environ, timeout=60,
    )  # fmt: skip


def test_login_checks_then_stores_and_job_uses_it(hub: str, tmp_path: Path) -> None:
    stored = tmp_path / ".config" / "jupyterhub-gpu" / FILE_NAME
    refused = _cli(["login"], tmp_path, f"{hub}/hub/token\nwrong-token\n")
    assert refused.returncode != 0 and "refused this token" in refused.stderr, refused
    assert refused.stderr.count("\n") == 1 and not stored.exists()

    done = _cli(["login"], tmp_path, f"{hub}/hub/token\n{GOOD}\n")
    assert done.returncode == 0, done.stderr
    assert f"Logged in to {hub} as alice" in done.stdout
    assert GOOD not in done.stdout + done.stderr  # the token is never shown
    assert json.loads(stored.read_text()) == {"url": hub, "token": GOOD}
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600

    _Hub.seen.clear()
    listed = _cli(["job", "list"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert _Hub.seen == [("/hub/api/gpu/jobs", f"token {GOOD}")]
    # the environment's token wins over the stored one
    _Hub.seen.clear()
    _cli(["job", "list"], tmp_path, JUPYTERHUB_API_TOKEN="other", JUPYTERHUB_URL=hub)
    assert _Hub.seen == [("/hub/api/gpu/jobs", "token other")]

    gone = _cli(["login", "--forget"], tmp_path)
    assert gone.returncode == 0 and not stored.exists()
    none = _cli(["job", "list"], tmp_path)
    assert none.returncode != 0 and "jupyterhub-gpu login" in none.stderr


def test_no_hub_there_stores_nothing(tmp_path: Path) -> None:
    done = _cli(["login", "--hub", "http://127.0.0.1:9"], tmp_path, f"{GOOD}\n")
    assert done.returncode != 0 and "No hub answered at http://127.0.0.1:9" in done.stderr
    assert not (tmp_path / ".config").exists()


@pytest.fixture
def tls_hub(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The same hub over HTTPS, its certificate signed by a site CA of its own (as ``hub
    install`` makes one): its address and the CA's file."""
    ca_pem, ca_key = make_ca()
    cert, key = issue(ca_pem, ca_key, "127.0.0.1", server_names=["127.0.0.1"])
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "ca.pem").write_bytes(ca_pem)
    (folder / "hub.crt").write_bytes(cert)
    (folder / "hub.key").write_bytes(key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "hub.crt", folder / "hub.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hub.seen = []
    yield f"https://127.0.0.1:{server.server_address[1]}", folder / "ca.pem"
    server.shutdown()
    server.server_close()


def test_a_hub_signed_by_the_sites_own_ca_is_trusted_with_login_ca(
    tls_hub: tuple[str, Path], tmp_path: Path
) -> None:
    hub, ca = tls_hub
    folder = tmp_path / ".config" / "jupyterhub-gpu"
    # not trusted: said so, with the command that fixes it; nothing stored
    refused = _cli(["login", "--hub", hub], tmp_path, f"{GOOD}\n")
    assert refused.returncode != 0, refused
    assert refused.stderr.strip() == (
        f"The hub at {hub} has a certificate this machine does not trust. If your site made "
        "it, ask your admin for the site's CA certificate (ca.pem) and run jupyterhub-gpu "
        "login --ca ca.pem."
    )
    assert not folder.exists()
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    bad = _cli(["login", "--hub", hub, "--ca", str(bogus)], tmp_path, f"{GOOD}\n")
    assert bad.returncode != 0 and "is not a CA certificate (PEM)" in bad.stderr, bad
    # the right CA but another name for the hub than its certificate's: said so
    other = hub.replace("127.0.0.1", "localhost")
    wrong = _cli(["login", "--hub", other, "--ca", str(ca)], tmp_path, f"{GOOD}\n")
    assert wrong.returncode != 0 and "is not for the address" in wrong.stderr, wrong
    # with the site's CA: checked, then stored beside the login (0600), and job uses it
    done = _cli(["login", "--hub", hub, "--ca", str(ca)], tmp_path, f"{GOOD}\n")
    assert done.returncode == 0, done.stderr
    stored = json.loads((folder / FILE_NAME).read_text())
    assert stored == {"url": hub, "token": GOOD, "ca": str(folder / CA_NAME)}
    assert (folder / CA_NAME).read_bytes() == ca.read_bytes()
    assert stat.S_IMODE((folder / CA_NAME).stat().st_mode) == 0o600
    _Hub.seen.clear()
    listed = _cli(["job", "list"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert _Hub.seen == [("/hub/api/gpu/jobs", f"token {GOOD}")]
    gone = _cli(["login", "--forget"], tmp_path)
    assert gone.returncode == 0 and not (folder / CA_NAME).exists()
