"""A port for a new server on a node (host networking: one port per server and node)."""

from __future__ import annotations

import errno
import random
import socket

from .ledger import GPULedger

TRIES = 200


def reserve_port(
    ledger: GPULedger,
    holder: str,
    node: str,
    address: str,
    port_range: tuple[int, int],
    rng: random.Random | None = None,
) -> int | None:
    """Take a random port of ``port_range`` on ``node`` for ``holder`` in the ledger, one
    that is also free on this machine when ``address`` is one of its own; ``None`` if
    :data:`TRIES` random picks found none."""
    low, high = port_range
    rng = rng or random.Random()
    for _ in range(TRIES):
        port = rng.randint(low, high)
        if free_locally(address, port) and ledger.reserve_port(holder, node, port):
            return port
    return None


def free_locally(address: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``address`` when that address is this machine's."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, port))
    except OSError as e:
        # EADDRNOTAVAIL: the address is another host's; the ledger alone decides
        return e.errno == errno.EADDRNOTAVAIL
    return True
