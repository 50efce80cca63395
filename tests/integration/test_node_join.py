"""``jupyterhub-gpu node token`` on a hub, ``node join`` on a fresh bare node (a network
namespace with a plain Docker engine, as a prepared server has: tests/support/bare_node.py),
the hub's join service between them, then ``node join`` again and ``node leave``; and
tokens refused (used, expired, for another name, a wrong CA fingerprint) with a sentence
and nothing changed on the node.

Stand-ins: ``systemctl`` on the node is tests/support/systemctl_standin.py (it runs what
the unit files say inside the node's namespace); the GPU is a declared inventory (no
NVML here, ``--inventory``); the Container Toolkit is the test cluster's fake hook on
PATH. The hub's side is ``hub install --no-start`` (the site laid out) and its join
service as the hub would run it (``node serve``), on the site address 10.250.0.1.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from jupyterhub_gpu.cli.join_service import JoinSettings, check_token
from jupyterhub_gpu.cli.layout import Site
from tests.support import systemctl_standin
from tests.support.bare_node import HOOK_DIR, REPO, SITE_ADDRESS, BareNode
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
NODE = BareNode(3)
PY = sys.executable
PORT = 9452  # not the default 9451: test_install_quick's hub serves that one, maybe at once


def jhgpu(*args: str, env: dict[str, str] | None = None, wrap: list[str] | None = None,
          timeout: float = 240) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [*(wrap or []), PY, "-m", "jupyterhub_gpu.cli", *args], capture_output=True, text=True,
        env=env or {**os.environ, "PYTHONPATH": str(REPO)}, timeout=timeout, check=False,
    )  # fmt: skip


@dataclass
class Hub:
    site: Site
    serve: subprocess.Popen[bytes]

    def token(self, *args: str) -> str:
        done = jhgpu("node", "token", "--etc", str(self.site.etc), "--state",
                     str(self.site.state), "--port", str(PORT), *args)  # fmt: skip
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1 and " node join " in lines[0], done.stdout  # no wheel kept here
        return lines[0]

    def nodes(self) -> list[dict[str, object]]:
        return list(yaml.safe_load(self.site.nodes_file.read_text())["nodes"] or [])


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    tmp = tmp_path_factory.mktemp("hub")
    (tmp / "shared/home").mkdir(parents=True)
    site = Site(etc=tmp / "etc", state=tmp / "state")
    done = jhgpu("hub", "install", "--no-start", "--etc", str(site.etc), "--state",
                 str(site.state), "--root", str(tmp), "--hub-ip", SITE_ADDRESS,
                 "--home-template", str(tmp / "shared/home/{username}"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = JoinSettings(site, SITE_ADDRESS, PORT, str(tmp / "shared/home"))
    log = open(tmp / "join-service.log", "wb")  # noqa: SIM115 - closed with the process
    serve = subprocess.Popen(
        [PY, "-m", "jupyterhub_gpu.cli", "node", "serve", "--etc", str(site.etc), "--state",
         str(site.state), "--address", settings.address, "--port", str(PORT), "--home-root",
         settings.home_root],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def listening() -> bool:
        return b"join service on" in (tmp / "join-service.log").read_bytes()

    wait_until(listening, 30, "the join service to listen")
    try:
        yield Hub(site, serve)
    finally:
        serve.terminate()
        serve.wait(10)
        log.close()


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BareNode, Path, dict[str, str]]]:
    """A prepared bare node: its namespace, Docker running on its unix socket (no TLS,
    no daemon.json of ours); (node, its root, the environment of its root shell)."""
    if not HOOK_DIR.exists():
        pytest.fail("the test cluster is not up: scripts/cluster.sh up 3", pytrace=False)
    tmp = tmp_path_factory.mktemp("node")
    root = tmp / "root"
    root.mkdir()
    NODE.create()
    stock = tmp / "stock"
    stock.mkdir()
    (stock / "docker.conf").write_text("[Service]\nExecStart=/usr/sbin/dockerd\n")
    (stock / "daemon.json").write_text(json.dumps({"hosts": ["unix:///var/run/docker.sock"]}))
    NODE.start_engine(stock / "docker.conf", stock / "daemon.json")
    NODE.engine = None  # the stand-in's restart stops it by its pidfile
    bin_dir = systemctl_standin.install(tmp / "bin", NODE, root)
    inventory = tmp / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": [{
        "name": "gpu-j", "driver_version": "550.54.15", "cuda_driver_version": "12.4",
        "gpus": [{"uuid": f"GPU-{i}0000000-0000-4000-8000-000000000000", "index": i,
                  "model": "NVIDIA GeForce RTX 3090", "memory_mib": 24576,
                  "compute_capability": "8.6"} for i in range(2)]}]}))  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PATH": f"{bin_dir}:{HOOK_DIR}:{os.environ['PATH']}",
        "DOCKER_HOST": f"unix://{NODE.socket}",
        "JHGPU_TEST_INVENTORY": str(inventory),
    }
    try:
        yield NODE, root, env
    finally:
        NODE.destroy()


def join(node: tuple[BareNode, Path, dict[str, str]], command: str, *extra: str,
         root: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The join line as `node token` printed it, on the node (its root folder standing in
    for /, its declared inventory)."""
    bare, node_root, env = node
    root = root or node_root
    words = command.split()
    assert words[0].endswith("/jupyterhub-gpu"), command
    return jhgpu(*words[1:], "--root", str(root), "--etc", str(root / "etc/jupyterhub-gpu"),
                 "--venv", str(Path(PY).parent.parent), "--inventory",
                 env["JHGPU_TEST_INVENTORY"], *extra, env=env, wrap=bare.wrap)  # fmt: skip


def test_a_node_joins_with_one_command_and_again_safely(
    hub: Hub, node: tuple[BareNode, Path, dict[str, str]]
) -> None:
    bare, root, _ = node
    command = hub.token("--node", "gpu-j", "--ttl", "10m")
    assert "--ca-fingerprint sha256:" in command and "--name gpu-j" in command
    started = time.monotonic()
    done = join(node, command)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last == "gpu-j joined: 2 x RTX 3090, all checks passed", done.stdout + done.stderr
    print(f"\n[node join] from `node join` to 'joined': {took:.1f} s\n{done.stdout}")
    # the hub lists it (a live add: the nodes file the running hub re-reads), undrained
    entry = next(e for e in hub.nodes() if e["name"] == "gpu-j")
    assert entry["address"] == bare.address and not entry.get("drain")
    assert entry["docker_url"] == f"tcp://{bare.address}:2376"
    # the key was made on the node and stays there; the certificate names that node only
    etc = root / "etc/jupyterhub-gpu"
    assert stat.S_IMODE((etc / "tls/key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((etc / "agent.token").stat().st_mode) == 0o600
    assert not hub.site.node_dir("gpu-j").exists()
    cert = x509.load_pem_x509_certificate((etc / "tls/cert.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(map(str, names.get_values_for_type(x509.IPAddress))) == [bare.address]
    assert names.get_values_for_type(x509.DNSName) == ["gpu-j"]
    daemon = json.loads((root / "etc/docker/daemon.json").read_text())
    assert daemon["live-restore"] is True and daemon["tlsverify"] is True
    # its Docker trusts the site's registry on the hub's address (docs/images.md)
    trust = root / "etc/docker/certs.d" / f"{SITE_ADDRESS}:5443" / "ca.crt"
    assert trust.read_bytes() == hub.site.ca_cert.read_bytes()
    # the token is used up
    assert "already used" in check_token(hub.site, command.split("--token ")[1].split()[0],
                                         "gpu-j", use=False)  # fmt: skip
    # the hub reaches the node's Docker with its client certificate, over TLS
    tls = ["--tlsverify", f"--tlscacert={hub.site.ca_cert}", f"--tlscert={hub.site.hub_cert}",
           f"--tlskey={hub.site.hub_key}", "-H", f"tcp://{bare.address}:2376"]  # fmt: skip
    ps = subprocess.run(["docker", *tls, "network", "ls", "--format", "{{.Name}}"],
                        capture_output=True, text=True, check=False)  # fmt: skip
    assert "jupyterhub-gpu-users" in ps.stdout.split(), ps.stderr

    # again: already joined, nothing to redo (Docker not restarted), still listed
    log = bare.folder / "systemctl.log"
    before = log.read_text()
    again = join(node, command)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "gpu-j has already joined" in again.stdout
    assert again.stdout.strip().splitlines()[-1] == last
    calls = log.read_text()[len(before) :]
    assert "docker" not in calls, calls
    assert [e["name"] for e in hub.nodes()].count("gpu-j") == 1


def test_refused_tokens_change_nothing_on_the_node(
    hub: Hub, node: tuple[BareNode, Path, dict[str, str]], tmp_path: Path
) -> None:
    bare = node[0]
    fresh = tmp_path / "fresh-root"  # another machine's / : nothing of ours yet
    fresh.mkdir()
    listed = hub.site.nodes_file.read_bytes()
    log = bare.folder / "systemctl.log"
    calls = log.read_text() if log.exists() else ""
    wrong_name = hub.token("--node", "gpu-other")
    expired = hub.token("--node", "gpu-k", "--ttl", "1m")
    tokens = json.loads((hub.site.state / "join-tokens.json").read_text())
    tokens[-1]["expires"] = time.time() - 1  # as if its minute had passed
    (hub.site.state / "join-tokens.json").write_text(json.dumps(tokens))
    used = hub.token("--node", "gpu-k")
    token = used.split("--token ")[1].split()[0]
    assert check_token(hub.site, token, "gpu-k", use=True) == ""
    cases = {
        "is for the node gpu-other, not gpu-k": (wrong_name, ["--name", "gpu-k"]),
        "has expired": (expired, []),
        "was already used": (used, []),
    }
    for sentence, (command, extra) in cases.items():
        done = join(node, command, *extra, root=fresh)
        assert done.returncode == 1, done.stdout
        assert sentence in done.stderr and "Traceback" not in done.stderr, done.stderr
    fingerprint = used.split("sha256:")[1].split()[0]
    unbound = hub.token().split("--token ")[1].split()[0]
    wrong_ca = used.replace(token, unbound).replace(fingerprint, "0" * 64)
    done = join(node, wrong_ca, root=fresh)
    assert done.returncode == 1 and "nothing was changed" in done.stderr, done.stderr
    assert list(fresh.iterdir()) == []  # nothing written on the node
    assert hub.site.nodes_file.read_bytes() == listed  # nor on the hub's list
    assert (log.read_text() if log.exists() else "") == calls  # no systemctl call at all


def test_a_node_leaves(hub: Hub, node: tuple[BareNode, Path, dict[str, str]]) -> None:
    bare, root, env = node
    if not any(e["name"] == "gpu-j" for e in hub.nodes()):
        pytest.skip("needs the joined node of the first test")
    done = jhgpu("node", "leave", "--etc", str(root / "etc/jupyterhub-gpu"), "--root",
                 str(root), env=env, wrap=bare.wrap)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu-j left" in done.stdout
    assert all(e["name"] != "gpu-j" for e in hub.nodes())
    assert not (root / "etc/jupyterhub-gpu/agent.token").exists()
    assert not (root / "etc/docker/certs.d" / f"{SITE_ADDRESS}:5443").exists()
    rules = bare.run(["iptables", "-S", "DOCKER-USER"]).stdout
    assert "jhgpu-users" not in rules, rules
