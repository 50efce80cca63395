"""One hostile node agent makes only its own node unreachable.

Real HTTP servers (tornado, on 127.0.0.1, in a thread with its own event loop) play three
agents; one of them answers with something hostile: deep nesting, ``1e400``, ``NaN``, a
50 MB body, wrong types, thousands of GPUs, non-UTF-8, forged log lines... The hub's
``Cluster`` reads them as it does for placement: the hostile node is unreachable with a
sentence saying why, logged once; the others keep their inventories and keep placing; the
hub's event loop keeps running meanwhile (a ticker on it keeps ticking), and a 50 MB body
is cut off, not read (the server sees its connection closed long before the end).

The fake agents accept only their own node's token (HMAC of the site secret), so every
good reading also proves that the hub sent each node its own token.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.iostream import StreamClosedError
from tornado.netutil import bind_sockets
from traitlets.config import Config

from jupyterhub_gpu.core.inventory import NodeInventory
from jupyterhub_gpu.core.placement import PlacementRequest, place
from jupyterhub_gpu.core.placement.request import NoFit, Placement
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.edges.agents import AgentEndpoint, Unreachable
from jupyterhub_gpu.hub.cluster import Cluster, ClusterSettings
from jupyterhub_gpu.wire.agent import inventory_to_json

pytestmark = pytest.mark.integration

T = TypeVar("T")
CLUSTER = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"
SECRET = "site-secret-for-the-hostile-agents-test"
INVENTORIES = {n.name: n for n in load_inventory_file(CLUSTER)}  # gpu-a, gpu-b, gpu-c
HOSTILE = "gpu-c"  # the only node with A100s
A100 = frozenset({"NVIDIA A100-SXM4-80GB"})
CHUNK = 64 * 1024
FIFTY_MB = 50 * 1024 * 1024
THREAD = "fake-agents"

Handler = Callable[["FakeAgent"], Awaitable[None]]


# -- what the agents answer --------------------------------------------------------------


def good(node: str) -> dict[str, Any]:
    return inventory_to_json(INVENTORIES[node], time.time())


def text(node: str) -> str:
    return json.dumps(good(node))


def body(make: Callable[[], bytes | str], status: int = 200) -> Handler:
    async def serve(handler: FakeAgent) -> None:
        data = make()
        handler.set_status(status)
        handler.set_header("Content-Type", "application/json")
        handler.finish(data.encode() if isinstance(data, str) else data)

    return serve


def many_gpus(count: int) -> str:
    data = good(HOSTILE)
    gpu = data["gpus"][0]
    data["gpus"] = [{**gpu, "uuid": f"GPU-{i:08d}", "index": i} for i in range(count)]
    return json.dumps(data)


def with_processes(processes: list[Any]) -> str:
    """A good answer whose first GPU lists ``processes`` (issue #26's per-process field)."""
    data = good(HOSTILE)
    data["gpus"][0]["processes"] = processes
    return json.dumps(data)


def fifty_mb(declared: bool) -> Handler:
    """A valid JSON array of 26 million zeros (seconds to parse), sent in 64 KiB chunks,
    with or without a Content-Length; records how much got out before the hub cut it."""
    first = b"[" + b"0," * (CHUNK // 2 - 1) + b"0"
    middle = b",0" * (CHUNK // 2)
    chunks = [first, *[middle] * (FIFTY_MB // CHUNK - 1), b"]"]

    async def serve(handler: FakeAgent) -> None:
        if declared:
            handler.set_header("Content-Length", str(sum(map(len, chunks))))
        sent = 0
        try:
            for chunk in chunks:
                handler.write(chunk)
                await handler.flush()
                sent += len(chunk)
            handler.finish()
        except StreamClosedError:
            handler._auto_finish = False  # the hub hung up: nothing more to say
        handler.agents.sent[handler.node] = sent
        handler.agents.finished.set()

    return serve


async def silent(handler: FakeAgent) -> None:
    await handler.agents.released.wait()


# kind -> (what the hostile agent serves, what the hub's error must say)
KINDS: dict[str, tuple[Handler, str]] = {
    "thousands of processes on a GPU": (
        body(lambda: with_processes([{"pid": i + 1} for i in range(5000)])),
        "invalid agent answer: gpus[0].processes lists 5000 processes, more than 1024",
    ),
    "a process of a container id that is no id": (
        body(lambda: with_processes([{"pid": 7, "container": "../../etc"}])),
        "invalid agent answer: gpus[0].processes[0].container must be a Docker container id",
    ),
    "deep nesting": (
        body(lambda: text(HOSTILE)[:-1] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}"),
        "invalid agent answer: JSON nested too deeply",
    ),
    "1e400": (
        body(lambda: text(HOSTILE).replace('"utilization_pct": 0.0', '"utilization_pct": 1e400')),
        "invalid agent answer: the number 1e400 is out of range",
    ),
    "NaN": (
        body(lambda: text(HOSTILE).replace('"utilization_pct": 0.0', '"utilization_pct": NaN')),
        "invalid agent answer: NaN is not a number an agent may send",
    ),
    "50 MB with a Content-Length": (
        fifty_mb(declared=True),
        "its answer is larger than 2097152 bytes (AgentClient.max_body_size); not read",
    ),
    "50 MB chunked": (
        fifty_mb(declared=False),
        "its answer is larger than 2097152 bytes (AgentClient.max_body_size); not read",
    ),
    "wrong types": (
        body(lambda: text(HOSTILE).replace('"memory_mib": 81920', '"memory_mib": "80 GB"')),
        r"invalid agent answer: gpus[0].memory_mib must be an integer >= 1, got '80 GB'",
    ),
    "thousands of GPUs": (
        body(lambda: many_gpus(5000)),
        "invalid agent answer: gpus lists 5000 GPUs, more than the 256 allowed",
    ),
    "non-UTF-8": (
        body(lambda: text(HOSTILE).encode().replace(b"A100", b"A\xa9100")),
        "invalid agent answer: not UTF-8",
    ),
    "a forged log line": (
        body(lambda: text(HOSTILE).replace("A100-SXM4", "A100\\nW 2026 GPU node gpu-a ok")),
        "invalid agent answer: gpus[0].model must be printable text",
    ),
    "an error page of 1 MB": (
        body(lambda: "<h1>" + "oops " * 200_000, status=500),
        "HTTP 500: <h1>oops oops",
    ),
    "another node's inventory": (
        body(lambda: text("gpu-a")),
        "it serves node 'gpu-a', but is configured for 'gpu-c'",
    ),
}


# -- the fake agents ---------------------------------------------------------------------


class FakeAgent(web.RequestHandler):
    def initialize(self, agents: FakeAgents, node: str) -> None:
        self.agents, self.node = agents, node

    async def get(self) -> None:
        expected = f"token {node_token(SECRET, self.node)}"
        if not hmac.compare_digest(self.request.headers.get("Authorization", ""), expected):
            self.set_status(403)
            self.finish({"error": "the token is not valid for this agent"})
            return
        await self.agents.handlers.get(self.node, body(lambda: text(self.node)))(self)


@dataclass
class FakeAgents:
    """One tornado server per node, served from a thread with its own event loop (so the
    hub's loop, the one under test, does nothing but the hub's work)."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)  # bytes a 50 MB answer got out
    finished: threading.Event = field(default_factory=threading.Event)  # ... and when
    urls: dict[str, str] = field(default_factory=dict)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)

    def start(self, nodes: list[str]) -> None:
        threading.Thread(target=self.loop.run_forever, name=THREAD, daemon=True).start()
        for node in nodes:
            sockets = bind_sockets(0, "127.0.0.1")
            app = web.Application([(r"/v1/gpus", FakeAgent, {"agents": self, "node": node})])

            def listen(app: web.Application = app, sockets: list[Any] = sockets) -> None:
                HTTPServer(app).add_sockets(sockets)

            self.call(listen)
            self.urls[node] = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"

    def call(self, function: Callable[[], None]) -> None:
        """Run ``function`` on the agents' loop and wait for it."""
        done = threading.Event()

        def run() -> None:
            function()
            done.set()

        self.loop.call_soon_threadsafe(run)
        assert done.wait(10)

    def stop(self) -> None:
        self.call(self.released.set)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def agents() -> Iterator[FakeAgents]:
    fakes = FakeAgents()
    fakes.start(list(INVENTORIES))
    yield fakes
    fakes.stop()


def make_cluster(agents: FakeAgents, config: Config, log: logging.Logger) -> Cluster:
    nodes = [
        {
            "name": name,
            "docker_url": f"unix:///nowhere/{name}.sock",
            "address": "127.0.0.1",
            "agent_url": url,
        }
        for name, url in agents.urls.items()
    ]
    settings = ClusterSettings(
        nodes=nodes, agent_token=SECRET, agent_config=config, reconcile_interval=0
    )
    cluster = Cluster(settings, log)
    cluster.reconciler.reconciled = True  # no engines here: the agents are what is tested

    async def engine_ok(node: str) -> bool:
        return True

    async def images_on(node: str) -> frozenset[str]:
        return frozenset()  # no engines to list (a failed listing logs the engine down)

    cluster.engine_ok = engine_ok  # type: ignore[method-assign]
    cluster.images_on = images_on  # type: ignore[method-assign]
    return cluster


async def while_ticking(work: Awaitable[T]) -> tuple[T, list[float]]:
    """``work``'s result, and the times a ticker on the same loop ticked meanwhile (the
    first and last entries: when the work began and ended)."""
    ticks: list[float] = [time.monotonic()]
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    ticker = asyncio.ensure_future(tick())
    try:
        result = await work
    finally:
        ticks.append(time.monotonic())
        done.set()
        await ticker
    return result, ticks


def states(snapshot: ClusterSnapshot) -> dict[str, tuple[bool, NodeInventory]]:
    return {n.name: (n.reachable, n.inventory) for n in snapshot.nodes}


# -- the tests ---------------------------------------------------------------------------


def test_all_good_agents_place_everywhere(agents: FakeAgents) -> None:
    """The control: the same servers, none hostile, give every node and the A100s."""

    async def run() -> ClusterSnapshot:
        return await make_cluster(agents, Config(), logging.getLogger("hub")).snapshot()

    snapshot = asyncio.run(run())
    assert states(snapshot) == {name: (True, inv) for name, inv in INVENTORIES.items()}
    assert place(snapshot, PlacementRequest(1, allowed_models=A100)) == Placement(
        HOSTILE, (INVENTORIES[HOSTILE].gpus[0].uuid,)
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_hostile_agent_makes_only_its_node_unreachable(
    agents: FakeAgents, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    handler, expected = KINDS[kind]
    agents.handlers[HOSTILE] = handler
    config = Config()
    config.AgentClient.timeout = 20.0  # the verdict must come from the checks, not a timeout
    config.AgentClient.max_age = 600.0
    log = logging.getLogger(f"hub.{kind}")

    async def run() -> tuple[ClusterSnapshot, list[float], Any]:
        cluster = make_cluster(agents, config, log)
        snapshot, ticks = await while_ticking(cluster.snapshot())
        # the cached verdict (max_age 600 s from the config: no second request)
        verdict = await cluster.agents.read(
            AgentEndpoint.for_node(HOSTILE, agents.urls[HOSTILE], SECRET)
        )
        return snapshot, ticks, verdict

    snapshot, ticks, verdict = asyncio.run(run())

    found = states(snapshot)
    assert found[HOSTILE][0] is False
    assert {n: s for n, s in found.items() if n != HOSTILE} == {
        n: (True, inv) for n, inv in INVENTORIES.items() if n != HOSTILE
    }
    assert isinstance(verdict, Unreachable)
    assert verdict.error.startswith(f"agent of {HOSTILE} at {agents.urls[HOSTILE]}: {expected}")
    assert len(verdict.error) < 400 and verdict.error.isprintable()

    # every other node keeps placing; the hostile node's GPUs are not offered
    assert isinstance(place(snapshot, PlacementRequest(1, allowed_models=A100)), NoFit)
    placed = place(snapshot, PlacementRequest(2))
    assert isinstance(placed, Placement) and placed.node != HOSTILE

    # one log line, naming the node and why; nothing about the others, no tracebacks
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == log.name]
    assert lines == [(logging.WARNING, f"GPU node unreachable: {verdict.error}")]
    hub_side = [r for r in caplog.records if r.threadName != THREAD]
    assert [r.getMessage() for r in hub_side if r.levelno >= logging.ERROR] == []

    # the hub's loop kept running: the ticker ticked all along, from before the read to
    # its end (a 50 MB JSON parsed on the loop, or read whole, stops it for seconds)
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    # 1 s: a busy 2-core machine running three test workers delays a tick by 0.6 s
    assert max(gaps) < 1.0, f"the hub's loop stalled {max(gaps):.2f} s"

    if kind.startswith("50 MB"):  # cut off early, not read to the end
        assert agents.finished.wait(30), "the 50 MB answer was neither cut off nor sent"
        assert agents.sent[HOSTILE] < FIFTY_MB // 4


def test_the_configured_timeout_is_the_one_used(agents: FakeAgents) -> None:
    """``c.AgentClient.timeout`` reaches the hub's client: an agent that never answers is
    given up after the configured 1.5 s, not the cluster's default of 2 s. (Not shorter:
    on a loaded 2-core CI machine the first reads of the good agents took over 0.3 s.)"""
    agents.handlers[HOSTILE] = silent
    config = Config()
    config.AgentClient.timeout = 1.5

    async def run() -> tuple[ClusterSnapshot, Any]:
        cluster = make_cluster(agents, config, logging.getLogger("hub"))
        snapshot = await cluster.snapshot()
        endpoint = AgentEndpoint.for_node(HOSTILE, agents.urls[HOSTILE], SECRET)
        return snapshot, await cluster.agents.read(endpoint)

    snapshot, verdict = asyncio.run(run())
    assert isinstance(verdict, Unreachable)
    assert verdict.error.endswith("no answer within 1.5 s")
    assert [n.name for n in snapshot.nodes if n.reachable] == ["gpu-a", "gpu-b"]
