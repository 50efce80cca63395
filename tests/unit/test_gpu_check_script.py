"""scripts/gpu-check.sh (issue 30, "On a real GPU"): its plumbing without a GPU.

The checks themselves need an NVIDIA GPU, its driver, Docker and the Container Toolkit
(docs/nodes.md, "Checks on a real GPU"); here: the script parses, ``--list`` names every
check and runs nothing, ``--dry-run`` on a machine without a GPU prints one ``SKIP`` line
per check saying no GPU was found and exits 0 (a real run exits 3: nothing checked), a
driver that answers with a GPU but no engine gives each check its own reason, the pytest
part runs for real, and the helpers' containers are the spawner's (``make_container``)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.containers import gpu_env
from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.core.sharing.mps import DEFAULT_PIPE_DIRECTORY, NO_MPS_PIPE_DIRECTORY, MpsPaths

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check.sh"
HELPERS = REPO / "scripts" / "gpu_check"
CHECKS = [
    "nvml-tests", "check-node", "attribution", "mps-limit", "mps-no-raise", "mps-no-quit",
    "mps-check-node", "mps-whole-gpu", "build-void", "suspend-gpu",
]  # fmt: skip
LINE = re.compile(r"^(PASS|FAIL|SKIP) ([a-z0-9-]+): (.+)$")


def run(*args: str, path: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "PATH": path or os.environ["PATH"],
        "GPU_CHECK_PYTHON": sys.executable,
        "DOCKER_HOST": "unix:///nonexistent/gpu-check-test.sock",
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=environ, timeout=300
    )


def lines(out: str) -> dict[str, tuple[str, str]]:
    found = {}
    for line in out.splitlines():
        m = LINE.match(line)
        assert m, f"not a result line: {line!r}"
        found[m.group(2)] = (m.group(1), m.group(3))
    return found


@pytest.fixture
def no_gpu_path(tmp_path: Path) -> str:
    """PATH without nvidia-smi (as on CI), whatever this machine has."""
    keep = tmp_path / "bin"
    keep.mkdir()
    tools = "bash sh env timeout id mktemp rm date sed grep head tail tr cat xargs seq sleep"
    for tool in (*tools.split(), "dirname", "docker", "python3"):
        for d in os.environ["PATH"].split(os.pathsep):
            if (Path(d) / tool).exists() and d and "nvidia" not in tool:
                (keep / tool).symlink_to(Path(d) / tool)
                break
    return str(keep)


@pytest.fixture
def fake_gpu_path(tmp_path: Path, no_gpu_path: str) -> str:
    """A stand-in ``nvidia-smi -L`` that lists one GPU (TEST ONLY): the driver "answers"."""
    fake = Path(no_gpu_path) / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n# TEST-ONLY STAND-IN for nvidia-smi -L\n"
        'echo "GPU 0: NVIDIA Test (UUID: GPU-00000000-1111-2222-3333-444444444444)"\n'
    )
    fake.chmod(0o755)
    return no_gpu_path


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_list_names_every_check_and_runs_nothing(no_gpu_path: str) -> None:
    done = run("--list", path=no_gpu_path)
    assert done.returncode == 0, done.stderr
    assert [ln.split()[0] for ln in done.stdout.splitlines()] == CHECKS
    assert "gpu-check:" not in done.stderr  # no summary: nothing was looked at


def test_dry_run_without_a_gpu_skips_each_check_saying_so(no_gpu_path: str) -> None:
    done = run("--dry-run", path=no_gpu_path)
    assert done.returncode == 0, done.stderr
    found = lines(done.stdout)
    assert list(found) == CHECKS
    for status, why in found.values():
        assert status == "SKIP"
        assert why.startswith("no NVIDIA GPU found"), why


def test_a_real_run_without_a_gpu_says_nothing_was_checked(no_gpu_path: str) -> None:
    done = run(path=no_gpu_path)
    assert done.returncode == 3, done.stdout + done.stderr
    assert {s for s, _ in lines(done.stdout).values()} == {"SKIP"}


def test_bad_usage_exits_2(no_gpu_path: str) -> None:
    assert run("--only", "no-such-check", path=no_gpu_path).returncode == 2
    assert run("--frobnicate", path=no_gpu_path).returncode == 2


def test_with_a_gpu_but_no_engine_each_check_says_what_it_lacks(fake_gpu_path: str) -> None:
    done = run("--dry-run", path=fake_gpu_path)
    assert done.returncode == 0, done.stderr
    found = lines(done.stdout)
    assert list(found) == CHECKS
    assert found["nvml-tests"][1].startswith("dry run: would run pytest -m gpu")
    for name in CHECKS[1:]:
        status, why = found[name]
        assert status == "SKIP"
        assert why.startswith(("no Docker engine answers", "no docker command")), why


def test_only_runs_the_named_checks_and_a_gpu_run_of_the_nvml_tests_that_skip_fails(
    fake_gpu_path: str,
) -> None:
    """The stand-in lists a GPU, NVML finds none: the probe tests all skip, and on a
    machine that claims a GPU that is a failure, not a pass."""
    done = run("--only", "nvml-tests", path=fake_gpu_path)
    found = lines(done.stdout)
    assert list(found) == ["nvml-tests"]
    assert found["nvml-tests"][0] == "FAIL", found
    assert "nothing passed" in found["nvml-tests"][1]
    assert done.returncode == 1


# ------------------------------------------------------------ the helpers' product calls
@pytest.fixture
def helpers() -> Iterator[Any]:
    sys.path.insert(0, str(HELPERS))
    try:
        yield importlib.import_module("common")
    finally:
        sys.path.remove(str(HELPERS))


class FakeAPI:
    """Records the create call docker-py's APIClient would send."""

    def __init__(self) -> None:
        self.created: dict[str, Any] = {}
        self.started: list[str] = []

    def create_host_config(self, **kw: Any) -> dict[str, Any]:
        import docker

        return dict(docker.types.HostConfig(version="1.43", **kw))

    def create_container(self, **kw: Any) -> dict[str, str]:
        self.created = kw
        return {"Id": "c" * 64}

    def start(self, cid: str) -> None:
        self.started.append(cid)


def test_the_helpers_start_containers_as_the_spawner_makes_servers(helpers: Any) -> None:
    from jupyterhub_gpu.core.sharing.policy import Share

    api = FakeAPI()
    uuid = "GPU-00000000-1111-2222-3333-444444444444"
    share = Share(1, 4, 20000, "mps")
    helpers.start_server(api, "s", "img:1", ["python3", "x"], [uuid], share=share, mps=MpsPaths())
    env = api.created["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid == gpu_env([uuid])["NVIDIA_VISIBLE_DEVICES"]
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == DEFAULT_PIPE_DIRECTORY
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20000M"
    assert api.created["user"] == "64123:64123"
    host = api.created["host_config"]
    assert host["DeviceRequests"][0]["DeviceIDs"] == [uuid]
    assert f"{HELPERS}:/gpucheck:ro" in host["Binds"]
    assert f"{DEFAULT_PIPE_DIRECTORY}:{DEFAULT_PIPE_DIRECTORY}:rw" in host["Binds"]
    assert host["CapDrop"] == ["ALL"] and host["NetworkMode"] == "none"
    labels = api.created["labels"]
    assert labels["jupyterhub-gpu.share"] == "1/4" and labels["jupyterhub-gpu.allocation"]
    assert labels[helpers.RUN_LABEL]

    whole = FakeAPI()
    helpers.start_server(whole, "w", "img:1", ["python3", "x"], [uuid])
    assert whole.created["environment"]["CUDA_MPS_PIPE_DIRECTORY"] == NO_MPS_PIPE_DIRECTORY
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in whole.created["environment"]


def test_the_mps_plan_is_the_products_policy(helpers: Any) -> None:
    mps = importlib.import_module("mps")
    inv = NodeInventory(
        "n", "580.1", (GPU("GPU-a", 0, "NVIDIA H100 80GB HBM3", 81559, (9, 0)),), "13.0"
    )
    devices, share, models = mps.plan(inv)
    assert [(d.index, d.memory_mib, d.thread_percentage) for d in devices] == [(0, 20389, 25)]
    assert (share.label, share.memory_mib, share.mode) == ("1/4", 20389, "mps")
    assert models == {"NVIDIA H100 80GB HBM3": {"shares": 4, "mode": "mps"}}


def test_the_build_probe_uses_the_recipes_gpu_lines(helpers: Any) -> None:
    build = importlib.import_module("build")
    plain = build.dockerfile("img:1", None)
    assert "ARG NVIDIA_VISIBLE_DEVICES" in plain and "ENV NVIDIA_VISIBLE_DEVICES" not in plain
    cuda = build.dockerfile("img:1", "all").splitlines()
    run_at = next(i for i, ln in enumerate(cuda) if ln.startswith("RUN "))
    assert "ENV NVIDIA_VISIBLE_DEVICES=void" in cuda[:run_at]
    assert cuda[-1] == "ENV NVIDIA_VISIBLE_DEVICES=all"


def test_the_cuda_program_parses_its_commands() -> None:
    """Inside the containers it has only the standard library (no libcuda here: it says so)."""
    done = subprocess.run(
        [sys.executable, "-I", str(HELPERS / "cuda_program.py"), "alloc", "--mib", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.startswith("{"), done.stderr
    assert '"pid"' in done.stdout
