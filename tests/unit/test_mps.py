"""MPS in ``mps`` mode (issue 26): what a share container gets (the node's pipe directory,
the daemon's shm directory, ``CUDA_MPS_PIPE_DIRECTORY``), and ``check-node --local``'s
checks of the node's daemon, run against a stand-in ``nvidia-cuda-mps-control``
(tests/unit/fake-mps/) and the unit in docs/sharing.md as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from jupyterhub_gpu.cli import check_node as cli
from jupyterhub_gpu.core.containers import ServerContainer, container_spec, share_env
from jupyterhub_gpu.core.form.resources import ResourceLimits
from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.core.sharing import Share, parse_policy
from jupyterhub_gpu.core.sharing.mps import (
    MpsDevice,
    MpsFacts,
    MpsPaths,
    mps_checks,
    mps_expectations,
    mps_paths,
    parse_memory_mib,
    parse_percentage,
)
from jupyterhub_gpu.edges import mps as edge
from jupyterhub_gpu.errors import ConfigError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "fake-mps"
RTX = "NVIDIA GeForce RTX 3090"
TITAN = "NVIDIA TITAN X (Pascal)"
POLICY = parse_policy({RTX: {"shares": 4, "mode": "mps"}, TITAN: {"shares": 2}}, {})
NODE = NodeInventory(
    "gpu-a",
    "550.54",
    (GPU("GPU-aaaa", 0, RTX, 24576, (8, 6)), GPU("GPU-bbbb", 1, TITAN, 12288, (6, 1))),
)
FAKE_PID = 4242


# ---------------------------------------------------------------- settings
@pytest.mark.parametrize(
    "pipe, shm, fragment",
    [
        ("/dev/shm", "/run/x", "mps_pipe_directory: /dev/shm is the node's own"),
        ("/tmp/nvidia-mps", "/dev/shm/", "mps_shm_directory: /dev/shm is the node's own"),
        ("/tmp/nvidia-mps", "/tmp", "/tmp is the node's own"),
        ("tmp/nvidia-mps", "/run/x", "an absolute path"),
        ("/tmp/nvidia-mps/../../etc", "/run/x", "no '..'"),
        ("/srv/mps", "/srv/mps/shm", "must be separate directories"),
        ("/srv/mps", "/srv/mps", "must be separate directories"),
    ],
)
def test_mps_directories_that_would_hand_users_the_host_are_refused(
    pipe: str, shm: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as e:
        mps_paths(pipe, shm)
    assert fragment in str(e.value)


def test_mps_directories_are_normalised() -> None:
    assert mps_paths("/tmp/nvidia-mps/", "/run//jhgpu/shm") == MpsPaths(
        "/tmp/nvidia-mps", "/run/jhgpu/shm"
    )


# ---------------------------------------------------------------- the container
def _spec(share: Share | None, mps: MpsPaths | None, binds: dict | None = None) -> tuple:
    c = ServerContainer(
        uid=10001,
        gid=5000,
        supplementary_gids=(),
        labels={},
        gpu_uuids=("GPU-aaaa",),
        network="jupyterhub-gpu-users",
        limits=ResourceLimits(cpu=2.0, mem_bytes=2**30, shm_bytes=2**26, pids_limit=512),
        binds=binds or {},
        mps=mps,
    )
    return container_spec(c)


def test_an_mps_share_gets_the_pipe_directory_and_the_daemons_shm_and_never_host_ipc() -> None:
    paths = MpsPaths("/tmp/nvidia-mps", "/run/jupyterhub-gpu/mps-shm")
    hostile = {  # an admin's dataset mount at /dev/shm or at the pipe directory loses
        "/dev/shm": {"bind": "/dev/shm", "mode": "rw"},
        "/srv/other": {"bind": "/tmp/nvidia-mps", "mode": "ro"},
        "/srv/data": {"bind": "/data", "mode": "ro"},
    }
    _, host = _spec(Share(1, 4, 6144, "mps"), paths, hostile)
    assert host["binds"] == {
        "/srv/data": {"bind": "/data", "mode": "ro"},
        "/tmp/nvidia-mps": {"bind": "/tmp/nvidia-mps", "mode": "rw"},
        "/run/jupyterhub-gpu/mps-shm": {"bind": "/dev/shm", "mode": "rw"},
    }
    assert "ipc_mode" not in host and "shm_size" not in host
    assert host["cap_drop"] == ["ALL"] and host["security_opt"] == ["no-new-privileges"]
    env = share_env(Share(1, 4, 6144, "mps"), paths)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=6144M"


def test_other_servers_get_no_mps_mounts() -> None:
    _, host = _spec(Share(1, 2, 6144, "time-slicing"), None)
    assert host["binds"] == {} and host["shm_size"] == 2**26
    assert "CUDA_MPS_PIPE_DIRECTORY" not in share_env(Share(1, 2, 6144, "time-slicing"))


# ---------------------------------------------------------------- pure judgements
@pytest.mark.parametrize(
    "answer, mib",
    [("6144M\n", 6144), ("6G", 6144), ("Device 0 limit: 6 GiB", 6144), ("0\n", None), ("", None)],
)
def test_pinned_memory_answers_are_read(answer: str, mib: int | None) -> None:
    assert parse_memory_mib(answer) == mib


def test_thread_answers_are_read() -> None:
    assert parse_percentage("25.0\n") == 25.0
    assert parse_percentage("") is None


def test_only_the_policys_mps_gpus_are_expected_with_one_shares_sizes() -> None:
    assert mps_expectations("gpu-a", NODE, POLICY) == [MpsDevice(0, "GPU-aaaa", RTX, 6144, 25)]
    off = parse_policy({RTX: {"shares": 4, "mode": "mps"}}, {"gpu-a": {"shareable": False}})
    assert mps_expectations("gpu-a", NODE, off) == []


def _good_facts() -> MpsFacts:
    return MpsFacts(
        "/tmp/nvidia-mps",
        "/run/s",
        pipe_dir_exists=True,
        control_pipe=True,
        shm_dir_exists=True,
        daemon_shm_shared=True,
        thread_answer="25.0",
        memory_answers={0: "6144M"},
    )


def test_two_mps_models_wanting_different_thread_shares_fail() -> None:
    devices = [MpsDevice(0, "GPU-a", RTX, 6144, 25), MpsDevice(1, "GPU-b", TITAN, 6144, 50)]
    facts = _good_facts()
    threads = {c.check: c for c in mps_checks("n", devices, facts)}["mps.threads"]
    assert not threads.ok and "same shares" in threads.fix


# ---------------------------------------------------------------- against the fake daemon
@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A node with the stand-in tool on PATH, a pipe directory, the shm tmpfs's stand-in
    and a /proc where the daemon's /dev/shm is that directory."""
    pipe, shm = tmp_path / "nvidia-mps", tmp_path / "mps-shm"
    shm.mkdir()
    proc = tmp_path / "proc"
    (proc / str(FAKE_PID) / "root" / "dev").mkdir(parents=True)
    (proc / str(FAKE_PID) / "root" / "dev" / "shm").symlink_to(shm)
    monkeypatch.setenv("PATH", f"{FAKE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_PID", str(FAKE_PID))
    monkeypatch.setattr(edge, "PROC", proc)
    return {"pipe": pipe, "shm": shm, "proc": proc, "root": tmp_path}


def _unit() -> str:
    text = (ROOT / "docs" / "sharing.md").read_text()
    found = re.search(
        r"```ini\n(# /etc/systemd/system/jupyterhub-gpu-mps.service\n.*?)```", text, re.S
    )
    assert found, "docs/sharing.md lost its MPS unit"
    return found.group(1)


def _follow_the_unit(pipe: Path) -> None:
    """What the unit does to the daemon, as written: its Environment, the daemon's
    ``nvidia-cuda-mps-control -d`` from ExecStart, then every ExecStartPost line."""
    unit = _unit()
    env = dict(os.environ)
    for line in re.findall(r"^Environment=(\S+)$", unit, re.M):
        key, _, value = line.partition("=")
        env[key] = value
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe)  # the test's, not the node's
    start = re.search(r"^ExecStart=.*exec (nvidia-cuda-mps-control -d)'$", unit, re.M)
    assert start, "the unit no longer starts the daemon with nvidia-cuda-mps-control -d"
    subprocess.run(shlex.split(start.group(1)), env=env, check=True, timeout=10)
    posts = re.findall(r"^ExecStartPost=(.*)$", unit, re.M)
    assert len(posts) == 2
    for post in posts:
        subprocess.run(post, shell=True, env=env, check=True, timeout=10)


def _checks(node: dict[str, Path]) -> dict[str, object]:
    paths = MpsPaths(str(node["pipe"]), str(node["shm"]))
    devices = mps_expectations("gpu-a", NODE, POLICY)
    return {c.check: c for c in mps_checks("gpu-a", devices, edge.gather(paths, devices))}


def _tell(pipe: Path, command: str) -> None:
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
    subprocess.run(
        ["nvidia-cuda-mps-control"],
        input=command + "\n",
        text=True,
        env=env,
        check=True,
        timeout=10,
    )


def test_no_daemon_fails_with_the_command_that_starts_it(node: dict[str, Path]) -> None:
    checks = _checks(node)
    daemon = checks["mps"]
    assert not daemon.ok and "not running" in daemon.detail
    assert f"CUDA_MPS_PIPE_DIRECTORY={node['pipe']} nvidia-cuda-mps-control -d" in daemon.fix
    assert not checks["mps.threads"].ok and checks["mps.threads"].detail.startswith("not run")
    assert not checks["mps.gpu0"].ok
    assert "mps.gpu1" not in checks  # the TITAN is time-sliced: no MPS limit wanted


def test_the_unit_in_the_docs_passes_and_each_thing_broken_fails(node: dict[str, Path]) -> None:
    _follow_the_unit(node["pipe"])
    checks = _checks(node)
    assert [c.check for c in checks.values() if not c.ok] == []
    assert "6144 MiB" in checks["mps.gpu0"].detail and "25" in checks["mps.threads"].detail

    # a daemon started by hand, limits left at NVIDIA's defaults
    _tell(node["pipe"], "quit")
    assert not _checks(node)["mps"].ok
    subprocess.run(
        ["nvidia-cuda-mps-control", "-d"],
        check=True,
        timeout=10,
        env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(node["pipe"])},
    )
    checks = _checks(node)
    assert checks["mps"].ok
    threads, memory = checks["mps.threads"], checks["mps.gpu0"]
    assert not threads.ok and "is 100, one share is 25" in threads.detail
    assert threads.fix == (
        f"echo set_default_active_thread_percentage 25 | "
        f"CUDA_MPS_PIPE_DIRECTORY={node['pipe']} nvidia-cuda-mps-control"
    )
    assert not memory.ok and "no default pinned memory limit" in memory.detail
    assert "set_default_device_pinned_mem_limit 0 6144M" in memory.fix

    # the fixes, as printed, make them pass; a wrong limit fails again
    subprocess.run(threads.fix, shell=True, check=True, timeout=10)
    subprocess.run(memory.fix, shell=True, check=True, timeout=10)
    assert all(c.ok for c in _checks(node).values())
    _tell(node["pipe"], "set_default_device_pinned_mem_limit 0 12G")
    memory = _checks(node)["mps.gpu0"]
    assert not memory.ok and "12288 MiB, one share is 6144 MiB" in memory.detail


def test_a_daemon_with_another_dev_shm_fails(node: dict[str, Path]) -> None:
    _follow_the_unit(node["pipe"])
    theirs = node["proc"] / str(FAKE_PID) / "root" / "dev" / "shm"
    theirs.unlink()
    other = node["root"] / "elsewhere"
    other.mkdir()
    theirs.symlink_to(other)
    shm = _checks(node)["mps.shm"]
    assert not shm.ok and "is not" in shm.detail and "mount -t tmpfs" in shm.fix
    (node["pipe"] / "nvidia-cuda-mps-control.pid").write_text("999999\n")
    shm = _checks(node)["mps.shm"]
    assert not shm.ok and "not running" in shm.detail


def test_the_hosts_own_dev_shm_is_never_the_shared_one(
    node: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _follow_the_unit(node["pipe"])
    monkeypatch.setattr(edge, "HOST_SHM", node["shm"])  # as if mps_shm_directory were it
    shm = _checks(node)["mps.shm"]
    assert not shm.ok and "never give it to users" in shm.detail


def test_check_node_local_reads_the_policy_and_exits_1_then_0(
    node: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = node["root"] / "jupyterhub_config.py"
    config.write_text(
        f"c.GPUSharing.models = {{{RTX!r}: {{'shares': 4, 'mode': 'mps'}}}}\n"
        f"c.GPUSharing.mps_pipe_directory = {str(node['pipe'])!r}\n"
        f"c.GPUSharing.mps_shm_directory = {str(node['shm'])!r}\n"
    )
    monkeypatch.setattr(cli, "local_inventory", lambda: (NODE, ""))
    argv = ["--local", "-f", str(config), "--node", "gpu-a", "--only", "mps", "--json"]
    assert cli.main(argv) == 1
    failed = [c["check"] for c in json.loads(capsys.readouterr().out) if not c["ok"]]
    assert failed == ["mps", "mps.shm", "mps.threads", "mps.gpu0"]
    _follow_the_unit(node["pipe"])
    assert cli.main(argv) == 0
    checks = json.loads(capsys.readouterr().out)
    assert {c["check"] for c in checks} >= {"mps", "mps.shm", "mps.threads", "mps.gpu0"}
    assert cli.main(["--local", "--only", "mps", "--json"]) == 1  # no policy: says so
    assert "no -f CONFIG" in capsys.readouterr().out


def test_the_spawner_sets_the_pipe_directory_last_over_any_other_environment() -> None:
    from types import SimpleNamespace

    from traitlets.config import Config

    from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

    c = Config()
    c.GPUSharing.mps_pipe_directory = "/srv/mps-pipes"
    c.GPUDockerSpawner.environment = {"CUDA_MPS_PIPE_DIRECTORY": "/home/alice/mine"}
    hub = SimpleNamespace(
        public_host="", url="/hub/", base_url="/hub/", api_url="http://h:8081/hub/api"
    )
    orm = SimpleNamespace(name="", server=None, user_options={}, last_activity=None)
    user = SimpleNamespace(name="alice", groups=[], url="/user/alice/")
    s = GPUDockerSpawner(user=user, orm_spawner=orm, config=c, hub=hub)
    s.gpu_uuids = ["GPU-aaaa"]
    s.share = Share(1, 4, 6144, "mps")
    assert s.get_env()["CUDA_MPS_PIPE_DIRECTORY"] == "/srv/mps-pipes"
    s.share = Share(1, 2, 6144, "time-slicing")
    assert s.get_env()["CUDA_MPS_PIPE_DIRECTORY"] == "/home/alice/mine"  # not ours to set
    assert s._mps_paths() is None
