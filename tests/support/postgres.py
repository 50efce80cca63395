"""A throw-away PostgreSQL server for tests and benchmarks (TEST ONLY).

::

    with PostgresServer() as pg:
        store = AccountingStore(pg.url)  # postgresql+psycopg://jhgpu@127.0.0.1:PORT/jhgpu

:class:`PostgresServer` finds the server binaries (``initdb``, ``pg_ctl``, ``postgres``: on
the ``PATH``, in ``/usr/lib/postgresql/<version>/bin`` as Debian's ``postgresql`` package
puts them, or in ``/usr/local/bin``), makes a new cluster in a temporary folder, starts it
on ``127.0.0.1`` on a free port with its unix socket in that folder, waits until it
accepts connections, creates one database, and on :meth:`~PostgresServer.stop` shuts it
down and removes the folder. PostgreSQL refuses to run as root: under root the server
runs as the ``postgres`` account when there is one, else ``nobody``, and the folder
belongs to that account.

Authentication is ``trust`` (any local client may connect as any role, no password) and
``fsync`` is off: a cluster for one test run on loopback, never a real database.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import psycopg
from psycopg import sql

SEARCH_DIRS = ("/usr/lib/postgresql/*/bin", "/usr/local/bin")
INSTALL_HINT = (
    "install PostgreSQL's server (scripts/cluster.sh up does it, or "
    "`apt-get install -y postgresql`)"
)
#: settings for a disposable cluster: nothing needs to survive a crash
FAST_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "40",
}


class PostgresError(RuntimeError):
    """The test server could not be found, made or started; the message says why."""


def _version_key(folder: Path) -> tuple[int, ...]:
    parts = folder.parent.name.split(".")  # /usr/lib/postgresql/<version>/bin
    return tuple(int(p) for p in parts if p.isdigit())


def find_binary(name: str) -> str:
    """The path of PostgreSQL's ``name`` (the newest version first), or PostgresError."""
    found = shutil.which(name)
    if found:
        return found
    candidates: list[Path] = []
    for pattern in SEARCH_DIRS:
        head, _, tail = pattern.partition("*")
        if tail:
            base = Path(head)
            folders = sorted(base.glob("*" + tail), key=_version_key, reverse=True)
            candidates += [f / name for f in folders]
        else:
            candidates.append(Path(pattern) / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise PostgresError(
        f"PostgreSQL's {name} was not found on PATH, in /usr/lib/postgresql/*/bin or in "
        f"/usr/local/bin: {INSTALL_HINT}."
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder (a context manager)."""

    def __init__(
        self,
        database: str = "jhgpu",
        role: str = "jhgpu",
        *,
        host: str = "127.0.0.1",
        os_user: str | None = None,
        startup_timeout: float = 30.0,
        settings: Mapping[str, str] = FAST_SETTINGS,
    ) -> None:
        self.database = database
        self.role = role
        self.host = host
        self.os_user = os_user
        self.startup_timeout = startup_timeout
        self.settings = dict(settings)
        self.port = 0
        self.folder: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._ids: tuple[int, int] | None = None  # (uid, gid) the server runs as

    # -- what tests use
    @property
    def url(self) -> str:
        """SQLAlchemy URL of the database (psycopg 3 driver)."""
        self._require_started()
        return f"postgresql+psycopg://{self.role}@{self.host}:{self.port}/{self.database}"

    @property
    def conninfo(self) -> str:
        """libpq connection string of the database (for psycopg directly)."""
        self._require_started()
        return self._conninfo(self.database)

    @property
    def log_path(self) -> Path | None:
        """The server's log (None once stopped: the folder is removed)."""
        return self.folder / "postgres.log" if self.folder is not None else None

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None:
            return "(no server log: the server's folder is removed)"
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"(no server log: {e})"
        return "\n".join(text.splitlines()[-lines:])

    # -- life cycle
    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> PostgresServer:
        if self._process is not None:
            return self
        initdb, postgres = find_binary("initdb"), find_binary("postgres")
        find_binary("pg_ctl")  # part of the same install; its absence means a broken one
        self.folder = Path(tempfile.mkdtemp(prefix="jhgpu-pg-"))
        try:
            self._ids = self._server_ids()
            os.chown(self.folder, *self._ids)
            self._run(
                [
                    initdb, "-D", str(self.folder / "data"), "-U", self.role,
                    "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync",
                ]
            )  # fmt: skip
            self._launch(postgres)
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Shut the server down (fast shutdown, then kill) and remove its folder."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # "fast" shutdown: end sessions, checkpoint
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    # -- internals
    def _require_started(self) -> None:
        if self._process is None or self.folder is None:
            raise PostgresError("the PostgreSQL test server is not started (call start())")

    def _conninfo(self, database: str) -> str:
        return f"host={self.host} port={self.port} user={self.role} dbname={database}"

    def _server_ids(self) -> tuple[int, int]:
        """(uid, gid) to run as: ours, or an unprivileged account's when we are root."""
        if os.geteuid() != 0:
            return os.getuid(), os.getgid()
        names: Sequence[str] = (self.os_user,) if self.os_user else ("postgres", "nobody")
        for name in names:
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                continue
            if entry.pw_uid != 0:
                return entry.pw_uid, entry.pw_gid
        raise PostgresError(
            f"PostgreSQL refuses to run as root and none of the accounts {', '.join(names)} "
            "exists: create one (useradd) and pass os_user=."
        )

    def _as_server(self) -> tuple[int | None, int | None, list[int] | None]:
        """(user, group, extra_groups) for Popen: switch to the server's account as root."""
        assert self._ids is not None
        if os.geteuid() != 0:
            return None, None, None
        return self._ids[0], self._ids[1], []

    def _run(self, argv: list[str]) -> None:
        assert self.folder is not None
        user, group, extra_groups = self._as_server()
        result = subprocess.run(
            argv,
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "LC_ALL": "C"},
            user=user,
            group=group,
            extra_groups=extra_groups,
        )
        if result.returncode != 0:
            output = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
            raise PostgresError(
                f"{Path(argv[0]).name} failed (exit {result.returncode}):\n{output}"
            )

    def _launch(self, postgres: str, attempts: int = 3) -> None:
        """Start the server on a free port (another one if that port was taken meanwhile)."""
        assert self.folder is not None
        user, group, extra_groups = self._as_server()
        for attempt in range(attempts):
            self.port = free_port(self.host)
            options = {
                **self.settings,
                "listen_addresses": self.host,
                "port": str(self.port),
                "unix_socket_directories": str(self.folder),
            }
            argv = [postgres, "-D", str(self.folder / "data")]
            for key, value in options.items():
                argv += ["-c", f"{key}={value}"]
            with open(self.folder / "postgres.log", "ab") as log:
                self._process = subprocess.Popen(
                    argv,
                    cwd=self.folder,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "LC_ALL": "C"},
                    start_new_session=True,  # a Ctrl-C in the terminal is not a shutdown
                    user=user,
                    group=group,
                    extra_groups=extra_groups,
                )
            if self._wait_ready():
                return
            in_use = "Address already in use" in self.log_tail(10)
            self._process.wait(timeout=10)
            self._process = None
            if not in_use or attempt == attempts - 1:
                break
        raise PostgresError(
            f"PostgreSQL exited while starting on {self.host}:{self.port}. Server log, "
            f"last lines:\n{self.log_tail()}"
        )

    def _wait_ready(self) -> bool:
        """True once the server accepts connections; False if it exited; PostgresError
        (with the log's tail) if it neither answers nor exits within the timeout."""
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                with psycopg.connect(self._conninfo("postgres"), connect_timeout=2):
                    return True
            except psycopg.OperationalError as e:
                last_error = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise PostgresError(
            f"PostgreSQL on {self.host}:{self.port} did not accept connections within "
            f"{self.startup_timeout:g} s (last error: {last_error}). Server log, last "
            f"lines:\n{tail}"
        )

    def _create_database(self) -> None:
        with psycopg.connect(self._conninfo("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))

    def database_size(self) -> int:
        """Bytes on disk of the database (``pg_database_size``)."""
        with psycopg.connect(self.conninfo) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert row is not None
        return int(row[0])
