"""MPS in ``mps`` mode (issue 26): what a share container gets (the node's pipe directory,
the daemon's shm directory, ``CUDA_MPS_PIPE_DIRECTORY``, ``K`` shares' limits), and
``check-node --local``'s checks of the node's daemon and its GPUs' compute mode, run
against stand-ins for ``nvidia-cuda-mps-control`` and ``nvidia-smi`` (tests/unit/fake-mps/)
and the unit in docs/sharing.md as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jupyterhub_gpu.cli import check_node as cli
from jupyterhub_gpu.core.attribution.labels import state_share
from jupyterhub_gpu.core.attribution.memory import MemoryPolicy, MemoryState, judge_memory
from jupyterhub_gpu.core.containers import ServerContainer, container_spec, share_env
from jupyterhub_gpu.core.form.resources import ResourceLimits
from jupyterhub_gpu.core.form.shares import check_share, share_label
from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.core.sharing import Share, parse_policy
from jupyterhub_gpu.core.sharing.compute_mode import (
    ComputeModeError,
    ComputeModeFacts,
    compute_mode_checks,
    parse_compute_modes,
)
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
from jupyterhub_gpu.core.sharing.policy import share_of
from jupyterhub_gpu.edges import mps as edge
from jupyterhub_gpu.errors import ConfigError, InvalidRequest

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
        ("/srv/mps", "/dev/shm/", "mps_shm_directory: /dev/shm is the node's own"),
        ("/srv/mps", "/tmp", "/tmp is the node's own"),
        ("srv/mps", "/run/x", "an absolute path"),
        ("/srv/mps/../../etc", "/run/x", "no '..'"),
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
    assert mps_paths("/run/jupyterhub-gpu//mps/", "/run//jhgpu/shm") == MpsPaths(
        "/run/jupyterhub-gpu/mps", "/run/jhgpu/shm"
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
    paths = MpsPaths("/run/jupyterhub-gpu/mps", "/run/jupyterhub-gpu/mps-shm")
    hostile = {  # an admin's dataset mount at /dev/shm or at the pipe directory loses
        "/dev/shm": {"bind": "/dev/shm", "mode": "rw"},
        "/srv/other": {"bind": "/run/jupyterhub-gpu/mps", "mode": "ro"},
        "/srv/data": {"bind": "/data", "mode": "ro"},
    }
    _, host = _spec(Share(1, 4, 6144, "mps"), paths, hostile)
    assert host["binds"] == {
        "/srv/data": {"bind": "/data", "mode": "ro"},
        "/run/jupyterhub-gpu/mps": {"bind": "/run/jupyterhub-gpu/mps", "mode": "rw"},
        "/run/jupyterhub-gpu/mps-shm": {"bind": "/dev/shm", "mode": "rw"},
    }
    assert "ipc_mode" not in host and "shm_size" not in host
    assert host["cap_drop"] == ["ALL"] and host["security_opt"] == ["no-new-privileges"]
    env = share_env(Share(1, 4, 6144, "mps"), paths)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/jupyterhub-gpu/mps"
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


def test_only_the_policys_mps_gpus_are_expected_with_the_largest_shares_sizes() -> None:
    # by default a server holds one share of an mps GPU: the daemon keeps every client to it
    want = [MpsDevice(0, "GPU-aaaa", RTX, 6144, 25, "1/4")]
    assert mps_expectations("gpu-a", NODE, POLICY) == want
    # an admin who lets a server hold 3 of 4 shares: the daemon's defaults must let it
    three = parse_policy({RTX: {"shares": 4, "mode": "mps", "max_held": 3}}, {})
    assert mps_expectations("gpu-a", NODE, three) == [
        MpsDevice(0, "GPU-aaaa", RTX, 18432, 75, "3/4")
    ]
    off = parse_policy({RTX: {"shares": 4, "mode": "mps"}}, {"gpu-a": {"shareable": False}})
    assert mps_expectations("gpu-a", NODE, off) == []


def _good_facts() -> MpsFacts:
    return MpsFacts(
        "/run/jupyterhub-gpu/mps",
        "/run/s",
        pipe_dir_exists=True,
        control_pipe=True,
        shm_dir_exists=True,
        daemon_shm_shared=True,
        thread_answer="25.0",
        memory_answers={0: "6144M"},
        compute=ComputeModeFacts("GPU-a, Exclusive_Process\nGPU-b, Exclusive_Process\n"),
    )


def test_two_mps_models_wanting_different_thread_shares_fail() -> None:
    devices = [
        MpsDevice(0, "GPU-a", RTX, 18432, 75, "3/4"),
        MpsDevice(1, "GPU-b", TITAN, 6144, 50, "1/2"),
    ]
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
    monkeypatch.setenv("FAKE_SMI_GPUS", ",".join(g.uuid for g in NODE.gpus))
    monkeypatch.setenv("FAKE_SMI_STATE", str(tmp_path / "smi"))
    monkeypatch.delenv("FAKE_SMI_ANSWER", raising=False)
    monkeypatch.setattr(edge, "PROC", proc)
    monkeypatch.setattr(edge, "NVIDIA_PIPES", tmp_path / "no-nvidia-mps")  # not this machine's
    return {"pipe": pipe, "shm": shm, "proc": proc, "root": tmp_path}


def _unit() -> str:
    text = (ROOT / "docs" / "sharing.md").read_text()
    found = re.search(
        r"```ini\n(# /etc/systemd/system/jupyterhub-gpu-mps.service\n.*?)```", text, re.S
    )
    assert found, "docs/sharing.md lost its MPS unit"
    return found.group(1)


def _follow_the_unit(pipe: Path) -> None:
    """What the unit does to the daemon, as written: its Environment, its ExecStartPre
    ``nvidia-smi`` lines (the compute mode), the daemon's ``nvidia-cuda-mps-control -d``
    from ExecStart, then every ExecStartPost line."""
    unit = _unit()
    env = dict(os.environ)
    for line in re.findall(r"^Environment=(\S+)$", unit, re.M):
        key, _, value = line.partition("=")
        env[key] = value
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/jupyterhub-gpu/mps"  # never NVIDIA's
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe)  # the test's, not the node's
    smis = re.findall(r"^ExecStartPre=/usr/bin/(nvidia-smi .*)$", unit, re.M)
    assert smis, "the unit no longer sets the GPUs' compute mode"
    for smi in smis:
        subprocess.run(shlex.split(smi), env=env, check=True, timeout=10)
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
    assert "Exclusive_Process" in checks["mps.gpu0.mode"].detail
    assert "mps.gpu1.mode" not in checks  # the TITAN is time-sliced: any mode will do

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
    assert not threads.ok
    assert "is 100, the largest share a server may hold (1/4) is 25" in threads.detail
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
    _tell(node["pipe"], "set_default_device_pinned_mem_limit 0 12G")  # two shares': too high
    memory = _checks(node)["mps.gpu0"]
    assert not memory.ok
    assert "12288 MiB, the largest share a server may hold (1/4) is 6144 MiB" in memory.detail


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
    assert failed == ["mps", "mps.shm", "mps.threads", "mps.gpu0", "mps.gpu0.mode"]
    _follow_the_unit(node["pipe"])
    assert cli.main(argv) == 0
    checks = json.loads(capsys.readouterr().out)
    names = {"mps", "mps.shm", "mps.threads", "mps.gpu0", "mps.gpu0.mode"}
    assert {c["check"] for c in checks} >= names
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
    s.share = Share(1, 2, 6144, "time-slicing")  # no daemon for it: a path that is nowhere
    assert s.get_env()["CUDA_MPS_PIPE_DIRECTORY"] == "/nonexistent/jupyterhub-gpu-no-mps"
    assert s._mps_paths() is None


# ---------------------------------------------------------------- K shares, everywhere
@pytest.mark.parametrize("memory_mib", [None, 1024])
@pytest.mark.parametrize("shares", range(2, 17))
def test_a_server_holding_k_shares_gets_k_shares_everywhere(
    shares: int, memory_mib: int | None
) -> None:
    """For every ``K`` a server may hold: its MPS client limits are ``K`` shares' memory and
    ``100 K / N`` % of the threads (1 to 100), the sizes the ledger (``share_of``), the
    form, the spawner's state and the culler's memory verdict count; and the daemon's
    defaults, the hard bound, never cut that share down."""
    raw: dict[str, object] = {"shares": shares, "mode": "mps", "max_held": shares - 1}
    if memory_mib is not None:
        raw["memory_mib"] = memory_mib
    policy = parse_policy({RTX: raw}, {})
    rule = policy.models[RTX]
    gpu_mib = NODE.gpus[0].memory_mib
    one = rule.share_memory(gpu_mib)
    (daemon,) = mps_expectations("gpu-a", NODE, policy)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    exact = MemoryPolicy(tolerance_mib=0)
    for k in range(1, shares):
        share = share_of(rule, k, gpu_mib)  # what placement decides and the hub's views count
        env = share_env(share)
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={k * one}M"
        assert env["JUPYTERHUB_GPU_SHARE_MEMORY_MIB"] == str(k * one)
        threads = int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
        assert threads == (100 * k) // shares and 1 <= threads <= 100
        assert daemon.memory_mib >= k * one and daemon.thread_percentage >= threads
        assert check_share(share.label, 1, RTX, policy) == share.label
        assert f": {k * one / 1024:g} GiB," in share_label(RTX, k, rule, gpu_mib)
        held = state_share({"share": [share.count, share.of, share.memory_mib, share.mode]})
        assert held is not None and held.memory_mib == k * one
        assert judge_memory(k * one, held.memory_mib, None, now, exact).state is MemoryState.OK
        over = judge_memory(k * one + 1, held.memory_mib, None, now, exact)
        assert over.state is MemoryState.OVER
    # the largest share a server may hold is the daemon's default, exactly
    assert daemon.largest == f"{shares - 1}/{shares}"
    assert daemon.memory_mib == (shares - 1) * one
    with pytest.raises(InvalidRequest):  # more is a whole GPU, never a share
        check_share(f"{shares}/{shares}", 1, RTX, policy)
    # the servers of one GPU, however it is cut, never ask for more than 100 % together
    for cut in ([1] * shares, [shares - 1, 1]):
        assert sum(Share(k, shares, k * one, "mps").thread_percentage for k in cut) <= 100


# ---------------------------------------------------------------- compute mode
MPS_GPU = [(0, "GPU-aaaa", RTX)]


def test_exclusive_process_passes() -> None:
    facts = ComputeModeFacts("GPU-aaaa, Exclusive_Process\nGPU-bbbb, Default\n")
    (check,) = compute_mode_checks("gpu-a", MPS_GPU, facts)
    assert check.ok and check.check == "mps.gpu0.mode" and "Exclusive_Process" in check.detail


@pytest.mark.parametrize("mode", ["Default", "Prohibited"])
def test_any_other_mode_fails_with_the_command_that_sets_it(mode: str) -> None:
    (check,) = compute_mode_checks("gpu-a", MPS_GPU, ComputeModeFacts(f"GPU-aaaa, {mode}\n"))
    assert not check.ok
    assert f"compute mode {mode}, not Exclusive_Process" in check.detail
    assert check.fix == (
        "as root on the node: nvidia-smi -i GPU-aaaa -c EXCLUSIVE_PROCESS (lost at reboot "
        "unless the MPS unit sets it: its ExecStartPre in docs/sharing.md)"
    )


@pytest.mark.parametrize(
    "answer, why",
    [
        ("", "it listed no GPU"),
        ("No devices were found\n", "line 1 is not 'GPU-<uuid>, <compute mode>'"),
        ("GPU-aaaa Default\n", "line 1 is not"),
        ("GPU-aaaa, Default, 3\n", "line 1 is not"),
        ("GPU-bbbb, Default\nGPU-aaaa, [N/A]\n", "line 2: unknown compute mode '[N/A]'"),
        ("\x00\xff, Default", "line 1 is not"),
    ],
)
def test_a_garbled_answer_is_reported_not_raised(answer: str, why: str) -> None:
    with pytest.raises(ComputeModeError) as e:
        parse_compute_modes(answer)
    assert why in str(e.value)
    (check,) = compute_mode_checks("gpu-a", MPS_GPU, ComputeModeFacts(answer))
    assert not check.ok and "cannot read its compute mode" in check.detail
    assert why in check.detail and "nvidia-smi -i GPU-aaaa -c EXCLUSIVE_PROCESS" in check.fix


def test_modes_are_read_in_any_case_and_a_gpu_not_listed_fails() -> None:
    assert parse_compute_modes(" GPU-aaaa ,  exclusive_process \r\n\n") == {
        "GPU-aaaa": "Exclusive_Process"
    }
    (check,) = compute_mode_checks("gpu-a", MPS_GPU, ComputeModeFacts("GPU-bbbb, Default\n"))
    assert not check.ok and "does not list it" in check.detail
    (check,) = compute_mode_checks("gpu-a", MPS_GPU, ComputeModeFacts(None, "no nvidia-smi"))
    assert not check.ok and "(no nvidia-smi)" in check.detail


def test_the_compute_mode_against_the_fake_nvidia_smi(
    node: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = _checks(node)  # no daemon yet: the mode is still checked, Default at boot
    mode = checks["mps.gpu0.mode"]
    assert not mode.ok and "compute mode Default" in mode.detail
    _follow_the_unit(node["pipe"])  # its ExecStartPre sets Exclusive_Process
    assert _checks(node)["mps.gpu0.mode"].ok

    subprocess.run(["nvidia-smi", "-i", "0", "-c", "DEFAULT"], check=True, timeout=10)
    mode = _checks(node)["mps.gpu0.mode"]
    assert not mode.ok
    command = re.search(r"nvidia-smi -i \S+ -c EXCLUSIVE_PROCESS", mode.fix)
    assert command, mode.fix
    subprocess.run(shlex.split(command.group(0)), check=True, timeout=10)  # the fix, as printed
    assert _checks(node)["mps.gpu0.mode"].ok

    monkeypatch.setenv("FAKE_SMI_ANSWER", "Failed to initialize NVML: Driver/library mismatch")
    mode = _checks(node)["mps.gpu0.mode"]
    assert not mode.ok and "unreadable" in mode.detail and "Failed to initialize" in mode.detail
    monkeypatch.delenv("FAKE_SMI_ANSWER")
    monkeypatch.delenv("FAKE_SMI_GPUS")  # the stand-in then fails, as nvidia-smi can
    assert "nvidia-smi exit status 9: NVIDIA-SMI has failed" in edge.compute_modes().error
    monkeypatch.setenv("PATH", str(node["root"]))  # no nvidia-smi there
    assert "not on PATH" in edge.compute_modes().error


def test_an_mps_server_holds_one_share_unless_the_admin_allows_more() -> None:
    """The daemon's defaults are the one limit a user cannot raise, so by default a server
    of an mps GPU holds one share; ``max_held`` is the admin's trade (docs/sharing.md)."""
    assert check_share("1/4", 1, RTX, POLICY) == "1/4"
    with pytest.raises(InvalidRequest, match="ask for 1 of 4"):
        check_share("2/4", 1, RTX, POLICY)
    assert check_share("3/4", 1, TITAN, parse_policy({TITAN: {"shares": 4}}, {})) == "3/4"
    two = parse_policy({RTX: {"shares": 4, "mode": "mps", "max_held": 2}}, {})
    assert check_share("2/4", 1, RTX, two) == "2/4"
    with pytest.raises(InvalidRequest, match="ask for 1 to 2 of 4"):
        check_share("3/4", 1, RTX, two)
    for bad in (0, 4, "2", True, 2.0):
        with pytest.raises(ConfigError, match=r"max_held .* must be 1 to 3 for 4 shares"):
            parse_policy({RTX: {"shares": 4, "mode": "mps", "max_held": bad}}, {})
