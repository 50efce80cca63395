"""``check-node``'s I/O: what a node's engine, a probe container, its agent and the shared
home say, gathered as plain facts for the pure decisions of
:mod:`jupyterhub_gpu.core.nodecheck`.

Every container started here carries the label :data:`~.core.nodecheck.PROBE_LABEL`
(its value the run's id), runs as a non-root uid with every capability dropped, and is
removed in a ``finally`` (Ctrl-C included); a run first removes what an earlier,
killed run left (:func:`remove_leftovers`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
import requests
from docker.types import Mount

from jupyterhub_gpu.core import nodecheck as rules
from jupyterhub_gpu.core.catalog.entries import CatalogEntry
from jupyterhub_gpu.core.containers import device_requests, server_env
from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.sharing.mps import NVIDIA_PIPE_DIRECTORY, nvidia_pipe_check
from jupyterhub_gpu.edges.agents import AgentEndpoint
from jupyterhub_gpu.edges.docker_nodes import node_client, tls_config
from jupyterhub_gpu.edges.probe import make_probe
from jupyterhub_gpu.errors import GPUHubError
from jupyterhub_gpu.wire.agent import parse_agent_body
from jupyterhub_gpu.wire.nodes_file import NodeSpec

# Runs in the probe container: tries every target at once (short timeouts), prints JSON.
FIREWALL_PROBE = r"""
import json, os, socket, sys
from concurrent.futures import ThreadPoolExecutor
targets = json.loads(sys.argv[1])
def connect(t):
    s = socket.socket(socket.AF_INET6 if ":" in t[0] else socket.AF_INET); s.settimeout(2.0)
    try:
        s.connect((t[0], t[1])); return "open"
    except socket.timeout: return "timeout"
    except ConnectionRefusedError: return "refused"
    except OSError as e: return "error:" + type(e).__name__
    finally: s.close()
def key(h, p): return ("[%s]:%d" if ":" in h else "%s:%d") % (h, p)
with ThreadPoolExecutor(32) as pool:
    out = dict(zip([key(h, p) for h, p in targets], pool.map(connect, targets)))
print(json.dumps({"uid": os.getuid(), "connect": out}))
"""

# The second probe container: a listener another container must not reach (ICC off).
PEER = r"""
import socket, time
s = socket.socket(); s.bind(("0.0.0.0", 8888)); s.listen(16); s.settimeout(1.0)
deadline = time.time() + 120
while time.time() < deadline:
    try:
        c, _ = s.accept(); c.close()
    except socket.timeout:
        pass
"""

# What GPUs a container sees: the toolkit injects nvidia-smi and lists what it exposes;
# and whether it mounted NVIDIA's default MPS pipe directory (argv[1]) too.
GPU_PROBE = r"""
import json, os, shutil, subprocess, sys
smi = shutil.which("nvidia-smi")
if not smi and os.path.exists("/usr/bin/nvidia-smi"):
    smi = "/usr/bin/nvidia-smi"
out = ""
if smi:
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except Exception as e:
        out = "error: %r" % e
print(json.dumps({"smi": bool(smi), "out": out,
                  "devices": sorted(d for d in os.listdir("/dev") if d.startswith("nvidia")),
                  "nvidia_mps": len(sys.argv) > 1 and os.path.lexists(sys.argv[1])}))
"""

# The shared home, from the node: the hub's marker there? a file written as uid:gid?
HOME_PROBE = r"""
import json, os, sys
d, marker = "/jhgpu-check", sys.argv[1]
r = {"mounted": os.path.isdir(d), "marker": False, "written": False, "error": ""}
try:
    r["marker"] = open(os.path.join(d, "marker")).read().strip() == marker
    with open(os.path.join(d, "written"), "w") as f:
        f.write(marker)
    r["written"] = True
except OSError as e:
    r["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(r))
"""


IN_GPU = "in a GPU container"


@dataclass(frozen=True)
class CheckSettings:
    """What the checks need from the hub's configuration (plain values)."""

    user_network: str = "jupyterhub-gpu-users"
    user_bridge: str = "jhgpu-users"
    gpu_device_driver: str = "nvidia"
    site_secret: str = field(default="", repr=False)
    agent_ca_cert: str = ""
    home_root: str = ""  # the folder before {username} in home_template; "" = none
    catalog: tuple[CatalogEntry, ...] = ()
    hub_api: tuple[str, int] | None = None  # where servers reach the hub's API
    hub_private: tuple[tuple[str, int, str], ...] = ()  # the hub's other ports
    images: tuple[str, ...] = ()  # the spawner's configured image(s), probe fallback
    probe_image: str = ""  # --image: run the probes with this image
    probe_mode: str = "auto"
    inventory_file: str = ""
    uid_gid: tuple[int, int] = (65534, 65534)
    timeout: float = 10.0
    only: frozenset[str] = frozenset()  # run only these checks' groups ("" = all)
    #: who runs the probes: "" the command (a run first removes every probe left on the
    #: node); a hub's id for the hub's own checks (its probes carry PROBE_OWNER_LABEL, and
    #: a run removes only that hub's leftovers, never a running command's probes)
    owner: str = ""

    def wants(self, group: str) -> bool:
        return not self.only or group in self.only


def remove_leftovers(client: docker.APIClient, run: str | None = None, owner: str = "") -> int:
    """Remove probe containers (of ``run``, or of any run when None; only ``owner``'s when
    given); how many."""
    labels = [rules.PROBE_LABEL if run is None else f"{rules.PROBE_LABEL}={run}"]
    if owner:
        labels.append(f"{rules.PROBE_OWNER_LABEL}={owner}")
    n = 0
    for c in client.containers(all=True, filters={"label": labels}):
        with suppress(docker.errors.NotFound, docker.errors.APIError):
            client.remove_container(c["Id"], force=True)
            n += 1
    return n


# ---------------------------------------------------------------- engine
def _session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # no proxies, no CA bundles from the environment (docker_nodes.py)
    return s


def _plain_docker_api(host: str, port: int) -> bool:
    """Whether http://host:port/version answers as a Docker API (no TLS, no credentials)."""
    try:
        r = _session().get(f"http://{host}:{port}/version", timeout=2)
        return r.status_code == 200 and "ApiVersion" in r.json()
    except (requests.RequestException, ValueError):
        return False


def _without_cert(spec: NodeSpec) -> str:
    """What a TLS client WITHOUT a client certificate gets from a tcp+TLS engine."""
    parts = urlsplit(spec.docker_url)
    try:
        r = _session().get(
            f"https://{parts.hostname}:{parts.port}/version",
            verify=spec.tls.get("ca_cert") or True,
            timeout=3,
        )
    except requests.RequestException:
        return "refused"
    return "answered" if r.status_code == 200 else "refused"


def engine_facts(spec: NodeSpec, client: docker.APIClient | None, error: str) -> rules.EngineFacts:
    version: dict[str, Any] = {}
    if client is not None:
        try:
            version = client.version()
        except (docker.errors.DockerException, requests.RequestException, OSError) as e:
            client, error = None, f"{type(e).__name__}: {e}"
    plain: list[str] = []
    hosts = {spec.address}
    ports = {2375}
    if spec.docker_url.startswith("tcp://"):
        parts = urlsplit(spec.docker_url)
        if parts.hostname:
            hosts.add(parts.hostname)
        if parts.port and not spec.tls:
            ports.add(parts.port)
    for host in sorted(hosts):
        for port in sorted(ports):
            if _plain_docker_api(host, port):
                plain.append(f"{host}:{port}")
    tcp_tls = spec.docker_url.startswith("tcp://") and bool(spec.tls)
    return rules.EngineFacts(
        docker_url=spec.docker_url,
        answered=client is not None,
        error=error,
        version=str(version.get("Version", "")),
        api_version=str(version.get("ApiVersion", "")),
        tls=tcp_tls and client is not None,
        insecure_plaintext=spec.insecure_plaintext_docker_api,
        without_cert=_without_cert(spec) if tcp_tls else "",
        plain_tcp_open=tuple(plain),
    )


# ---------------------------------------------------------------- containers
class Probes:
    """Starts the run's probe containers on one engine and removes them all at the end."""

    def __init__(self, client: docker.APIClient, run: str, image: str, settings: CheckSettings):
        self.client, self.run, self.image, self.settings = client, run, image, settings
        self._owner = {rules.PROBE_OWNER_LABEL: settings.owner} if settings.owner else {}

    def __enter__(self) -> Probes:
        return self

    def __exit__(self, *exc: object) -> None:
        remove_leftovers(self.client, self.run)

    def create(
        self,
        script: str,
        args: Sequence[str] = (),
        *,
        network: str = "none",
        uuids: Sequence[str] | None = None,
        mounts: Sequence[Mount] = (),
        user: str = "",
    ) -> str:
        env: dict[str, str] = {}
        requests_: list[Any] = []
        if uuids is not None:
            env = server_env(uuids)  # as the spawner sets them: last, exactly the UUIDs
            requests_ = device_requests(uuids, self.settings.gpu_device_driver)
        uid, gid = self.settings.uid_gid
        host_config = self.client.create_host_config(
            network_mode=network,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            device_requests=requests_ or None,
            mounts=list(mounts) or None,
            pids_limit=128,
            mem_limit="256m",
            auto_remove=False,
        )
        created = self.client.create_container(
            self.image,
            entrypoint=["python3", "-c", script],
            command=list(args),
            user=user or f"{uid}:{gid}",
            environment=env,
            labels={rules.PROBE_LABEL: self.run, **self._owner},
            host_config=host_config,
            network_disabled=False,
        )
        return str(created["Id"])

    def run_json(self, script: str, args: Sequence[str] = (), **kw: Any) -> dict[str, Any]:
        """Run ``script`` to its end; its JSON output. Raises on any failure."""
        cid = self.create(script, args, **kw)
        try:
            self.client.start(cid)
            status = self.client.wait(cid, timeout=60)
            out = self.client.logs(cid, stdout=True, stderr=False).decode(errors="replace")
            if status.get("StatusCode") != 0:
                err = self.client.logs(cid, stdout=False, stderr=True).decode(errors="replace")
                raise GPUHubError(f"the probe exited {status.get('StatusCode')}: {err[-300:]}")
            lines = out.strip().splitlines()
            return dict(json.loads(lines[-1])) if lines else {}
        finally:
            with suppress(docker.errors.APIError):
                self.client.remove_container(cid, force=True)


def _error(e: BaseException) -> str:
    text = getattr(e, "explanation", None) or str(e)
    return f"{text}"[:400]


def firewall_facts(
    probes: Probes,
    spec: NodeSpec,
    settings: CheckSettings,
    net: dict[str, Any],
    agent_port: int | None,
) -> list[rules.Check]:
    client = probes.client
    peer_ip = None
    peer = probes.create(PEER, network=settings.user_network)
    client.start(peer)
    for _ in range(50):
        info = client.inspect_container(peer)
        peer_ip = (info["NetworkSettings"]["Networks"].get(settings.user_network) or {}).get(
            "IPAddress"
        )
        if peer_ip:
            break
        time.sleep(0.1)
    time.sleep(0.3)  # the listener binds
    targets = rules.firewall_targets(
        node_address=spec.address,
        gateway=rules.bridge_gateway(net),
        gateway6=rules.bridge_gateway6(net),
        agent_port=agent_port,
        hub_api=settings.hub_api,
        hub_private=settings.hub_private,
        peer=peer_ip,
    )
    try:
        result = probes.run_json(
            FIREWALL_PROBE,
            [json.dumps([[t.host, t.port] for t in targets])],
            network=settings.user_network,
        )
    finally:
        with suppress(docker.errors.APIError):
            client.remove_container(peer, force=True)
    return rules.firewall_checks(
        spec.name,
        targets,
        result.get("connect", {}),
        result.get("uid"),
        settings.user_bridge,
        settings.hub_api,
    )


def gpu_probe(probes: Probes, uuids: Sequence[str]) -> rules.GPUProbe:
    try:
        r = probes.run_json(GPU_PROBE, [NVIDIA_PIPE_DIRECTORY], uuids=uuids)
    except (docker.errors.DockerException, GPUHubError, requests.RequestException) as e:
        return rules.GPUProbe(tuple(uuids), error=_error(e))
    return rules.GPUProbe(
        tuple(uuids),
        seen=rules.visible_uuids(str(r.get("out", ""))),
        nvidia_smi=bool(r.get("smi")),
        nvidia_mps=r.get("nvidia_mps") is True,
    )


def home_facts(probes: Probes, settings: CheckSettings) -> rules.HomeFacts:
    root = settings.home_root
    uid, gid = settings.uid_gid
    base = rules.HomeFacts(root=root, uid_gid=(uid, gid))
    if not root:
        return base
    if not Path(root).is_dir():
        return rules.HomeFacts(root=root, on_hub=False, uid_gid=(uid, gid))
    folder = Path(root) / f".jhgpu-check-{probes.run}"
    try:
        folder.mkdir(mode=0o700)
        marker = folder / "marker"
        marker.write_text(probes.run)
        for p in (folder, marker):
            os.chown(p, uid, gid)
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        return rules.HomeFacts(root=root, on_hub=True, hub_error=str(e), uid_gid=(uid, gid))
    try:
        try:
            r = probes.run_json(
                HOME_PROBE,
                [probes.run],
                mounts=[Mount("/jhgpu-check", str(folder), type="bind", read_only=False)],
            )
        except (docker.errors.DockerException, GPUHubError) as e:
            text = _error(e)
            if "does not exist" in text or "no such file" in text.lower():
                return rules.HomeFacts(root=root, on_hub=True, mounted=False, uid_gid=(uid, gid))
            return rules.HomeFacts(root=root, on_hub=True, probe_error=text, uid_gid=(uid, gid))
        owner = None
        written = folder / "written"
        if written.exists():
            st = written.stat()
            owner = (st.st_uid, st.st_gid)
        return rules.HomeFacts(
            root=root,
            on_hub=True,
            mounted=bool(r.get("mounted")),
            marker_seen=bool(r.get("marker")),
            written=bool(r.get("written")),
            write_error=str(r.get("error", "")),
            owner=owner,
            uid_gid=(uid, gid),
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- agent
def agent_facts(
    spec: NodeSpec, settings: CheckSettings
) -> tuple[rules.AgentFacts, NodeInventory | None]:
    if not spec.agent_url:
        return rules.AgentFacts(url=None), None
    endpoint = AgentEndpoint.for_node(spec.name, spec.agent_url, settings.site_secret)
    if not endpoint.token:
        return rules.AgentFacts(url=spec.agent_url, token=False), None
    url = spec.agent_url.rstrip("/") + "/v1/gpus"
    before = time.time()
    try:
        r = _session().get(
            url,
            headers={"Authorization": f"token {endpoint.token}", "Accept": "application/json"},
            timeout=min(settings.timeout, 5),
            verify=settings.agent_ca_cert or True,
            allow_redirects=False,
        )
    except requests.RequestException as e:
        return rules.AgentFacts(url=spec.agent_url, error=f"{type(e).__name__}: {e}"), None
    now = (before + time.time()) / 2
    skew = None
    with suppress(TypeError, ValueError):
        skew = parsedate_to_datetime(r.headers.get("Date", "")).timestamp() - now
    if r.status_code != 200:
        return rules.AgentFacts(url=spec.agent_url, status=r.status_code, clock_skew_s=skew), None
    try:
        inventory, _ = parse_agent_body(r.content)
    except GPUHubError as e:
        return rules.AgentFacts(
            url=spec.agent_url, status=200, error=str(e), clock_skew_s=skew
        ), None
    facts = rules.AgentFacts(
        url=spec.agent_url, status=200, served_node=inventory.name, clock_skew_s=skew
    )
    return facts, inventory if inventory.name == spec.name else None


def declared_inventory(spec: NodeSpec, settings: CheckSettings) -> NodeInventory | None:
    """The node's GPUs without an agent: the hub's declared inventory file."""
    if spec.agent_url or not settings.inventory_file or settings.probe_mode == "nvml":
        return None
    try:
        return make_probe("declared", settings.inventory_file, spec.name).read()
    except (GPUHubError, OSError):
        return None


# ---------------------------------------------------------------- one node
def local_inventory() -> tuple[NodeInventory | None, str]:
    """This machine's GPUs through NVML (``--local``, on the node itself); or why not."""
    try:
        return make_probe("nvml", None).read(), ""
    except (GPUHubError, OSError) as e:
        return None, str(e)


def check_node(
    spec: NodeSpec, settings: CheckSettings, run: str, gpus: NodeInventory | None = None
) -> rules.NodeReport:
    """Every check of one node; containers it starts are gone when it returns or raises.
    ``gpus``: the node's GPUs when known otherwise (``--local``: NVML)."""
    report = rules.NodeReport(spec.name)
    client: docker.APIClient | None = None
    error = ""
    try:
        client = node_client(spec, settings.timeout, tls_config(spec))
    except (docker.errors.DockerException, requests.RequestException, OSError) as e:
        error = f"{type(e).__name__}: {e}"
    try:
        _run_checks(report, spec, settings, run, client, error, gpus)
        return report
    finally:
        if client is not None:
            with suppress(Exception):
                remove_leftovers(client, run)
            client.close()


def _run_checks(
    report: rules.NodeReport,
    spec: NodeSpec,
    settings: CheckSettings,
    run: str,
    client: docker.APIClient | None,
    error: str,
    gpus: NodeInventory | None,
) -> None:
    """check_node's checks, in order, into ``report`` (``client``: None when ``error``)."""
    add = report.checks.extend
    name = spec.name
    engine = engine_facts(spec, client, error)
    add(rules.engine_checks(name, engine))
    agent, inventory = agent_facts(spec, settings)
    inventory = inventory or gpus
    if inventory is None:
        inventory = declared_inventory(spec, settings)
    if client is None or not engine.answered:
        groups = ("user-network", "firewall", "gpu", "home", "catalog")
        add(_not_run_groups(name, settings, groups, "the engine does not answer"))
        if settings.wants("agent"):
            add(rules.agent_checks(name, agent))
        return
    remove_leftovers(client, owner=settings.owner)
    images = client.images()
    tags = [t for i in images for t in (i.get("RepoTags") or [])]
    digests = [d for i in images for d in (i.get("RepoDigests") or [])]
    net: dict[str, Any] | None = None
    try:
        net = client.inspect_network(settings.user_network)
    except docker.errors.NotFound:
        net = None
    if settings.wants("user-network"):
        add(rules.network_checks(name, net, settings.user_network, settings.user_bridge))
    add(_probe_checks(spec, settings, run, client, (tags, digests), net, inventory))
    if settings.wants("agent"):
        add(rules.agent_checks(name, agent))
    if settings.wants("catalog"):
        add(rules.catalog_checks(name, settings.catalog, tags, inventory, digests))


def _not_run_groups(
    name: str, settings: CheckSettings, groups: Sequence[str], because: str
) -> list[rules.Check]:
    """A not-run line for each of ``groups`` the run wants."""
    return [rules.not_run(name, group, because) for group in groups if settings.wants(group)]


def _probe_checks(
    spec: NodeSpec,
    settings: CheckSettings,
    run: str,
    client: docker.APIClient,
    held: tuple[Sequence[str], Sequence[str]],
    net: dict[str, Any] | None,
    inventory: NodeInventory | None,
) -> list[rules.Check]:
    """The firewall, GPU and home checks: what probe containers on the node see (``held``:
    the node's image tags and digests)."""
    name = spec.name
    tags, digests = held
    cpu = [e.image for e in settings.catalog if e.cpu_only]
    image = settings.probe_image or rules.probe_image(cpu, settings.images, tags, digests)
    agent_port = urlsplit(spec.agent_url).port if spec.agent_url else None
    present = rules.image_present(image, tags, digests) if image else False
    if image is None or (settings.probe_image and not present):
        seen = f"{rules.NOT_RUN} no probe image on the node (one with python3)"
        fix = "load the catalog's CPU image on the node, or give --image"
        groups = ("firewall", "gpu", "home")
        return [rules.Check(name, g, False, seen, fix) for g in groups if settings.wants(g)]
    out: list[rules.Check] = []
    with Probes(client, run, image, settings) as probes:
        if settings.wants("firewall"):
            out += _firewall_probe_checks(probes, spec, settings, net, agent_port)
        if settings.wants("gpu"):
            one = none = None
            if inventory is not None and inventory.gpus:
                one = gpu_probe(probes, [inventory.gpus[0].uuid])
                none = gpu_probe(probes, [])
            out += rules.gpu_checks(name, inventory, one, none, settings.gpu_device_driver)
            if one is not None and not one.error:  # did the toolkit mount NVIDIA's MPS pipes?
                out.append(nvidia_pipe_check(name, "gpu.nvidia-mps", one.nvidia_mps, IN_GPU))
        if settings.wants("home"):
            out += rules.home_checks(name, home_facts(probes, settings))
    return out


def _firewall_probe_checks(
    probes: Probes,
    spec: NodeSpec,
    settings: CheckSettings,
    net: dict[str, Any] | None,
    agent_port: int | None,
) -> list[rules.Check]:
    """The firewall's checks, or why its probe could not run."""
    if net is None:
        return [rules.not_run(spec.name, "firewall", "no user network")]
    try:
        return firewall_facts(probes, spec, settings, net, agent_port)
    except (docker.errors.DockerException, GPUHubError, ValueError) as e:
        seen = f"{rules.PROBE_FAILED} {_error(e)}"
        return [
            rules.Check(
                spec.name, "firewall", False, seen, "check the engine's log and the probe image"
            )
        ]
