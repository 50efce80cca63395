"""One SSH session or forwarded connection in a user's server: ``docker exec`` in the
server's container as her uid:gid, in her home, with the container's environment (the GPU
variables included), its input and output bridged to the SSH channel; the exit status
goes back to the client.

``ssh alice@hub`` is ``bash -l`` with a terminal; ``ssh alice@hub CMD`` is ``bash -lc CMD``
(login shells: the image's profile gives the venv's PATH and the user's name)
(a terminal only with ``-t``). Window size changes are passed on. The ``sftp`` subsystem
(``sftp``, and ``scp``, which speaks SFTP) is the image's ``sftp-server``; legacy ``scp -O``
runs the image's ``scp`` where it has one. A forwarded connection (``ssh -L``, VS Code
Remote-SSH) is a small relay (:mod:`.relay`) connecting from inside the container.
Input on any of them is the server's activity
(:class:`~jupyterhub_gpu.core.ssh.activity.ActivityBook`).
A session whose server stops under it ends with a sentence."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncssh
import httpx
from asyncssh.stream import SSHTCPStreamSession

from jupyterhub_gpu.core.ssh.activity import ActivityBook
from jupyterhub_gpu.core.ssh.census import Census, OpenChannel
from jupyterhub_gpu.core.ssh.channels import (
    MAX_SESSIONS,
    REMOTE_FORWARD_REFUSED,
    TOO_MANY_SESSIONS,
    forward_refusal,
    legacy_scp,
    legacy_scp_argv,
    sftp_argv,
)
from jupyterhub_gpu.core.ssh.logins import Login
from jupyterhub_gpu.core.ssh.sessions import (
    SessionRecord,
    ended_line,
    not_running,
    server_stopped,
    start_refused,
    started_line,
    starting_line,
    subsystem_refused,
)
from jupyterhub_gpu.edges.docker_exec import ExecFailed, NodeEngine
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.services.ssh.relay import relay_argv
from jupyterhub_gpu.services.ssh.server import Gate, GatewayServer, server_of
from jupyterhub_gpu.wire.docker_stream import Demuxer
from jupyterhub_gpu.wire.nodes_file import NodeSpec
from jupyterhub_gpu.wire.ssh_target import SSHTarget

HUB_DOWN = "The hub did not answer; try again in a minute."
NOT_YOURS = "Your server's container does not run as you; ask your administrator."
CHUNK = 64 * 1024
#: a forwarded connection's relay must say it connected within this many seconds
RELAY_CONNECT_TIMEOUT = 20.0


class GatewayProcess(asyncssh.SSHServerProcess):
    """asyncssh's server process, but every subsystem goes to the process factory: asyncssh
    itself would serve ``sftp`` on the gateway's machine (or refuse it), while here it
    runs in the user's container (:meth:`Sessions.handle` refuses other subsystems with a
    sentence)."""

    def subsystem_requested(self, subsystem: str) -> bool:
        return True

    def session_started(self) -> None:
        chan = self._chan
        stdin = asyncssh.SSHReader[bytes](self, chan)
        stdout = asyncssh.SSHWriter[bytes](self, chan)
        stderr = asyncssh.SSHWriter[bytes](self, chan, asyncssh.EXTENDED_DATA_STDERR)
        handler = self._start_process(stdin, stdout, stderr)
        if inspect.isawaitable(handler):
            assert self._conn is not None
            self._conn.create_task(handler, stdin.logger)


@dataclass(frozen=True)
class Landing:
    """Where a login's channels run: her server's container, as her."""

    target: SSHTarget
    node: NodeSpec
    engine: NodeEngine
    user: str  # "uid:gid"
    env: Mapping[str, str]


@dataclass
class Sessions:
    """Opens sessions and forwarded connections: the gate (the hub), the public URL for
    sentences, one engine client per node, the activity to report."""

    gate: Gate
    hub_url: str
    activity: ActivityBook | None = None
    start_servers: bool = False  # start a stopped default server with its last options
    start_timeout: float = 300.0
    engines: dict[tuple[str, str], NodeEngine] = field(default_factory=dict)
    census: Census = field(default_factory=Census)  # what is open, for the hub
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # the census moved

    def opened(self, login: Login, kind: str, peer: str) -> int:
        number = self.census.opened(OpenChannel(login.user, login.server, kind, time.time(), peer))
        self.changed.set()
        return number

    def closed(self, number: int) -> None:
        self.census.closed(number)
        self.changed.set()

    def engine(self, spec: NodeSpec) -> NodeEngine:
        key = (spec.name, spec.docker_url)
        if key not in self.engines:
            self.engines[key] = NodeEngine(spec)
        return self.engines[key]

    def saw_input(self, login: Login) -> None:
        if self.activity is not None:
            self.activity.saw(login.user, login.server, time.time())

    async def land(self, login: Login) -> Landing | str:
        """Where ``login``'s channels run, or the sentence saying why nowhere."""
        try:
            target = await self.gate.hub.target(login)
        except (httpx.HTTPError, ProbeError):
            return HUB_DOWN
        if target is None or not target.running or target.node is None:
            exists = target is not None and target.exists
            pending = target is not None and target.state == "pending"
            return not_running(self.hub_url, login, pending, exists)
        engine = self.engine(target.node)
        info = await engine.inspect(target.container)
        user = _runs_as(info)
        if target.uid is None or user.split(":")[0] != str(target.uid):
            return NOT_YOURS
        return Landing(target, target.node, engine, user, _env(info))

    async def handle(self, process: asyncssh.SSHServerProcess) -> None:
        """asyncssh's ``process_factory``: the whole session."""
        status = 1
        gateway = server_of(process)
        gateway.sessions_open += 1
        try:
            if gateway.sessions_open > MAX_SESSIONS:
                _say(process, TOO_MANY_SESSIONS)
            else:
                status = await self._session(process, gateway)
        except (BrokenPipeError, ConnectionError, asyncssh.DisconnectError):
            status = 255
        except ExecFailed as e:
            self.gate.log.warning("SSH session failed: %s", e)
            _say(process, f"Your server could not run that: {e}.")
        finally:
            gateway.sessions_open -= 1
            with contextlib.suppress(Exception):
                process.exit(status)

    async def _session(self, process: asyncssh.SSHServerProcess, gateway: GatewayServer) -> int:
        login = gateway.login
        if login is None:  # not possible once authenticated; never open anything then
            return 1
        if gateway.refused_remote and not gateway.told_remote:
            gateway.told_remote = True
            _say(process, REMOTE_FORWARD_REFUSED)
        subsystem = process.subsystem
        if subsystem and subsystem != "sftp":
            _say(process, subsystem_refused(str(subsystem)))
            return 1
        landing = await self.land(login)
        if isinstance(landing, str) and self.start_servers and not login.server:
            landing = await self._start_then_land(process, login, landing)
        if isinstance(landing, str):
            _say(process, landing)
            return 1
        self.saw_input(login)  # logging in is using the server
        return await self._exec(process, login, landing, gateway.peer, gateway.auth)

    async def _exec(
        self,
        process: asyncssh.SSHServerProcess,
        login: Login,
        landing: Landing,
        peer: str,
        auth: str,
    ) -> int:
        engine, target = landing.engine, landing.target
        term = process.get_terminal_type()
        command = process.command
        extra = {"TERM": term} if term else {}
        if process.subsystem:  # sftp: binary, no terminal
            argv, tty, kind = sftp_argv(), False, "sftp"
        elif command and legacy_scp(command):
            argv, tty, kind = legacy_scp_argv(command), False, "scp"
        else:
            tty = term is not None
            # login shells both: the image's profile gives the venv's PATH and the user's name
            # a shell: a login shell started from one, so that it starts with her name
            # (libnss_wrapper, from the profile) and its prompt says alice, not "I have
            # no name!"
            argv = ["bash", "-lc", command] if command else ["bash", "-lc", "exec bash -l"]
            kind = ("command+pty" if tty else "command") if command else "shell"
        exec_id = await engine.create(
            target.container,
            argv,
            user=landing.user,
            workdir=landing.env.get("HOME") or None,
            tty=tty,
            env=extra,
        )
        record = SessionRecord(login, peer, auth, landing.node.name, target.container, kind)
        self.gate.log.info("%s", started_line(record))
        started = time.monotonic()
        status: int | None = None
        counted = self.opened(login, kind, peer)
        try:
            reader, writer = await engine.start(exec_id, tty)
            if tty:
                width, height, _, _ = process.get_terminal_size()
                with contextlib.suppress(ExecFailed):  # a quick command may be done already
                    await engine.resize(exec_id, width, height)
            try:
                await _bridge(
                    process,
                    engine,
                    exec_id,
                    tty,
                    reader,
                    writer,
                    lambda: self.saw_input(login),
                    close_on_eof=kind in ("sftp", "scp"),
                )
            except ConnectionError:  # the engine's side broke: the server may have stopped
                if await _stopped(engine, target.container):
                    _say(process, server_stopped(self.hub_url, login))
                    return 255
                raise
            try:
                status = await engine.exit_code(exec_id)
            except ExecFailed:  # the container is gone, and the exec with it
                status = None
            # was it her server stopping? (a process may also end well as it stops: its
            # input closed)
            if await self._server_stopped(login, landing, status):
                status = None
                _say(process, server_stopped(self.hub_url, login))
                return 255
        finally:
            self.closed(counted)
            seconds = time.monotonic() - started
            self.gate.log.info("%s", ended_line(record, seconds, status))
        return 255 if status is None else status

    async def _start_then_land(
        self, process: asyncssh.SSHServerProcess, login: Login, why: str
    ) -> Landing | str:
        """Her stopped default server started with its last options, its progress shown
        on the session's stderr, then where the session runs; else a sentence (``why``
        where it was not stopped)."""
        try:
            target = await self.gate.hub.target(login)
        except (httpx.HTTPError, ProbeError):
            return HUB_DOWN
        if target is None or target.state != "stopped":
            return why
        options = target.last_options or {}
        _say(process, starting_line(bool(target.last_options)))
        try:
            refused = await self.gate.hub.start(login.user, options)
            if refused is not None:
                return start_refused(self.hub_url, login, refused)
            self.gate.log.info("SSH started the server of %s", login.user)
            failed = await asyncio.wait_for(
                self._follow_progress(login, process), timeout=self.start_timeout
            )
            if failed is not None:
                return start_refused(self.hub_url, login, failed)
        except (httpx.HTTPError, ProbeError):
            return HUB_DOWN
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on Python 3.10
            return not_running(self.hub_url, login, pending=True)
        return await self.land(login)

    async def _follow_progress(
        self, login: Login, process: asyncssh.SSHServerProcess
    ) -> str | None:
        """The spawn's progress shown in the session until it is ready; the failure's
        message when it failed."""
        async for event in self.gate.hub.progress(login.user):
            message = str(event.get("message") or "")[:200]
            if message:
                _say(process, f"  {message}")
            if event.get("failed"):
                return message
            if event.get("ready"):
                break
        return None

    async def _server_stopped(self, login: Login, landing: Landing, status: int | None) -> bool:
        """Whether the session's process ended because its server stopped: killed (no
        status, or a signal's) while the container stopped, or the hub no longer saying
        this container runs her server (stopping or stopped)."""
        container = landing.target.container
        if (status is None or status >= 128) and await _stopped(landing.engine, container):
            return True
        try:
            now = await self.gate.hub.target(login)
        except (httpx.HTTPError, ProbeError):
            return False
        return now is None or not now.running or now.container != container

    async def forward(self, gateway: GatewayServer, host: str, port: int) -> SSHTCPStreamSession:
        """A ``direct-tcpip`` channel (``ssh -L``): the relay started in her container and
        connected to ``host:port`` from there, or :class:`asyncssh.ChannelOpenError` with
        the reason the client prints (``channel N: open failed: ...``)."""
        login = gateway.login
        refusal = forward_refusal(host, port, gateway.forwards_open)
        if login is None or refusal is not None:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, refusal or "not logged in"
            )
        gateway.forwards_open += 1
        try:
            return await self._relay(gateway, login, host, port)
        except BaseException:
            gateway.forwards_open -= 1
            raise

    async def _relay(
        self, gateway: GatewayServer, login: Login, host: str, port: int
    ) -> SSHTCPStreamSession:
        try:
            landing = gateway.landing or await self.land(login)
            if isinstance(landing, str):
                raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, landing)
            gateway.landing = landing
            engine = landing.engine
            exec_id = await engine.create(
                landing.target.container,
                relay_argv(host, port),
                user=landing.user,
                workdir=landing.env.get("HOME") or None,
                tty=False,
                env={},
            )
            reader, writer = await engine.start(exec_id, False)
        except ExecFailed as e:
            gateway.landing = None  # the server may have stopped: ask the hub again next time
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(e)) from None
        demux = Demuxer()
        early: list[bytes] = []
        try:
            why = await asyncio.wait_for(
                _relay_connected(reader, demux, early), RELAY_CONNECT_TIMEOUT
            )
        except asyncio.TimeoutError:
            why = "timed out"
        if why is not None:
            writer.close()
            self.gate.log.info(
                "SSH forward failed: user=%s server=%s to=%s:%d: %s",
                login.user,
                login.server or "(default)",
                host[:64],
                port,
                why,
            )
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, f"connect failed: {why}")
        self.gate.log.info(
            "SSH forward opened: user=%s server=%s to=%s:%d",
            login.user,
            login.server or "(default)",
            host[:64],
            port,
        )

        async def carry(chan_reader: asyncssh.SSHReader, chan_writer: asyncssh.SSHWriter) -> None:
            counted = self.opened(login, "forward", gateway.peer)
            try:
                for data in early:
                    chan_writer.write(data)
                await _pipe(
                    chan_reader, chan_writer, reader, writer, demux, lambda: self.saw_input(login)
                )
            finally:
                self.closed(counted)
                gateway.forwards_open -= 1
                with contextlib.suppress(Exception):
                    chan_writer.close()

        return SSHTCPStreamSession(carry)

    def new_process(self) -> GatewayProcess:
        """A session channel's handler (the gateway server's ``session_requested``)."""
        return GatewayProcess(self.handle, None, 0, False)

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()


async def _relay_connected(
    reader: asyncio.StreamReader, demux: Demuxer, early: list[bytes]
) -> str | None:
    """None once the relay wrote its ``+`` (what came after it kept in ``early``), else why
    it did not connect (its stderr, bounded)."""
    errors = b""
    while data := await reader.read(CHUNK):
        for stream, payload in demux.feed(data):
            if stream == 2:
                errors = (errors + payload)[:200]
            elif payload:
                if payload[:1] == b"+" and not early:
                    payload = payload[1:]
                    early.append(payload)
                    return None
                early.append(payload)
    text = errors.decode(errors="replace").strip()
    return text.splitlines()[-1] if text else "the relay ended"


async def _pipe(
    chan_reader: asyncssh.SSHReader,
    chan_writer: asyncssh.SSHWriter,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    demux: Demuxer,
    saw_input: Callable[[], None],
) -> None:
    """A forwarded connection both ways, until the relay ends."""

    async def pump_in() -> None:
        while data := await chan_reader.read(CHUNK):
            saw_input()
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        else:  # TLS can't half-close: the client's EOF ends the connection
            writer.close()

    feeding = asyncio.create_task(pump_in())
    try:
        while data := await reader.read(CHUNK):
            for stream, payload in demux.feed(data):
                if stream == 1:
                    chan_writer.write(payload)
            await chan_writer.drain()
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await feeding
        writer.close()


async def _bridge(
    process: asyncssh.SSHServerProcess,
    engine: NodeEngine,
    exec_id: str,
    tty: bool,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    saw_input: Callable[[], None],
    close_on_eof: bool = False,
) -> None:
    """Input to the exec until EOF, its output to the channel until the process ends.
    ``close_on_eof``: where the engine's connection can't be half-closed (TLS), the
    client's EOF closes it (sftp and scp: the client has every answer it waits for by then)."""

    async def pump_in() -> None:
        while True:
            try:
                data = await process.stdin.read(CHUNK)
            except asyncssh.TerminalSizeChanged as e:
                with contextlib.suppress(ExecFailed):
                    await engine.resize(exec_id, e.width, e.height)
                continue
            except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                continue
            if not data:
                # a terminal has one end for both ways: sshd ignores EOF there, and
                # closing the engine's side would end the output too
                if not tty and writer.can_write_eof():
                    writer.write_eof()
                elif close_on_eof:  # TLS can't half-close: end it all
                    writer.close()
                return
            saw_input()
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


async def _stopped(engine: NodeEngine, container: str, within: float = 3.0) -> bool:
    """Whether the server's container stopped (or is gone), waiting up to ``within``
    seconds for the engine to say so: an exec's stream may end before the container's
    state changes."""
    deadline = time.monotonic() + within
    while True:
        try:
            info = await engine.inspect(container)
        except ExecFailed as e:
            return "gone" in str(e)  # not when the engine did not answer
        state = info.get("State") or {}
        if not state.get("Running") or state.get("Restarting"):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)


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


__all__ = ["Landing", "Sessions"]
