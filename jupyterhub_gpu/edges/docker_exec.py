"""A process in a running container, its input and output as asyncio streams: the SSH
gateway's way into a user's server (``docker exec`` through the node's engine).

The exec is made and read back with docker-py (:mod:`.docker_nodes`'s client, the node's
own CA only) off the event loop; its start is a hijacked HTTP connection opened here with
asyncio (a unix socket, or TCP with the node's TLS), so the bytes flow both ways without
a thread per session. Docker's ``ssh://`` endpoints are not supported by the gateway yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import docker

from jupyterhub_gpu.edges.docker_nodes import node_client, tls_config
from jupyterhub_gpu.errors import ExecFailed as ExecFailed
from jupyterhub_gpu.wire.nodes_file import NodeSpec

#: how long one engine call may take (create, inspect, resize), and the start's answer
ENGINE_TIMEOUT = 15.0


class NodeEngine:
    """One node's engine, for execs (one docker-py client per node, reused)."""

    def __init__(self, spec: NodeSpec, timeout: float = ENGINE_TIMEOUT) -> None:
        self.spec = spec
        self.timeout = timeout
        self._client: docker.APIClient | None = None

    def _api(self) -> docker.APIClient:
        if self._client is None:
            self._client = node_client(self.spec, self.timeout, tls_config(self.spec))
        return self._client

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        call = functools.partial(getattr(self._api(), method), *args, **kwargs)
        try:
            return await asyncio.wait_for(loop.run_in_executor(None, call), self.timeout + 5)
        except docker.errors.NotFound as e:
            raise ExecFailed("the server's container is gone") from e
        except (docker.errors.DockerException, OSError, asyncio.TimeoutError) as e:
            raise ExecFailed(f"the node's engine did not answer ({type(e).__name__})") from e

    async def inspect(self, container: str) -> Mapping[str, Any]:
        return dict(await self._call("inspect_container", container))

    async def create(
        self,
        container: str,
        command: Sequence[str],
        *,
        user: str,
        workdir: str | None,
        tty: bool,
        env: Mapping[str, str],
    ) -> str:
        made = await self._call(
            "exec_create",
            container,
            list(command),
            stdin=True,
            stdout=True,
            stderr=True,
            tty=tty,
            user=user,
            workdir=workdir,
            environment=dict(env),
        )
        return str(made["Id"])

    async def resize(self, exec_id: str, width: int, height: int) -> None:
        if width > 0 and height > 0:
            await self._call("exec_resize", exec_id, height=height, width=width)

    async def exit_code(self, exec_id: str) -> int | None:
        """The process's exit status (None if the engine does not know it yet)."""
        for _ in range(20):
            info = await self._call("exec_inspect", exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            await asyncio.sleep(0.05)
        return None

    async def start(
        self, exec_id: str, tty: bool
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The exec started, its hijacked connection: write stdin, read the output (raw
        with a TTY, else Docker's frames: :class:`~jupyterhub_gpu.wire.docker_stream.Demuxer`)."""
        reader, writer = await asyncio.wait_for(self._connect(), self.timeout)
        body = json.dumps({"Detach": False, "Tty": tty}).encode()
        head = (
            f"POST /exec/{exec_id}/start HTTP/1.1\r\nHost: docker\r\n"
            "Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        try:
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            writer.close()
            raise ExecFailed("the node's engine did not start the process") from None
        status = answer.split(b"\r\n", 1)[0].split(b" ")
        if len(status) < 2 or status[1] not in (b"101", b"200"):
            writer.close()
            raise ExecFailed(f"the node's engine refused to start the process ({status[1:2]})")
        return reader, writer

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        url = urlsplit(self.spec.docker_url)
        if url.scheme == "unix":
            return await asyncio.open_unix_connection(url.path)
        if url.scheme in ("tcp", "https") and url.hostname:
            context = self._tls_context()
            port = url.port or (2376 if context else 2375)
            raw_reader, raw_writer = await asyncio.open_connection(url.hostname, port)
            if context is None:
                return raw_reader, raw_writer
            tls = TLSStream(context, url.hostname, raw_reader, raw_writer)
            try:
                await tls.handshake()
            except (ssl.SSLError, OSError, asyncio.IncompleteReadError) as e:
                raw_writer.close()
                raise ExecFailed(f"the node's engine refused TLS ({type(e).__name__})") from e
            return tls.reader, tls  # type: ignore[return-value]
        raise ExecFailed(f"the gateway can't reach an engine at {url.scheme}:// yet")

    def _tls_context(self) -> ssl.SSLContext | None:
        tls = self.spec.tls
        if not tls:
            return None
        context = ssl.create_default_context(cafile=tls["ca_cert"])
        context.load_cert_chain(tls["client_cert"], tls["client_key"])
        return context

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class TLSStream:
    """TLS over an asyncio connection that can be half-closed: :meth:`write_eof` sends
    TLS's close_notify and leaves the socket open, so the engine gives the process EOF on
    its stdin and its output still comes back (asyncio's own TLS transport can't do that).
    The writer side of a stream pair (``write``, ``drain``, ``write_eof``, ``close``);
    :attr:`reader` the plaintext coming back."""

    def __init__(
        self,
        context: ssl.SSLContext,
        hostname: str,
        raw_reader: asyncio.StreamReader,
        raw_writer: asyncio.StreamWriter,
    ) -> None:
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_hostname=hostname)
        self._raw_reader, self._raw_writer = raw_reader, raw_writer
        self.reader = asyncio.StreamReader(limit=2**20)
        self._pump: asyncio.Task[None] | None = None
        self._eof_sent = False

    def _flush(self) -> None:
        data = self._out.read()
        if data:
            self._raw_writer.write(data)

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = await self._raw_reader.read(65536)
                if not data:
                    raise asyncio.IncompleteReadError(b"", None) from None
                self._in.write(data)
        self._flush()
        self._pump = asyncio.create_task(self._read_loop())

    async def _read_loop(self) -> None:
        try:
            while data := await self._raw_reader.read(65536):
                self._in.write(data)
                while True:
                    try:
                        plain = self._tls.read(65536)
                    except ssl.SSLWantReadError:
                        break
                    except ssl.SSLZeroReturnError:
                        plain = b""
                    if not plain:  # the engine's close_notify: its output is done
                        self._flush()
                        self.reader.feed_eof()
                        return
                    self.reader.feed_data(plain)
                self._flush()  # e.g. TLS 1.3 key updates
        except (ssl.SSLError, OSError) as e:
            self.reader.set_exception(ConnectionResetError(str(e)))
            return
        self.reader.feed_eof()

    def write(self, data: bytes) -> None:
        if self._eof_sent:
            return
        self._tls.write(data)
        self._flush()

    async def drain(self) -> None:
        await self._raw_writer.drain()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._eof_sent:
            return
        self._eof_sent = True
        # the close_notify is written; the engine's answer comes in the read loop
        with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLError):
            self._tls.unwrap()
        self._flush()

    def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
        self._raw_writer.close()


__all__ = ["ENGINE_TIMEOUT", "ExecFailed", "NodeEngine", "TLSStream"]
