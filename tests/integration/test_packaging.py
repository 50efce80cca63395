"""The release as a site installs it: ``python -m build`` makes an sdist and, from it, a
wheel; a GPU node's virtual environment gets the wheel without the ``hub`` extra and runs
the agent (over HTTPS with certificates the installed ``certs`` command made) and the node
commands; a hub's environment gets ``[hub]`` and checks a site laid out by the installed
``site init``. Prints both environments' size and package count. Needs PyPI (pip fetches
the dependencies) and about two minutes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
# what must ship inside the package (read at run time, or put in place by a command)
PACKAGE_DATA = [
    "jupyterhub_gpu/cli/files/node-firewall.sh",
    "jupyterhub_gpu/cli/files/site/jupyterhub_config.py.in",
    "jupyterhub_gpu/cli/files/units/jupyterhub-gpu-hub.service.in",
    "jupyterhub_gpu/cli/files/units/jupyterhub-gpu-agent.service.in",
    "jupyterhub_gpu/cli/files/units/jupyterhub-gpu-firewall.service.in",
    "jupyterhub_gpu/core/form/templates/spawn_form.html",
    "jupyterhub_gpu/edges/accounting/migrations/script.py.mako",
    "jupyterhub_gpu/hub/templates/page.html",
    "jupyterhub_gpu/services/dashboard/templates/dashboard.html",
    "jupyterhub_gpu/services/dashboard/static/dashboard.js",
    "jupyterhub_gpu/services/usage/templates/usage.html",
    "jupyterhub_gpu/py.typed",
]
#: what only the hub installs (docker-py is in the base install: a node's check-node --local
#: talks to its own engine with it)
HUB_ONLY = {"jupyterhub", "dockerspawner", "sqlalchemy", "alembic", "oauthenticator"}


def run(*argv: str | Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    # the installed environments alone: not the copy under test that scripts/test.sh
    # puts on PYTHONPATH (it would shadow what each venv installed)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JHGPU_UNDER_TEST")}
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env)
    if ok:
        assert r.returncode == 0, f"{argv}: {r.stdout}\n{r.stderr}"
    return r


def venv(path: Path, requirement: str) -> Path:
    run(sys.executable, "-m", "venv", path)
    run(path / "bin" / "pip", "install", "-q", "--disable-pip-version-check", requirement)
    return path / "bin"


def size_and_count(path: Path) -> tuple[float, int]:
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    listed = run(path / "bin" / "pip", "list", "--format=json", "--disable-pip-version-check")
    return size / 2**20, len(json.loads(listed.stdout))


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel, built from a copy of the working tree (the wheel from the sdist,
    as ``python -m build`` does: a file missing from the sdist is missing from it)."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    skip = {".venv", ".git", ".demo", "build", "dist", "artifacts", "__pycache__"}
    shutil.copytree(
        REPO,
        src,
        symlinks=True,
        ignore=lambda d, names: [n for n in names if n in skip or n.endswith(".egg-info")],
    )
    out = work / "dist"
    run(sys.executable, "-m", "build", "--outdir", out, src)
    return out


def test_the_sdist_and_the_wheel_carry_the_package_data(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    with tarfile.open(sdist) as t:
        in_sdist = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    with zipfile.ZipFile(wheel) as z:
        in_wheel = set(z.namelist())
        metadata = z.read(next(n for n in in_wheel if n.endswith("METADATA"))).decode()
    for name in PACKAGE_DATA:
        assert name in in_sdist, name
        assert name in in_wheel, name
    assert "images/catalog.yaml" in in_sdist
    assert "jupyterhub_gpu/data/catalog.yaml" in in_wheel
    base = [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert not {b.split("<")[0].split(">")[0].split("=")[0].strip() for b in base} & HUB_ONLY


def test_a_node_installs_the_wheel_without_the_hub(
    dist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (wheel,) = dist.glob("*.whl")
    node = venv(tmp_path / "node", str(wheel))
    installed = {
        p["name"].lower() for p in json.loads(run(node / "pip", "list", "--format=json").stdout)
    }
    assert not installed & HUB_ONLY, installed & HUB_ONLY
    etc, state = tmp_path / "etc", tmp_path / "state"
    jg = node / "jupyterhub-gpu"

    # the node commands, from the node's environment only
    assert "--print-token" in run(node / "jupyterhub-gpu-agent", "--help-all").stdout
    fw = run(jg, "firewall", "--dry-run", "--allow", "10.0.0.1:8081").stdout
    assert "-d 10.0.0.1 -p tcp --dport 8081 -j RETURN" in fw
    root = tmp_path / "root"
    run(jg, "units", "install", "--node", "gpu-a", "--address", "127.0.0.1",
        "--allow", "10.0.0.1:8081", "--root", root, "--etc", etc)  # fmt: skip
    agent_unit = (root / "etc/systemd/system/jupyterhub-gpu-agent.service").read_text()
    assert f"ExecStart={node}/jupyterhub-gpu-agent --node gpu-a" in agent_unit
    run(
        jg,
        "site",
        "init",
        "--etc",
        etc,
        "--state",
        state,
        "--node",
        "gpu-a=127.0.0.1",
        "--ldap-server",
        "ldaps://ldap.cs.uni.edu",
    )  # not an example name: check-config flags those
    assert (etc / "catalog.yaml").read_bytes() == (REPO / "images/catalog.yaml").read_bytes()
    for argv in (["ca"], ["hub"], ["public", "--address", "127.0.0.1"],
                 ["node", "gpu-a", "--address", "127.0.0.1"]):  # fmt: skip
        run(jg, "certs", "--etc", etc, *argv)
    # what needs the hub says how to get it
    for argv in (["check-config", "--etc", etc], ["report", "--by", "user"]):
        r = run(jg, *argv, ok=False)
        assert r.returncode != 0 and "pip install 'jupyterhub-gpu[hub]'" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr

    # the agent serves HTTPS with the node's certificate, its token derived on the "hub"
    token = run(
        node / "jupyterhub-gpu-agent", "--print-token", "--node", "node-a",
        "--site-secret-file", etc / "secrets" / "site-secret",
    ).stdout.strip()  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tls = etc / "tls" / "nodes" / "gpu-a"
    agent = subprocess.Popen(
        [node / "jupyterhub-gpu-agent", "--probe=declared", "--node=node-a",
         f"--inventory={REPO / 'scripts/demo/inventory.yaml'}", f"--port={port}",
         f"--certfile={tls / 'cert.pem'}", f"--keyfile={tls / 'key.pem'}"],
        env={**os.environ, "JUPYTERHUB_GPU_AGENT_TOKEN": token},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        context = ssl.create_default_context(cafile=str(etc / "tls" / "ca.pem"))
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/v1/gpus", headers={"Authorization": f"token {token}"}
        )
        body = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as r:
                    body = json.loads(r.read())
                break
            except (OSError, ValueError):
                assert agent.poll() is None, agent.stdout.read() if agent.stdout else ""
                time.sleep(0.1)
        assert body is not None and "GPU-d0000000-0000-4000-8000-000000000000" in json.dumps(body)
    finally:
        agent.terminate()
        agent.wait(10)

    # the hub's environment checks the site the node's commands laid out
    hub = venv(tmp_path / "hub", f"{wheel}[hub]")
    r = run(hub / "jupyterhub-gpu", "check-config", "--etc", etc, "--state", state, ok=False)
    assert r.returncode == 0, r.stderr
    node_mib, node_count = size_and_count(tmp_path / "node")
    hub_mib, hub_count = size_and_count(tmp_path / "hub")
    with capsys.disabled():
        print(
            f"\n[install sizes] node (base): {node_mib:.0f} MiB, {node_count} packages; "
            f"hub ([hub]): {hub_mib:.0f} MiB, {hub_count} packages"
        )
    assert node_count < hub_count and node_mib < hub_mib
