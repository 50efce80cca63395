"""Real agent processes with per-node tokens and TLS.

Two agents get their own tokens, derived from one site secret: each opens only its own
agent (the other's token and the site secret itself get 403). An agent serving HTTPS with
a certificate from a test CA (made here with ``openssl``) is read by the hub's client
when ``c.AgentClient.ca_cert`` names that CA, and refused otherwise: another CA, the
system's CAs, a certificate for another host, or plain HTTP to the TLS port.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from traitlets.config import Config

from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.edges.agents import AgentClient, AgentEndpoint, Unreachable
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from tests.support.agent import AgentProcess
from tests.support.pki import issue, make_ca

pytestmark = pytest.mark.integration

CLUSTER = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"
INVENTORIES = {n.name: n for n in load_inventory_file(CLUSTER)}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not shutil.which("openssl"):
        pytest.fail("openssl is needed: apt-get install -y openssl", pytrace=False)
    folder = tmp_path_factory.mktemp("agent-pki")
    ca = make_ca(folder, "agents-ca")
    _, other_ca = make_ca(folder, "someone-elses-ca")
    cert, key = issue(folder, ca, "gpu-a", "IP:127.0.0.1")
    elsewhere, elsewhere_key = issue(folder, ca, "elsewhere", "DNS:gpu-z.example.org")
    return {
        "ca": ca[1],
        "other_ca": other_ca,
        "cert": cert,
        "key": key,
        "elsewhere": elsewhere,
        "elsewhere_key": elsewhere_key,
    }


@pytest.fixture(scope="module")
def site_secret() -> str:
    return secrets.token_hex(32)


@pytest.fixture(scope="module")
def plain_agents(
    tmp_path_factory: pytest.TempPathFactory, site_secret: str
) -> Iterator[dict[str, AgentProcess]]:
    work = tmp_path_factory.mktemp("agents")
    agents = {
        node: AgentProcess(node, CLUSTER, work / f"{node}.log", token=site_secret)
        for node in ("gpu-a", "gpu-b")
    }
    try:
        for agent in agents.values():
            agent.start()
        yield agents
    finally:
        for agent in agents.values():
            agent.stop()


@pytest.fixture(scope="module")
def tls_agent(
    tmp_path_factory: pytest.TempPathFactory, site_secret: str, pki: dict[str, Path]
) -> Iterator[AgentProcess]:
    """gpu-a serving HTTPS with a certificate for 127.0.0.1 from the test CA."""
    work = tmp_path_factory.mktemp("tls-agent")
    agent = AgentProcess("gpu-a", CLUSTER, work / "gpu-a.log", token=site_secret)
    agent.tls = (pki["ca"], pki["cert"], pki["key"])
    try:
        yield agent.start()
    finally:
        agent.stop()


def get_gpus(agent: AgentProcess, token: str) -> httpx.Response:
    headers = {"Authorization": f"token {token}"}
    return httpx.get(f"{agent.url}/v1/gpus", headers=headers, timeout=5, verify=agent.verify)


# -- per-node tokens -----------------------------------------------------------------------


def test_a_nodes_token_opens_only_its_own_agent(
    plain_agents: dict[str, AgentProcess], site_secret: str
) -> None:
    a, b = plain_agents["gpu-a"], plain_agents["gpu-b"]
    assert get_gpus(a, node_token(site_secret, "gpu-a")).status_code == 200
    assert get_gpus(b, node_token(site_secret, "gpu-b")).status_code == 200
    assert get_gpus(a, node_token(site_secret, "gpu-b")).status_code == 403
    assert get_gpus(b, node_token(site_secret, "gpu-a")).status_code == 403
    assert get_gpus(a, site_secret).status_code == 403  # the site secret is no agent token
    assert get_gpus(a, node_token(secrets.token_hex(32), "gpu-a")).status_code == 403
    for agent in (a, b):
        text = agent.log.read_text()
        assert site_secret not in text and agent.node_token not in text


async def test_the_hub_reads_each_agent_with_its_own_token(
    plain_agents: dict[str, AgentProcess], site_secret: str
) -> None:
    client = AgentClient()
    endpoints = [AgentEndpoint.for_node(n, a.url, site_secret) for n, a in plain_agents.items()]
    swapped = AgentEndpoint("gpu-a", plain_agents["gpu-a"].url, endpoints[1].token)
    try:
        readings = await client.read_all(endpoints)
        refused = await client.read(swapped, max_age=0)
    finally:
        client.http_client.close()
    assert readings == {n: INVENTORIES[n] for n in ("gpu-a", "gpu-b")}
    assert isinstance(refused, Unreachable)
    assert "refused the hub's token (HTTP 403)" in refused.error


# -- TLS -----------------------------------------------------------------------------------


def test_the_agent_serves_https_and_no_plain_http(tls_agent: AgentProcess) -> None:
    agent = tls_agent
    assert agent.url.startswith("https://")
    assert get_gpus(agent, agent.node_token).status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(agent.url.replace("https://", "http://") + "/healthz", timeout=5)
    assert "serving on https://127.0.0.1" in agent.log.read_text()


@pytest.mark.parametrize(
    ("ca", "scheme", "error"),
    [
        ("ca", "https", None),
        ("other_ca", "https", "CERTIFICATE_VERIFY_FAILED"),
        ("", "https", "CERTIFICATE_VERIFY_FAILED"),  # the system's CAs don't know it
        ("ca", "http", "cannot reach it"),
    ],
)
async def test_the_hub_verifies_the_agents_certificate(
    tls_agent: AgentProcess,
    pki: dict[str, Path],
    site_secret: str,
    ca: str,
    scheme: str,
    error: str | None,
) -> None:
    agent = tls_agent
    client = AgentClient(ca_cert=str(pki[ca]) if ca else "")
    url = agent.url.replace("https://", f"{scheme}://")
    try:
        reading = await client.read(AgentEndpoint.for_node("gpu-a", url, site_secret))
    finally:
        client.http_client.close()
    if error is None:
        assert reading == INVENTORIES["gpu-a"]
    else:
        assert isinstance(reading, Unreachable) and error in reading.error, reading


async def test_a_certificate_for_another_host_is_refused(
    tmp_path: Path, pki: dict[str, Path], site_secret: str
) -> None:
    """Signed by the right CA, but for gpu-z.example.org: not the agent at 127.0.0.1."""
    agent = AgentProcess("gpu-b", CLUSTER, tmp_path / "gpu-b.log", token=site_secret)
    agent.tls = (pki["ca"], pki["elsewhere"], pki["elsewhere_key"])
    agent.start()
    client = AgentClient(ca_cert=str(pki["ca"]))
    try:
        reading = await client.read(AgentEndpoint.for_node("gpu-b", agent.url, site_secret))
    finally:
        client.http_client.close()
        agent.stop()
    assert isinstance(reading, Unreachable)
    assert "CERTIFICATE_VERIFY_FAILED" in reading.error, reading
    assert "127.0.0.1" in reading.error  # the mismatch is named


async def test_ca_cert_in_the_hubs_config_reaches_the_cluster(
    tls_agent: AgentProcess, pki: dict[str, Path], site_secret: str
) -> None:
    agent = tls_agent
    config = Config()
    config.AgentClient.ca_cert = str(pki["ca"])
    nodes = [
        {"name": "gpu-a", "docker_url": "unix:///nowhere/a.sock", "address": "127.0.0.1",
         "agent_url": agent.url},
    ]  # fmt: skip
    settings = ClusterSettings(
        nodes=nodes, agent_token=site_secret, agent_config=config, reconcile_interval=0
    )
    cluster = Cluster(settings, logging.getLogger("hub"))
    cluster.reconciler.reconciled = True

    async def engine_ok(node: str) -> bool:
        return True

    cluster.engine_ok = engine_ok  # type: ignore[method-assign]
    snapshot = await cluster.snapshot()
    assert [(n.name, n.reachable, n.inventory) for n in snapshot.nodes] == [
        ("gpu-a", True, INVENTORIES["gpu-a"])
    ]
    assert isinstance(await cluster.agents.read(AgentEndpoint.for_node(
        "gpu-a", agent.url, site_secret)), NodeInventory)  # fmt: skip
