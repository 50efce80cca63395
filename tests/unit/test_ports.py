"""Port choice for a new server (ports.py)."""

from __future__ import annotations

import random
import socket

import pytest

from jupyterhub_gpu.ledger import GPULedger
from jupyterhub_gpu.ports import free_locally, reserve_port

pytestmark = pytest.mark.unit


def test_ports_are_taken_once_per_node() -> None:
    ledger, rng = GPULedger(), random.Random(1)
    first = reserve_port(ledger, "alice/", "n", "10.255.255.1", (40000, 40001), rng)
    second = reserve_port(ledger, "bob/", "n", "10.255.255.1", (40000, 40001), rng)
    assert {first, second} == {40000, 40001}
    assert reserve_port(ledger, "carol/", "n", "10.255.255.1", (40000, 40001), rng) is None
    assert reserve_port(ledger, "carol/", "other", "10.255.255.1", (40000, 40001), rng) in (
        40000,
        40001,
    )


def test_a_port_in_use_on_this_machine_is_skipped() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not free_locally("127.0.0.1", port)
        assert reserve_port(GPULedger(), "alice/", "n", "127.0.0.1", (port, port)) is None
    assert free_locally("10.255.255.1", port)  # not this machine's address: the ledger decides
