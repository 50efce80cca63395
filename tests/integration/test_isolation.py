"""The attack suite: what a user can reach from inside her own server.

Every attempt runs for real, inside a real single-user container on a namespaced node
(scripts/cluster.sh: node-c, its own network namespace, dockerd with the bridge and
iptables on, the node firewall of scripts/node-firewall.sh), as the user's uid, with a
small Python program executed in the container. Each blocked target has a control: the
same address and port reached from where it must be reachable (this machine, as the hub
is, or the node itself), so a test fails if a target was simply not there.

Attempts (each must fail): the node's Docker engine (unix socket in the container, TLS
port and plain 2375 on every address of the node and of the bridge gateways), a node
agent listening on every address of the node, the hub's API beyond the user's own server,
the proxy's API, the LDAP server, another user's container (its bridge address and its
published port), the other nodes and this machine's other addresses, cloud metadata; and
a port-squatting attempt: the attacker binds a range of ports, then a second user spawns
on the same node and gets their own server (the attacker's listeners see no request).
"""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import gpu_inventory
from tests.ldap_fixture import LDAPServer
from tests.support.cluster import SITE_ADDRESS, USER_NETWORK, Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
OPTIONS = {"image": "demo-cuda11", "gpu_count": 1, "mem_gib": 1, "cpu": 0.5}

# Runs inside the container: tries every target at once (short timeouts), prints JSON.
PROBE = r"""
import json, os, socket, sys, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor

targets, http = json.loads(sys.argv[1])

def connect(t):
    host, port = t
    s = socket.socket(); s.settimeout(2.0)
    try:
        s.connect((host, port)); return "open"
    except socket.timeout: return "timeout"
    except ConnectionRefusedError: return "refused"
    except OSError as e: return "error:" + type(e).__name__
    finally: s.close()

def get(u):
    url, auth = u
    headers = {"Authorization": "token " + os.environ[auth]} if auth else {}
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r: return r.status
    except urllib.error.HTTPError as e: return e.code
    except Exception as e: return "error:" + type(e).__name__

with ThreadPoolExecutor(64) as pool:
    conn = dict(zip(["%s:%d" % tuple(t) for t in targets], pool.map(connect, targets)))
    gets = dict(zip([u for u, _ in http], pool.map(get, http)))
gateways = []
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        gateways.append(socket.inet_ntoa(bytes.fromhex(f[2])[::-1]))
sockets = [p for p in ("/var/run/docker.sock", "/run/docker.sock", "/var/run/docker",
                       "/run/containerd/containerd.sock") if os.path.exists(p)]
mounts = [l for l in open("/proc/mounts").read().splitlines() if "docker" in l and ".sock" in l]
tb = socket.socket(); tb.bind(("0.0.0.0", 6006)); tb.listen(); tb.close()
print(json.dumps({"uid": os.getuid(), "connect": conn, "http": gets, "gateways": gateways,
                  "sockets": sockets, "socket_mounts": mounts, "tensorboard_6006": True}))
"""

# Runs inside the attacker's container: binds every port it can of a range, logs accepts.
SQUAT = r"""
import selectors, socket, sys, time
low, high, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sel, bound = selectors.DefaultSelector(), 0
for port in range(low, high + 1):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port)); s.listen(16); sel.register(s, selectors.EVENT_READ); bound += 1
    except OSError:
        s.close()
with open(log + ".ready", "w") as f: f.write(str(bound))
deadline = time.time() + 300
while time.time() < deadline:
    for key, _ in sel.select(1.0):
        conn, peer = key.fileobj.accept()
        with open(log, "a") as f: f.write("%s %s\n" % (key.fileobj.getsockname()[1], peer))
        conn.close()
"""


# A stand-in service: accepts, says its name, closes (for decoys that must be unreachable).
DECOY = r"""
import socket, sys, time
host, port, name, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port)); s.listen(16); open(ready, "w").write("ok"); s.settimeout(1.0)
deadline = time.time() + 600
while time.time() < deadline:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    c.sendall(name); c.close()
"""

METADATA = "169.254.169.254"


@pytest.fixture
def decoys(node: Engine, tmp_path: Path) -> Iterator[dict[str, tuple[str, int]]]:
    """Listeners where a user must not reach, each answering from where it must:
    a plain-TCP "Docker API" (2375) and an "sshd" (22) on every address of the node (the
    node's own services, bound to 0.0.0.0), a "site service" on the hub machine's site
    address outside the hub API's allowed ports (LDAP, a database), and "cloud metadata"
    on 169.254.169.254:80 (an address this test gives this machine's loopback)."""
    added = subprocess.run(["ip", "addr", "add", f"{METADATA}/32", "dev", "lo"]).returncode == 0
    site_port = free_port()
    assert site_port not in range(20000, 21000), "an allowed hub API port"
    spec = {
        "node_docker": ("0.0.0.0", 2375, True),
        "node_ssh": ("0.0.0.0", 22, True),
        "site_service": (SITE_ADDRESS, site_port, False),
        "metadata": (METADATA, 80, False),
    }
    procs = []
    try:
        for name, (host, port, in_node) in spec.items():
            ready = tmp_path / f"decoy-{name}.ready"
            argv = [sys.executable, "-c", DECOY, host, str(port), name, str(ready)]
            procs.append(subprocess.Popen(node.nsenter(*argv) if in_node else argv))
            wait_until(ready.exists, 20, f"decoy {name}")
        yield {
            "node_docker": (node.address, 2375),
            "node_ssh": (node.address, 22),
            "site_service": (SITE_ADDRESS, site_port),
            "metadata": (METADATA, 80),
        }
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        if added:
            subprocess.run(["ip", "addr", "del", f"{METADATA}/32", "dev", "lo"], check=False)


def banner_from(where: list[str], host: str, port: int) -> str:
    """What a decoy says to a connection made by ``where`` (a command prefix, e.g. an
    nsenter into the node); "" when it can't connect."""
    dial = (
        "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 3);"
        "print(s.recv(64).decode())"
    )
    r = subprocess.run([*where, sys.executable, "-c", dial, host, str(port)], capture_output=True)
    return r.stdout.decode().strip() if r.returncode == 0 else ""


@pytest.fixture
def node(engines: list[Engine]) -> Engine:
    """node-c: the node whose engine the hub reaches over TCP with TLS client certificates."""
    return engines[2]


@pytest.fixture
def agent_on_node(node: Engine, tmp_path: Path) -> Iterator[int]:
    """A node agent inside the node's namespace, listening on every address of the node
    (0.0.0.0), as an agent on a real node may: only the node firewall keeps users out."""
    port = free_port()
    inv = tmp_path / "agent-inventory.yaml"
    inv.write_text(json.dumps({"nodes": [gpu_inventory(node.name, "a9e47a9e", [RTX])]}))
    cmd = node.nsenter(
        sys.executable, "-m", "jupyterhub_gpu.services.agent", "--probe=declared",
        f"--inventory={inv}", f"--node={node.name}", "--ip=0.0.0.0", f"--port={port}",
    )  # fmt: skip
    env = {"JUPYTERHUB_GPU_AGENT_TOKEN": secrets.token_hex(16), "PATH": "/usr/bin:/bin"}
    log = (tmp_path / "agent.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: reachable(node.address, port), 20, f"agent in {node.netns}")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def hub(make_hub: Callable[..., Hub], node: Engine) -> Hub:
    inventory = [gpu_inventory(node.name, "15015015", [RTX, RTX])]
    return make_hub([node], inventory, TOKEN_ROLE_CONFIG)


def reachable(host: str, port: int) -> bool:
    """A TCP connect from this machine (where the hub runs)."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def container(node: Engine, hub: Hub, owner: str) -> Any:
    with node.client() as client:
        found = client.containers.list(
            ignore_removed=True,
            filters={"label": [f"jupyterhub-gpu.hub={hub.hub_id}", f"jupyterhub-gpu.owner={owner}"]}
        )
        assert len(found) == 1, found
        return found[0]


def run_in(c: Any, *argv: str) -> str:
    """``argv`` in container ``c`` as the container's user (the server's uid, not root)."""
    result = c.exec_run(list(argv))
    out = result.output.decode(errors="replace")
    assert result.exit_code == 0, out
    return out


def start_server(hub: Hub, name: str) -> dict[str, Any]:
    assert hub.create_user(name).status_code == 201
    r = hub.spawn(name, OPTIONS)
    assert r.status_code in (201, 202), r.text
    return hub.wait_ready(name)


def test_a_users_server_reaches_nothing_privileged(
    hub: Hub,
    node: Engine,
    agent_on_node: int,
    ldap_server: LDAPServer,
    decoys: dict[str, tuple[str, int]],
) -> None:
    start_server(hub, "alice")
    start_server(hub, "bob")
    alice, bob = container(node, hub, "alice"), container(node, hub, "bob")
    bob.reload()
    bob_ip = bob.attrs["NetworkSettings"]["Networks"][USER_NETWORK]["IPAddress"]
    bob_port = int(bob.attrs["NetworkSettings"]["Ports"]["8888/tcp"][0]["HostPort"])
    other_nodes = ["10.250.1.2", "10.250.2.2", "10.250.3.1"]  # + this machine's veth end

    # controls: from where they must answer, these targets do answer
    assert reachable(node.address, 2376), "node-c's Docker TLS port (the hub's way in)"
    ctx = ssl.create_default_context(cafile=node.tls["ca_cert"])
    ctx.load_cert_chain(node.tls["client_cert"], node.tls["client_key"])
    r = httpx.get(f"https://{node.address}:2376/version", verify=ctx, timeout=10)
    assert r.status_code == 200 and "ApiVersion" in r.json()
    assert reachable(node.address, agent_on_node), "the agent, from the hub's machine"
    assert reachable(node.address, bob_port), "bob's published port, from the hub's machine"
    assert reachable(SITE_ADDRESS, hub.hub_api_port), "the hub's API, for the servers"
    assert reachable("127.0.0.1", hub.proxy_api_port) and reachable("127.0.0.1", hub.port)
    assert reachable(ldap_server.host, ldap_server.port), "LDAP, from the hub's machine"
    dial = f"import socket; socket.create_connection(({bob_ip!r}, 8888), 3)"
    in_node = subprocess.run(node.nsenter(sys.executable, "-c", dial), capture_output=True)
    assert in_node.returncode == 0, f"bob's server from node-c itself: {in_node.stderr!r}"
    # the decoys answer where they must: the node's own ones from this machine, the site
    # service and the metadata address from the node (its own traffic is not filtered)
    for name in ("node_docker", "node_ssh"):
        assert banner_from([], *decoys[name]) == name, f"{name} from the hub's machine"
    for name in ("site_service", "metadata"):
        assert banner_from(node.nsenter(), *decoys[name]) == name, f"{name} from node-c"

    targets: list[tuple[str, int]] = []
    for host in (node.address, "172.17.0.1", *other_nodes):
        targets += [(host, 2375), (host, 2376), (host, agent_on_node), (host, 22)]
    targets += [
        (node.address, bob_port),  # bob's published port, from inside the node
        (bob_ip, 8888),  # bob's server on the user bridge (ICC off)
        ("169.254.169.254", 80),  # cloud metadata
        (SITE_ADDRESS, hub.proxy_api_port),  # the proxy's API (the hub machine's loopback)
        (SITE_ADDRESS, hub.port),  # the proxy's public port, not meant for containers
        (SITE_ADDRESS, ldap_server.port),  # LDAP: this site does not allow it
        *decoys.values(),  # the node's 2375 and 22, a site service, cloud metadata
    ]
    hub_api = f"http://{SITE_ADDRESS}:{hub.hub_api_port}/hub/api"
    http = [
        (f"{hub_api}/user", "JUPYTERHUB_API_TOKEN"),  # control: its own identity
        (f"{hub_api}/users", "JUPYTERHUB_API_TOKEN"),
        (f"{hub_api}/users/bob", "JUPYTERHUB_API_TOKEN"),
        (f"{hub_api}/proxy", "JUPYTERHUB_API_TOKEN"),
        (f"{hub_api}/users/bob/tokens", "JUPYTERHUB_API_TOKEN"),
    ]
    probe = json.loads(run_in(alice, "python3", "-c", PROBE, json.dumps([targets, http])))

    assert probe["uid"] != 0
    assert probe["sockets"] == [] and probe["socket_mounts"] == []
    assert probe["tensorboard_6006"]
    # the container's gateway is the user bridge: probe it too (the node's address on it)
    gateway = probe["gateways"][0]
    opened = {t: v for t, v in probe["connect"].items() if v == "open"}
    assert opened == {}, f"reachable from alice's server: {opened}"
    again = json.loads(
        run_in(
            alice, "python3", "-c", PROBE,
            json.dumps([[(gateway, p) for p in (2375, 2376, agent_on_node, bob_port, 22)], []]),
        )
    )  # fmt: skip
    assert all(v != "open" for v in again["connect"].values()), again["connect"]
    assert probe["http"][f"{hub_api}/user"] == 200, probe["http"]  # the hub is there...
    refused = {u: s for u, s in probe["http"].items() if not u.endswith("/user")}
    assert all(s in (403, 404) for s in refused.values()), refused  # ...and says no

    # TensorBoard's 6006 in both servers at once: each is its own, each sees its own
    for c, who in ((alice, "alice"), (bob, "bob")):
        ready = f"/tmp/tb-{secrets.token_hex(4)}.ready"
        c.exec_run(["python3", "-c", DECOY, "0.0.0.0", "6006", who, ready], detach=True)
        wait_until(lambda c=c, ready=ready: c.exec_run(["cat", ready]).exit_code == 0, 20, who)
    dial = "import socket; print(socket.create_connection(('127.0.0.1', 6006)).recv(9).decode())"
    assert run_in(alice, "python3", "-c", dial).strip() == "alice"
    assert run_in(bob, "python3", "-c", dial).strip() == "bob"


def test_squatted_ports_do_not_catch_the_next_users_server(
    hub: Hub, node: Engine, tmp_path: Path
) -> None:
    """alice binds 800 ports of the range where engines publish servers (and would bind
    8888 if her own server did not hold it) before bob spawns on the same node: bob's
    server is bob's, and nothing reaches alice's listeners. (With host networking a
    squatted port got bob's traffic: the hub routed /user/bob/ to alice's listener.)"""
    start_server(hub, "alice")
    alice = container(node, hub, "alice")
    log = "/tmp/squat.log"
    alice.exec_run(["python3", "-c", SQUAT, "32768", "33567", log], detach=True)

    def bound() -> int:
        out = alice.exec_run(["cat", log + ".ready"]).output.decode().strip()
        return int(out) if out.isdigit() else 0

    # nearly all 800: a port her own server's outgoing connections hold at that moment
    # (the range is also her namespace's ephemeral range) can't be bound (CI saw 799)
    assert wait_until(bound, 60, "alice's listeners") >= 780
    start_server(hub, "bob")
    token = hub.user_token("bob")
    r = httpx.get(
        f"{hub.url}/user/bob/api/me", headers={"Authorization": f"token {token}"}, timeout=30
    )
    assert r.status_code == 200 and r.json()["identity"]["username"] == "bob", r.text
    seen = alice.exec_run(["cat", log])
    assert seen.exit_code != 0, f"alice's listeners got connections: {seen.output!r}"
    bob = container(node, hub, "bob")
    bob.reload()
    assert bob.id != alice.id
    assert int(bob.attrs["NetworkSettings"]["Ports"]["8888/tcp"][0]["HostPort"]) > 0
