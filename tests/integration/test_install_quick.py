"""docs/install.md's "Quick install" and "Images for every node from one build" followed
literally, on this machine: the hub from the release's wheel (with the site's registry),
then two fresh GPU nodes joining the running hub with the two lines that ``node token``
printed, the catalog's CPU image published into the site's registry and pre-pulled by the
hub onto both nodes through the trust ``node join`` wrote (and a pull failing, with its
sentence, once that trust is gone, until ``node join`` repairs it), up to alice logging in
over HTTPS (verified against the site's CA) and her server running on a joined node.

The quick path's blocks (``<!-- quick: ... -->``) run in order with bash after its
variables block, whose values are replaced for a sandbox (the hub's ``VENV`` and the
wheel in the hub's folder; ``HUB_IP`` the site address 10.250.0.1; the lab's LDAP a
private slapd over LDAPS, its CA in the hub's ``SSL_CERT_FILE``). Stand-ins, each
because this machine is not a fleet of real servers:

- the wheel is built from the working tree (the release's file);
- ``npm install -g configurable-http-proxy`` is skipped (this machine has it), and so is
  the ``docker-registry`` package (a prerequisite: this machine has it);
- each machine's ``/`` is a folder: ``--etc``, ``--state`` and ``--root`` are added to
  ``hub install`` and ``node token``, ``--etc`` to ``images publish``, and ``--root``,
  ``--etc`` to ``node join``, whose ``/opt/jupyterhub-gpu/venv`` is the node's folder's
  (``VENV`` for the install line);
- ``systemctl`` is tests/support/systemctl_standin.py: what the unit files say (the hub's
  ``ExecStartPre``/``ExecStart``, the registry's units; on a node, dockerd from the
  drop-in and daemon.json in its namespace, the agent, the firewall);
- the nodes are fresh network namespaces with a plain Docker engine running (a prepared
  server's Docker CE: tests/support/bare_node.py); the driver is a declared inventory
  (``--inventory``), the Container Toolkit the test cluster's fake hook on PATH; the
  install line runs in this machine's namespace (pip fetches the wheel's dependencies
  from the package index: the nodes have no route to it), the join line in the node's;
- the hub's Docker, which builds the images and pushes them, is the test cluster's
  builder engine (this machine's namespace; it trusts the registry's loopback side as
  Docker does); the build (``images/build.py --only python-cpu``, the guide's manual
  line) is the one the cluster's set-up ran with that same script;
- each node's ``/etc/docker`` (where ``node join`` writes the registry's CA) is its
  root's, bind-mounted for its dockerd alone (tests/support/bare_node.py).

The hub starts with no node (an empty nodes file) and alice's server lands on a node
that joined while the hub ran: the join is a live add. Needs root, the test cluster
(the image, the fake hook), a package index for pip, slapd; about three minutes.
"""

from __future__ import annotations

import re
import shlex
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from jupyterhub_gpu.cli.join_service import JOIN_PORT
from jupyterhub_gpu.core.join import registry_address
from jupyterhub_gpu.core.progress import UNTRUSTED, pull_failure
from tests.ldap_fixture import DEMO_PASSWORDS, LDAPServer, start_ldap_server
from tests.support import install_guide as guide
from tests.support import systemctl_standin
from tests.support.bare_node import HOOK_DIR, SITE_ADDRESS, STATE, BareNode
from tests.support.pki import issue, make_ca
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.site_ports]
NODES = {"gpu-a": BareNode(4), "gpu-b": BareNode(5)}
CPU_IMAGE = "jupyterhub-gpu/python-cpu:3.11-bookworm"
BUILDER = STATE / "engines" / "builder" / "docker.sock"  # stands in for the hub's Docker
ALICE_UID = 10001
HUB_URL = f"https://{SITE_ADDRESS}:8000"
REGISTRY = registry_address(SITE_ADDRESS)


def clean_env() -> dict[str, str]:
    from tests.integration.test_install_guide import clean_env as guide_env

    return guide_env()


def declared(name: str) -> dict[str, object]:
    from tests.integration.test_install_guide import declared as one_gpu

    return one_gpu(name)


@pytest.fixture
def ldaps(tmp_path: Path) -> Iterator[tuple[LDAPServer, Path]]:
    folder = tmp_path / "ldap-pki"
    folder.mkdir()
    ca = make_ca(folder, "lab-ca")
    cert, key = issue(folder, ca, "ldap", "IP:127.0.0.1")
    server = start_ldap_server(tmp_path / "slapd", tls=(cert, key))
    try:
        yield server, ca[1]
    finally:
        server.stop()


@pytest.fixture
def prepared_nodes(tmp_path: Path) -> Iterator[dict[str, tuple[BareNode, Path]]]:
    """Each node: its namespace, Docker CE running (unix socket only, no daemon.json)."""
    if not BUILDER.exists() or not HOOK_DIR.exists():
        pytest.fail("the test cluster is not up: scripts/cluster.sh up 3", pytrace=False)
    out = {}
    stock = tmp_path / "stock-docker"
    stock.mkdir()
    (stock / "docker.conf").write_text("[Service]\nExecStart=/usr/sbin/dockerd\n")
    (stock / "daemon.json").write_text('{"hosts": ["unix:///var/run/docker.sock"]}')
    try:
        for name, node in NODES.items():
            node.create()
            node.start_engine(stock / "docker.conf", stock / "daemon.json")
            node.engine = None  # the systemctl stand-in restarts it by its pidfile
            root = tmp_path / name
            (root / "root").mkdir(parents=True)
            out[name] = (node, root)
        yield out
    finally:
        for node in NODES.values():
            node.destroy()


def build_wheel(src: Path, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = out.glob("jupyterhub_gpu-*.whl")
    return wheel


def sandboxed(command: str, hub: Path) -> str:
    """``hub install``, ``node token`` and ``images publish`` with the hub's folders for
    /etc, /var/lib, /."""
    flags = f" --etc {hub}/etc/jupyterhub-gpu --state {hub}/var/lib/jupyterhub-gpu"
    if " hub install " in command:
        return command + flags + f" --root {hub}"
    if " node token " in command:
        return command + flags
    if " images publish" in command:
        return command + f" --etc {hub}/etc/jupyterhub-gpu"
    return command


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def run_block(block: guide.Block, variables: guide.Block, values: dict[str, str], hub: Path,
              env: dict[str, str], text: str) -> list[str]:  # fmt: skip
    """Every line of a hub block, in order, sandboxed; the stdout of ``node token``."""
    printed: list[str] = []
    for index, line in enumerate(block.lines):
        step = guide.Block("hub", block.line + index, sandboxed(line, hub) + "\n")
        done = guide.run_step(variables, values, step, machine="hub", cwd=hub / "root",
                              env=env, lines=text.splitlines())  # fmt: skip
        if " node token " in line:
            printed = done.stdout.strip().splitlines()
        if " images publish" in line:
            printed = done.stdout.strip().splitlines()
    return printed


def test_the_quick_install_from_the_wheel_to_alices_server_on_a_joined_node(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    ldaps: tuple[LDAPServer, Path],
    prepared_nodes: dict[str, tuple[BareNode, Path]],
) -> None:
    text = guide.GUIDE.read_text()
    blocks = guide.parse(text, mark_re=guide.QUICK)
    variables, steps = blocks[0], blocks[1:]
    assert variables.where == "both"
    assert [b.where for b in steps] == ["manual", "hub", "node", "manual", "hub"]
    quick = steps[:3]  # the quick path; then "Images for every node from one build"
    hub_commands = sum(
        len(re.findall(r"&&|;", c)) + 1 for b in quick if b.where != "node"
        for c in guide.commands(b)
    )  # fmt: skip
    node_commands = sum(
        len(re.findall(r"&&|;", c)) + 1 for c in guide.commands(quick[2])
    )  # fmt: skip
    assert hub_commands <= 5 and node_commands <= 2, (hub_commands, node_commands)
    assert steps[0].lines == ["npm install -g configurable-http-proxy"]  # skipped: it's here
    # the images' build, done by the test cluster's set-up with the same script
    assert steps[3].lines == ['python3 "$SRC/images/build.py" --only python-cpu']
    ldap, lab_ca = ldaps
    hub = tmp_path / "hub"
    (hub / "root").mkdir(parents=True)
    (tmp_path / "shared/home").mkdir(parents=True)
    for folder in (tmp_path, tmp_path / "shared"):
        folder.chmod(0o755)
    wheel = build_wheel(guide.copy_checkout(tmp_path / "src"), hub / "root")
    values = {
        "HUB_IP": SITE_ADDRESS,
        "LDAP_SERVER": f"127.0.0.1:{ldap.ldaps_port}",
        "LDAP_BASE": ldap.suffix,
        "HOME_TEMPLATE": str(tmp_path / "shared/home/{username}"),
        "WHEEL": str(wheel),
        "VENV": str(hub / "opt/jupyterhub-gpu/venv"),
        "SRC": str(tmp_path / "src"),
    }
    trusted = tmp_path / "trusted.pem"
    trusted.write_text(Path(ssl.get_default_verify_paths().openssl_cafile).read_text()
                       + lab_ca.read_text())  # fmt: skip
    hub_bin = systemctl_standin.install(tmp_path / "hub-bin", None, hub)
    env = clean_env()
    hub_env = {**env, "SSL_CERT_FILE": str(trusted), "PATH": f"{hub_bin}:{env['PATH']}"}
    site_ca = hub / "etc/jupyterhub-gpu/tls/ca.pem"
    started = time.monotonic()
    took: dict[str, float] = {}
    try:
        # the hub: every line of the hub block, in order
        printed = run_block(steps[1], variables, values, hub, hub_env, text)
        hub_took = time.monotonic() - started
        browser_trust = ssl.create_default_context(cafile=str(site_ca))  # the site's CA only
        log = hub / "run/hub.log"
        wait_until(lambda: hub_answers(browser_trust), 90, "the hub's API over HTTPS",
                   details=lambda: log.read_text()[-4000:])  # fmt: skip
        assert not plain_http_answers(), "the hub answers logins over plain HTTP"

        def join_service_listens() -> bool:  # a service the hub starts after its API:
            if "join service on" not in log.read_text():  # this hub's own (a service
                return False  # left by another run may hold the port: its log says so)
            try:
                socket.create_connection((SITE_ADDRESS, JOIN_PORT), timeout=2).close()
            except OSError:
                return False
            return True

        wait_until(join_service_listens, 90, "the hub's join service",
                   details=lambda: log.read_text()[-4000:])  # fmt: skip
        # what node token printed: the install line, then a join line per node, shaped
        # as the guide shows them
        shown = guide.commands(steps[2])
        assert len(printed) == 3, printed
        assert printed[0].split()[:4] == shown[0].split()[:4], (printed[0], shown[0])
        assert printed[0].endswith("/v1/install | sh") and shown[0].endswith("/v1/install | sh")
        for join_line in printed[1:]:
            words = join_line.split()
            assert words[:3] == shown[1].split()[:3] and words[3] == SITE_ADDRESS, join_line
            assert [w for w in words if w.startswith("--")] == ["--token", "--ca-fingerprint"]
        nodes_file = hub / "etc/jupyterhub-gpu/nodes.yaml"
        assert not yaml.safe_load(nodes_file.read_text())["nodes"]  # the hub has no node yet
        size = 0
        joins: dict[str, tuple[list[str], dict[str, str]]] = {}
        for (name, (node, root)), join_line in zip(prepared_nodes.items(), printed[1:],
                                                    strict=True):  # fmt: skip
            venv = root / "opt/jupyterhub-gpu/venv"
            install = subprocess.run(
                ["bash", "-c", f"set -o pipefail; {printed[0]}"], cwd=root / "root",
                env={**env, "VENV": str(venv)}, capture_output=True, text=True, timeout=600,
                check=False,
            )  # fmt: skip
            assert install.returncode == 0, install.stdout + install.stderr
            assert not list(venv.glob("lib/python3*/site-packages/jupyterhub/"))  # no hub
            size = du(venv)
            inventory = root / "inventory.yaml"
            inventory.write_text(yaml.safe_dump({"nodes": [declared(name)]}))
            words = shlex.split(join_line.replace("/opt/jupyterhub-gpu/venv", str(venv)))
            words += ["--name", name, "--root", str(root), "--etc",
                      str(root / "etc/jupyterhub-gpu"), "--inventory", str(inventory)]  # fmt: skip
            node_bin = systemctl_standin.install(root / "bin", node, root)
            node_env = {
                **env,
                "PATH": f"{node_bin}:{HOOK_DIR}:{env['PATH']}",
                "DOCKER_HOST": node.docker_env()["DOCKER_HOST"],
            }
            joins[name] = (words, node_env)
            t0 = time.monotonic()
            joined = node.run(words, env=node_env, timeout=300)
            took[name] = time.monotonic() - t0
            assert joined.returncode == 0, joined.stdout + joined.stderr
            assert joined.stdout.strip().splitlines()[-1] == (
                f"{name} joined: 1 x RTX 3090, all checks passed"
            ), joined.stdout
            trust = root / "etc/docker/certs.d" / REGISTRY / "ca.crt"
            assert trust.read_bytes() == site_ca.read_bytes()  # its Docker trusts the registry
        listed = yaml.safe_load(nodes_file.read_text())["nodes"]
        assert sorted(e["name"] for e in listed) == sorted(NODES)
        assert not any(e.get("drain") for e in listed)

        # the images: built once on the hub, published into the site's registry, pulled
        # onto every node by the hub's pre-puller
        builder = {"DOCKER_HOST": f"unix://{BUILDER}"}
        t0 = time.monotonic()
        said = run_block(steps[4], variables, values, hub, {**hub_env, **builder}, text)
        took["publish"] = time.monotonic() - t0
        published = [line for line in said if line.startswith("published python-cpu: ")]
        assert published, said
        reference = published[0].split()[2]
        name, _, digest = reference.partition("@")
        assert name == f"{REGISTRY}/{CPU_IMAGE}" and digest.startswith("sha256:"), reference
        catalog = yaml.safe_load((hub / "etc/jupyterhub-gpu/catalog.yaml").read_text())
        entry = next(e for e in catalog["images"] if e["slug"] == "python-cpu")
        assert entry["image"] == reference
        pinned = f"{REGISTRY}/{CPU_IMAGE.split(':')[0]}@{digest}"

        def on_every_node() -> list[str]:
            return [n for n, (node, _) in prepared_nodes.items()
                    if node.docker("image", "inspect", pinned, check=False).returncode]  # fmt: skip

        t0 = time.monotonic()
        wait_until(lambda: not on_every_node(), 240, "the pre-puller's pulls onto the nodes",
                   details=lambda: f"missing on {on_every_node()}; "
                   + log.read_text()[-3000:])  # fmt: skip
        took["pre-pull"] = time.monotonic() - t0

        # without the trust node join wrote, gpu-b's Docker refuses the registry: the
        # sentence says what to do; node join again repairs it
        node_b, root_b = prepared_nodes["gpu-b"]
        trust = root_b / "etc/docker/certs.d" / REGISTRY / "ca.crt"
        trust.unlink()
        tagged = f"{REGISTRY}/{CPU_IMAGE}"  # by tag: the registry is asked, not the node
        failed = node_b.docker("pull", tagged, check=False)
        assert failed.returncode != 0, failed.stdout
        cause, sentence = pull_failure(tagged, "gpu-b", failed.stderr)
        assert cause == UNTRUSTED, failed.stderr
        assert sentence.startswith(
            f"Could not pull {tagged} on node gpu-b: the node does not trust the TLS "
            f"certificate of the registry {REGISTRY} (certificate signed by unknown authority)"
        ), sentence
        assert "`jupyterhub-gpu node join` there again" in sentence, sentence
        words, node_env = joins["gpu-b"]
        again = node_b.run(words, env=node_env, timeout=300)
        assert again.returncode == 0 and "gpu-b has already joined" in again.stdout, again.stdout
        assert trust.read_bytes() == site_ca.read_bytes()
        assert node_b.docker("pull", tagged, check=False).returncode == 0

        node, container = alice_server(log, browser_trust)
        done = node.docker("exec", container, "id")
        assert f"uid={ALICE_UID}(" in done.stdout or f"uid={ALICE_UID} " in done.stdout
        mine = node.docker("exec", container, "bash", "-c",
                           'touch "$HOME/written-from-my-server" && echo "$HOME"')  # fmt: skip
        assert mine.returncode == 0, mine.stderr
        written = tmp_path / "shared/home/alice/written-from-my-server"
        assert written.is_file() and written.stat().st_uid == ALICE_UID
        image = node.docker("inspect", "--format", "{{.Config.Image}}", container).stdout
        assert image.strip() == reference  # the catalog's reference, from the site registry
    finally:
        systemctl_standin.stop_all(hub)
    with capsys.disabled():
        print(
            f"\n[quick install] commands: hub {hub_commands} (per site), node {node_commands} "
            f"(per node), the variables block aside; the hub in {hub_took:.0f} s; "
            f"node join to 'joined': {', '.join(f'{n} {took[n]:.1f} s' for n in NODES)}; "
            f"the node's install (venv): {size / 1e6:.0f} MB; images publish (python-cpu "
            f"into the site's registry) {took['publish']:.0f} s, then pre-pulled onto both "
            f"nodes in {took['pre-pull']:.0f} s; alice's server on {node.netns}, over HTTPS"
        )


def hub_answers(trust: ssl.SSLContext) -> bool:
    try:
        return httpx.get(f"{HUB_URL}/hub/api/", timeout=5, verify=trust).status_code == 200
    except httpx.HTTPError:
        return False


def plain_http_answers() -> bool:
    """Whether the hub's public port answers a plain-HTTP request (it must not)."""
    try:
        r = httpx.get(f"http://{SITE_ADDRESS}:8000/hub/login", timeout=5)
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and "password" in r.text


def alice_server(log: Path, trust: ssl.SSLContext) -> tuple[BareNode, str]:
    """alice logs in with her LDAP password over HTTPS (the site's CA verified), picks
    python-cpu and no GPU; her server answers through the proxy; (its node, its
    container)."""
    with httpx.Client(base_url=HUB_URL, timeout=30, follow_redirects=True,
                      verify=trust) as browser:  # fmt: skip
        page = browser.get("/hub/login")
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
        assert xsrf, page.text[-2000:]
        login = {"username": "alice", "password": DEMO_PASSWORDS["alice"], "_xsrf": xsrf[1]}
        assert browser.post("/hub/login", data=login).status_code == 200, log.read_text()[-3000:]
        form = browser.get("/hub/spawn/alice")
        token = re.search(r'xsrf_token: "([^"]+)"', form.text)
        assert token and 'value="python-cpu"' in form.text, form.text[-3000:]
        started = browser.post(
            "/hub/spawn/alice", data={"_xsrf": token[1], "image": "python-cpu", "gpu_count": "0"}
        )
        assert started.status_code == 200, started.text[-3000:]

        def answers() -> bool:
            r = browser.get("/user/alice/lab")
            return r.status_code == 200 and r.url.path == "/user/alice/lab"

        wait_until(answers, 120, "alice's JupyterLab through the proxy", interval=1,
                   details=lambda: log.read_text()[-4000:])  # fmt: skip
    found = [
        (node, cid)
        for node in NODES.values()
        for cid in node.docker(
            "ps", "-q", "--filter", "label=jupyterhub-gpu.owner=alice"
        ).stdout.split()
    ]
    assert len(found) == 1, found
    return found[0]
