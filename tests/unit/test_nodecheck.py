# ruff: noqa: E501  (the tables read best one case a line)
"""``check-node``'s pure decisions (core/nodecheck.py), table-driven: every check can pass
and every check can fail with its fix; and the command's reading of the hub's config."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterhub_gpu.cli import check_node as cmd
from jupyterhub_gpu.core import nodecheck as nc
from jupyterhub_gpu.core.catalog.entries import CatalogEntry
from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.edges.nodecheck import FIREWALL_PROBE
from jupyterhub_gpu.wire.catalog_file import parse_entry

pytestmark = pytest.mark.unit

U0 = "GPU-00000000-0000-4000-8000-000000000000"
U1 = "GPU-11111111-0000-4000-8000-000000000000"
INV = NodeInventory(
    "n1",
    "550.54.15",
    (GPU(U0, 0, "RTX 3090", 24576, (8, 6)), GPU(U1, 1, "RTX 3090", 24576, (8, 6))),
    "12.4",
)


def by_name(checks: list[nc.Check]) -> dict[str, nc.Check]:
    return {c.check: c for c in checks}


# ---------------------------------------------------------------- engine
TLS = "tcp://10.0.0.2:2376"
ENGINE_CASES = [
    # facts, {check: ok}, a word of the fix of each failing one
    (
        nc.EngineFacts(
            TLS, True, version="24.0", api_version="1.43", tls=True, without_cert="refused"
        ),
        {"engine": True, "engine.tls": True, "engine.plain-tcp": True},
        "",
    ),
    (
        nc.EngineFacts(TLS, True, version="24.0", tls=True, without_cert="answered"),
        {"engine": True, "engine.tls": False, "engine.plain-tcp": True},
        "--tlsverify",
    ),
    (
        nc.EngineFacts("tcp://10.0.0.2:2375", True, version="24.0", insecure_plaintext=True),
        {"engine": True, "engine.tls": False, "engine.plain-tcp": True},
        "insecure_plaintext_docker_api",
    ),
    (
        nc.EngineFacts("unix:///var/run/docker.sock", True, plain_tcp_open=("10.0.0.2:2375",)),
        {"engine": True, "engine.plain-tcp": False},
        "2375",
    ),
    (
        nc.EngineFacts(TLS, False, error="ConnectionError: refused"),
        {"engine": False, "engine.plain-tcp": True},
        "--tlsverify",
    ),
    (
        nc.EngineFacts("unix:///var/run/docker.sock", False, error="no socket"),
        {"engine": False},
        "systemctl start docker",
    ),
]


@pytest.mark.parametrize(("facts", "want", "hint"), ENGINE_CASES)
def test_engine(facts: nc.EngineFacts, want: dict[str, bool], hint: str) -> None:
    got = by_name(nc.engine_checks("n1", facts))
    assert {k: got[k].ok for k in want} == want
    for c in got.values():
        if not c.ok:
            assert hint in c.fix, c
        else:
            assert c.fix == ""


# ---------------------------------------------------------------- user network
def net(icc: str = "false", bridge: str = "jhgpu-users", driver: str = "bridge") -> dict:
    return {
        "Driver": driver,
        "Options": {nc_icc: icc, "com.docker.network.bridge.name": bridge},
        "IPAM": {"Config": [{"Subnet": "172.18.0.0/16", "Gateway": "172.18.0.1"}]},
    }


nc_icc = "com.docker.network.bridge.enable_icc"


@pytest.mark.parametrize(
    ("info", "ok", "hint"),
    [
        (net(), True, ""),
        (net(icc="true"), False, "docker network rm"),
        (net(bridge="docker0"), False, "user_bridge"),
        (net(driver="host"), False, "bridge"),
        (None, False, "docker network create"),
    ],
)
def test_user_network(info: dict | None, ok: bool, hint: str) -> None:
    [c] = nc.network_checks("n1", info, "jupyterhub-gpu-users", "jhgpu-users")
    assert c.ok is ok and hint in c.fix


def test_bridge_gateway() -> None:
    assert nc.bridge_gateway(net()) == "172.18.0.1"
    assert nc.bridge_gateway({}) is None and nc.bridge_gateway(None) is None
    assert nc.bridge_gateway6(net()) is None and nc.bridge_gateway6(None) is None


def net6() -> dict:
    """A user network that Docker gave IPv6 (an engine with IPv6 on for new networks)."""
    info = net()
    info["EnableIPv6"] = True
    info["IPAM"]["Config"] = [
        {"Subnet": "fd00:1::/64", "Gateway": "fd00:1::1"},
        {"Subnet": "172.18.0.0/16", "Gateway": "172.18.0.1"},
    ]
    return info


def test_a_user_network_with_ipv6_fails_with_the_fix() -> None:
    # the node firewall filters IPv4 only: over IPv6 a user's container reaches the node
    [c] = nc.network_checks("n1", net6(), "jupyterhub-gpu-users", "jhgpu-users")
    assert not c.ok and "IPv6" in c.detail
    assert "docker network rm jupyterhub-gpu-users" in c.fix and "without IPv6" in c.fix


def test_the_create_fix_turns_ipv6_off() -> None:
    [c] = nc.network_checks("n1", None, "jupyterhub-gpu-users", "jhgpu-users")
    assert "--opt com.docker.network.enable_ipv6=false" in c.fix


def test_the_ipv6_gateway_is_probed_too() -> None:
    assert nc.bridge_gateway(net6()) == "172.18.0.1"  # the IPv4 one, whatever the order
    assert nc.bridge_gateway6(net6()) == "fd00:1::1"
    targets = nc.firewall_targets(
        node_address="10.0.0.2",
        gateway="172.18.0.1",
        gateway6="fd00:1::1",
        agent_port=9450,
        hub_api=HUB,
    )
    keys = {t.key for t in targets}
    assert {"[fd00:1::1]:2375", "[fd00:1::1]:2376", "[fd00:1::1]:9450"} <= keys
    # an open IPv6 port on the node is a leak like any other
    seen = {t.key: "timeout" for t in targets} | {HUB_KEY: "open", "[fd00:1::1]:2376": "open"}
    got = by_name(nc.firewall_checks("n1", targets, seen, 64123, "jhgpu-users", HUB))
    assert not got["firewall"].ok and "[fd00:1::1]:2376" in got["firewall"].detail


def test_the_probe_names_its_outcomes_as_the_targets_do() -> None:
    """The probe container's script, run here: IPv6 targets are tried over IPv6 and their
    outcomes come back under the target's own key (loopback only, nothing listens)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: the connections are refused
    targets = [nc.Target("127.0.0.1", port, "v4"), nc.Target("::1", port, "v6")]
    argv = [sys.executable, "-c", FIREWALL_PROBE, json.dumps([[t.host, t.port] for t in targets])]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["connect"]
    assert set(out) == {t.key for t in targets}
    assert out[f"127.0.0.1:{port}"] == "refused"
    # "refused" where the machine has IPv6 on loopback; never an IPv4 socket's gaierror
    assert out[f"[::1]:{port}"] in ("refused", "error:OSError"), out


# ---------------------------------------------------------------- firewall
HUB = ("10.0.0.5", 8081)
TARGETS = nc.firewall_targets(
    node_address="10.0.0.2",
    gateway="172.18.0.1",
    agent_port=9450,
    hub_api=HUB,
    hub_private=(("10.0.0.5", 8001, "the proxy's API"),),
    peer="172.18.0.3",
)


def test_targets_cover_what_the_issue_names() -> None:
    keys = {t.key for t in TARGETS}
    for host in ("10.0.0.2", "172.18.0.1"):
        assert {f"{host}:2375", f"{host}:2376", f"{host}:9450"} <= keys
    assert {"169.254.169.254:80", "172.18.0.3:8888", "10.0.0.5:8001"} <= keys
    assert [t.key for t in TARGETS if t.must_reach] == ["10.0.0.5:8081"]


def outcomes(default: str, **special: str) -> dict[str, str]:
    out = {t.key: default for t in TARGETS if not t.must_reach}
    out["10.0.0.5:8081"] = "open"
    out.update({k.replace("_", ":"): v for k, v in special.items()})
    return out


FIREWALL_CASES = [
    (outcomes("timeout"), 64123, {"firewall": True, "firewall.hub-api": True}, ""),
    (outcomes("error:OSError"), 64123, {"firewall": True, "firewall.hub-api": True}, ""),
    # no firewall: the node answers (refused = a packet got there and back)
    (outcomes("refused"), 64123, {"firewall": False}, "jupyterhub-gpu firewall --bridge jhgpu-users"),
    (outcomes("timeout", **{"10.0.0.2_2376": "open"}), 64123, {"firewall": False}, "--allow 10.0.0.5:8081"),
    (outcomes("timeout", **{"172.18.0.3_8888": "open"}), 64123, {"firewall": False}, "enable_icc=false"),
    (outcomes("timeout", **{"10.0.0.5_8081": "timeout"}), 64123, {"firewall.hub-api": False}, "--allow 10.0.0.5:8081"),
    (outcomes("timeout", **{"10.0.0.5_8081": "refused"}), 64123, {"firewall.hub-api": True}, ""),
    (outcomes("timeout"), 0, {"firewall.probe": False}, "userns"),
]  # fmt: skip


@pytest.mark.parametrize(("seen", "uid", "want", "hint"), FIREWALL_CASES)
def test_firewall(seen: dict[str, str], uid: int, want: dict[str, bool], hint: str) -> None:
    got = by_name(nc.firewall_checks("n1", TARGETS, seen, uid, "jhgpu-users", HUB))
    assert {k: got[k].ok for k in want} == want
    assert all(hint in c.fix for c in got.values() if not c.ok)


HUB_KEY = "10.0.0.5:8081"


def test_a_target_without_an_outcome_is_a_failure_not_a_block() -> None:
    # a probe that answered for some targets only proves nothing about the others
    seen = outcomes("timeout")
    del seen["10.0.0.2:2376"]
    got = by_name(nc.firewall_checks("n1", TARGETS, seen, 64123, "jhgpu-users", HUB))
    assert not got["firewall"].ok
    assert "10.0.0.2:2376" in got["firewall"].detail and "no outcome" in got["firewall"].detail
    assert got["firewall"].fix
    seen[TARGETS[0].key] = ""  # an empty outcome is no outcome either
    got = by_name(nc.firewall_checks("n1", TARGETS, seen, 64123, "jhgpu-users", HUB))
    assert not got["firewall"].ok and TARGETS[0].key in got["firewall"].detail


def test_a_leak_and_a_missing_outcome_are_both_named() -> None:
    seen = outcomes("timeout", **{"10.0.0.2_2375": "open"})
    del seen["10.0.0.2:2376"]
    got = by_name(nc.firewall_checks("n1", TARGETS, seen, 64123, "jhgpu-users", HUB))
    detail = got["firewall"].detail
    assert not got["firewall"].ok and "10.0.0.2:2375" in detail and "10.0.0.2:2376" in detail


def test_firewall_without_a_known_hub_api() -> None:
    targets = [t for t in TARGETS if not t.must_reach]
    got = by_name(nc.firewall_checks("n1", targets, {}, 1000, "jhgpu-users", None))
    assert not got["firewall.hub-api"].ok and "hub_connect_url" in got["firewall.hub-api"].fix


# ---------------------------------------------------------------- GPUs
def smi(*uuids: str) -> str:
    return "".join(f"GPU {i}: NVIDIA GeForce RTX 3090 (UUID: {u})\n" for i, u in enumerate(uuids))


def test_visible_uuids_reads_nvidia_smi_and_mig() -> None:
    out = smi(U0) + "  MIG 1g.5gb     Device  0: (UUID: MIG-5c7a-11ee-8c99-0242ac120002)\n"
    assert nc.visible_uuids(out) == (U0, "MIG-5c7a-11ee-8c99-0242ac120002")
    assert nc.visible_uuids("No devices were found") == ()


GPU_CASES = [
    (nc.GPUProbe((U0,), seen=(U0,), nvidia_smi=True), nc.GPUProbe(()), {"gpu.one": True, "gpu.none": True}, ""),
    (nc.GPUProbe((U0,), seen=(U0, U1), nvidia_smi=True), nc.GPUProbe(()), {"gpu.one": False}, "config.toml"),
    (nc.GPUProbe((U0,), seen=(), nvidia_smi=False), nc.GPUProbe(()), {"gpu.one": False}, "nvidia-ctk"),
    (nc.GPUProbe((U0,), error="could not select device driver \"nvidia\""), nc.GPUProbe(()),
     {"gpu.one": False}, "nvidia-ctk runtime configure"),
    (nc.GPUProbe((U0,), seen=(U0,), nvidia_smi=True), nc.GPUProbe((), seen=(U0, U1), nvidia_smi=True),
     {"gpu.none": False}, "default"),
]  # fmt: skip


@pytest.mark.parametrize(("one", "none", "want", "hint"), GPU_CASES)
def test_gpu(one: nc.GPUProbe, none: nc.GPUProbe, want: dict[str, bool], hint: str) -> None:
    got = by_name(nc.gpu_checks("n1", INV, one, none))
    assert {k: got[k].ok for k in want} == want
    assert all(hint in c.fix for c in got.values() if not c.ok)


def test_gpu_cdi_fix_and_unknown_gpus() -> None:
    [c] = nc.gpu_checks("n1", INV, nc.GPUProbe((U0,), error="x"), None, driver="cdi")
    assert not c.ok and "nvidia-ctk cdi generate" in c.fix
    [c] = nc.gpu_checks("n1", None, None, None)
    assert not c.ok and c.detail.startswith("not run")


# ---------------------------------------------------------------- agent and clock
URL = "http://10.0.0.2:9450"
AGENT_CASES = [
    (nc.AgentFacts(None), {"agent": True}, ""),
    (nc.AgentFacts(URL, status=200, served_node="n1", clock_skew_s=1.0), {"agent": True, "clock": True}, ""),
    (nc.AgentFacts(URL, status=200, served_node="n1", clock_skew_s=-42.0), {"agent": True, "clock": False}, "NTP"),
    (nc.AgentFacts(URL, error="ConnectionError"), {"agent": False}, "jupyterhub-gpu-agent"),
    (nc.AgentFacts(URL, status=403), {"agent": False}, "--print-token --node n1"),
    (nc.AgentFacts(URL, status=200, served_node="n2"), {"agent": False}, "--node n1"),
    (nc.AgentFacts(URL, token=False), {"agent": False}, "agent_token"),
    (nc.AgentFacts(URL, status=500, error="boom"), {"agent": False}, "log"),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "want", "hint"), AGENT_CASES)
def test_agent(facts: nc.AgentFacts, want: dict[str, bool], hint: str) -> None:
    got = by_name(nc.agent_checks("n1", facts))
    assert {k: got[k].ok for k in want} == want
    assert all(hint in c.fix for c in got.values() if not c.ok)


# ---------------------------------------------------------------- home
R = "/mnt/cephfs/home"
UG = (64123, 64123)
HOME_CASES = [
    (nc.HomeFacts(""), True, ""),
    (nc.HomeFacts(R, on_hub=True, mounted=True, marker_seen=True, written=True, owner=UG, uid_gid=UG), True, ""),
    (nc.HomeFacts(R, on_hub=False), False, "on the hub's machine"),
    (nc.HomeFacts(R, on_hub=True, mounted=False), False, "same shared export"),
    (nc.HomeFacts(R, on_hub=True, mounted=True, marker_seen=False), False, "same shared export"),
    (nc.HomeFacts(R, on_hub=True, mounted=True, marker_seen=True, write_error="EROFS", uid_gid=UG), False, "read-write"),
    (nc.HomeFacts(R, on_hub=True, mounted=True, marker_seen=True, written=True, owner=(65534, 65534), uid_gid=UG),
     False, "mapping"),
    (nc.HomeFacts(R, on_hub=True, hub_error="Permission denied"), False, "as root"),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "ok", "hint"), HOME_CASES)
def test_home(facts: nc.HomeFacts, ok: bool, hint: str) -> None:
    [c] = nc.home_checks("n1", facts)
    assert c.ok is ok and hint in c.fix


# ---------------------------------------------------------------- catalog
def entry(slug: str, image: str, cuda: str | None, cc: dict | None = None) -> CatalogEntry:
    raw = {
        "slug": slug,
        "display_name": slug,
        "framework": "python",
        "framework_version": "3.11",
        "cuda_version": cuda,
        "image": image,
    }
    if cc:
        raw["compute_capabilities"] = cc
    return parse_entry(raw, slug)


CATALOG = [
    entry("cpu", "lab/cpu:1", None),
    entry("cu12", "lab/torch:cu12", "12.4"),
    entry("cu12-also", "lab/torch:cu12", "12.1"),
    entry("cu13", "lab/torch:cu13", "13.0", {"min": "7.5"}),  # driver 550 < 580: not here
    entry("hopper", "lab/hopper:1", "12.4", {"min": "9.0"}),  # cc 8.6 < 9.0: not here
]


@pytest.mark.parametrize(
    ("tags", "failing"),
    [
        (["lab/cpu:1", "lab/torch:cu12"], set()),
        (["lab/cpu:1"], {"catalog lab/torch:cu12"}),
        ([], {"catalog lab/torch:cu12", "catalog lab/cpu:1"}),
    ],
)
def test_catalog(tags: list[str], failing: set[str]) -> None:
    got = by_name(nc.catalog_checks("n1", CATALOG, tags, INV))
    assert len(got) == 4  # one line per distinct image
    assert {k for k, c in got.items() if not c.ok} == failing
    assert "cu12, cu12-also" in got["catalog lab/torch:cu12"].detail
    assert "cannot run on this node" in got["catalog lab/torch:cu13"].detail
    assert "compute capability" in got["catalog lab/hopper:1"].detail
    for c in got.values():
        if not c.ok:
            assert "docker pull" in c.fix


def test_image_present_and_probe_image() -> None:
    assert nc.image_present("lab/cpu", ["lab/cpu:latest"])
    assert not nc.image_present("lab/cpu:2", ["lab/cpu:1"])
    assert nc.image_present("lab/cpu@sha256:ab", [], ["lab/cpu@sha256:ab"])
    assert nc.image_present("reg:5000/lab/cpu", ["reg:5000/lab/cpu:latest"])
    assert nc.probe_image(["lab/cpu:1"], ["single:1"], ["single:1"]) == "single:1"
    assert nc.probe_image(["lab/cpu:1"], ["single:1"], ["single:1", "lab/cpu:1"]) == "lab/cpu:1"
    assert nc.probe_image(["lab/cpu:1"], [], []) is None
    # as images publish pins them: name:tag@digest; the engine keeps name@digest
    pinned = "reg:5443/lab/cpu:1@sha256:ab"
    assert nc.image_present(pinned, [], ["reg:5443/lab/cpu@sha256:ab"])
    assert not nc.image_present(pinned, ["reg:5443/lab/cpu:1"], ["reg:5443/lab/cpu@sha256:cd"])
    assert nc.probe_image([pinned], [], [], ["reg:5443/lab/cpu@sha256:ab"]) == pinned


def test_render_text_marks_and_fixes() -> None:
    report = nc.NodeReport(
        "n1",
        [
            nc.Check("n1", "engine", True, "fine"),
            nc.Check("n1", "agent", False, "down", "start it"),
        ],
    )
    text = nc.render_text([report])
    assert "n1: 1 check(s) failed" in text
    assert "  ✓ engine: fine" in text and "  ✗ agent: down\n      fix: start it" in text
    assert not report.ok
    assert report.checks[1].as_json() == {
        "node": "n1", "check": "agent", "ok": False, "detail": "down", "fix": "start it"
    }  # fmt: skip


# ---------------------------------------------------------------- the command's reading of the config
def write_config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text("c = get_config()\n" + body)
    return str(path)


def args(**kw: object) -> argparse.Namespace:
    base = {"hub_api": None, "uid_gid": "64123:64123", "image": None, "only": []}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ('c.JupyterHub.hub_connect_url = "http://10.0.0.5:8081"', ("10.0.0.5", 8081)),
        ('c.JupyterHub.hub_connect_ip = "10.0.0.5"\nc.JupyterHub.hub_port = 9000', ("10.0.0.5", 9000)),
        ('c.JupyterHub.hub_bind_url = "http://10.0.0.5:8082"', ("10.0.0.5", 8082)),
        ('c.JupyterHub.hub_bind_url = "http://0.0.0.0:8082"', None),
        ("", None),
    ],
)  # fmt: skip
def test_hub_api_address(tmp_path: Path, body: str, want: tuple[str, int] | None) -> None:
    assert cmd.hub_api_address(cmd.load_config(write_config(tmp_path, body))) == want


def test_settings_and_nodes_from_the_hub_config(tmp_path: Path) -> None:
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(
        "nodes:\n  - {name: n2, docker_url: 'unix:///run/n2.sock', address: 10.0.0.3, drain: true}\n"
    )
    path = write_config(
        tmp_path,
        f"""
c.JupyterHub.hub_connect_url = "http://10.0.0.5:8081"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:8101"
c.GPUDockerSpawner.nodes = [{{"name": "n1", "docker_url": "unix:///run/n1.sock", "address": "10.0.0.2"}}]
c.GPUDockerSpawner.nodes_file = {str(nodes_file)!r}
c.GPUDockerSpawner.agent_token = "s" * 32
c.GPUDockerSpawner.home_template = "/mnt/cephfs/home/{{username}}"
c.GPUDockerSpawner.user_network = "users"
c.DockerSpawner.image = "lab/single:1"
""",
    )
    config = cmd.load_config(path)
    assert [s.name for s in cmd.node_specs(config)] == ["n1", "n2"]  # drained ones too
    s = cmd.settings_from(config, args())
    assert s.hub_api == ("10.0.0.5", 8081)
    assert s.hub_private == (("10.0.0.5", 8101, "the proxy's API on the hub's machine"),)
    assert s.home_root == "/mnt/cephfs/home" and s.user_network == "users"
    assert s.site_secret == "s" * 32 and s.images == ("lab/single:1",)
    assert s.catalog  # the shipped catalog by default
    with pytest.raises(Exception, match="never root"):
        cmd.settings_from(config, args(uid_gid="0:0"))


def test_command_refuses_unknown_nodes_and_bad_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(
        tmp_path,
        'c.GPUDockerSpawner.nodes = [{"name": "n1", "docker_url": "unix:///nope", "address": "10.0.0.2"}]\n',
    )
    assert cmd.main(["-f", path, "n9"]) == 2
    assert "unknown node(s) n9" in capsys.readouterr().err
    bad = write_config(tmp_path, 'c.GPUDockerSpawner.nodes = [{"name": "n1", "docker_url": "tcp://1.2.3.4:2375", "address": "1.2.3.4"}]\n')  # fmt: skip
    assert cmd.main(["-f", bad]) == 2
    assert "tls" in capsys.readouterr().err


def test_an_unreachable_engine_fails_every_check_with_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(
        tmp_path,
        f'c.GPUDockerSpawner.nodes = [{{"name": "n1", "docker_url": "unix://{tmp_path}/none.sock", '
        '"address": "127.0.0.1"}]\n',
    )
    assert cmd.main(["-f", path, "--json", "--only", "firewall,gpu"]) == 1
    checks = json.loads(capsys.readouterr().out)
    assert {"node", "check", "ok", "fix"} <= set(checks[0])
    got = {c["check"]: c for c in checks}
    assert not got["engine"]["ok"] and "systemctl start docker" in got["engine"]["fix"]
    assert got["firewall"]["detail"].startswith("not run") and not got["gpu"]["ok"]
    assert "catalog" not in " ".join(got)  # --only


@pytest.mark.parametrize(("sig", "status"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_terminated_command_removes_its_probes_as_ctrl_c_does(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sig: str,
    status: int,
) -> None:
    """``kill``/``timeout`` (SIGTERM) or a closed terminal (SIGHUP) while the probes run:
    the command cleans up on the way out as it does for Ctrl-C (tests/integration/
    test_check_node.py shows the containers gone), exits 128 + the signal, and leaves the
    process's handlers as they were."""
    import os
    import signal

    path = write_config(
        tmp_path,
        f'c.GPUDockerSpawner.nodes = [{{"name": "n1", "docker_url": "unix://{tmp_path}/none.sock", '
        '"address": "127.0.0.1"}]\n',
    )
    cleaned: list[str] = []

    def probing(spec: object, settings: object, run: str) -> object:
        os.kill(os.getpid(), getattr(signal, sig))  # delivered here, in the main thread
        raise AssertionError("the signal did not stop the command")

    monkeypatch.setattr(cmd, "check_node", probing)
    monkeypatch.setattr(cmd, "_clean", lambda spec, run: cleaned.append(spec.name))
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    assert cmd.main(["-f", path]) == status
    assert cleaned == ["n1"]
    assert f"interrupted ({sig}); probe containers removed" in capsys.readouterr().err
    assert {s: signal.getsignal(s) for s in before} == before


def test_catalog_when_the_gpus_are_unknown() -> None:
    got = by_name(nc.catalog_checks("n1", CATALOG, ["lab/cpu:1", "lab/torch:cu12"], None))
    assert got["catalog lab/cpu:1"].ok and got["catalog lab/torch:cu12"].ok
    assert "unknown" in got["catalog lab/torch:cu12"].detail
    assert not got["catalog lab/hopper:1"].ok  # missing; whether it fits is unknown
    assert "docker pull lab/hopper:1" in got["catalog lab/hopper:1"].fix


def test_clock_never_says_minus_zero() -> None:
    got = by_name(
        nc.agent_checks("n1", nc.AgentFacts(URL, status=200, served_node="n1", clock_skew_s=-0.3))
    )
    assert got["clock"].detail == "the node's clock is +0 s off the hub's"


def test_nvml_checks() -> None:
    [c] = nc.nvml_checks("n1", None, "libnvidia-ml.so.1 was not found")
    assert not c.ok and "install the NVIDIA driver" in c.fix
    got = by_name(nc.nvml_checks("n1", INV))
    assert got["nvml"].ok and got["nvml"].detail == "driver 550.54.15, CUDA 12.4, 2 GPU(s)"
    assert (
        got["nvml.gpu1"].ok and U1 in got["nvml.gpu1"].detail and "8.6" in got["nvml.gpu1"].detail
    )
    sick = NodeInventory("n1", "550.54.15", (GPU(U0, 0, "A100", 40960, (8, 0), healthy=False),))
    assert not by_name(nc.nvml_checks("n1", sick))["nvml.gpu0"].ok
    assert not nc.nvml_checks("n1", NodeInventory("n1", "550.54.15"))[0].ok


def test_local_mode_on_a_machine_without_gpu_or_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setattr(cmd, "local_inventory", lambda: (INV, ""))
    assert cmd.main(["--local", "--json"]) == 1
    got = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
    assert (
        got["nvml"]["ok"]
        and got["nvml.gpu0"]["ok"]
        and all(c["node"] == "n1" for c in got.values())
    )
    assert not got["engine"]["ok"] and got["gpu"]["detail"].startswith("not run")


def test_the_stand_in_hook_never_ships_in_the_package() -> None:
    package = Path(cmd.__file__).resolve().parents[1]
    assert not list(package.rglob("nvidia-container-runtime-hook*"))


def test_firewall_fixes_name_the_installed_commands_and_they_run(tmp_path: Path) -> None:
    """The firewall's fixes give an installed site's words (jupyterhub-gpu firewall, units
    install), never the repository's scripts/, and those commands are accepted as written
    (the firewall's dry run; units install under a temporary root)."""
    import re
    import shlex
    import subprocess
    import sys

    from jupyterhub_gpu.cli import main

    reached = outcomes("refused")
    hub_cut = outcomes("timeout", **{"10.0.0.5_8081": "timeout"})
    fixes = [
        c.fix
        for seen in (reached, hub_cut)
        for c in nc.firewall_checks("n1", TARGETS, seen, 64123, "jhgpu-users", HUB)
        if not c.ok
    ]
    assert len(fixes) == 2 and not [f for f in fixes if "scripts/" in f or ".sh" in f], fixes
    apply = re.search(r"jupyterhub-gpu firewall [^;(]+", fixes[0])
    assert apply, fixes[0]
    argv = shlex.split(apply.group(0))[2:]
    assert argv == ["--bridge", "jhgpu-users", "--allow", "10.0.0.5:8081"]
    code = "import sys; from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, "firewall", "--dry-run", "--no-host-dns", *argv]
    r = subprocess.run(command, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "systemctl enable --now jupyterhub-gpu-firewall" in fixes[0]
    install = re.search(r"jupyterhub-gpu units install [^(]+", fixes[1])
    assert install, fixes[1]
    argv = shlex.split(install.group(0).replace("NAME", "n1").replace("ADDR", "10.0.0.2"))[1:]
    assert argv[-2:] == ["--allow", "10.0.0.5:8081"]
    assert main([*argv, "--root", str(tmp_path), "--etc", str(tmp_path / "etc")]) == 0
    unit = (tmp_path / "etc/systemd/system/jupyterhub-gpu-firewall.service").read_text()
    assert "firewall --bridge jhgpu-users --allow 10.0.0.5:8081\n" in unit
    assert "systemctl restart jupyterhub-gpu-firewall" in fixes[1]
