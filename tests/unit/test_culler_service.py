"""The culler service's rounds against a fake hub, servers and agents (httpx.MockTransport).

The HTTP client is injected through the service's ``http_client`` trait, as OAuthenticator
does; nothing inside the service is patched. Time is passed to ``poll_gpus_once`` and
``cull_once`` as their ``now`` argument.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from traitlets.config import Config

from jupyterhub_gpu.core.culling.access import server_access
from jupyterhub_gpu.core.culling.idleness import Decision, Signal
from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.edges.files import load_cull_warnings, load_deadlines, load_notes
from jupyterhub_gpu.errors import ConfigError, ProbeError
from jupyterhub_gpu.services.culler.app import GPUIdleCuller
from jupyterhub_gpu.services.culler.client import (
    GpuReading,
    describe_failure,
    parse_time,
    read_agent,
)
from jupyterhub_gpu.wire.agent import DEFAULT_MAX_BODY_SIZE
from jupyterhub_gpu.wire.cull_notes import notes_for
from tests.support.waiting import wait_until

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
HUB = "http://hub.test/hub/api"
SITE_SECRET = "site-secret-of-the-culler-tests"  # the hub's; each agent gets its own token


def iso(minutes_ago: float) -> str:
    return (T0 - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def token_of(user: str, name: str = "") -> str:
    """The API token the hub gave ``user``'s server ``name`` (its spawner state keeps it)."""
    return f"srv-{user}-{name or 'default'}"


def server(user: str, name: str = "", *, idle: float = 120, gpus: tuple[str, ...] = (),
           state: bool = True, token: bool = True,
           **extra: Any) -> tuple[str, dict[str, Any]]:  # fmt: skip
    model: dict[str, Any] = {
        "name": name,
        "ready": True,
        "pending": None,
        "url": f"/user/{user}/" + (f"{name}/" if name else ""),
        "started": iso(300),
        "last_activity": iso(idle),
    }
    if state:
        model["state"] = {"gpu_uuids": list(gpus), "node": "node-a", **extra}
        if token:
            model["state"]["server_token"] = token_of(user, name)
    return name, model


class World:
    """A hub, its users' servers and two node agents (node-b's is down)."""

    def __init__(self) -> None:
        self.users = [
            self.user("alice", server("alice", gpus=("GPU-a0",))),
            self.user("bob", server("bob", gpus=("GPU-a1",))),
            self.user("carol", server("carol", gpus=("GPU-a2",))),
            self.user("dave", server("dave", gpus=("GPU-b0",))),
            self.user("erin", server("erin", "train", server_url="http://10.0.0.7:8888/user/erin/train/")),
            self.user("frank", server("frank", state=False)),
            self.user("grace", server("grace", gpus=("GPU-a3",)), groups=["staff"]),
            self.user("heidi", ("", {**server("heidi")[1], "ready": False, "pending": "spawn"})),
            self.user("ivan", server("ivan", token=False)),  # started before tokens were kept
        ]  # fmt: skip
        self.gpu_util = {"GPU-a0": 0.0, "GPU-a1": 0.0, "GPU-a2": 85.0, "GPU-a3": 0.0}
        self.gpu_memory: dict[str, int] = {}  # MiB in use; 0 when absent
        self.kernels = {
            "/user/alice/": [{"id": "k1", "execution_state": "idle", "last_activity": iso(110)}],
            "/user/bob/": [{"id": "k2", "execution_state": "busy", "last_activity": iso(100)}],
        }
        self.hub_up = True
        self.answers: dict[str, httpx.Response] = {}  # server URL path prefix -> its answer
        self.agent_answers: dict[str, Callable[[], httpx.Response]] = {}  # host -> answer
        self.requests: list[httpx.Request] = []
        self.in_flight = self.max_in_flight = 0
        # the hub's list of nodes (GET /hub/api/gpu/agents); None: the culler may not read it
        self.hub_agents: dict[str, Any] | None = {"loaded": True, "agents": {}}

    @staticmethod
    def user(name: str, *servers: tuple[str, dict[str, Any]], groups: Any = ()) -> dict[str, Any]:
        return {"kind": "user", "name": name, "groups": list(groups), "servers": dict(servers)}

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.001)
            return self.route(request)
        finally:
            self.in_flight -= 1

    def route(self, request: httpx.Request) -> httpx.Response:
        url, host = request.url, request.url.host
        if host == "hub.test":
            if not self.hub_up:
                raise httpx.ConnectError("connection refused", request=request)
            return self.hub(request)
        if host in self.agent_answers:
            return self.agent_answers[host]()
        if host == "agent-a.test":
            return httpx.Response(200, json=self.agent_a())
        if host == "agent-b.test":
            raise httpx.ConnectError("no route to host", request=request)
        prefix, _, endpoint = url.path.rpartition("api/")
        if prefix in self.answers:
            return self.answers[prefix]
        if endpoint == "kernels":
            return httpx.Response(200, json=self.kernels.get(prefix, []))
        if endpoint == "status":
            return httpx.Response(200, json={"last_activity": iso(115), "connections": 0})
        return httpx.Response(404)

    def agent_a(self) -> dict[str, Any]:
        """node-a's agent's answer, as the real agent writes it (inventory/wire.py)."""
        gpus = [{"uuid": u, "index": i, "model": "TITAN X", "memory_mib": 12288,
                 "memory_used_mib": self.gpu_memory.get(u, 0), "utilization_pct": p,
                 "compute_capability": "6.1", "healthy": True, "process_containers": [],
                 "new_field": 1}  # unknown fields are ignored
                for i, (u, p) in enumerate(sorted(self.gpu_util.items()))]  # fmt: skip
        return {"node": "node-a", "driver_version": "535.104.05", "gpus": gpus}

    def hub(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(204)
        if request.url.path == "/hub/api/gpu/agents":
            if self.hub_agents is None:
                return httpx.Response(403, json={"status": 403, "message": "Not authorized"})
            return httpx.Response(200, json=self.hub_agents)
        assert request.url.path == "/hub/api/users"
        query = parse_qs(request.url.query.decode())
        assert query["state"] == ["ready"]
        offset = int(query.get("offset", ["0"])[0])
        page = self.users[offset : offset + 3]
        nxt = None
        if offset + 3 < len(self.users):
            nxt = {"offset": offset + 3, "limit": 3,
                   "url": f"{HUB}/users?state=ready&offset={offset + 3}&limit=3"}  # fmt: skip
        body = {"items": page, "_pagination": {"offset": offset, "limit": 3, "next": nxt}}
        return httpx.Response(200, json=body)

    def deletes(self) -> list[str]:
        return sorted(r.url.path for r in self.requests if r.method == "DELETE")

    def reads_of(self, endpoint: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path.endswith(f"/api/{endpoint}")]


@pytest.fixture
def world() -> World:
    return World()


def make_culler(world: World, tmp_path: Path, **traits: Any) -> GPUIdleCuller:
    c = Config()
    c.GPUIdleCuller.api_url = HUB
    c.GPUIdleCuller.proxy_url = "http://proxy.test"
    c.GPUIdleCuller.agent_urls = {"node-a": "http://agent-a.test:9450",
                                  "node-b": "http://agent-b.test:9450"}  # fmt: skip
    c.GPUIdleCuller.agent_token = SITE_SECRET
    c.GPUIdleCuller.gpu_poll_interval = 60.0
    c.GPUIdleCuller.notes_file = str(tmp_path / "notes.json")
    c.GPUIdleCuller.state_file = str(tmp_path / "state.json")
    c.GPUIdleCuller.group_overrides = {
        "10-staff": {"groups": ["staff"], "policy_override": {"gpu_timeout": 4 * 3600.0}}
    }
    c.GPUIdleCuller.warn_before = 0.0  # the judgement alone (warnings: test_cull_warnings.py)
    for key, value in traits.items():
        setattr(c.GPUIdleCuller, key, value)
    # an injected client may follow redirects: the culler's reads of servers never do
    client = httpx.AsyncClient(transport=httpx.MockTransport(world.handle), follow_redirects=True)
    return GPUIdleCuller(config=c, http_client=client, api_token="svc-token")


def minutes(start: float, stop: float) -> Iterator[datetime]:
    """T0 - start ... T0 - stop, a minute apart."""
    for m in range(int(start), int(stop) - 1, -1):
        yield T0 - timedelta(minutes=m)


async def poll(culler: GPUIdleCuller, start: float = 40, stop: float = 0) -> None:
    for at in minutes(start, stop):
        await culler.poll_gpus_once(now=at)


SERVER_OF = {  # a server's URL prefix -> (user, server name)
    "http://proxy.test/user/alice/": ("alice", ""),
    "http://proxy.test/user/bob/": ("bob", ""),
    "http://10.0.0.7:8888/user/erin/train/": ("erin", "train"),
}


def expected_auth(request: httpx.Request) -> str:
    """The one Authorization header the culler may send with ``request``."""
    if request.url.host == "hub.test":
        return "token svc-token"
    if request.url.host.startswith("agent-"):  # agent-a.test is node-a's: its own token
        return f"token {node_token(SITE_SECRET, 'node-' + request.url.host[6])}"
    prefix = str(request.url.copy_with(query=None)).rpartition("api/")[0]
    return f"token {token_of(*SERVER_OF[prefix])}"


EXPECTED = {
    "alice": (True, Signal.IDLE),  # GPU at 0% for 40 min, kernels and hub idle for 2h
    "bob": (False, Signal.KERNELS),  # a busy kernel nobody watches
    "carol": (False, Signal.GPU),  # 85% GPU, no busy kernel: a training in a terminal
    "dave": (False, Signal.GPU_MISSING),  # node-b's agent is unreachable
    "erin/train": (True, Signal.IDLE),  # CPU-only named server, idle 2h > 1h
    "frank": (False, Signal.GPU_MISSING),  # no spawner state: GPUs unknown
    "grace": (False, Signal.HUB),  # staff: gpu_timeout 4h by group override
    "heidi": (False, Signal.HUB),  # still spawning
    "ivan": (False, Signal.KERNELS_MISSING),  # no server token in its state: not read
}


async def test_a_round_culls_only_the_idle(world: World, tmp_path: Path) -> None:
    culler = make_culler(world, tmp_path)
    await poll(culler)
    decisions = await culler.cull_once(now=T0)
    assert {k: (d.cull, d.signal) for k, d in decisions.items()} == EXPECTED
    assert world.deletes() == ["/hub/api/users/alice/server", "/hub/api/users/erin/servers/train"]
    assert decisions["ivan"].reason == "kernels not read: no server_token in its spawner state"
    # the service's token on the hub only, on each agent that node's own token (never the
    # site secret), and on each server that server's own token: nothing a server's user
    # could not already use
    for r in world.requests:
        assert r.headers["Authorization"] == expected_auth(r), r.url
    # kernels are read only where every other signal said idle, and never tracked as activity
    kernel_reads = world.reads_of("kernels")
    assert sorted(str(r.url.copy_with(query=None)) for r in kernel_reads) == [
        "http://10.0.0.7:8888/user/erin/train/api/kernels",
        "http://proxy.test/user/alice/api/kernels",
        "http://proxy.test/user/bob/api/kernels",
    ]
    assert all(r.url.params["no_track_activity"] == "1" for r in kernel_reads)
    # the hub's user list was read page by page, as the hub paginates it
    pages = [r for r in world.requests if r.url.path == "/hub/api/users"]
    assert len(pages) == 3
    assert all(r.headers["Accept"] == "application/jupyterhub-pagination+json" for r in pages)
    notes = load_notes(tmp_path / "notes.json")
    (note,) = notes_for(notes, "alice")
    assert note.server == "" and note.reason.startswith("idle: no hub activity for 2 h")
    assert [n.server for n in notes_for(notes, "erin")] == ["train"]


async def test_the_note_is_written_before_the_stop_and_taken_back_if_it_fails(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub's spawner reads the note while it stops the server (to record the
    allocation as culled): it must be on disk when the DELETE arrives. A DELETE that fails
    (erin's) leaves no note: her server was not stopped."""
    seen_at_delete: dict[str, list[str]] = {}
    route = world.hub

    def hub(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            notes = load_notes(tmp_path / "notes.json")
            seen_at_delete[request.url.path] = [n.server for n in notes_for(notes, "alice")]
            if "erin" in request.url.path:
                raise httpx.ReadTimeout("no answer", request=request)
        return route(request)

    monkeypatch.setattr(world, "hub", hub)
    culler = make_culler(world, tmp_path)
    await poll(culler)
    await culler.cull_once(now=T0)
    assert seen_at_delete["/hub/api/users/alice/server"] == [""]
    notes = load_notes(tmp_path / "notes.json")
    assert [n.server for n in notes_for(notes, "alice")] == [""]
    assert notes_for(notes, "erin") == []


async def test_a_round_writes_when_each_kept_server_would_be_culled(
    world: World, tmp_path: Path
) -> None:
    """The deadlines file lists the servers the round kept (with an earliest cull), not
    the culled ones; for dave, whose GPU is unread (his agent is down), only max_age."""
    culler = make_culler(world, tmp_path, deadlines_file=str(tmp_path / "deadlines.json"))
    await poll(culler)
    decisions = await culler.cull_once(now=T0)
    deadlines = load_deadlines(tmp_path / "deadlines.json", now=T0)
    assert "alice/" not in deadlines and "erin/train" not in deadlines  # culled
    assert deadlines["dave/"].why == "max_age"  # GPU unread: idleness says nothing
    assert "bob/" in deadlines and "carol/" in deadlines, deadlines
    kept = {k for k, d in decisions.items() if not d.cull}
    assert {h.rstrip("/") for h in deadlines} <= kept
    assert all(d.at >= T0 for d in deadlines.values())


async def test_dry_run_stops_nothing(world: World, tmp_path: Path) -> None:
    culler = make_culler(world, tmp_path, dry_run=True)
    await poll(culler)
    decisions = await culler.cull_once(now=T0)
    assert {k: (d.cull, d.signal) for k, d in decisions.items()} == EXPECTED
    assert world.deletes() == []
    assert not (tmp_path / "notes.json").exists()


async def test_young_gpu_history_protects(world: World, tmp_path: Path) -> None:
    """Right after the culler starts, 10 minutes of 0% is not 30 minutes of idle."""
    culler = make_culler(world, tmp_path)
    await poll(culler, start=10)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].signal is Signal.GPU
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]


async def test_agent_going_away_protects_its_servers(world: World, tmp_path: Path) -> None:
    culler = make_culler(world, tmp_path)
    await poll(culler, start=40, stop=5)  # then node-a's agent stops answering
    culler.agent_urls = {"node-a": "http://agent-b.test:9450"}
    await poll(culler, start=4)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].signal is Signal.GPU_MISSING
    assert "alice" not in " ".join(world.deletes())


async def test_an_agent_known_down_protects_at_once(world: World, tmp_path: Path) -> None:
    """The agent fails its latest poll: its GPUs' last readings are a minute old, well
    under ``gpu_stale_after`` (3 min), yet they are not used."""
    culler = make_culler(world, tmp_path)
    await poll(culler, start=40, stop=1)
    culler.agent_urls = {"node-a": "http://agent-b.test:9450"}  # node-a's agent goes away
    await culler.poll_gpus_once(now=T0)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].signal is Signal.GPU_MISSING
    assert decisions["alice"].reason == "GPU GPU-a0: no reading from its node agent"
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]


async def test_an_agent_answering_for_another_node_is_not_believed(
    world: World, tmp_path: Path
) -> None:
    """A wrong URL in ``agent_urls``: node-a's agent configured as node-x's."""
    culler = make_culler(world, tmp_path)
    culler.agent_urls = {"node-x": "http://agent-a.test:9450"}
    await poll(culler)
    assert culler._trackers == {}  # node-a's readings were not taken for node-x's
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].signal is Signal.GPU_MISSING
    assert "alice" not in " ".join(world.deletes())


async def test_without_agent_urls_the_agents_are_the_hubs_nodes(
    world: World, tmp_path: Path
) -> None:
    """One list of nodes: the culler polls the agents the hub names, and follows it."""
    culler = make_culler(world, tmp_path, agent_urls={})
    world.hub_agents = {"loaded": True, "agents": {"node-a": "http://agent-a.test:9450"}}
    await culler.poll_gpus_once(now=T0)
    assert sorted(culler._trackers) == ["GPU-a0", "GPU-a1", "GPU-a2", "GPU-a3"]
    # the hub's nodes change (node-a's agent moves): the next poll follows
    world.hub_agents = {"loaded": True, "agents": {"node-a": "http://agent-b.test:9450"}}
    await culler.poll_gpus_once(now=T0)
    assert culler._agent_ok == {"node-a": False}
    # the culler may not read the list: it says which scope, once, and keeps the last list
    world.hub_agents = None
    lines = record_log(culler)
    await culler.poll_gpus_once(now=T0)
    await culler.poll_gpus_once(now=T0)
    warned = [line for line in lines if "agent list" in line]
    assert len(warned) == 1 and "custom:gpu-agents:read" in warned[0], warned
    assert culler._agents() == {"node-a": "http://agent-b.test:9450"}
    # a hub that has not read its nodes yet changes nothing
    world.hub_agents = {"loaded": False, "agents": {}}
    await culler.poll_gpus_once(now=T0)
    assert culler._agents() == {"node-a": "http://agent-b.test:9450"}


@pytest.mark.parametrize(
    "answer",
    [
        {"agents": {}},
        {"loaded": True, "agents": []},
        {"loaded": True, "agents": {"node-a": "file:///etc/passwd"}},
        {"loaded": True, "agents": {"": "http://a.test"}},
    ],
)
async def test_a_malformed_agent_list_is_not_believed(
    world: World, tmp_path: Path, answer: dict[str, Any]
) -> None:
    culler = make_culler(world, tmp_path, agent_urls={})
    world.hub_agents = {"loaded": True, "agents": {"node-a": "http://agent-a.test:9450"}}
    await culler.poll_gpus_once(now=T0)
    world.hub_agents = answer
    await culler.poll_gpus_once(now=T0)
    assert culler._agents() == {"node-a": "http://agent-a.test:9450"}


async def test_after_missed_readings_a_gpu_is_observed_again(world: World, tmp_path: Path) -> None:
    """One failed poll (a 2-minute gap, under ``gpu_stale_after``) or one answer without
    the GPU: the time not observed is not idle time, the whole timeout starts again."""
    culler = make_culler(world, tmp_path)
    agents = dict(culler.agent_urls)
    await poll(culler, start=60, stop=2)
    culler.agent_urls = {"node-a": "http://agent-b.test:9450"}
    await culler.poll_gpus_once(now=T0 - timedelta(minutes=1))
    culler.agent_urls = agents
    del world.gpu_util["GPU-a1"]  # the agent answers again, without bob's GPU
    await culler.poll_gpus_once(now=T0)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].signal is Signal.GPU
    assert "observed for only 0 s of 30 min" in decisions["alice"].reason
    assert decisions["bob"].signal is Signal.GPU_MISSING
    world.gpu_util["GPU-a1"] = 0.0
    world.kernels["/user/bob/"][0]["execution_state"] = "idle"
    for at in minutes(-1, -29):
        await culler.poll_gpus_once(now=at)
    decisions = await culler.cull_once(now=T0 + timedelta(minutes=29))
    assert decisions["alice"].signal is Signal.GPU and decisions["bob"].signal is Signal.GPU
    await culler.poll_gpus_once(now=T0 + timedelta(minutes=30))
    decisions = await culler.cull_once(now=T0 + timedelta(minutes=30))
    assert decisions["alice"].cull and decisions["bob"].signal is Signal.GPU, decisions
    await culler.poll_gpus_once(now=T0 + timedelta(minutes=31))  # bob's came back a poll later
    assert (await culler.cull_once(now=T0 + timedelta(minutes=31)))["bob"].cull


async def test_hub_down_is_survived(world: World, tmp_path: Path) -> None:
    culler = make_culler(world, tmp_path)
    await poll(culler)
    world.hub_up = False
    assert await culler.cull_once(now=T0) == {}
    world.hub_up = True
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].cull and len(world.deletes()) == 2


async def test_restart_keeps_gpu_history(world: World, tmp_path: Path) -> None:
    first = make_culler(world, tmp_path)
    await poll(first)
    world.users = [u for u in world.users if u["name"] == "alice"]
    first.save_state()
    again = make_culler(world, tmp_path)
    again.load_state()
    later = T0 + timedelta(seconds=30)
    # nothing is known of the agents until the restarted culler has asked them once ...
    assert (await again.cull_once(now=later))["alice"].signal is Signal.GPU_MISSING
    # ... and one answer is enough: the 40 minutes observed before the restart count
    await again.poll_gpus_once(now=later)
    decisions = await again.cull_once(now=later)
    assert decisions["alice"].cull, decisions["alice"].reason


async def test_a_new_server_on_the_gpu_does_not_inherit_its_past(
    world: World, tmp_path: Path
) -> None:
    """The previous holder paused 100 min between two jobs (so its GPU would have needed
    2h of idle); alice's server started after it left and owes nothing to that pattern."""
    culler = make_culler(world, tmp_path)
    for util, start, stop in [(90.0, 200, 195), (0.0, 194, 96), (90.0, 95, 90), (0.0, 89, 0)]:
        world.gpu_util["GPU-a0"] = util
        await poll(culler, start=start, stop=stop)
    alice = world.users[0]["servers"][""]
    alice["started"] = iso(80)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].cull, decisions["alice"].reason


async def test_concurrency_is_bounded(world: World, tmp_path: Path) -> None:
    world.users = [World.user(f"u{i}", server(f"u{i}")) for i in range(30)]
    culler = make_culler(world, tmp_path, concurrency=3)
    decisions = await culler.cull_once(now=T0)
    assert sum(d.cull for d in decisions.values()) == 30
    assert 1 < world.max_in_flight <= 3


async def test_callable_group_overrides(world: World, tmp_path: Path) -> None:
    def overrides(user: dict[str, Any]) -> dict[str, Any]:
        groups = ["everyone"] if user["name"] == "alice" else []
        return {"x": {"groups": groups, "policy_override": {"gpu_timeout": 0}}}

    culler = make_culler(world, tmp_path, group_overrides=overrides)
    world.users[0]["groups"] = ["everyone"]
    await poll(culler)
    assert (await culler.cull_once(now=T0))["alice"].signal is Signal.DISABLED


async def test_a_gpu_holding_memory_waits_longer(world: World, tmp_path: Path) -> None:
    """alice's GPU holds a loaded model it never ran: kept for gpu_loaded_idle (1 h), not
    the 30-min timeout; a group override can shorten that wait."""
    world.gpu_memory["GPU-a0"] = 8000
    culler = make_culler(world, tmp_path)
    await poll(culler, start=50)
    decision = (await culler.cull_once(now=T0))["alice"]
    assert (decision.cull, decision.signal) == (False, Signal.GPU)
    assert decision.reason.endswith("observed for only 50 min of 1 h (now 0%)")
    await poll(culler, start=-1, stop=-11)
    assert (await culler.cull_once(now=T0 + timedelta(minutes=11)))["alice"].cull
    world.users[0]["groups"] = ["hurry"]
    hurry = {"x": {"groups": ["hurry"], "policy_override": {"gpu_loaded_idle": 0}}}
    culler = make_culler(world, tmp_path / "2", group_overrides=hurry)
    await poll(culler)
    assert (await culler.cull_once(now=T0))["alice"].cull


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (httpx.Response(302, headers={"Location": "http://elsewhere.test/steal"}), "HTTP 302"),
        (httpx.Response(200, content=b"[" + b" " * 3 * 1024 * 1024 + b"]"), "more than"),
        (httpx.Response(200, content=b"[" * 100_000 + b"]" * 100_000), "readable JSON"),
        (httpx.Response(200, json={"kernels": "all busy"}), "unexpected answer"),
    ],
    ids=["redirect", "50MB", "deep", "wrong-shape"],
)
async def test_a_hostile_server_answer_keeps_only_that_server(
    world: World, tmp_path: Path, answer: httpx.Response, why: str
) -> None:
    """alice's server answers the culler with a redirect (her token must go nowhere else),
    a huge body, JSON too deep to parse or the wrong shape: she is kept (her kernels are
    unknown), with one line saying why; everyone else is judged as usual."""
    world.answers["/user/alice/"] = answer
    culler = make_culler(world, tmp_path)
    lines = record_log(culler)
    await poll(culler)
    decisions = await culler.cull_once(now=T0)
    assert {k: (d.cull, d.signal) for k, d in decisions.items()} == {
        **EXPECTED,
        "alice": (False, Signal.KERNELS_MISSING),
    }
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]
    assert not [r for r in world.requests if r.url.host == "elsewhere.test"]
    (line,) = [m for m in lines if m.startswith("Keeping alice: its kernels could not be read")]
    assert why in line


def record_log(culler: GPUIdleCuller) -> list[str]:
    """Every message the culler logs from now on, at any level, formatted."""
    lines: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    culler.log.addHandler(Recorder(logging.DEBUG))
    culler.log.setLevel(logging.DEBUG)
    return lines


async def test_no_token_reaches_the_log(world: World, tmp_path: Path) -> None:
    """A round with every kind of failure, logged at DEBUG: no token in any line, and the
    object holding a server's token does not show it in its repr."""
    world.answers["/user/alice/"] = httpx.Response(500, text="token srv-alice-default")
    world.answers["/user/bob/"] = httpx.Response(302, headers={"Location": "http://x.test/"})
    culler = make_culler(world, tmp_path)
    lines = record_log(culler)
    await poll(culler)
    await culler.cull_once(now=T0)
    world.hub_up = False
    await culler.cull_once(now=T0)
    assert any("kernels could not be read" in m for m in lines)
    text = "\n".join(lines)
    assert "svc-token" not in text and "srv-" not in text and SITE_SECRET not in text
    assert node_token(SITE_SECRET, "node-a") not in text
    access = server_access(world.users[0]["servers"][""], "http://proxy.test")
    assert access is not None and access.token == "srv-alice-default"
    assert "srv-alice-default" not in repr(access)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (lambda: httpx.Response(200, content=endless_body()), "more than 2097152 bytes"),
        (lambda: httpx.Response(200, content=b'{"node": "node-b", "x": 1e400}'), "out of range"),
        (lambda: httpx.Response(200, json={**one_gpu(), "node": "node-b", "gpus": "all"}),
         "gpus must be a list"),
    ],
    ids=["endless", "1e400", "wrong-type"],
)  # fmt: skip
async def test_a_hostile_agent_marks_only_its_node_unreachable(
    world: World, tmp_path: Path, answer: Callable[[], httpx.Response], why: str
) -> None:
    """node-b's agent answers garbage instead of nothing: its servers are kept, with one
    log line saying why, and node-a's GPUs are judged as usual."""
    world.agent_answers["agent-b.test"] = answer
    culler = make_culler(world, tmp_path)
    lines = record_log(culler)
    await poll(culler)
    decisions = await culler.cull_once(now=T0)
    assert {k: (d.cull, d.signal) for k, d in decisions.items()} == EXPECTED
    (line,) = [m for m in lines if m.startswith("Agent of node-b unreachable")]
    assert why in line and line.endswith("its servers are kept")


@pytest.mark.parametrize("secret", ["", "too-short"])
async def test_without_a_site_secret_agents_are_not_asked(
    world: World, tmp_path: Path, secret: str
) -> None:
    """No usable site secret: nothing is sent to any agent, each node's agent counts as
    unreachable (one line per node saying what to set), and their servers are kept."""
    culler = make_culler(world, tmp_path, agent_token=secret)
    lines = record_log(culler)
    await poll(culler)
    assert not [r for r in world.requests if r.url.host.startswith("agent-")]
    warnings = [m for m in lines if m.startswith("Agent of")]
    assert [w.split()[2] for w in warnings] == ["node-a", "node-b"]
    assert all("no agent token" in w and "GPUIdleCuller.agent_token" in w for w in warnings)
    decisions = await culler.cull_once(now=T0)
    assert decisions["alice"].signal is Signal.GPU_MISSING
    assert world.deletes() == ["/hub/api/users/erin/servers/train"]


def test_config_is_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="can't override"):
        GPUIdleCuller(group_overrides={"x": {"groups": ["a"], "policy_override": {"foo": 1}}})
    culler = GPUIdleCuller(api_token="")
    with pytest.raises(ConfigError, match="no hub token"):
        culler.check_config()
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"holders": {}, "trackers": {"GPU-x": {"samples": 3}}}))
    broken = GPUIdleCuller(api_token="t", state_file=str(state))
    broken.load_state()  # logs and starts afresh


async def endless_body() -> AsyncIterator[bytes]:
    """A body that never ends (no Content-Length): only a cap stops reading it."""
    while True:
        yield b" " * 65536


def one_gpu(**fields: Any) -> dict[str, Any]:
    gpu = {"uuid": "G", "index": 0, "model": "TITAN X", "memory_mib": 12288,
           "compute_capability": "6.1", "utilization_pct": 7, "memory_used_mib": 100}  # fmt: skip
    return {"node": "n", "driver_version": "535.104.05", "gpus": [{**gpu, **fields}]}


def huge_gpu_list() -> dict[str, Any]:
    gpus = [{**one_gpu()["gpus"][0], "uuid": f"G{i}", "index": i} for i in range(1000)]
    return {**one_gpu(), "gpus": gpus}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda: httpx.Response(200, json=[]), "the answer must be a JSON object"),
        (lambda: httpx.Response(200, json={"node": "n", "gpus": []}), "driver_version is missing"),
        (lambda: httpx.Response(200, json=one_gpu(uuid=None)), r"gpus\[0\]\.uuid must be"),
        (lambda: httpx.Response(200, json=one_gpu(utilization_pct="7")), "utilization_pct"),
        (lambda: httpx.Response(200, json=one_gpu(memory_used_mib=True)), "memory_used_mib"),
        (lambda: httpx.Response(200, content=b'{"node": 1e400}'), "out of range"),
        (lambda: httpx.Response(200, content=b"[" * 100_000 + b"]" * 100_000), "too deeply"),
        (lambda: httpx.Response(200, content=b"\xff"), "not UTF-8"),
        (lambda: httpx.Response(200, json=huge_gpu_list()), "more than the 256 allowed"),
        (lambda: httpx.Response(200, content=b" " * (DEFAULT_MAX_BODY_SIZE + 1)), "answers 2097"),
        (lambda: httpx.Response(200, content=endless_body()), "answered more than 2097152 bytes"),
        (lambda: httpx.Response(403, json={"error": "wrong token"}), "node's own token"),
        (lambda: httpx.Response(307, headers={"Location": "http://x.test/"}), "307"),
    ],
    ids=["not-an-object", "no-driver", "no-uuid", "util-string", "memory-bool", "1e400",
         "deep", "not-utf8", "1000-gpus", "declared-too-big", "endless", "403", "redirect"],
)  # fmt: skip
async def test_bad_agent_answers_are_named(
    answer: Callable[[], httpx.Response], message: str
) -> None:
    """An agent's answer is untrusted: each bad one is a ProbeError naming the problem,
    an endless body is cut at the cap (DEFAULT_MAX_BODY_SIZE, the hub's AgentClient's),
    and no redirect is followed (its token goes to that agent only)."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return answer()

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler), follow_redirects=True)
    with pytest.raises((ProbeError, httpx.HTTPStatusError), match=message):
        await read_agent(client, "http://agent.test:9450", "node-token", 5.0)
    assert seen == ["http://agent.test:9450/v1/gpus"]


async def test_agent_answer_and_times() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "token node-token"
        return httpx.Response(200, json=one_gpu(new_field=1))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    node, readings = await read_agent(client, "http://agent.test:9450/", "node-token", 5.0)
    assert (node, readings) == ("n", [GpuReading("G", 7.0, 100.0)])
    assert parse_time("2026-01-01T12:00:00.000000Z") == T0
    assert parse_time("2026-01-01T12:00:00") == T0
    assert parse_time("yesterday") is None and parse_time(None) is None


def test_failures_are_told_in_one_line() -> None:
    request = httpx.Request("GET", "http://hub.test/hub/api/users?state=ready")
    response = httpx.Response(403, request=request)
    status = httpx.HTTPStatusError("Client error '403 Forbidden'\nFor more...", request=request,
                                   response=response)  # fmt: skip
    assert describe_failure(status, 30) == "HTTP 403 Forbidden from /hub/api/users"
    assert describe_failure(httpx.ReadTimeout("", request=request), 4.0) == "no answer within 4s"
    refused = httpx.ConnectError("[Errno 111] Connection refused", request=request)
    assert describe_failure(refused, 30) == "[Errno 111] Connection refused"
    assert describe_failure(ProbeError(""), 30) == "ProbeError"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_hubs_stop_signals_end_the_process_even_if_ignored(
    sig: signal.Signals, tmp_path: Path
) -> None:
    """The hub stops a service with SIGINT (then SIGTERM 10 s later). A hub started with
    SIGINT ignored (a background job) passes that on: the culler must stop anyway, at once,
    saving its state, or the hub's shutdown waits for it."""
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": "t", "JUPYTERHUB_API_URL": "http://127.0.0.1:9/"}
    state = tmp_path / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub_gpu.services.culler", "--interval=3600",
         f"--GPUIdleCuller.state_file={state}"],
        env=env, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        # the first round has run: the loops are up (or the culler ended, said below)
        wait_until(lambda: state.exists() or proc.poll() is not None, 30, "the culler's start")
        assert proc.poll() is None, "culler did not start"
        proc.send_signal(sig)
        assert proc.wait(5) == 0
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert "Stopping" in err, err


# -- the agents' CA ----------------------------------------------------------------------


def test_configure_culler_passes_the_agents_ca(tmp_path: Path) -> None:
    """The culler reads the agents over HTTPS as the hub does: with the hub's
    ``AgentClient.ca_cert`` (found missing by the install guide's test: every agent was
    'unreachable' to the culler with CERTIFICATE_VERIFY_FAILED)."""
    from jupyterhub_gpu.hub.extensions import configure_culler

    with_ca, without = Config(), Config()
    with_ca.AgentClient.ca_cert = "/etc/jupyterhub-gpu/tls/ca.pem"
    for c in (with_ca, without):
        configure_culler(c, site_secret="s" * 32)
    (command,) = [s["command"] for s in with_ca.JupyterHub.services]
    assert "--GPUIdleCuller.agent_ca_cert=/etc/jupyterhub-gpu/tls/ca.pem" in command
    (command,) = [s["command"] for s in without.JupyterHub.services]
    assert not [a for a in command if "agent_ca_cert" in a]


def test_an_unreadable_agents_ca_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent_ca_cert: .*missing.pem can't be read"):
        GPUIdleCuller(agent_ca_cert=str(tmp_path / "missing.pem"))


async def test_https_agents_are_verified_with_the_sites_ca(tmp_path: Path) -> None:
    """A real HTTPS agent whose certificate the site's CA signed: read with
    ``agent_ca_cert``, refused without it (the system's CAs don't know the site's)."""
    import ssl

    from tornado import web
    from tornado.httpserver import HTTPServer
    from tornado.netutil import bind_sockets

    from tests.support.pki import issue, make_ca

    ca = make_ca(tmp_path, "site-ca")
    cert, key = issue(tmp_path, ca, "gpu-a", "IP:127.0.0.1")
    body = {"node": "gpu-a", "driver_version": "550.54.15", "gpus": []}

    class Agent(web.RequestHandler):
        def get(self) -> None:
            self.write(body)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = HTTPServer(web.Application([(r"/v1/gpus", Agent)]), ssl_options=context)
    (sock,) = bind_sockets(0, "127.0.0.1")
    server.add_sockets([sock])
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    try:
        trusting = GPUIdleCuller(agent_ca_cert=str(ca[1]))
        node, readings = await read_agent(trusting._client(), url, "t" * 32, 5)
        assert (node, readings) == ("gpu-a", [])
        stranger = GPUIdleCuller()
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await read_agent(stranger._client(), url, "t" * 32, 5)
    finally:
        server.stop()


async def test_idle_servers_are_warned_first_and_a_postponement_counts_as_activity(
    world: World, tmp_path: Path
) -> None:
    """With ``warn_before``: the round that would cull warns instead (the warnings file
    the hub shows), the cull comes once the warning's time has passed; a server whose
    state says its user pressed "I'm still here" 5 min ago is kept for its hub activity."""
    warnings = tmp_path / "warnings.json"
    culler = make_culler(world, tmp_path, warn_before=600.0, warnings_file=str(warnings))
    erin = world.users[4]["servers"]["train"]
    erin["state"]["cull_postponed_at"] = iso(5)  # erin pressed it 5 min ago
    await poll(culler)
    first = await culler.cull_once(now=T0)
    assert first["alice"].signal is Signal.WARNED and not first["alice"].cull
    assert first["alice"].reason.startswith("warned, stopped at 12:10:00 UTC at the earliest: idle")
    assert first["erin/train"] == Decision(False, "hub activity 5 min ago", Signal.HUB)
    assert world.deletes() == []
    written = load_cull_warnings(warnings)
    assert set(written) == {"alice/"}
    assert written["alice/"].at == T0 + timedelta(minutes=10) and written["alice/"].postponable
    await poll(culler, start=-1, stop=-9)  # readings go on: no missed poll
    still = await culler.cull_once(now=T0 + timedelta(minutes=9))
    assert still["alice"].signal is Signal.WARNED and world.deletes() == []
    await poll(culler, start=-10, stop=-10)
    done = await culler.cull_once(now=T0 + timedelta(minutes=10))
    assert done["alice"].cull and done["alice"].signal is Signal.IDLE
    assert world.deletes() == ["/hub/api/users/alice/server"]
