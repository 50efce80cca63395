"""``jupyterhub-gpu check-node``'s decisions: what passed, and for each failure, the fix.

Pure functions over plain facts that :mod:`jupyterhub_gpu.edges.nodecheck` gathers on a
node (its engine's answers, what a probe container could reach, what a container given
GPUs saw, the agent's answer, the shared home, the images). Each returns
:class:`Check` lines; the command prints them (✓/✗ and the fix) or writes them as JSON.
docs/nodes.md ("Checking a node") maps each check to its fix.

The hub runs the cheap ones itself (:data:`HUB_CHECKS`) on every node it sees; what it
makes of them is :func:`hub_verdict` (may servers go there?), :func:`verdict_log` (what
its log says, once per change) and :func:`next_check_in` (section 7).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from jupyterhub_gpu.core.catalog.compat import image_runs_on
from jupyterhub_gpu.core.catalog.entries import CatalogEntry
from jupyterhub_gpu.core.checklist import CHECKS, Check
from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.usernet import network_options, network_problem
from jupyterhub_gpu.core.words import duration

#: the label on every probe container (its value: the run's id); leftovers are removed by it
PROBE_LABEL = "jupyterhub-gpu.check-node"
#: on the hub's own probes, beside PROBE_LABEL: the hub's id (a hub removes only its own
#: leftovers; the command removes every probe left behind)
PROBE_OWNER_LABEL = "jupyterhub-gpu.check-node.owner"
#: how a check that could not run begins its detail (:func:`not_run`)
NOT_RUN = "not run:"
#: how a check whose probe container failed begins its detail
PROBE_FAILED = "the probe failed:"
#: a clock further off than this many seconds from the hub's fails
MAX_CLOCK_SKEW_S = 5.0
#: what a node's GPU containers run: the UUIDs the NVIDIA toolkit shows them
UUID_RE = re.compile(r"UUID:\s*((?:GPU|MIG)-[0-9A-Za-z-]+)")


def not_run(node: str, check: str, because: str) -> Check:
    """A check that could not run because an earlier one failed."""
    return Check(node, check, False, f"{NOT_RUN} {because}", "fix the failed check it needs first")


# ---------------------------------------------------------------- certificates
#: a certificate that expires within this many days fails check-node, with its renewal
RENEW_WITHIN_DAYS = 30


@dataclass(frozen=True)
class CertFacts:
    what: str  # "the node's server certificate", ...
    path: str
    not_after: float | None  # epoch seconds; None when it could not be read
    error: str = ""
    renew: str = ""  # the command that renews it


def certificate_check(node: str, certs: Sequence[CertFacts], now: float) -> Check:
    """One line for the TLS certificates a node's connections use: each must be readable
    and valid for more than :data:`RENEW_WITHIN_DAYS` days; the fix is each renewal."""
    bad, fixes, soonest = [], [], None
    for c in certs:
        if c.not_after is None:
            bad.append(f"{c.what} {c.path} cannot be read ({c.error})")
            fixes.append(c.renew)
            continue
        days = (c.not_after - now) / 86400
        soonest = days if soonest is None else min(soonest, days)
        if days <= 0:
            bad.append(f"{c.what} {c.path} expired {duration(-days * 86400)} ago")
        elif days <= RENEW_WITHIN_DAYS:
            bad.append(f"{c.what} {c.path} expires in {duration(days * 86400)}")
        else:
            continue
        fixes.append(c.renew)
    if bad:
        fix = "; ".join(dict.fromkeys(f for f in fixes if f))
        return Check(node, "certificates", False, "; ".join(bad), fix)
    if soonest is None:
        return Check(node, "certificates", True, "no TLS certificate in use")
    return Check(
        node, "certificates", True, f"{len(certs)} valid for {duration(soonest * 86400)} or more"
    )


# ---------------------------------------------------------------- 1. engine
@dataclass(frozen=True)
class EngineFacts:
    docker_url: str
    answered: bool
    error: str = ""
    version: str = ""
    api_version: str = ""
    tls: bool = False  # the hub's client reached it over TLS with its client certificate
    insecure_plaintext: bool = False  # the node entry says insecure_plaintext_docker_api
    #: tcp nodes with TLS: what a client WITHOUT a certificate got ("refused" or "answered")
    without_cert: str = ""
    #: plain http://address:2375 (and any tcp port in docker_url) answered as a Docker API
    plain_tcp_open: tuple[str, ...] = ()


#: fixes of the engine's checks (engine_checks)
_ENGINE_FIX = {
    "start": (
        "start the engine on the node (systemctl start docker) and check docker_url "
        "{docker_url!r} in the node's entry"
    ),
    "tcp": (
        "; over tcp:// the engine must run with --tlsverify and a certificate "
        "signed by the CA in tls.ca_cert, the hub's tls.client_cert signed by the "
        "CA the engine trusts (docs/nodes.md)"
    ),
    "plaintext": (
        "run dockerd with --tlsverify --tlscacert --tlscert --tlskey -H "
        "tcp://NODE_IP:2376 and give the node's entry tls: {ca_cert, client_cert, "
        "client_key}; drop insecure_plaintext_docker_api (docs/nodes.md)"
    ),
    "no-verify": (
        "start dockerd with --tlsverify (not just --tls) so it requires a client "
        "certificate signed by its --tlscacert"
    ),
    "plain-tcp": (
        'remove every -H tcp://...:2375 (and "hosts" in /etc/docker/daemon.json, '
        "socat forwarders) from the node; use TLS on 2376 (docs/nodes.md)"
    ),
}


def engine_checks(node: str, f: EngineFacts) -> list[Check]:
    out = [_engine_answer_check(node, f)]
    tls = _engine_tls_check(node, f)
    if tls is not None:
        out.append(tls)
    out.append(_engine_plain_tcp_check(node, f))
    return out


def _engine_answer_check(node: str, f: EngineFacts) -> Check:
    """engine: does the engine answer the hub's client?"""
    if f.answered:
        how = "over TLS with the hub's client certificate" if f.tls else f"at {f.docker_url}"
        return Check(
            node, "engine", True, f"Docker {f.version} (API {f.api_version}) answers {how}"
        )
    fix = _ENGINE_FIX["start"].format(docker_url=f.docker_url)
    if f.docker_url.startswith("tcp://") and not f.insecure_plaintext:
        fix += _ENGINE_FIX["tcp"]
    return Check(node, "engine", False, f"no answer from {f.docker_url}: {f.error}", fix)


def _engine_tls_check(node: str, f: EngineFacts) -> Check | None:
    """engine.tls: plain TCP, or TLS that does not require a client certificate."""
    if f.insecure_plaintext or (f.docker_url.startswith("tcp://") and f.answered and not f.tls):
        seen = f"the hub reaches the engine over plain TCP ({f.docker_url}), unauthenticated"
        return Check(node, "engine.tls", False, seen, _ENGINE_FIX["plaintext"])
    if f.without_cert == "answered":
        seen = "the engine answered a client without a certificate"
        return Check(node, "engine.tls", False, seen, _ENGINE_FIX["no-verify"])
    if f.without_cert == "refused":
        return Check(node, "engine.tls", True, "a client without a certificate is refused")
    return None


def _engine_plain_tcp_check(node: str, f: EngineFacts) -> Check:
    """engine.plain-tcp: no unauthenticated Docker API on the node."""
    if not f.plain_tcp_open:
        return Check(node, "engine.plain-tcp", True, "no plain-TCP Docker API answers")
    seen = (
        f"a plain-TCP Docker API answers at {', '.join(f.plain_tcp_open)}: root on the "
        "node for whoever reaches it"
    )
    return Check(node, "engine.plain-tcp", False, seen, _ENGINE_FIX["plain-tcp"])


def network_checks(
    node: str, info: Mapping[str, Any] | None, name: str, bridge: str
) -> list[Check]:
    """The user bridge: ``info`` is ``docker network inspect`` (None: missing)."""
    if info is None:
        opts = " ".join(f"--opt {k}={v}" for k, v in network_options(bridge).items())
        return [
            Check(
                node,
                "user-network",
                False,
                f"network {name!r} does not exist",
                "the hub creates it at the first server it places on the node; or now: "
                f"docker network create --driver bridge {opts} {name}",
            )
        ]
    problem = network_problem(info, name, bridge)
    if problem:
        return [Check(node, "user-network", False, problem.split(";")[0], problem)]
    return [
        Check(node, "user-network", True, f"{name} on bridge {bridge}, inter-container traffic off")
    ]


def _gateways(info: Mapping[str, Any] | None) -> list[str]:
    out = []
    for cfg in ((info or {}).get("IPAM") or {}).get("Config") or []:
        gw = cfg.get("Gateway") if isinstance(cfg, Mapping) else None
        if isinstance(gw, str) and gw:
            out.append(gw.split("/")[0])
    return out


def bridge_gateway(info: Mapping[str, Any] | None) -> str | None:
    """The user network's IPv4 gateway (the node's address on the bridge), if known."""
    return next((gw for gw in _gateways(info) if ":" not in gw), None)


def bridge_gateway6(info: Mapping[str, Any] | None) -> str | None:
    """The user network's IPv6 gateway, if it has one (it must not: network_checks fails
    it; the firewall probe tries it too, to show what a container reaches over IPv6)."""
    return next((gw for gw in _gateways(info) if ":" in gw), None)


# ---------------------------------------------------------------- 2. firewall
@dataclass(frozen=True)
class Target:
    host: str
    port: int
    what: str  # "the node's Docker TLS port", ...
    must_reach: bool = False

    @property
    def key(self) -> str:
        """``host:port``, ``[host]:port`` for an IPv6 host (the probe's keys are the same)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def firewall_targets(
    *,
    node_address: str,
    gateway: str | None,
    agent_port: int | None,
    hub_api: tuple[str, int] | None,
    hub_private: Sequence[tuple[str, int, str]] = (),
    peer: str | None = None,
    peer_port: int = 8888,
    gateway6: str | None = None,
) -> list[Target]:
    """Where a user's container must not get (and the hub's API, where it must).
    ``gateway6``: the bridge's IPv6 gateway, on a user network with IPv6 (unfit anyway)."""
    hosts = [(node_address, "the node")]
    if gateway and gateway != node_address:
        hosts.append((gateway, "the bridge gateway (the node)"))
    if gateway6:
        hosts.append((gateway6, "the bridge's IPv6 gateway (the node)"))
    out: list[Target] = []
    for host, where in hosts:
        out.append(Target(host, 2375, f"plain Docker API on {where}"))
        out.append(Target(host, 2376, f"Docker TLS port on {where}"))
        if agent_port:
            out.append(Target(host, agent_port, f"the node agent on {where}"))
    for host, port, what in hub_private:
        out.append(Target(host, port, what))
    out.append(Target("169.254.169.254", 80, "cloud metadata"))
    if peer:
        out.append(Target(peer, peer_port, "another container on the user bridge"))
    if hub_api:
        out.append(Target(hub_api[0], hub_api[1], "the hub's API", must_reach=True))
    seen: set[str] = set()
    unique = []
    for t in out:
        if t.key not in seen:
            seen.add(t.key)
            unique.append(t)
    return unique


def reached(outcome: str) -> bool:
    """A connection attempt's outcome says the packet got through: it connected, or a
    host answered with a reset (refused). A firewall that drops gives a timeout."""
    return outcome in ("open", "refused")


#: fixes of the firewall's checks (firewall_checks)
_FIREWALL_FIX = {
    "root": "the engine ignored the container's user: check for userns/authorization plugins",
    "apply": (
        "apply the node firewall on the node, as root: jupyterhub-gpu firewall --bridge "
        "{bridge}{allow}; and at every boot: systemctl enable --now jupyterhub-gpu-firewall "
        "(the unit `jupyterhub-gpu units install --node` writes; docs/nodes.md)"
    ),
    "icc": "; containers reach each other: the user network needs enable_icc=false",
    "no-outcome": (
        "the probe did not try every target, so they are not shown blocked: check the "
        "probe image (python3) and the engine's log, then run check-node again"
    ),
    "hub-api": (
        "allow it in the node firewall, as root on the node: jupyterhub-gpu units install "
        "--node NAME --address ADDR --bridge {bridge} --allow {key} (with the node's other "
        "--allow), then systemctl restart jupyterhub-gpu-firewall; check "
        "JupyterHub.hub_connect_url is an address the nodes route to"
    ),
    "hub-api-unknown": (
        "set c.JupyterHub.hub_connect_url (or hub_connect_ip) to the address servers "
        "reach the hub at"
    ),
}


def firewall_checks(
    node: str,
    targets: Sequence[Target],
    outcomes: Mapping[str, str],
    uid: int | None,
    bridge: str,
    hub_api: tuple[str, int] | None,
) -> list[Check]:
    """``outcomes``: target key -> "open", "refused", "timeout" or "error:..." as seen
    from a probe container on the user bridge (non-root, no capabilities)."""
    out: list[Check] = []
    if uid == 0:
        seen = "the probe container ran as root"
        out.append(Check(node, "firewall.probe", False, seen, _FIREWALL_FIX["root"]))
    out.append(_private_targets_check(node, targets, outcomes, uid, bridge, hub_api))
    for t in targets:
        if t.must_reach:
            out.append(_hub_api_check(node, t.key, outcomes.get(t.key, "not tried"), bridge))
    if hub_api is None:
        seen = "the hub's API address is unknown (not in the configuration)"
        out.append(Check(node, "firewall.hub-api", False, seen, _FIREWALL_FIX["hub-api-unknown"]))
    return out


def _private_targets_check(
    node: str,
    targets: Sequence[Target],
    outcomes: Mapping[str, str],
    uid: int | None,
    bridge: str,
    hub_api: tuple[str, int] | None,
) -> Check:
    """firewall: a user's container reaches none of the targets it must not reach. A
    target the probe gave no outcome for was not shown blocked: that fails too."""
    private = [t for t in targets if not t.must_reach]
    leaks = [t for t in private if reached(outcomes.get(t.key, ""))]
    untried = [t for t in private if not outcomes.get(t.key)]
    if not leaks and not untried:
        seen = (
            f"a user's container (uid {uid}, no capabilities) reached none of "
            f"{len(private)} private targets"
        )
        return Check(node, "firewall", True, seen)
    parts, fixes = [], []
    if leaks:
        reach = "; ".join(f"{t.key} ({t.what}: {outcomes[t.key]})" for t in leaks)
        parts.append(f"a user's container reached {reach}")
        allow = f" --allow {hub_api[0]}:{hub_api[1]}" if hub_api else " --allow HUB_IP:HUB_API_PORT"
        fix = _FIREWALL_FIX["apply"].format(bridge=bridge, allow=allow)
        if any(t.what.startswith("another container") for t in leaks):
            fix += _FIREWALL_FIX["icc"]
        fixes.append(fix)
    if untried:
        names = ", ".join(f"{t.key} ({t.what})" for t in untried)
        parts.append(f"the probe gave no outcome for {names}")
        fixes.append(_FIREWALL_FIX["no-outcome"])
    return Check(node, "firewall", False, "; ".join(parts), "; ".join(fixes))


def _hub_api_check(node: str, key: str, outcome: str, bridge: str) -> Check:
    """firewall.hub-api: a user's container must reach the hub's API (``key``)."""
    if outcome == "open":
        return Check(node, "firewall.hub-api", True, f"the hub's API {key} is reachable")
    if outcome == "refused":
        seen = f"the hub's API {key} is let through (nothing answered: is the hub running?)"
        return Check(node, "firewall.hub-api", True, seen)
    seen = f"the hub's API {key} is out of reach from a user's container ({outcome})"
    fix = _FIREWALL_FIX["hub-api"].format(bridge=bridge, key=key)
    return Check(node, "firewall.hub-api", False, seen, fix)


# ---------------------------------------------------------------- 3. GPU isolation
def visible_uuids(nvidia_smi_output: str) -> tuple[str, ...]:
    """The GPU (and MIG) UUIDs ``nvidia-smi -L`` lists, in order."""
    return tuple(UUID_RE.findall(nvidia_smi_output))


@dataclass(frozen=True)
class GPUProbe:
    given: tuple[str, ...]
    error: str = ""  # the container could not be created or started
    seen: tuple[str, ...] = ()
    nvidia_smi: bool = False  # nvidia-smi was there (the toolkit injected it)
    nvidia_mps: bool = False  # /tmp/nvidia-mps was there (the toolkit mounted it)


#: fixes of the GPU isolation checks (gpu_checks; the toolkit's own: _toolkit_fix)
_GPU_FIX = {
    "extra": (
        "the toolkit exposes GPUs the container was not given "
        "({extra}): check /etc/nvidia-container-runtime/config.toml "
        "(no default 'all' device list, no 'nvidia' default-runtime with "
        "NVIDIA_VISIBLE_DEVICES=all in /etc/docker/daemon.json) and that the "
        "hub's GPU UUIDs are the node's (docs/nodes.md)"
    ),
    "missing": (
        "the toolkit did not expose the requested GPU: check the driver "
        "(nvidia-smi on the node) and the UUIDs the agent reports"
    ),
    "none-error": "check the probe image and the engine's log",
    "none-sees": (
        "the toolkit exposes GPUs without a device request: remove a default "
        "'nvidia' runtime that adds all GPUs, and set NVIDIA_VISIBLE_DEVICES=void "
        "handling back to the toolkit's default (docs/nodes.md)"
    ),
}


def gpu_checks(
    node: str,
    inventory: NodeInventory | None,
    one: GPUProbe | None,
    none: GPUProbe | None,
    driver: str = "nvidia",
) -> list[Check]:
    out: list[Check] = []
    if inventory is None or not inventory.gpus:
        unknown = "the node's GPUs are unknown (no agent answer, declared inventory or NVML)"
        return [not_run(node, "gpu", unknown)]
    if one is not None:
        out.append(_gpu_one_check(node, one, driver))
    if none is not None:
        out.append(_gpu_none_check(node, none))
    return out


def _gpu_one_check(node: str, one: GPUProbe, driver: str) -> Check:
    """gpu.one: a container given one GPU sees exactly that one."""
    want = set(one.given)
    if one.error:
        seen = f"a container given {', '.join(one.given)} did not run: {one.error}"
        return Check(node, "gpu.one", False, seen, _toolkit_fix(driver, one.error))
    if set(one.seen) == want and len(one.seen) == len(want):
        return Check(node, "gpu.one", True, f"a container given {one.given[0]} sees exactly it")
    if not one.nvidia_smi:
        seen = f"a container given {one.given[0]} has no nvidia-smi (the toolkit exposed nothing)"
        return Check(node, "gpu.one", False, seen, _toolkit_fix(driver, ""))
    extra = sorted(set(one.seen) - want)
    seen = f"a container given {one.given[0]} sees {', '.join(one.seen) or 'no GPU'}"
    fix = _GPU_FIX["extra"].format(extra=", ".join(extra)) if extra else _GPU_FIX["missing"]
    return Check(node, "gpu.one", False, seen, fix)


def _gpu_none_check(node: str, none: GPUProbe) -> Check:
    """gpu.none: a container given no GPU sees none."""
    if none.error:
        seen = f"a container without GPUs did not run: {none.error}"
        return Check(node, "gpu.none", False, seen, _GPU_FIX["none-error"])
    if none.seen:
        seen = f"a container given no GPU sees {', '.join(none.seen)}"
        return Check(node, "gpu.none", False, seen, _GPU_FIX["none-sees"])
    return Check(node, "gpu.none", True, "a container given no GPU sees none")


def _toolkit_fix(driver: str, error: str) -> str:
    if driver == "cdi":
        return (
            "generate the CDI spec on the node (nvidia-ctk cdi generate "
            "--output=/etc/cdi/nvidia.yaml) and enable CDI in the engine (Docker >= 25)"
        )
    if "device driver" in error:
        return (
            "install the NVIDIA Container Toolkit and register it with Docker "
            "(nvidia-ctk runtime configure --runtime=docker; systemctl restart docker)"
        )
    return (
        "check the NVIDIA Container Toolkit on the node (nvidia-ctk --version; "
        "docker run --rm --gpus all IMAGE nvidia-smi -L) and the engine's log"
    )


def nvml_checks(node: str, inventory: NodeInventory | None, error: str = "") -> list[Check]:
    """``--local`` on the node itself: what NVML says (driver, CUDA, each GPU's UUID and
    compute capability), the facts the agent serves and the catalog's rules read."""
    if inventory is None:
        return [
            Check(
                node,
                "nvml",
                False,
                f"NVML cannot be read: {error or 'no NVIDIA driver'}",
                "install the NVIDIA driver (nvidia-smi must work on the node) and "
                "nvidia-ml-py in the agent's environment",
            )
        ]
    cuda = inventory.cuda_driver_version or "unknown"
    out = [
        Check(
            node,
            "nvml",
            bool(inventory.gpus),
            f"driver {inventory.driver_version}, CUDA {cuda}, {len(inventory.gpus)} GPU(s)",
            "" if inventory.gpus else "NVML sees no GPU: check the driver (nvidia-smi) and dmesg",
        )
    ]
    for g in inventory.gpus:
        cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}"
        ok = g.healthy is not False
        out.append(
            Check(
                node,
                f"nvml.gpu{g.index}",
                ok,
                f"{g.model}, {g.uuid}, compute capability {cc}, {g.memory_mib} MiB",
                ""
                if ok
                else "NVML reports the GPU unhealthy (XID errors?): see nvidia-smi -q, dmesg",
            )
        )
    return out


# ---------------------------------------------------------------- 4. agent
@dataclass(frozen=True)
class AgentFacts:
    url: str | None  # None: the node's entry has no agent_url
    token: bool = True  # a token could be derived from the site secret
    status: int | None = None  # HTTP status; None: no answer
    error: str = ""  # why no answer, or why the answer could not be read
    served_node: str = ""  # the node name in its answer
    clock_skew_s: float | None = None  # node's Date minus the hub's clock


#: fixes of the agent's checks (agent_checks)
_AGENT_FIX = {
    "token": (
        "set c.GPUCluster.agent_token (or $JUPYTERHUB_GPU_AGENT_TOKEN) to the "
        "site secret (docs/agent.md)"
    ),
    "no-answer": (
        "start it on the node (jupyterhub-gpu-agent, docs/agent.md) listening on the "
        "address and port of agent_url; the node firewall must let the hub in"
    ),
    "refused": (
        "give the agent this node's own token: python -m jupyterhub_gpu.services.agent "
        "--print-token --node {node} --site-secret-file FILE, in its "
        "JUPYTERHUB_GPU_AGENT_TOKEN (docs/agent.md)"
    ),
    "error": "check the agent's log on the node",
    "other-node": "start the agent with --node {node} (and this node's token), or fix agent_url",
    "clock": (
        "run NTP (chrony or systemd-timesyncd) on the node and the hub: agent "
        "readings older than AgentClient.max_snapshot_age count as a stuck probe"
    ),
}


def agent_checks(node: str, f: AgentFacts) -> list[Check]:
    if f.url is None:
        seen = "no agent_url: the hub reads GPUs with its own probe (declared inventory or NVML)"
        return [Check(node, "agent", True, seen)]
    if not f.token:
        seen = "no token for the agent: the site secret is missing or shorter than 16 characters"
        return [Check(node, "agent", False, seen, _AGENT_FIX["token"])]
    out = [_agent_answer_check(node, f.url, f)]
    if f.clock_skew_s is not None:
        out.append(_clock_check(node, f.clock_skew_s))
    return out


def _agent_answer_check(node: str, url: str, f: AgentFacts) -> Check:
    """agent: the agent at ``url`` answers, to this node's token, as this node."""
    if f.status is None:
        seen = f"the agent at {url} does not answer: {f.error}"
        return Check(node, "agent", False, seen, _AGENT_FIX["no-answer"])
    if f.status in (401, 403):
        seen = f"the agent at {url} refused this node's token (HTTP {f.status})"
        return Check(node, "agent", False, seen, _AGENT_FIX["refused"].format(node=node))
    if f.status != 200 or f.error:
        seen = f"the agent at {url} answered HTTP {f.status}: {f.error}"
        return Check(node, "agent", False, seen, _AGENT_FIX["error"])
    if f.served_node != node:
        seen = f"the agent at {url} serves node {f.served_node!r}, not {node!r}"
        return Check(node, "agent", False, seen, _AGENT_FIX["other-node"].format(node=node))
    return Check(node, "agent", True, f"the agent at {url} answers as {node}")


def _clock_check(node: str, clock_skew_s: float) -> Check:
    """clock: the node's clock is within MAX_CLOCK_SKEW_S of the hub's."""
    skew = round(clock_skew_s) or 0  # never "-0"
    seen = f"the node's clock is {skew:+d} s off the hub's"
    if abs(clock_skew_s) <= MAX_CLOCK_SKEW_S:
        return Check(node, "clock", True, seen)
    return Check(node, "clock", False, seen, _AGENT_FIX["clock"])


# ---------------------------------------------------------------- 5. shared home root
@dataclass(frozen=True)
class HomeFacts:
    root: str  # "" = no home_template
    on_hub: bool = False  # the root exists on the hub's machine
    hub_error: str = ""  # the marker could not be written on the hub's side
    probe_error: str = ""  # the container could not run
    mounted: bool = False  # the container saw the root
    marker_seen: bool = False  # ... with the hub's marker in it
    written: bool = False  # it wrote a file as uid:gid
    write_error: str = ""
    owner: tuple[int, int] | None = None  # the written file's owner, as the hub sees it
    uid_gid: tuple[int, int] = (65534, 65534)


#: fixes of the shared home's check (home_checks)
_HOME_FIX = {
    "hub": (
        "mount the shared filesystem at {root} on the hub's machine too (the hub "
        "creates homes there) and run check-node as root, as the hub runs"
    ),
    "probe": "check that {root} exists on the node and the engine may bind-mount it",
    "not-shared": (
        "mount the same shared export at {root} on the node as on the hub (fstab, "
        "x-systemd.automount), then restart Docker so it sees the mount (docs/nodes.md)"
    ),
    "write": (
        "mount it read-write on the node; for NFS check root_squash/all_squash and "
        "idmapping; for CephFS the client's caps (rw on the path)"
    ),
    "owner": (
        "the node and the hub map ids differently: use the same uid/gid mapping on both "
        "(NFSv4 idmapd domain, no all_squash, the same LDAP/sssd)"
    ),
}


def home_checks(node: str, f: HomeFacts) -> list[Check]:
    if not f.root:
        return [Check(node, "home", True, "no home_template: servers get no shared home")]
    problem = _home_problem(f)
    if problem is not None:
        seen, fix = problem
        return [Check(node, "home", False, seen, fix)]
    uid, gid = f.uid_gid
    seen = f"{f.root} is the hub's filesystem, writable as {uid}:{gid} with the right owner"
    return [Check(node, "home", True, seen)]


def _home_problem(f: HomeFacts) -> tuple[str, str] | None:
    """What is wrong with the shared home root ``f.root`` (what was seen, the fix), if any."""
    root = f.root
    if not f.on_hub or f.hub_error:
        seen = f"the home root {root} on the hub's machine: {f.hub_error or 'missing'}"
        return seen, _HOME_FIX["hub"].format(root=root)
    if f.probe_error:
        seen = f"the probe container did not run: {f.probe_error}"
        return seen, _HOME_FIX["probe"].format(root=root)
    if not f.mounted or not f.marker_seen:
        seen = (
            f"{root} on the node is not the filesystem the hub sees (the hub's marker "
            "file is not there)"
        )
        return seen, _HOME_FIX["not-shared"].format(root=root)
    uid, gid = f.uid_gid
    if not f.written:
        seen = (
            f"{root} is shared, but uid {uid}:{gid} cannot write its own folder there: "
            f"{f.write_error}"
        )
        return seen, _HOME_FIX["write"]
    if f.owner != (uid, gid):
        owner = f"{f.owner[0] if f.owner else '?'}:{f.owner[1] if f.owner else '?'}"
        seen = f"a file written on the node as {uid}:{gid} belongs to {owner} on the hub"
        return seen, _HOME_FIX["owner"]
    return None


# ---------------------------------------------------------------- 6. catalog
def image_present(reference: str, tags: Iterable[str], digests: Iterable[str] = ()) -> bool:
    """Whether ``reference`` (name:tag, name@digest, name:tag@digest as ``images publish``
    pins them, or a bare name) is on the node; a digest decides when there is one."""
    if "@" in reference:
        name, _, digest = reference.partition("@")
        last = name.rsplit("/", 1)[-1]
        if ":" in last:  # the engine keeps name@digest: the tag is a reader's hint
            name = name[: len(name) - len(last)] + last.split(":", 1)[0]
        return f"{name}@{digest}" in set(digests)
    last = reference.rsplit("/", 1)[-1]
    ref = reference if ":" in last else f"{reference}:latest"
    return ref in set(tags)


#: the fix of a catalog image missing on a node that could run it (catalog_checks)
_CATALOG_PULL_FIX = (
    "docker pull {image} on the node (or docker save | docker load from a "
    "machine that has it; images/build.py builds the catalog); otherwise the "
    "first spawn of it waits for the pull"
)


def catalog_checks(
    node: str,
    entries: Sequence[CatalogEntry],
    tags: Iterable[str],
    inventory: NodeInventory | None,
    digests: Iterable[str] = (),
) -> list[Check]:
    """One line per distinct image of the catalog: present? runnable here?"""
    tags, digests = set(tags), set(digests)
    by_image: dict[str, list[CatalogEntry]] = {}
    for e in entries:
        by_image.setdefault(e.image, []).append(e)
    out: list[Check] = []
    for image, group in by_image.items():
        runnable, reasons = _runnable_here(group, inventory)
        present = image_present(image, tags, digests)
        out.append(_catalog_image_check(node, image, group, runnable, reasons, present, inventory))
    return out


def _runnable_here(
    group: Sequence[CatalogEntry], inventory: NodeInventory | None
) -> tuple[list[str], list[str]]:
    """The slugs of ``group`` that can run on the node, and why each other cannot."""
    runnable: list[str] = []
    reasons: list[str] = []
    for e in group:
        if inventory is None:
            ok, why = e.cpu_only, "the node's GPUs are unknown"
        else:
            ok, why = image_runs_on(e, inventory)
        (runnable if ok else reasons).append(e.slug if ok else why)
    return runnable, reasons


def _catalog_image_check(
    node: str,
    image: str,
    group: Sequence[CatalogEntry],
    runnable: Sequence[str],
    reasons: Sequence[str],
    present: bool,
    inventory: NodeInventory | None,
) -> Check:
    """catalog IMAGE: the image of ``group`` is on the node where it can run there."""
    slugs = ", ".join(e.slug for e in group)
    name = f"catalog {image}"
    if inventory is None and not runnable:  # GPU images, GPUs unknown: present or not
        where = "present" if present else "missing on the node"
        seen = f"{slugs}: {where} (whether its GPUs fit is unknown: no GPU reading)"
        return Check(
            node, name, present, seen, "" if present else f"docker pull {image} on the node"
        )
    if not runnable:
        note = reasons[0].split(": ", 1)[-1] if reasons else ""
        seen = (
            f"{slugs}: {'present' if present else 'not here'}; cannot run on this node "
            f"({note}): placement skips it here"
        )
        return Check(node, name, True, seen)
    if present:
        return Check(node, name, True, f"{slugs}: present; runs here ({', '.join(runnable)})")
    seen = f"{slugs}: missing on the node (it could run here: {', '.join(runnable)})"
    return Check(node, name, False, seen, _CATALOG_PULL_FIX.format(image=image))


def probe_image(
    cpu_images: Sequence[str],
    configured: Sequence[str],
    tags: Iterable[str],
    digests: Iterable[str] = (),
) -> str | None:
    """The image the probe containers run (it needs python3): the catalog's CPU image,
    else the spawner's configured image, whichever is on the node first."""
    tags, digests = set(tags), set(digests)
    for image in [*cpu_images, *configured]:
        if image and image_present(image, tags, digests):
            return image
    return None


@dataclass
class NodeReport:
    node: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def render_text(reports: Sequence[NodeReport], color: bool = False) -> str:
    """The checklist as people read it: ✓/✗ per line, the fix under each ✗."""
    lines: list[str] = []
    for r in reports:
        failed = sum(not c.ok for c in r.checks)
        head = f"{r.node}: " + ("all checks passed" if not failed else f"{failed} check(s) failed")
        lines.append(head)
        for c in r.checks:
            mark = "✓" if c.ok else "✗"
            if color:
                mark = f"\033[32m{mark}\033[0m" if c.ok else f"\033[31m{mark}\033[0m"
            lines.append(f"  {mark} {c.check}: {c.detail}")
            if not c.ok and c.fix:
                lines.append(f"      fix: {c.fix}")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- 7. the hub's own checks
#: the check groups the hub runs on each node it sees (the engine is always checked):
#: a few seconds each, and they decide whether users' servers may go there (the
#: registry's ``hub`` entries: user-network, firewall)
HUB_CHECKS = frozenset(k.layer for k in CHECKS if k.hub)
#: failing, these keep the hub from placing servers on the node until a check passes: a
#: user's container reaches the node, the hub or another container (firewall), the probe
#: ran as root (firewall.probe), the user network lets containers talk (user-network)
BLOCKING = frozenset(k.name for k in CHECKS if k.blocking)
#: seconds before a check that could not judge (engine down, no probe image) runs again
RETRY_S = 30.0
PASSED, FAILED, UNCHECKED = "passed", "failed", "unchecked"
_WORDS = {k.name: k.words for k in CHECKS if k.words}


def hub_api_target(url: str) -> tuple[str, int] | None:
    """Where user servers reach the hub's API, from its URL (``JupyterHub.hub_connect_url``,
    or the API URL the hub gives servers); None for a loopback or unspecified address,
    which a container on a node cannot use to reach the hub."""
    try:
        parts = urlsplit(url if "//" in url else f"http://{url}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or host in ("0.0.0.0", "::", "localhost", "::1") or host.startswith("127."):
        return None
    return host, port or (443 if parts.scheme == "https" else 80)


def inconclusive(c: Check) -> bool:
    """A failed line that says nothing of the node's set-up: the check could not run
    (the engine did not answer, no probe image, the probe container failed), or the user
    network is missing (the hub creates it)."""
    if c.ok:
        return False
    if c.check == "engine" or c.detail.startswith((NOT_RUN, PROBE_FAILED)):
        return True
    return c.check == "user-network" and c.detail.endswith("does not exist")


@dataclass(frozen=True)
class NodeVerdict:
    """What the hub makes of one node's checks.

    ``state``: :data:`PASSED`; :data:`FAILED`, no new servers there (``failed`` says why);
    or :data:`UNCHECKED`, the checks could not judge (servers go there as before).
    ``warnings``: the failed lines that keep nothing off the node (the hub's API out of
    reach, the engine on plain TCP, why a check could not run). ``kept``: a failure kept
    from an earlier check because this one could not judge: only a passing check ends it."""

    node: str
    state: str
    failed: tuple[Check, ...] = ()
    warnings: tuple[Check, ...] = ()
    kept: bool = False

    @property
    def schedulable(self) -> bool:
        return self.state != FAILED

    @property
    def key(self) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """What the log reports a change of: the state and the names of the failed lines
        (of a failed node, those that keep it out)."""
        warnings = () if self.state == FAILED else tuple(c.check for c in self.warnings)
        return (self.state, tuple(c.check for c in self.failed), warnings)

    @property
    def what(self) -> str:
        """The failed checks in words ("firewall", "user network and firewall")."""
        names = list(dict.fromkeys(_WORDS.get(c.check, c.check) for c in self.failed))
        return " and ".join(names) or "node"

    @property
    def note(self) -> str:
        """Why the node takes no new servers and what to do (the dashboard's drain note);
        "" when it takes them."""
        if self.state != FAILED:
            return ""
        return " ".join(_line(c, 400) for c in self.failed)


def _line(c: Check, limit: int = 0) -> str:
    detail = c.detail if not limit or len(c.detail) <= limit else c.detail[: limit - 3] + "..."
    text = f"{_WORDS.get(c.check, c.check)} check failed: {detail}."
    return text + (f" Fix: {c.fix}." if c.fix else "")


def hub_verdict(
    node: str, checks: Sequence[Check], previous: NodeVerdict | None = None
) -> NodeVerdict:
    """The verdict of one run of :data:`HUB_CHECKS` on ``node``. A run that could not judge
    the firewall keeps an earlier failure (``kept``): a node that failed stays out until a
    check passes."""
    failing = [c for c in checks if not c.ok]
    blocking = tuple(c for c in failing if c.check in BLOCKING and not inconclusive(c))
    others = tuple(c for c in failing if c not in blocking)
    if blocking:
        return NodeVerdict(node, FAILED, blocking, others)
    judged = any(c.check == "firewall" and not inconclusive(c) for c in checks)
    if judged:
        return NodeVerdict(node, PASSED, (), others)
    if previous is not None and previous.state == FAILED:
        return replace(previous, warnings=others, kept=True)
    return NodeVerdict(node, UNCHECKED, (), others)


def next_check_in(verdict: NodeVerdict, interval: float) -> float:
    """Seconds until the node's next check: ``interval``, or at most :data:`RETRY_S` when
    this one could not judge."""
    if verdict.state == UNCHECKED or verdict.kept:
        return min(interval, RETRY_S)
    return interval


def verdict_log(
    previous: NodeVerdict | None, verdict: NodeVerdict, next_in: float
) -> tuple[str, str] | None:
    """(level, message) for the hub's log when the verdict changed (one line per change,
    naming the node, what the check saw and the fix); None when it did not."""
    if previous is not None and previous.key == verdict.key:
        return None
    node, again = verdict.node, f"next check in {duration(next_in)}"
    extra = ""
    if verdict.warnings:
        extra = " Also: " + " ".join(_line(c) for c in verdict.warnings)
    if verdict.state == FAILED:
        if len(verdict.failed) == 1:
            c = verdict.failed[0]
            lines = f"{c.detail}." + (f" Fix: {c.fix}." if c.fix else "")
        else:
            lines = " ".join(_line(c) for c in verdict.failed)
        return (
            "warning",
            f"Node {node} failed its {verdict.what} check: {lines} No new servers there "
            f"until a check passes ({again}).{extra}",
        )
    if verdict.state == UNCHECKED:
        return (
            "warning",
            f"Node {node}: its firewall could not be checked; servers go there as before "
            f"({again}).{extra}",
        )
    head = f"Node {node} passed its checks (engine, user network, firewall)"
    if previous is not None and previous.state == FAILED:
        head += f" again, after its {previous.what} check failed: it takes new servers"
    if verdict.warnings:
        return ("warning", f"{head}; but some lines failed.{extra}")
    return ("info", f"{head}.")
