"""The relay a forwarded connection (``ssh -L``) runs inside the user's container, as her
uid, with the image's ``python3``: it connects to HOST PORT from the container's network
namespace (so the node firewall and the user bridge decide, as for her notebook), writes
one ``+`` on stdout once connected (or the reason on stderr, status 1), then copies stdin
to the socket and the socket to stdout, 64 KiB at a time, until both ends are done."""

from __future__ import annotations

#: the relay's Python source (``python3 -c RELAY HOST PORT``)
RELAY = r"""
import os, socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=10)
except OSError as e:
    sys.stderr.write((e.strerror or str(e)) if not isinstance(e, socket.timeout) else "timed out")
    sys.exit(1)
s.settimeout(None)
out = sys.stdout.buffer
out.write(b"+"); out.flush()
def up():
    try:
        while True:
            d = os.read(0, 65536)
            if not d:
                break
            s.sendall(d)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        os._exit(0)
threading.Thread(target=up, daemon=True).start()
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out.write(d); out.flush()
except OSError:
    pass
os._exit(0)
"""

#: the relay's process: python3 where the image has it, else the reason and status 1
RELAY_SH = (
    'command -v python3 >/dev/null 2>&1 || { echo "the server image has no python3" >&2; '
    'exit 1; }; exec python3 -c "$0" "$1" "$2"'
)


def relay_argv(host: str, port: int) -> list[str]:
    return ["sh", "-c", RELAY_SH, RELAY, host, str(port)]


__all__ = ["RELAY", "relay_argv"]
