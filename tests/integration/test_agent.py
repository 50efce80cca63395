"""The node agent as a real process (services/gpu-agent.py) with a declared inventory, and
the hub's AgentClient against real agents, a dead port and a port that never answers."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from jupyterhub_gpu.core.inventory import GpuProcess, NodeInventory
from jupyterhub_gpu.edges.agents import AgentClient, AgentEndpoint, Unreachable
from jupyterhub_gpu.wire.agent import inventory_from_json, parse_agent_body
from tests.support.hub import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tests" / "data" / "cluster-hetero.yaml"
POLL = 0.2
B1 = "GPU-bbbbbbbb-0000-4000-8000-000000000001"
B3 = "GPU-bbbbbbbb-0000-4000-8000-000000000003"


@dataclass
class Agent:
    node: str
    url: str
    token: str
    proc: subprocess.Popen[bytes]
    log: Path

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def endpoint(self) -> AgentEndpoint:
        return AgentEndpoint(self.node, self.url, self.token)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.auth(), timeout=5)

    def put_state(self, uuid: str, body: object) -> httpx.Response:
        return httpx.put(
            f"{self.url}/v1/gpus/{uuid}/state", json=body, headers=self.auth(), timeout=5
        )


def run_agent(args: list[str], token: str | None, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "JUPYTERHUB_GPU_AGENT_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    if token is not None:
        env["JUPYTERHUB_GPU_AGENT_TOKEN"] = token
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(REPO / "services" / "gpu-agent.py"), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_healthy(agent: Agent, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.proc.poll() is not None:
            raise AssertionError(f"agent exited {agent.proc.returncode}:\n{agent.log.read_text()}")
        try:
            if httpx.get(agent.url + "/healthz", timeout=1).text == "ok":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"agent not healthy in {timeout} s:\n{agent.log.read_text()}")


@pytest.fixture(scope="module")
def start_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Agent]]:
    """Factory: a real agent process serving ``node`` of the heterogeneous cluster."""
    agents: list[Agent] = []

    def start(node: str) -> Agent:
        port, token = free_port(), secrets.token_hex(32)
        log = tmp_path_factory.mktemp("agent") / f"{node}.log"
        args = ["--port", str(port), "--probe", "declared", "--inventory", str(CLUSTER)]
        args += ["--node", node, "--poll-interval", str(POLL)]
        agent = Agent(node, f"http://127.0.0.1:{port}", token, run_agent(args, token, log), log)
        agents.append(agent)
        wait_healthy(agent)
        return agent

    yield start
    for agent in agents:
        agent.proc.terminate()
        try:
            agent.proc.wait(10)
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait()


@pytest.fixture(scope="module")
def agent_a(start_agent: Callable[[str], Agent]) -> Agent:
    return start_agent("gpu-a")


@pytest.fixture(scope="module")
def agent_b(start_agent: Callable[[str], Agent]) -> Agent:
    return start_agent("gpu-b")


@pytest.fixture(autouse=True)
def dump_agent_logs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for log in tmp_path_factory.getbasetemp().glob("agent*/*.log"):
            print(f"\n===== {log.name} =====\n{log.read_text()[-4000:]}")


def test_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    args = ["--port", str(free_port()), "--probe", "declared", "--inventory", str(CLUSTER)]
    proc = run_agent([*args, "--node", "gpu-b"], None, log)
    assert proc.wait(30) == 2
    assert "JUPYTERHUB_GPU_AGENT_TOKEN" in log.read_text()


def test_refuses_a_node_the_inventory_lacks(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    args = ["--port", str(free_port()), "--probe", "declared", "--inventory", str(CLUSTER)]
    proc = run_agent([*args, "--node", "gpu-z"], secrets.token_hex(16), log)
    assert proc.wait(30) == 2
    assert "no node named 'gpu-z'" in log.read_text()


@pytest.mark.parametrize("path", ["/v1/gpus", "/metrics"])
def test_token_is_required(agent_b: Agent, path: str) -> None:
    url = agent_b.url + path
    assert httpx.get(url, timeout=5).status_code == 401
    assert httpx.get(url, headers={"Authorization": "token"}, timeout=5).status_code == 401
    wrong = {"Authorization": f"token {secrets.token_hex(32)}"}
    assert httpx.get(url, headers=wrong, timeout=5).status_code == 403
    prefix = {"Authorization": f"token {agent_b.token[:-1]}"}
    assert httpx.get(url, headers=prefix, timeout=5).status_code == 403
    bearer = {"Authorization": f"Bearer {agent_b.token}"}
    assert httpx.get(url, headers=bearer, timeout=5).status_code == 200
    assert agent_b.get(path).status_code == 200
    put = httpx.put(f"{agent_b.url}/v1/gpus/{B1}/state", json={"healthy": False}, timeout=5)
    assert put.status_code == 401
    assert agent_b.token not in agent_b.log.read_text()


def test_healthz_needs_no_token_and_says_only_ok(agent_b: Agent) -> None:
    response = httpx.get(agent_b.url + "/healthz", timeout=5)
    assert response.status_code == 200
    assert response.text == "ok"


def test_gpus_answer(agent_b: Agent) -> None:
    response = agent_b.get("/v1/gpus")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    data = response.json()
    assert data["node"] == "gpu-b"
    assert data["driver_version"] == "470.223.02"
    assert data["cuda_driver_version"] == "11.4"
    assert data["labels"] == {"site": "lab", "rack": "r1"}
    assert abs(data["time"] - time.time()) < 5
    assert [g["model"] for g in data["gpus"]] == [
        "NVIDIA TITAN X (Pascal)",
        "NVIDIA TITAN X (Pascal)",
        "NVIDIA GeForce RTX 2080 Ti",
        "NVIDIA GeForce RTX 2070",
    ]
    assert [g["compute_capability"] for g in data["gpus"]] == ["6.1", "6.1", "7.5", "7.5"]
    assert data["gpus"][0]["uuid"] == "GPU-bbbbbbbb-0000-4000-8000-000000000000"
    assert data["gpus"][0]["memory_mib"] == 12288
    assert data["gpus"][0]["healthy"] is True
    assert data["gpus"][0]["process_containers"] == []
    assert inventory_from_json(data).name == "gpu-b"


def next_reading(agent: Agent, after: float, timeout: float = 10.0) -> dict:
    """The agent's first answer from a reading of the GPUs newer than ``after``."""
    deadline = time.monotonic() + timeout
    while True:
        reading = dict(agent.get("/v1/gpus").json())
        if reading["time"] > after:
            return reading
        assert time.monotonic() < deadline, f"no reading after {after} in {timeout} s"
        time.sleep(POLL / 2)


def metric(text: str, name: str, uuid: str) -> float | None:
    match = re.search(rf'^{name}\{{[^}}]*uuid="{uuid}"[^}}]*\}} (\S+)$', text, re.M)
    return None if match is None else float(match.group(1))


def test_live_state_shows_in_gpus_and_metrics(start_agent: Callable[[str], Agent]) -> None:
    agent = start_agent("gpu-c")
    a0 = "GPU-cccccccc-0000-4000-8000-000000000000"
    a1 = "GPU-cccccccc-0000-4000-8000-000000000001"
    foreign = "f" * 64
    busy = {"utilization_pct": 87.5, "memory_used_mib": 40960, "process_containers": [foreign, ""]}
    response = agent.put_state(a0, busy)
    assert response.status_code == 200, response.text
    assert response.json()["utilization_pct"] == 87.5
    assert agent.put_state(a1, {"healthy": False, "temperature_c": 91}).status_code == 200

    def reflected(reading: dict) -> bool:
        gpus = {g["uuid"]: g for g in reading["gpus"]}
        return (
            gpus[a0]["utilization_pct"] == 87.5
            and gpus[a0]["memory_used_mib"] == 40960
            and gpus[a0]["process_containers"] == ["", foreign]
            and gpus[a1]["healthy"] is False
            and gpus[a1]["temperature_c"] == 91.0
        )

    # shown at once, and still after two more readings of the declared file (a reading's
    # ``time`` is when the agent read the GPUs)
    reading = agent.get("/v1/gpus").json()
    assert reflected(reading), reading
    for _ in range(2):
        reading = next_reading(agent, after=reading["time"])
        assert reflected(reading), reading
    metrics = agent.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert metric(text, "jupyterhub_gpu_utilization_percent", a0) == 87.5
    assert metric(text, "jupyterhub_gpu_memory_used_bytes", a0) == 40960 * 2**20
    assert metric(text, "jupyterhub_gpu_memory_total_bytes", a0) == 81920 * 2**20
    assert metric(text, "jupyterhub_gpu_process_containers", a0) == 2
    assert metric(text, "jupyterhub_gpu_host_processes", a0) == 1
    assert metric(text, "jupyterhub_gpu_healthy", a0) == 1
    assert metric(text, "jupyterhub_gpu_healthy", a1) == 0
    assert metric(text, "jupyterhub_gpu_temperature_celsius", a1) == 91
    assert (
        'node="gpu-c"' in text and 'model="NVIDIA A100-SXM4-80GB"' in text and 'index="1"' in text
    )


def test_declared_processes_show_in_gpus_and_metrics(start_agent: Callable[[str], Agent]) -> None:
    """Issue #26: a declared node's GPU processes, set at run time, are served per process
    (the hub's parser reads them back) and as per-container series."""
    agent = start_agent("gpu-c")
    a0 = "GPU-cccccccc-0000-4000-8000-000000000000"
    mine, host = "a" * 64, ""
    procs = [
        {"pid": 4242, "container": mine, "memory_mib": 3100, "utilization_pct": 35.0},
        {"pid": 17, "container": host, "memory_mib": 200, "utilization_pct": None},
    ]
    response = agent.put_state(a0, {"processes": procs})
    assert response.status_code == 200, response.text
    assert response.json()["process_containers"] == ["", mine]
    bad = agent.put_state(a0, {"processes": [{"pid": 1, "container": "nope"}]})
    assert bad.status_code == 400 and "64 lowercase hex" in bad.text
    raw = agent.get("/v1/gpus")
    inventory, _ = parse_agent_body(raw.content)
    gpu = inventory.gpu(a0)
    assert gpu is not None and gpu.processes == (
        GpuProcess(4242, mine, 3100, 35.0),
        GpuProcess(17, "", 200, None),
    )
    text = agent.get("/metrics").text
    line = re.search(
        rf'^jupyterhub_gpu_container_memory_used_bytes\{{[^}}]*container="{mine[:12]}"'
        rf'[^}}]*uuid="{a0}"[^}}]*\}} (\S+)$',
        text,
        re.M,
    )
    assert line is not None and float(line.group(1)) == 3100 * 2**20, text[-2000:]


@pytest.mark.parametrize(
    ("uuid", "body", "status", "message"),
    [
        ("GPU-nope", {"healthy": False}, 404, "no GPU GPU-nope"),
        (B3, {"utilization_pct": 150}, 400, "utilization_pct must be a number from 0 to 100"),
        (B3, {"memory_used_mib": 9000}, 400, "more than the GPU's 8192 MiB"),
        (B3, {"model": "A100"}, 400, "unknown field"),
        (B3, {}, 400, "must be a JSON object with some of"),
        (B3, "not json", 400, "not valid JSON"),
    ],
)
def test_bad_state_updates_get_a_sentence(
    agent_b: Agent, uuid: str, body: object, status: int, message: str
) -> None:
    if body == "not json":
        response = httpx.put(
            f"{agent_b.url}/v1/gpus/{uuid}/state", content=b"{", headers=agent_b.auth(), timeout=5
        )
    else:
        response = agent_b.put_state(uuid, body)
    assert response.status_code == status
    assert message in response.json()["error"]
    assert "Traceback" not in response.text


def hung_listener() -> socket.socket:
    """A port that accepts connections (the kernel does) but never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


async def test_client_reads_agents_concurrently_and_reports_the_dead(
    agent_a: Agent, agent_b: Agent
) -> None:
    hung = hung_listener()
    dead = AgentEndpoint("gpu-dead", f"http://127.0.0.1:{free_port()}", "x" * 32)
    silent = AgentEndpoint("gpu-hung", f"http://127.0.0.1:{hung.getsockname()[1]}", "x" * 32)
    client = AgentClient(timeout=1.0, max_age=30)
    try:
        start = time.monotonic()
        readings = await client.read_all([agent_a.endpoint(), dead, agent_b.endpoint(), silent])
        elapsed = time.monotonic() - start
    finally:
        hung.close()
    assert elapsed < 2.5, f"took {elapsed:.2f} s with a 1 s timeout"
    assert list(readings) == ["gpu-a", "gpu-dead", "gpu-b", "gpu-hung"]
    a, b = readings["gpu-a"], readings["gpu-b"]
    assert isinstance(a, NodeInventory) and a.gpus[0].model == "NVIDIA GeForce RTX 3090"
    assert isinstance(b, NodeInventory) and len(b.gpus) == 4
    down, hung_reading = readings["gpu-dead"], readings["gpu-hung"]
    assert isinstance(down, Unreachable) and "cannot reach" in down.error, down
    assert isinstance(hung_reading, Unreachable) and "no answer within 1 s" in hung_reading.error
    assert "x" * 32 not in down.error + hung_reading.error + repr(dead)

    # cached for max_age: the same objects come back without asking again, dead ones too
    start = time.monotonic()
    again = await client.read_all([agent_a.endpoint(), dead, agent_b.endpoint(), silent])
    assert time.monotonic() - start < 0.2
    assert all(again[n] is readings[n] for n in readings)
    client.http_client.close()


async def test_client_shares_one_request_among_concurrent_callers(agent_a: Agent) -> None:
    client = AgentClient(max_age=30)
    results = await asyncio.gather(*(client.read(agent_a.endpoint()) for _ in range(20)))
    assert isinstance(results[0], NodeInventory)
    assert all(r is results[0] for r in results)
    fresh = await client.read(agent_a.endpoint(), max_age=0)
    assert fresh is not results[0] and fresh == results[0]
    client.http_client.close()


async def test_client_rejects_a_wrong_token_or_node(agent_a: Agent) -> None:
    client = AgentClient()
    wrong_token = AgentEndpoint("gpu-a", agent_a.url, secrets.token_hex(32))
    wrong_node = AgentEndpoint("gpu-x", agent_a.url, agent_a.token)
    readings = await client.read_all([wrong_token, wrong_node])
    assert isinstance(readings["gpu-a"], Unreachable)
    assert "refused the hub's token (HTTP 403)" in readings["gpu-a"].error
    assert isinstance(readings["gpu-x"], Unreachable)
    assert "serves node 'gpu-a', but is configured for 'gpu-x'" in readings["gpu-x"].error
    client.http_client.close()
