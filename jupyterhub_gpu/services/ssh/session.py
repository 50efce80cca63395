"""One SSH session in a user's server: ``docker exec`` in the server's container as her
uid:gid, in her home, with the container's environment (the GPU variables included),
its input and output bridged to the SSH channel; the exit status goes back to the client.

``ssh alice@hub`` is ``bash -l`` with a terminal; ``ssh alice@hub CMD`` is ``bash -lc CMD``
(login shells: the image's profile gives the venv's PATH and the user's name)
(a terminal only with ``-t``). Window size changes are passed on. Subsystems (SFTP) and
forwarding are not available yet (docs/ssh.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncssh
import httpx

from jupyterhub_gpu.core.ssh.logins import Login
from jupyterhub_gpu.core.ssh.sessions import (
    SessionRecord,
    ended_line,
    not_running,
    started_line,
    subsystem_refused,
)
from jupyterhub_gpu.edges.docker_exec import ExecFailed, NodeEngine
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.services.ssh.server import Gate, server_of
from jupyterhub_gpu.wire.docker_stream import Demuxer
from jupyterhub_gpu.wire.nodes_file import NodeSpec
from jupyterhub_gpu.wire.ssh_target import SSHTarget

HUB_DOWN = "The hub did not answer; try again in a minute."
NOT_YOURS = "Your server's container does not run as you; ask your administrator."
CHUNK = 64 * 1024


@dataclass
class Sessions:
    """Opens sessions: the gate (the hub), the public URL for sentences, one engine
    client per node."""

    gate: Gate
    hub_url: str
    engines: dict[tuple[str, str], NodeEngine] = field(default_factory=dict)

    def engine(self, spec: NodeSpec) -> NodeEngine:
        key = (spec.name, spec.docker_url)
        if key not in self.engines:
            self.engines[key] = NodeEngine(spec)
        return self.engines[key]

    async def handle(self, process: asyncssh.SSHServerProcess) -> None:
        """asyncssh's ``process_factory``: the whole session."""
        status = 1
        try:
            status = await self._session(process)
        except (BrokenPipeError, ConnectionError, asyncssh.DisconnectError):
            status = 255
        except ExecFailed as e:
            self.gate.log.warning("SSH session failed: %s", e)
            _say(process, f"Your server could not run that: {e}.")
        finally:
            with contextlib.suppress(Exception):
                process.exit(status)

    async def _session(self, process: asyncssh.SSHServerProcess) -> int:
        gateway = server_of(process)
        login = gateway.login
        if login is None:  # not possible once authenticated; never open anything then
            return 1
        if process.subsystem:
            _say(process, subsystem_refused(str(process.subsystem)))
            return 1
        try:
            target = await self.gate.hub.target(login)
        except (httpx.HTTPError, ProbeError):
            _say(process, HUB_DOWN)
            return 1
        if target is None or not target.running or target.node is None:
            exists = target is not None and target.exists
            pending = target is not None and target.state == "pending"
            _say(process, not_running(self.hub_url, login, pending, exists))
            return 1
        return await self._exec(process, login, target, target.node, gateway.peer, gateway.auth)

    async def _exec(
        self,
        process: asyncssh.SSHServerProcess,
        login: Login,
        target: SSHTarget,
        node: NodeSpec,
        peer: str,
        auth: str,
    ) -> int:
        engine = self.engine(node)
        info = await engine.inspect(target.container)
        user, env = _runs_as(info), _env(info)
        if target.uid is None or user.split(":")[0] != str(target.uid):
            _say(process, NOT_YOURS)
            return 1
        term = process.get_terminal_type()
        tty = term is not None
        command = process.command
        # login shells both: the image's profile gives the venv's PATH and the user's name
        argv = ["bash", "-lc", command] if command else ["bash", "-l"]
        extra = {"TERM": term} if term else {}
        exec_id = await engine.create(
            target.container,
            argv,
            user=user,
            workdir=env.get("HOME") or None,
            tty=tty,
            env=extra,
        )
        kind = ("command+pty" if tty else "command") if command else "shell"
        record = SessionRecord(login, peer, auth, node.name, target.container, kind)
        self.gate.log.info("%s", started_line(record))
        started = time.monotonic()
        status: int | None = None
        try:
            reader, writer = await engine.start(exec_id, tty)
            if tty:
                width, height, _, _ = process.get_terminal_size()
                await engine.resize(exec_id, width, height)
            await _bridge(process, engine, exec_id, tty, reader, writer)
            status = await engine.exit_code(exec_id)
        finally:
            seconds = time.monotonic() - started
            self.gate.log.info("%s", ended_line(record, seconds, status))
        return 255 if status is None else status

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()


async def _bridge(
    process: asyncssh.SSHServerProcess,
    engine: NodeEngine,
    exec_id: str,
    tty: bool,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Input to the exec until EOF, its output to the channel until the process ends."""

    async def pump_in() -> None:
        while True:
            try:
                data = await process.stdin.read(CHUNK)
            except asyncssh.TerminalSizeChanged as e:
                await engine.resize(exec_id, e.width, e.height)
                continue
            except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                continue
            if not data:
                # a terminal has one end for both ways: sshd ignores EOF there, and
                # closing the engine's side would end the output too
                if not tty and writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    feeding = asyncio.create_task(pump_in())
    demux = None if tty else Demuxer()
    try:
        while data := await reader.read(CHUNK):
            if demux is None:
                process.stdout.write(data)
            else:
                for stream, payload in demux.feed(data):
                    (process.stderr if stream == 2 else process.stdout).write(payload)
            await process.stdout.drain()
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await feeding
        writer.close()


def _runs_as(info: Mapping[str, Any]) -> str:
    """The container's ``uid:gid`` (its ``Config.User``)."""
    return str((info.get("Config") or {}).get("User") or "")


def _env(info: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (info.get("Config") or {}).get("Env") or []:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def _say(process: asyncssh.SSHServerProcess, sentence: str) -> None:
    """One sentence on the client's stderr (with a terminal's line ending)."""
    with contextlib.suppress(Exception):
        process.stderr.write((sentence + "\r\n").encode())


__all__ = ["Sessions"]
