"""A private OpenLDAP server for tests, started with ``scripts/ldap-server.sh``.

Import the session fixture in ``tests/conftest.py``::

    from tests.ldap_fixture import ldap_server  # noqa: F401

``ldap_server`` yields a running :class:`LDAPServer` loaded with ``scripts/ldap/demo.ldif``
(alice, bob, carol, dave without uidNumber, erin outside gpu-users; passwords in
:data:`DEMO_PASSWORDS`; the openssh-lpk schema, :data:`LPK_SCHEMA`, for
``sshPublicKey``) on a free loopback port, with its state under pytest's temporary
folder, and stops it at the end of the session. :func:`make_ldap_server_fixture` makes
another one (another scope or LDIF); :func:`start_ldap_server` is the plain function.
slapd and ldap-utils must be installed (``apt-get install -y slapd ldap-utils``); without
them the fixture fails with that instruction.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "ldap-server.sh"
DEMO_LDIF = REPO / "scripts" / "ldap" / "demo.ldif"
#: the openssh-lpk schema (``sshPublicKey``), loaded by every test slapd
LPK_SCHEMA = REPO / "scripts" / "ldap" / "openssh-lpk.ldif"
SUFFIX = "dc=example,dc=org"

#: The demo directory's users and their (public) passwords.
DEMO_PASSWORDS = {
    "alice": "alice-gpu",
    "bob": "bob-gpu",
    "carol": "carol-gpu",
    "dave": "dave-gpu",
    "erin": "erin-gpu",
}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def hash_password(password: str) -> str:
    """A ``{SSHA}`` hash for an LDIF ``userPassword`` (slappasswd, password via a file)."""
    with tempfile.NamedTemporaryFile("w", delete=True) as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(password)
        f.flush()
        out = subprocess.run(
            [_slappasswd(), "-T", f.name], check=True, capture_output=True, text=True
        )
    return out.stdout.strip()


def _slappasswd() -> str:
    return shutil.which("slappasswd") or "/usr/sbin/slappasswd"


@dataclass
class LDAPServer:
    """A running slapd started by scripts/ldap-server.sh."""

    host: str
    port: int
    suffix: str
    state_dir: Path
    pid: int
    admin_dn: str
    admin_password_file: Path
    ldaps_port: int | None = None  # with a certificate: TLS from the first byte

    @property
    def url(self) -> str:
        return f"ldap://{self.host}:{self.port}/"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "slapd.log"

    def user_dn(self, uid: str) -> str:
        return f"uid={uid},ou=people,{self.suffix}"

    def group_dn(self, cn: str) -> str:
        return f"cn={cn},ou=groups,{self.suffix}"

    def authenticator_config(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for GPULDAPAuthenticator against this server."""
        config: dict[str, Any] = {
            "server_address": self.host,
            "server_port": self.port,
            "tls_strategy": "insecure",
            "bind_dn_template": [f"uid={{username}},ou=people,{self.suffix}"],
            "group_search_base": f"ou=groups,{self.suffix}",
        }
        config.update(overrides)
        return config

    # -- processes
    def pause(self) -> None:
        """Freeze slapd (SIGSTOP): connections are accepted by the kernel, never answered."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def stop(self) -> None:
        subprocess.run(
            [str(SCRIPT), "stop", "--dir", str(self.state_dir)], check=False, capture_output=True
        )

    # -- data
    def _ldap(self, tool: str, args: Sequence[str], ldif: str | None = None) -> str:
        cmd = [tool, "-x", "-H", self.url, "-D", self.admin_dn, "-y", str(self.admin_password_file)]
        proc = subprocess.run(
            [*cmd, *args], input=ldif, capture_output=True, text=True, check=False, timeout=30
        )
        if proc.returncode not in (0, 68):  # 68: entry already exists (with -c)
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def add(self, ldif: str) -> None:
        """Add entries (as the directory admin); entries that exist already are kept."""
        self._ldap("ldapadd", ["-c"], ldif)

    def modify(self, ldif: str) -> None:
        self._ldap("ldapmodify", [], ldif)

    def search(self, base: str, filt: str = "(objectClass=*)", *attrs: str) -> str:
        return self._ldap("ldapsearch", ["-LLL", "-b", base, filt, *attrs])

    def accepted_before_probe(self, timeout: float = 10) -> int:
        """Connect to slapd once (a probe) and wait until its log shows that connection
        accepted; return how many connections it had accepted before the probe.

        slapd accepts connections in the order they arrived, so every connection made
        before this call is counted: "nothing connected" is proven by this count, not by
        waiting for slapd's log to catch up. (Two calls in a row differ by 1: the probe.)
        """
        with socket.create_connection((self.host, self.port), timeout=5) as probe:
            port = probe.getsockname()[1]
            # this connection's line: "conn=N fd=M ACCEPT from IP=127.0.0.1:<port> (IP=...)"
            line = re.compile(rf" ACCEPT from IP=\S+:{port} ")

            def accepted_before() -> tuple[int] | None:  # a tuple: 0 is an answer too
                text = self.log_path.read_text(errors="replace")
                found = line.search(text)
                return None if found is None else (text.count(" ACCEPT from ", 0, found.start()),)

            (count,) = wait_until(
                accepted_before,
                timeout,
                f"slapd to log the probe connection from port {port}",
                interval=0.01,
                ignore=(OSError,),
                details=lambda: self.log_tail(10),
            )
        return count

    def waiting_connections(self) -> int:
        """Connections the kernel has completed to slapd's port that slapd has not
        accepted yet (its listening socket's accept queue, from /proc/net/tcp*): while
        slapd is paused, a client that connected shows here."""
        queued = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError), open(table) as f:
                for row in f.readlines()[1:]:
                    fields = row.split()
                    local, state, queues = fields[1], fields[3], fields[4]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == self.port:
                        queued += int(queues.split(":")[1], 16)  # rx_queue: the accept queue
        return queued

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no slapd log)"


def start_ldap_server(
    state_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    ldifs: Sequence[Path] = (DEMO_LDIF,),
    suffix: str = SUFFIX,
    tls: tuple[Path, Path] | None = None,
    schemas: Sequence[Path] = (LPK_SCHEMA,),
) -> LDAPServer:
    """Start (or reuse) a slapd with its state in ``state_dir``; see scripts/ldap-server.sh.

    ``tls``: (certificate, key) PEM files: StartTLS on the port, plus an ldaps:// port.
    """
    if not (shutil.which("slapd") or Path("/usr/sbin/slapd").exists()) or not shutil.which(
        "ldapadd"
    ):
        raise RuntimeError(
            "slapd and ldap-utils are needed: "
            "DEBIAN_FRONTEND=noninteractive apt-get install -y slapd ldap-utils"
        )
    cmd = [str(SCRIPT), "start", "--dir", str(state_dir), "--host", host, "--suffix", suffix]
    cmd += ["--port", str(port or free_port(host))]
    for ldif in ldifs:
        cmd += ["--ldif", str(ldif)]
    for schema in schemas:
        cmd += ["--schema", str(schema)]
    if tls is not None:
        cmd += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
        cmd += ["--ldaps-port", str(free_port(host))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/ldap-server.sh start failed:\n{proc.stderr}")
    # the script prints shell assignments (NAME=value, shell-quoted)
    pairs = (line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    values = {name: (shlex.split(v) or [""])[0] for name, v in pairs}
    return LDAPServer(
        host=values["LDAP_HOST"],
        port=int(values["LDAP_PORT"]),
        suffix=values["LDAP_SUFFIX"],
        state_dir=Path(values["LDAP_DIR"]),
        pid=int(values["LDAP_PID"]),
        admin_dn=values["LDAP_ADMIN_DN"],
        admin_password_file=Path(values["LDAP_ADMIN_PASSWORD_FILE"]),
        ldaps_port=int(values["LDAPS_PORT"]) if "LDAPS_PORT" in values else None,
    )


def make_ldap_server_fixture(
    scope: Any = "session", ldifs: Sequence[Path] = (DEMO_LDIF,)
) -> Callable[..., Iterator[LDAPServer]]:
    """A pytest fixture yielding a fresh :class:`LDAPServer` for ``scope``."""

    @pytest.fixture(scope=scope)
    def _ldap_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LDAPServer]:
        state = tmp_path_factory.mktemp("slapd")
        try:
            server = start_ldap_server(state, ldifs=ldifs)
        except RuntimeError as e:
            pytest.fail(str(e), pytrace=False)
        try:
            yield server
        finally:
            server.stop()  # also resumes a server a test left SIGSTOPped

    return _ldap_server


#: The session-scoped demo directory (see the module docstring).
ldap_server = make_ldap_server_fixture("session")
