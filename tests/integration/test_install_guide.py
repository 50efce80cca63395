"""docs/install.md followed literally, on this machine, from the wheel to alice's server
running on a fresh GPU node.

Every ``hub``, ``node`` and ``both`` block of the guide runs in the guide's order with bash
(``set -euo pipefail``) after the guide's variables block, whose values are replaced for
a sandbox: each machine (the hub, two GPU nodes) is a folder of its own standing in for
its ``/`` (``ETC``, ``STATE``, ``VENV``, ``ROOT``, ``DIST``, ``BUNDLES`` under it), a copy
of the working tree as the release's checkout, a folder as the shared home mount. The
two GPU nodes are fresh network namespaces with nothing of ours in them
(tests/support/bare_node.py: ``10.250.21.2`` and ``.22.2``); the hub is this machine, at
the site address ``10.250.0.1``; the lab's LDAP server is a private slapd over LDAPS with
a certificate from a test CA (the demo directory: alice, bob, ...).

``manual`` blocks are commands for the real machines. Those that prepare a machine
(packages, the LDAP entries, ``git clone``, an editor, a reboot, ``nvidia-smi``) are
skipped; every other command of a manual block must be one the test knows how to do, or
the test fails naming its line (the guide can't grow a step the test ignores):
``scp`` of the bundles is a copy between the machines' folders; ``systemctl`` on a unit
runs what the unit file says (tests/support/units.py: ``ExecStartPre``/``ExecStart``,
its environment and credentials; as root, without the sandboxing); ``systemctl restart
docker`` starts the node's dockerd as the drop-in and daemon.json say, in the node's
namespace; ``nvidia-ctk`` is the TEST-ONLY fake hook on dockerd's PATH (no GPU here);
``docker network create`` and the ``curl`` checks run as written, on their machine; the
first image (step 10) is loaded from the test cluster (the nodes have no route to a
package index, so images/build.py can't build there); the agent gets a declared inventory
(no NVML here); the trust of the LDAP CA (``update-ca-certificates``) is the hub's
``SSL_CERT_FILE``. Then ``check-node`` runs as written, and alice logs in with her LDAP
password, picks ``python-cpu`` and no GPU in the form, her server starts on a node and
answers through the proxy, and step 12's commands run in it: ``id`` is her uid and
group, and her file lands in her home on the shared mount.

Needs root, the test cluster's engines (for the image and the fake hook), a package index
for pip (as test_packaging.py), slapd, and about four minutes."""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import stat
import subprocess
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import jupyterhub_gpu
from jupyterhub_gpu.core.tokens import node_token
from tests.ldap_fixture import DEMO_PASSWORDS, LDAPServer, start_ldap_server
from tests.support import install_guide as guide
from tests.support import units
from tests.support.bare_node import SITE_ADDRESS, STATE, BareNode
from tests.support.pki import issue, make_ca
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.site_ports]
REPO = guide.REPO
HUB_IP = SITE_ADDRESS
BARE = {"gpu-a": BareNode(1), "gpu-b": BareNode(2)}
NODES = {name: node.address for name, node in BARE.items()}
CPU_IMAGE = "jupyterhub-gpu/python-cpu:3.11-bookworm"
#: scripts/cluster.sh loads the catalog's CPU image into node-a
IMAGE_SOURCE = STATE / "engines" / "node-a" / "docker.sock"
ALICE = {"uid": 10001, "gid": 5000}
#: manual steps that prepare a machine: nothing a test can do here
PREPARE = re.compile(
    r"^(apt-get |npm |cp lab-ca|update-ca-certificates|ldapadd |git clone |editor |reboot"
    r"|nvidia-smi)"
)
HUB_UNIT = "jupyterhub-gpu-hub.service"


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


@dataclass
class Lab:
    """The sandboxed machines and what the guide's manual steps started on them."""

    tmp: Path
    hub: Path
    nodes: dict[str, Path]
    values: dict[str, dict[str, str]]
    env: dict[str, str]
    variables: guide.Block
    lines: list[str]
    hub_env: dict[str, str]
    hub_proc: subprocess.Popen[bytes] | None = None
    done: list[str] = field(default_factory=list)  # what each manual line became
    alice_container: tuple[BareNode, str] | None = None

    def etc(self, machine: str) -> Path:
        return Path(self.values[machine]["ETC"])

    def unit(self, machine: str, name: str) -> units.Unit:
        root = self.hub if machine == "hub" else self.nodes[machine]
        return units.Unit(root / "etc/systemd/system" / name)

    def run_line(self, block: guide.Block, index: int, machine: str, **kw: Any) -> str:
        root = self.hub if machine == "hub" else self.nodes[machine]
        step = guide.one_line(block, index)
        done = guide.run_step(
            self.variables, self.values[machine], step, machine=machine, cwd=root,
            env=kw.pop("env", self.env), lines=self.lines, **kw,
        )  # fmt: skip
        return done.stdout

    def hub_log(self) -> str:
        log = Path(self.values["hub"]["STATE"]) / "hub.log"
        return log.read_text(errors="replace")[-6000:] if log.exists() else "(no hub log)"


# -- what each manual command becomes ---------------------------------------------------


def copy_bundles(lab: Lab, block: guide.Block, index: int) -> None:
    """``scp -rp`` of each node's bundle: hub's BUNDLES/NAME to the node's BUNDLES/."""
    for name, root in lab.nodes.items():
        src = Path(machine_values(lab.hub)["BUNDLES"]) / name
        dst = Path(machine_values(root)["BUNDLES"])
        dst.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copytree(src, dst / name, symlinks=True)  # copy2: modes and times kept


def restart_docker(lab: Lab, block: guide.Block, index: int) -> None:
    for name, root in lab.nodes.items():
        drop_in = root / "etc/systemd/system/docker.service.d/jupyterhub-gpu-tls.conf"
        BARE[name].start_engine(drop_in, root / "etc/docker/daemon.json")


def on_each_node(lab: Lab, block: guide.Block, index: int) -> None:
    """A command the guide runs on each node's shell, talking to its local engine."""
    for name in lab.nodes:
        node = BARE[name]
        lab.run_line(block, index, name, env={**lab.env, **node.docker_env()}, wrap=node.wrap)


def wait_for_each_agent(lab: Lab, block: guide.Block, index: int) -> None:
    """The ``curl .../healthz`` line on each node, once its agent listens (systemd's
    ``Type=simple`` does not wait for it either)."""
    for name in lab.nodes:
        node = BARE[name]
        out: list[str] = []

        def answered(name: str = name, node: BareNode = node, out: list[str] = out) -> bool:
            try:
                out.append(lab.run_line(block, index, name, wrap=node.wrap, timeout=20))
            except guide.StepFailed:
                return False
            return True

        wait_until(answered, 30, f"{name}'s agent to answer /healthz")
        assert out[-1].strip() == "ok", out[-1]


def enable_units(lab: Lab, block: guide.Block, index: int) -> None:
    names = guide.commands(guide.one_line(block, index))[0].split()[3:]
    for unit_name in names:
        if unit_name == HUB_UNIT:
            unit = lab.unit("hub", HUB_UNIT)
            unit.run_pre(lab.hub_env)
            log = Path(lab.values["hub"]["STATE"]) / "hub.log"
            lab.hub_proc = unit.popen(lab.hub_env, log)
            continue
        for name in lab.nodes:
            unit, node = lab.unit(name, unit_name), BARE[name]
            if unit_name == "jupyterhub-gpu-firewall.service":  # Type=oneshot
                done = node.run(unit.start, env=units.without_venv(lab.env))
                assert done.returncode == 0, f"{name}'s firewall: {done.stdout}{done.stderr}"
            elif unit_name == "jupyterhub-gpu-agent.service":
                inventory = lab.tmp / f"{name}-inventory.yaml"
                inventory.write_text(yaml.safe_dump({"nodes": [declared(name)]}))
                extra = ["--probe", "declared", "--inventory", str(inventory)]
                node.start_service(unit, units.without_venv(lab.env), extra)
            else:
                raise AssertionError(f"the guide enables a unit the test doesn't know: {unit_name}")


def units_running(lab: Lab, block: guide.Block, index: int) -> None:
    names = guide.commands(guide.one_line(block, index))[0].split()[3:]
    if HUB_UNIT in names:
        assert lab.hub_proc is not None and lab.hub_proc.poll() is None, lab.hub_log()
        return
    for name in lab.nodes:
        node = BARE[name]
        assert node.engine is not None and node.engine.poll() is None, f"{name}: dockerd died"
        dead = [p.args for p in node.services if p.poll() is not None]
        assert not dead, f"{name}: a service died: {dead}"


def wait_for_hub(lab: Lab, block: guide.Block, index: int) -> None:
    out: list[str] = []

    def answered() -> bool:
        assert lab.hub_proc is not None and lab.hub_proc.poll() is None, lab.hub_log()
        try:
            out.append(lab.run_line(block, index, "hub"))
        except guide.StepFailed:  # not listening yet
            return False
        return '"version"' in out[-1]

    wait_until(answered, 90, "the hub's API to answer", details=lab.hub_log)


def load_first_image(lab: Lab, block: guide.Block, index: int) -> None:
    """Step 10 builds python-cpu on each node; here the test cluster's copy is loaded
    (once for the whole block)."""
    if any("first image" in d for d in lab.done):
        return
    threads = [
        threading.Thread(target=BARE[name].load, args=(CPU_IMAGE, IMAGE_SOURCE))
        for name in lab.nodes
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in lab.nodes:
        BARE[name].docker("image", "inspect", CPU_IMAGE)


def check_nodes(lab: Lab, block: guide.Block, index: int) -> None:
    out = lab.run_line(block, index, "hub", timeout=300)
    assert "✗" not in out and out.count("✓") >= 5 * len(lab.nodes), out


def alice_server(lab: Lab) -> tuple[BareNode, str]:
    """Log in as alice with her LDAP password, ask for python-cpu and no GPU in the form,
    wait until her server answers through the proxy; (its node, its container)."""
    if lab.alice_container is not None:
        return lab.alice_container
    url = f"https://{HUB_IP}:8000"  # a browser that trusts the site's CA
    trust = ssl.create_default_context(cafile=str(lab.etc("hub") / "tls/ca.pem"))
    with httpx.Client(base_url=url, timeout=30, follow_redirects=True, verify=trust) as browser:
        page = browser.get("/hub/login")
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
        assert xsrf, page.text[-2000:]
        login = {"username": "alice", "password": DEMO_PASSWORDS["alice"], "_xsrf": xsrf[1]}
        assert browser.post("/hub/login", data=login).status_code == 200, lab.hub_log()
        form = browser.get("/hub/spawn/alice")
        assert 'value="python-cpu"' in form.text, form.text[-3000:]
        # the page's token, as its script sends it with the form
        token = re.search(r'xsrf_token: "([^"]+)"', form.text)
        assert token, form.text[-3000:]
        choice = {"_xsrf": token[1], "image": "python-cpu", "gpu_count": "0"}
        started = browser.post("/hub/spawn/alice", data=choice)
        assert started.status_code == 200, started.text[-3000:]

        def answers() -> bool:  # JupyterLab's page, after the OAuth round with the hub
            r = browser.get("/user/alice/lab")
            return r.status_code == 200 and r.url.path == "/user/alice/lab"

        wait_until(answers, 120, "alice's JupyterLab through the proxy", interval=1,
                   details=lab.hub_log)  # fmt: skip
        status = browser.get("/user/alice/api/status")  # with the server's own cookie now
        assert status.status_code == 200 and "started" in status.json(), status.text
    mine = "label=jupyterhub-gpu.owner=alice"
    found = [
        (node, cid)
        for node in BARE.values()
        for cid in node.docker("ps", "-q", "--filter", mine).stdout.split()
    ]
    assert len(found) == 1, (found, lab.hub_log())
    lab.alice_container = found[0]
    return found[0]


def in_alice_server(lab: Lab, block: guide.Block, index: int) -> None:
    """A line of step 12, typed in a terminal of alice's JupyterLab."""
    node, container = alice_server(lab)
    line = guide.commands(guide.one_line(block, index))[0]
    done = node.docker("exec", container, "bash", "-c", line)
    lab.done.append(f"{block.line + index} in alice's server: {done.stdout.strip()!r}")
    if line == "id":
        assert f"uid={ALICE['uid']}(" in done.stdout or f"uid={ALICE['uid']} " in done.stdout
        assert f"gid={ALICE['gid']}" in done.stdout, done.stdout


def skip_docker_client_setup(lab: Lab, block: guide.Block, index: int) -> None:
    """Step 10's client settings in /root/.docker: the image is loaded instead."""


def nothing(lab: Lab, block: guide.Block, index: int) -> None:
    """Nothing to do here (``systemctl daemon-reload``, the journal: the hub's log is a file)."""


HUB_API = re.compile(r'^curl -s --cacert "\$ETC/tls/ca.pem" "https://\$HUB_IP:8000/hub/api/"')
CLIENT_SETUP = re.compile(r"^(install -d -m 700 /root/\.docker|ln -sf .* /root/\.docker/)")
Handler = Callable[[Lab, guide.Block, int], None]
MANUAL: list[tuple[re.Pattern[str], str, Handler]] = [
    (re.compile(r"^for n in \$NODES; do ssh .*scp "), "copied", copy_bundles),
    (re.compile(r"^nvidia-ctk runtime configure"), "fake hook on dockerd's PATH", nothing),
    (re.compile(r"^systemctl daemon-reload$"), "nothing to reload", nothing),
    (re.compile(r"^systemctl restart docker$"), "dockerd from the drop-in", restart_docker),
    (re.compile(r"^docker network create "), "ran on each node", on_each_node),
    (re.compile(r"^systemctl enable --now "), "units' ExecStart", enable_units),
    (re.compile(r"^systemctl --no-pager status "), "processes alive", units_running),
    (re.compile(r"^curl .*/healthz\"$"), "ran on each node", wait_for_each_agent),
    (re.compile(r"^journalctl "), "hub.log", nothing),
    (HUB_API, "ran on the hub", wait_for_hub),
    (CLIENT_SETUP, "not needed: no build", skip_docker_client_setup),
    (re.compile(r"images/build\.py"), "first image loaded", load_first_image),
    (re.compile(r"jupyterhub-gpu\" check-node "), "ran on the hub", check_nodes),
    (re.compile(r"^id$|^echo \"\$HOME\" && touch "), "in alice's server", in_alice_server),
]


def manual_block(lab: Lab, block: guide.Block) -> str:
    """Do a manual block, command by command; 'skipped' when it prepares a machine."""
    commands = guide.commands(block)
    if any(PREPARE.match(c) for c in commands):
        return "skipped"
    for index, line in enumerate(block.lines):
        command = line.strip()
        if not command or command.startswith("#") or command == "done":
            continue
        for pattern, what, handler in MANUAL:
            if pattern.search(command):
                handler(lab, block, index)
                lab.done.append(f"{block.line + index}: {what}")
                break
        else:
            raise AssertionError(
                f"docs/install.md:{block.line + index}: a manual command this test does not "
                f"know how to follow: {command!r}; teach tests/integration/"
                "test_install_guide.py (MANUAL) what it means here"
            )
    return "done"


@pytest.fixture
def ldaps(tmp_path: Path) -> Iterator[tuple[LDAPServer, Path]]:
    """The lab's LDAP server over LDAPS, its certificate from a test CA; (server, CA)."""
    folder = tmp_path / "ldap-pki"
    folder.mkdir()
    ca = make_ca(folder, "lab-ca")
    cert, key = issue(folder, ca, "ldap", "IP:127.0.0.1")
    try:
        server = start_ldap_server(tmp_path / "slapd", tls=(cert, key))
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield server, ca[1]
    finally:
        server.stop()


@pytest.fixture
def bare_nodes() -> Iterator[dict[str, BareNode]]:
    if not IMAGE_SOURCE.exists():
        pytest.fail("the test cluster is not up: scripts/cluster.sh up 3", pytrace=False)
    for node in BARE.values():
        node.create()
    try:
        yield BARE
    finally:
        for node in BARE.values():
            node.destroy()


def test_the_install_guide_from_the_wheel_to_alices_server(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    ldaps: tuple[LDAPServer, Path],
    bare_nodes: dict[str, BareNode],
) -> None:
    text = guide.GUIDE.read_text()
    lines = text.splitlines()
    blocks = guide.parse(text)
    variables = guide.variables(blocks)
    hub = tmp_path / "hub"
    nodes = {name: tmp_path / name for name in NODES}
    for root in (hub, *nodes.values()):
        (root / "root").mkdir(parents=True)  # root's home: where the guide keeps its files
    (tmp_path / "shared/home").mkdir(parents=True)  # the lab's shared home mount
    (tmp_path / "shared").chmod(0o755)
    tmp_path.chmod(0o755)  # the homes' path is walked by users' uids on the nodes
    ldap, lab_ca = ldaps
    common = {
        "HUB_IP": HUB_IP,
        "NODES": " ".join(f"{n}={a}" for n, a in NODES.items()),
        "HOME_TEMPLATE": str(tmp_path / "shared/home/{username}"),
        "SRC": str(guide.copy_checkout(hub / "root/jupyterhub-gpu")),
        "VERSION": jupyterhub_gpu.__version__,  # setup.cfg reads it from there
        "LDAP_SERVER": f"127.0.0.1:{ldap.ldaps_port}",
        "LDAP_TLS": "on_connect",
        "LDAP_BASE": ldap.suffix,
        "LDAP_USERS_GROUP": "gpu-users",
        "LDAP_ADMINS_GROUP": "hub-admins",
    }
    values = {"hub": {**common, **machine_values(hub)}}
    for name, root in nodes.items():
        values[name] = {**common, **machine_values(root), "NODE": name}
    env = clean_env()
    # the lab's CA trusted on the hub (update-ca-certificates' stand-in)
    trusted = tmp_path / "trusted.pem"
    trusted.write_text(Path(ssl.get_default_verify_paths().openssl_cafile).read_text()
                       + lab_ca.read_text())  # fmt: skip
    lab = Lab(tmp_path, hub, nodes, values, env, variables, lines,
              hub_env={**units.without_venv(env), "SSL_CERT_FILE": str(trusted)})  # fmt: skip

    ran: list[str] = []
    skipped: list[int] = []
    started = time.monotonic()
    try:
        for block in blocks:
            if block.where == "manual":
                if manual_block(lab, block) == "skipped":
                    skipped.append(block.line)
                else:
                    ran.append(f"{block.line} (manual)")
                continue
            machines = {"hub": ["hub"], "node": list(nodes), "both": ["hub", *nodes]}[block.where]
            for m in machines:
                root = hub if m == "hub" else nodes[m]
                guide.run_step(variables, values[m], block, machine=m, cwd=root, env=env,
                               lines=lines)  # fmt: skip
            ran.append(f"{block.line} ({block.where})")
        elapsed = time.monotonic() - started
        check_the_layout(lab)
        check_the_agents(lab)
        # step 12's file, written from alice's server, is hers on the shared mount
        written = tmp_path / "shared/home/alice/written-from-my-server"
        assert written.is_file(), lab.done
        assert (written.stat().st_uid, written.stat().st_gid) == (ALICE["uid"], ALICE["gid"])
        assert lab.alice_container is not None
    finally:
        if lab.hub_proc is not None:
            units.stop(lab.hub_proc)
        units.stop_leftovers(hub)  # its services, if the hub went before it stopped them
        units.stop_proxy(Path(lab.values["hub"]["STATE"]))  # as systemd's stop would

    counts = {
        where: sum(len(guide.commands(b)) for b in blocks[1:] if b.where == where)
        for where in guide.PLACES
    }
    with capsys.disabled():
        print(
            f"\n[install guide] {len(blocks)} blocks; commands (variables block aside): "
            f"{sum(counts.values())} = {counts}; ran (line, where): {', '.join(ran)}; "
            f"skipped manual blocks at lines {skipped}; manual lines: {'; '.join(lab.done)}; "
            f"took {elapsed:.0f} s"
        )


def check_the_layout(lab: Lab) -> None:
    """What the guide laid out is what it says."""
    hub, values = lab.hub, lab.values
    hub_etc = lab.etc("hub")
    hub_unit = (hub / "etc/systemd/system" / HUB_UNIT).read_text()
    assert (
        f"ExecStart={values['hub']['VENV']}/bin/jupyterhub -f {hub_etc}/jupyterhub_config.py"
        in hub_unit
    )
    assert not Path(values["hub"]["BUNDLES"]).exists()  # the bundles are gone from the hub
    for name, root in lab.nodes.items():
        etc = lab.etc(name)
        assert stat.S_IMODE((etc / "agent.token").stat().st_mode) == 0o600
        assert stat.S_IMODE((etc / "tls/key.pem").stat().st_mode) == 0o600
        assert (etc / "tls/cert.pem").read_bytes() == (
            hub_etc / "tls/nodes" / name / "cert.pem"
        ).read_bytes()
        unit = (root / "etc/systemd/system/jupyterhub-gpu-agent.service").read_text()
        assert f"--node {name} --ip {NODES[name]} " in unit, unit
        assert f"{values[name]['VENV']}/bin/jupyterhub-gpu-agent" in unit
        assert f"tcp://{NODES[name]}:2376" in (root / "etc/docker/daemon.json").read_text()
        # the drop-in starts a dockerd this (Debian 12) machine has
        drop_in = root / "etc/systemd/system/docker.service.d/jupyterhub-gpu-tls.conf"
        assert Path(units.exec_start(drop_in.read_text())[0]).is_file()
        # a node's install has no JupyterHub
        assert not list(Path(values[name]["VENV"]).glob("lib/python3*/site-packages/jupyterhub"))
        assert not Path(values[name]["BUNDLES"], name).exists()
        assert str(etc) in units.Unit(root / "etc/systemd/system/jupyterhub-gpu-agent.service"
                                      ).credentials["agent-token"]  # fmt: skip


def check_the_agents(lab: Lab) -> None:
    """Each node's agent answers the hub as the hub's site describes it: the nodes file's
    ``agent_url``, the site's CA, the node's token derived from the site secret."""
    hub_etc = lab.etc("hub")
    nodes_file = yaml.safe_load((hub_etc / "nodes.yaml").read_text())["nodes"]
    assert sorted(e["name"] for e in nodes_file) == sorted(NODES)
    secret = (hub_etc / "secrets/site-secret").read_text()
    context = ssl.create_default_context(cafile=str(hub_etc / "tls/ca.pem"))
    for entry in nodes_file:
        name = entry["name"]
        request = urllib.request.Request(
            f"{entry['agent_url']}/v1/gpus",
            headers={"Authorization": f"token {node_token(secret, name)}"},
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as r:
            body = json.loads(r.read())
        assert body["node"] == name and len(body["gpus"]) == 1, body
