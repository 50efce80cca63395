"""The node firewall keeps the containers' DNS when the resolver is on a private address:
a resolver on the site's network (this machine, 10.250.0.1:53, a tiny DNS server of this
test), named in the node's resolv.conf, answers a container on the user bridge through
the firewall that `jupyterhub-gpu firewall` applies; with the resolvers left out
(`--no-host-dns`, the old firewall) the same lookup fails. Docker's embedded DNS forwards
the containers' queries from their own network namespace, so they cross the bridge.

alone: it replaces a node's firewall (restored as scripts/cluster.sh applies it)."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyterhub_gpu.cli.units import firewall_argv
from jupyterhub_gpu.core.usernet import BRIDGE_NAME, network_options
from tests.support.cluster import REPO, SITE_ADDRESS, TEST_IMAGE, Engine

pytestmark = [pytest.mark.integration, pytest.mark.alone]
SCRIPT = str(REPO / "scripts" / "node-firewall.sh")
CLUSTER_FIREWALL = ["--bridge", "jhgpu-users", "--allow", f"{SITE_ADDRESS}:8081",
                    "--allow", f"{SITE_ADDRESS}:20000-20999"]  # fmt: skip
ANSWER = "10.250.77.77"
NAME = "probe.jhgpu.test"
LOOKUP = f"import socket; print(socket.gethostbyname({NAME!r}))"


def answer(query: bytes) -> bytes:
    """A DNS response to ``query``: one A record, ANSWER, for whatever was asked."""
    header, question = query[:12], query[12:]
    end = question.index(b"\0") + 5  # the name, then QTYPE and QCLASS
    (qid,) = struct.unpack("!H", header[:2])
    response = struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question[:end]
    return response + b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ANSWER)


@pytest.fixture
def resolver() -> Iterator[list[bytes]]:
    """A DNS server on the site's private address, port 53; yields the names asked."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((SITE_ADDRESS, 53))
    sock.settimeout(0.2)
    asked: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                query, peer = sock.recvfrom(512)
            except TimeoutError:
                continue
            asked.append(query[12:])
            sock.sendto(answer(query), peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield asked
    finally:
        stop.set()
        thread.join(5)
        sock.close()


@pytest.fixture
def user_network(engines: list[Engine]) -> Iterator[tuple[Engine, str]]:
    """(the node, its user network on bridge jhgpu-users), made as the hub makes it when
    no hub has yet."""
    node = engines[0]
    with node.client() as client:
        made = None
        found = [
            n.name
            for n in client.networks.list(filters={"driver": "bridge"}, greedy=True)
            if n.attrs.get("Options", {}).get(BRIDGE_NAME) == "jhgpu-users"
        ]
        if not found:
            made = client.networks.create(
                "jhgpu-users", driver="bridge", options=network_options("jhgpu-users")
            )
            found = ["jhgpu-users"]
        try:
            yield node, found[0]
        finally:
            subprocess.run(node.nsenter(SCRIPT, *CLUSTER_FIREWALL), check=True,
                           capture_output=True)  # fmt: skip
            if made is not None:
                made.remove()


def lookup(node: Engine, network: str) -> tuple[int, str]:
    with node.client() as client:
        c = client.containers.run(
            TEST_IMAGE, ["python3", "-c", LOOKUP], network=network, dns=[SITE_ADDRESS],
            user="1000:1000", environment={"RES_OPTIONS": "timeout:2 attempts:2"}, detach=True,
        )  # fmt: skip
        try:
            rc = int(c.wait(timeout=60)["StatusCode"])
            return rc, c.logs(stderr=False).decode(errors="replace").strip()
        finally:
            c.remove(force=True)


def test_a_private_resolver_answers_containers_through_the_firewall(
    user_network: tuple[Engine, str], resolver: list[bytes], tmp_path: Path
) -> None:
    node, network = user_network
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {SITE_ADDRESS}\n")
    missing = tmp_path / "none"
    # the firewall without the resolvers (as before): the lookup fails, nothing reached it
    argv = firewall_argv([*CLUSTER_FIREWALL, "--no-host-dns"], resolv, missing, missing)
    subprocess.run(node.nsenter(SCRIPT, *argv), check=True, capture_output=True)
    rc, out = lookup(node, network)
    assert rc != 0 and ANSWER not in out, out
    assert not [q for q in resolver if b"jhgpu" in q]
    # `jupyterhub-gpu firewall`: the node's resolver allowed, the same lookup answered
    argv = firewall_argv(CLUSTER_FIREWALL, resolv, missing, missing)
    assert argv[-2:] == ["--dns", SITE_ADDRESS]
    applied = subprocess.run(node.nsenter(SCRIPT, *argv), capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    rc, out = lookup(node, network)
    assert (rc, out) == (0, ANSWER)
    assert [q for q in resolver if b"jhgpu" in q]
