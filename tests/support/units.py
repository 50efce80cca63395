"""A stand-in for systemd in tests: read a unit file that ``jupyterhub-gpu units install``
wrote and run its service as systemd would, as far as a test can.

What it does as systemd: ``ExecStartPre=`` then ``ExecStart=`` (split like a shell
line), ``WorkingDirectory=``, ``Environment=`` and ``EnvironmentFile=`` (``NAME=value``
lines, ``#`` comments), ``LoadCredential=NAME:PATH`` with ``%d/NAME`` in the command
line replaced by ``PATH`` (systemd copies the file into a private folder first).
What it does not: ``DynamicUser=``/``User=`` (the test runs as root), the sandboxing
options (``ProtectSystem=`` ...), ``Restart=``. A stand-in for the drop-in of
``docker.service`` is :func:`exec_start` on the drop-in's text (its last ``ExecStart=``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def _values(text: str, key: str) -> list[str]:
    prefix = f"{key}="
    return [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]


def exec_start(text: str) -> list[str]:
    """The command of a unit or drop-in: its last non-empty ``ExecStart=`` (an empty one
    clears the list, as in a drop-in)."""
    starts = [v for v in _values(text, "ExecStart") if v.strip()]
    if not starts:
        raise AssertionError(f"no ExecStart= in:\n{text}")
    return shlex.split(starts[-1])


def read_environment_file(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    )
    return {k.strip(): v for k, v in pairs}


@dataclass
class Unit:
    """One ``.service`` file, read."""

    path: Path
    text: str = field(init=False)

    def __post_init__(self) -> None:
        self.text = self.path.read_text()

    @property
    def credentials(self) -> dict[str, str]:
        return dict(v.split(":", 1) for v in _values(self.text, "LoadCredential"))

    def _argv(self, line: str) -> list[str]:
        argv = shlex.split(line.lstrip("-@+!"))
        for name, path in self.credentials.items():
            argv = [a.replace(f"%d/{name}", path) for a in argv]
        return argv

    @property
    def start(self) -> list[str]:
        return self._argv(_values(self.text, "ExecStart")[-1])

    @property
    def start_pre(self) -> list[list[str]]:
        return [self._argv(v) for v in _values(self.text, "ExecStartPre")]

    @property
    def working_directory(self) -> str | None:
        found = _values(self.text, "WorkingDirectory")
        return found[-1] if found else None

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        for value in _values(self.text, "Environment"):
            for pair in shlex.split(value):
                name, _, val = pair.partition("=")
                env[name] = val
        for value in _values(self.text, "EnvironmentFile"):
            optional = value.startswith("-")
            path = Path(value.lstrip("-"))
            if path.exists() or not optional:
                env.update(read_environment_file(path))
        return env

    def run_pre(self, base: Mapping[str, str], wrap: Sequence[str] = ()) -> None:
        """Every ``ExecStartPre=``; raises with its output when one fails."""
        for argv in self.start_pre:
            done = subprocess.run(
                [*wrap, *argv],
                cwd=self.working_directory,
                env=self.environment(base),
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise AssertionError(
                    f"{self.path.name}: ExecStartPre={shlex.join(argv)} failed:\n"
                    f"{done.stdout}{done.stderr}"
                )

    def popen(
        self,
        base: Mapping[str, str],
        log: Path,
        wrap: Sequence[str] = (),
        extra: Sequence[str] = (),
    ) -> subprocess.Popen[bytes]:
        """Start ``ExecStart=`` (with ``extra`` arguments after it), its output in ``log``;
        ``wrap`` goes before the command (e.g. ``nsenter --net=...``)."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                [*wrap, *self.start, *extra],
                cwd=self.working_directory,
                env=self.environment(base),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )


def stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` (as systemd's stop)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def stop_leftovers(folder: Path) -> list[int]:
    """SIGKILL every process whose command line names ``folder`` (a test's own machine
    folder): the hub's services (the join service, the culler, the dashboard), which
    JupyterHub starts in sessions of their own, outlive a hub killed before it stopped them
    and keep their ports (a later test's join service then cannot listen). Their pids."""
    import signal

    marker = (str(folder).rstrip("/") + "/").encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in command:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(int(entry.name))
    return killed


def without_venv(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as a service gets it: no virtual environment of the test's."""
    return {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")} | {
        "HOME": os.environ.get("HOME", "/root")
    }


def stop_proxy(state: Path) -> None:
    """The proxy an installed hub started (its pid file ``jupyterhub-proxy.pid`` in the
    hub's state folder, as the site's configuration names it). JupyterHub starts it in a
    session of its own so that it outlives a hub restart; systemd's stop reaches it
    through the unit's cgroup, a test's stop of the hub does not: left, it holds the
    site's ports (8000, 8001) for the next test."""
    pidfile = state / "jupyterhub-proxy.pid"
    with contextlib.suppress(ValueError, OSError):
        pid = int(pidfile.read_text().strip())
        if b"configurable-http-proxy" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
