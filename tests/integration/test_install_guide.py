"""docs/install.md followed literally, on this machine: every ``hub``, ``node`` and ``both``
block of the guide, in the guide's order, run with bash (``set -euo pipefail``) after the
guide's variables block, whose values are replaced for a sandbox: each machine (the hub,
two GPU nodes) is a folder of its own standing in for its ``/`` (``ETC``, ``STATE``,
``VENV``, ``ROOT``, ``DIST``, ``BUNDLES`` under it), test addresses (the nodes on
127.0.0.11 and .12), a copy of the working tree as the release's checkout, a folder as
the shared home mount.
``manual`` blocks are skipped (packages, systemctl, the LDAP server, a browser), except
the copy of each node's bundle (``scp``), which the test does with a copy between the
machines' folders. The guide builds the wheel from the checkout, installs it with
``[hub]`` on the hub and without on the nodes, lays out the site, makes the certificates,
the bundles, the nodes' and the hub's units, and ends with ``check-config`` passing; a
step that fails fails this test naming its line in docs/install.md. Then each node's
agent runs as its installed unit says (the unit's ``ExecStart``, its credentials read from
the files the unit names, a declared inventory added: no GPU here), and the hub's view of
it (the nodes file's ``agent_url``, the agents' CA and the node's token derived from the
site secret, as the hub does) reads its GPUs over HTTPS. Needs a package index for pip
(as test_packaging.py) and about two minutes."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import ssl
import stat
import subprocess
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyterhub_gpu.core.tokens import node_token
from tests.support import install_guide as guide

pytestmark = pytest.mark.integration
REPO = guide.REPO
HUB_IP = "192.0.2.1"
#: loopback addresses of their own, so that each node's agent can listen on its address
NODES = {"gpu-a": "127.0.0.11", "gpu-b": "127.0.0.12"}


def machine_values(root: Path) -> dict[str, str]:
    """A machine's folders, under the folder standing in for its ``/``."""
    return {
        "ETC": str(root / "etc/jupyterhub-gpu"),
        "STATE": str(root / "var/lib/jupyterhub-gpu"),
        "VENV": str(root / "opt/jupyterhub-gpu/venv"),
        "ROOT": str(root),
        "DIST": str(root / "root/jupyterhub-gpu-dist"),
        "BUNDLES": str(root / "root/jupyterhub-gpu-nodes"),
    }


def clean_env() -> dict[str, str]:
    """This process's environment without the repository's virtual environment: the
    guide's ``python3`` is the machine's."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and str(REPO) not in p
    )
    return env


def declared(name: str) -> dict[str, object]:
    """A declared inventory of one GPU for node ``name`` (this machine has none)."""
    return {
        "name": name,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "gpus": [
            {
                "uuid": f"GPU-{zlib.crc32(name.encode()):08x}-0000-4000-8000-000000000000",
                "index": 0,
                "model": "NVIDIA GeForce RTX 3090",
                "memory_mib": 24576,
                "compute_capability": "8.6",
            }
        ],
    }


def read_agent(
    agent: subprocess.Popen[str], url: str, token: str, context: ssl.SSLContext
) -> dict[str, Any]:
    """``GET {url}/v1/gpus`` as the hub sends it, once the agent listens."""
    request = urllib.request.Request(f"{url}/v1/gpus", headers={"Authorization": f"token {token}"})
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as r:
                return dict(json.loads(r.read()))
        except (OSError, ValueError) as e:
            if agent.poll() is not None or time.monotonic() > deadline:
                out = agent.stdout.read() if agent.stdout else ""
                raise AssertionError(f"the agent at {url} did not answer ({e}): {out}") from e
            time.sleep(0.2)


def copy_bundles(hub: Path, nodes: dict[str, Path]) -> None:
    """The manual ``scp -rp`` of each node's bundle: hub's BUNDLES/NAME to the node's
    BUNDLES/, modes kept."""
    for name, root in nodes.items():
        src = Path(machine_values(hub)["BUNDLES"]) / name
        dst = Path(machine_values(root)["BUNDLES"])
        dst.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copytree(src, dst / name, symlinks=True)  # copy2: modes and times kept


def test_the_install_guide_from_the_wheel_to_a_checked_site(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = guide.GUIDE.read_text()
    lines = text.splitlines()
    blocks = guide.parse(text)
    variables = guide.variables(blocks)
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    hub = tmp_path / "hub"
    nodes = {name: tmp_path / name for name in NODES}
    for root in (hub, *nodes.values()):
        (root / "root").mkdir(parents=True)  # root's home: where the guide keeps its files
    (tmp_path / "shared/home").mkdir(parents=True)  # the lab's shared home mount
    common = {
        "HUB_IP": HUB_IP,
        "NODES": " ".join(f"{n}={a}" for n, a in NODES.items()),
        "HOME_TEMPLATE": str(tmp_path / "shared/home/{username}"),
        "SRC": str(guide.copy_checkout(hub / "root/jupyterhub-gpu")),
        "VERSION": setup["metadata"]["version"],
    }
    values = {"hub": {**common, **machine_values(hub)}}
    for name, root in nodes.items():
        values[name] = {**common, **machine_values(root), "NODE": name}
    env = clean_env()

    ran: list[str] = []
    skipped: list[int] = []
    copied = False
    started = time.monotonic()
    for block in blocks:
        if block.where == "manual":
            if "scp " in block.text:
                copy_bundles(hub, nodes)
                copied = True
                ran.append(f"{block.line} (copy)")
            else:
                skipped.append(block.line)
            continue
        machines = {"hub": ["hub"], "node": list(nodes), "both": ["hub", *nodes]}[block.where]
        for m in machines:
            root = hub if m == "hub" else nodes[m]
            guide.run_step(variables, values[m], block, machine=m, cwd=root, env=env, lines=lines)
        ran.append(f"{block.line} ({block.where})")
    elapsed = time.monotonic() - started
    assert copied, "the guide no longer copies the nodes' bundles with scp"

    # what the guide laid out is what it says
    hub_etc = Path(values["hub"]["ETC"])
    hub_unit = (hub / "etc/systemd/system/jupyterhub-gpu-hub.service").read_text()
    # the unit's own check before each start passes, in the unit's environment
    (pre,) = [x.split("=", 1)[1] for x in hub_unit.splitlines() if x.startswith("ExecStartPre=")]
    unit_env = {
        **env,
        **dict(
            x.split("=", 1)
            for x in (hub_etc / "secrets/hub.env").read_text().splitlines()
            if x and not x.startswith("#")
        ),
    }
    r = subprocess.run(
        shlex.split(pre), cwd=values["hub"]["STATE"], env=unit_env, capture_output=True, text=True
    )
    assert r.returncode == 0, f"the hub unit's ExecStartPre={pre}: {r.stderr}"
    assert (
        f"ExecStart={values['hub']['VENV']}/bin/jupyterhub -f {hub_etc}/jupyterhub_config.py"
        in hub_unit
    )
    assert not Path(values["hub"]["BUNDLES"]).exists()  # the bundles are gone from the hub
    for name, root in nodes.items():
        etc = Path(values[name]["ETC"])
        assert stat.S_IMODE((etc / "agent.token").stat().st_mode) == 0o600
        assert stat.S_IMODE((etc / "tls/key.pem").stat().st_mode) == 0o600
        assert (etc / "tls/cert.pem").read_bytes() == (
            hub_etc / "tls/nodes" / name / "cert.pem"
        ).read_bytes()
        unit = (root / "etc/systemd/system/jupyterhub-gpu-agent.service").read_text()
        assert f"--node {name} --ip {NODES[name]} " in unit, unit
        assert f"{values[name]['VENV']}/bin/jupyterhub-gpu-agent" in unit
        assert (root / "etc/systemd/system/jupyterhub-gpu-firewall.service").is_file()
        assert f"tcp://{NODES[name]}:2376" in (root / "etc/docker/daemon.json").read_text()
        # the drop-in starts a dockerd this (Debian 12) machine has
        drop_in = root / "etc/systemd/system/docker.service.d/jupyterhub-gpu-tls.conf"
        (exec_start,) = [x for x in drop_in.read_text().splitlines() if x.startswith("ExecStart=/")]
        assert Path(exec_start.split("=", 1)[1].split()[0]).is_file(), exec_start
        # a node's install has no JupyterHub
        assert not list(Path(values[name]["VENV"]).glob("lib/python3*/site-packages/jupyterhub"))
        assert not Path(values[name]["BUNDLES"], name).exists()

    # each node's agent, as its unit runs it, answers the hub as the hub's site describes it
    nodes_file = yaml.safe_load((hub_etc / "nodes.yaml").read_text())["nodes"]
    secret = (hub_etc / "secrets/site-secret").read_text()
    context = ssl.create_default_context(cafile=str(hub_etc / "tls/ca.pem"))
    for entry in nodes_file:
        name = entry["name"]
        root, etc = nodes[name], Path(values[name]["ETC"])
        unit = (root / "etc/systemd/system/jupyterhub-gpu-agent.service").read_text()
        (start,) = [x.split("=", 1)[1] for x in unit.splitlines() if x.startswith("ExecStart=")]
        credentials = dict(
            x.split("=", 1)[1].split(":", 1)
            for x in unit.splitlines()
            if x.startswith("LoadCredential=")
        )
        argv = shlex.split(start)
        for credential, path in credentials.items():  # %d: the unit's credentials folder
            argv = [a.replace(f"%d/{credential}", path) for a in argv]
        inventory = tmp_path / f"{name}-inventory.yaml"
        inventory.write_text(yaml.safe_dump({"nodes": [declared(name)]}))
        agent = subprocess.Popen(
            [*argv, "--probe", "declared", "--inventory", str(inventory)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            body = read_agent(agent, entry["agent_url"], node_token(secret, name), context)
        finally:
            agent.terminate()
            agent.wait(10)
        assert body["node"] == name and len(body["gpus"]) == 1, body
        assert str(etc) in credentials["agent-token"]

    counts = {
        where: sum(len(guide.commands(b)) for b in blocks[1:] if b.where == where)
        for where in guide.PLACES
    }
    with capsys.disabled():
        print(
            f"\n[install guide] {len(blocks)} blocks; commands (variables block aside): "
            f"{sum(counts.values())} = {counts}; ran (line, where): {', '.join(ran)}; "
            f"skipped manual blocks at lines {skipped}; steps took {elapsed:.0f} s"
        )
