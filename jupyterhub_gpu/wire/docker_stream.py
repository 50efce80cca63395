"""Docker's multiplexed exec stream (no TTY): frames of an 8-byte header (stream: 0 stdin,
1 stdout, 2 stderr; three zero bytes; the payload's length, big-endian) and the payload.
With a TTY the stream is raw bytes and needs no parser."""

from __future__ import annotations

import struct

from jupyterhub_gpu.errors import ProbeError

HEADER = struct.Struct(">BxxxL")
#: a frame larger than this breaks the stream's contract (Docker sends at most 32 KiB)
MAX_FRAME = 1 << 20


class Demuxer:
    """Fed bytes as they come; returns the whole frames' payloads as ``(stream, bytes)``."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buffer += data
        out: list[tuple[int, bytes]] = []
        while len(self._buffer) >= HEADER.size:
            stream, size = HEADER.unpack_from(self._buffer)
            if stream > 2 or size > MAX_FRAME:
                raise ProbeError(f"not a Docker exec stream (stream {stream}, {size} bytes)")
            end = HEADER.size + size
            if len(self._buffer) < end:
                break
            out.append((stream, bytes(self._buffer[HEADER.size : end])))
            del self._buffer[:end]
        return out

    @property
    def pending(self) -> int:
        """Bytes of a frame not yet whole."""
        return len(self._buffer)


__all__ = ["HEADER", "Demuxer"]
