"""The GPU-aware idle culler end to end (issue 6): a real hub starts the real culler service
(``c.JupyterHub.services`` with a command, the minimal role of docs/culler.md); servers run
in real containers; node agents run in declared mode and report what each test sets.

One hub holds four servers side by side, one per case, so the whole timeline (timeout
30 s, a round every 5 s) is paid once:

- ann: nothing runs (no kernel, GPU at 0 %, no HTTP): culled within timeout + interval,
  and her GPU goes to the next user at once;
- bob: a kernel busy in a ``time.sleep`` cell, GPU at 0 %: kept;
- carol: her GPU at 90 % (a training in a terminal), no kernel: kept;
- dave: idle like ann, but his node's agent is stopped before his timeout: kept; when the
  agent returns his GPU is observed afresh and he goes a full timeout later.

Then, each on its own hub: a dry run; the culler killed (the hub restarts it) and the hub
frozen, both survived.

Every decision is one line of the culler's log, asserted with its reason.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import select

from jupyterhub_gpu.core.culling.warning import stopped_words
from jupyterhub_gpu.edges.accounting.schema import AllocationRow
from jupyterhub_gpu.edges.accounting.store import AccountingStore
from jupyterhub_gpu.edges.files import load_notes
from jupyterhub_gpu.services.culler.client import parse_time
from jupyterhub_gpu.wire.cull_notes import notes_for
from tests.conftest import gpu_inventory
from tests.support.agent import AgentProcess
from tests.support.cluster import REPO, Engine
from tests.support.hub import Hub
from tests.support.kernels import start_busy_kernel
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TIMEOUT = 30.0
INTERVAL = 5.0
STOP_SLACK = 30.0  # from the cull decision to the hub reporting the server gone
# a loaded 2-core machine starts JupyterLab in a minute or more: more than the hub's 60 s
SLOW_STARTS = "c.Spawner.http_timeout = 180\nc.Spawner.start_timeout = 180\n"
# a spawn into a full cluster is refused at once here (the queue is test_queue.py's)
SLOW_STARTS += "c.GPUDockerSpawner.max_queue_wait = 0\n"
RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
A100 = ("NVIDIA A100-SXM4-40GB", 40960, "8.0")
OPTIONS = {"image": "demo-cuda11", "gpu_count": 1, "mem_gib": 1, "cpu": 0.5}
# no access:servers: each server is read with its own token (docs/culler.md)
CULLER_SCOPES = ["list:users", "read:servers", "admin:server_state", "delete:servers"]
LINE = re.compile(r"^\[(?P<level>[DIWEC]) (?P<at>[\d-]+ [\d:.]+) GPUIdleCuller\] (?P<message>.*)$")
# what a test waits for instead of sleeping "long enough": the culler's lines (DEBUG) that
# say a round finished, and that a round found the hub's API unavailable
ROUND_DONE = r"GPUIdleCuller\] Cull round \d+ done"
HUB_UNAVAILABLE = r"GPUIdleCuller\] Hub API unavailable \("


# -- the culler as the hub's service ----------------------------------------------------


def culler_extra(
    work: Path,
    agents: dict[str, AgentProcess],
    entry: str = "module",
    timeout: float = TIMEOUT,
    settings: str = "",
    args: tuple[str, ...] = (),
) -> str:
    """Hub config adding the culler service and its role; its own settings in a file
    (``settings``: more lines for it; ``args``: more command-line arguments)."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "culler_config.py"
    # through configure_culler (entry "module"), the culler learns the agents from the hub
    agent_urls = (
        ""
        if entry == "module"
        else f"c.GPUIdleCuller.agent_urls = { ({n: a.url for n, a in agents.items()})!r}"
    )
    config.write_text(
        f"""
{agent_urls}
c.GPUIdleCuller.timeout = {timeout}
c.GPUIdleCuller.gpu_timeout = {timeout}
c.GPUIdleCuller.interval = {INTERVAL}
c.GPUIdleCuller.gpu_poll_interval = 1.0
c.GPUIdleCuller.gpu_window = 5.0
c.GPUIdleCuller.api_page_size = 2  # a few servers already span pages of the hub's /users
c.GPUIdleCuller.notes_file = {str(work / "notes.json")!r}
c.GPUIdleCuller.state_file = {str(work / "state.json")!r}
c.GPUIdleCuller.warn_before = 0  # culls at the timeout (warnings: test_cull_warnings.py)
{settings}
"""
    )
    start = ["-m", "jupyterhub_gpu.services.culler", *args]
    if entry == "script":
        start = [str(REPO / "services" / "culler.py"), *args]
    token = next(iter(agents.values())).token if agents else ""
    if entry == "module":
        return (
            SLOW_STARTS
            + f"""
import os
os.environ["JUPYTERHUB_GPU_SITE_SECRET"] = {token!r}
from jupyterhub_gpu.hub.extensions import configure_culler
configure_culler(
    c,
    config_file={str(config)!r},
    args=[*{list(args)!r}, "--log-level=DEBUG",
          "--GPUIdleCuller.proxy_url=" + c.JupyterHub.bind_url],
)
"""
        )
    return (
        SLOW_STARTS
        + f"""
import sys
c.JupyterHub.services.append({{
    "name": "gpu-culler",
    "command": [sys.executable, *{start!r}, "--config={config}", "--log-level=DEBUG",
                "--GPUIdleCuller.proxy_url=" + c.JupyterHub.bind_url],
    "environment": {{"JUPYTERHUB_GPU_AGENT_TOKEN": {token!r}}},
}})
c.JupyterHub.load_roles.append(
    {{"name": "gpu-culler", "scopes": {CULLER_SCOPES!r}, "services": ["gpu-culler"]}}
)
"""
    )


def culler_log(hub: Hub) -> list[tuple[datetime, str, str]]:
    """(time, level, message) of every line the culler logged (its output goes to the
    hub's log; its time is local, made aware here)."""
    text = hub.log_path.read_text(errors="replace")
    return [
        (datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S.%f").astimezone(), m["level"], m["message"])
        for m in map(LINE.match, text.splitlines())
        if m
    ]


def logged_at(hub: Hub, message: str) -> datetime:
    """When the culler logged ``message``."""
    at = next((at for at, _, msg in culler_log(hub) if msg == message), None)
    assert at is not None, f"not in the culler's log: {message}"
    return at


def decisions(hub: Hub, user: str, since: datetime | None = None) -> list[str]:
    """The culler's decision lines about ``user``'s default server, in order."""
    return [
        msg
        for at, _, msg in culler_log(hub)
        if msg.startswith((f"Culling {user}: ", f"Keeping {user}: "))
        and (since is None or at >= since)
    ]


StartAgents = Callable[[list[dict[str, Any]]], dict[str, AgentProcess]]


@pytest.fixture
def start_agents(tmp_path: Path) -> Iterator[StartAgents]:
    """Factory: one declared-mode agent per inventory node, all with one token."""
    started: list[AgentProcess] = []

    def start(inventory: list[dict[str, Any]]) -> dict[str, AgentProcess]:
        path = tmp_path / "agents-inventory.yaml"
        path.write_text(yaml.safe_dump({"nodes": inventory}))
        token = uuid.uuid4().hex
        agents = {}
        for node in inventory:
            agent = AgentProcess(node["name"], path, tmp_path / f"agent-{node['name']}.log")
            agent.token = token
            started.append(agent.start())
            agents[node["name"]] = agent
        return agents

    yield start
    for agent in started:
        agent.stop()


# -- servers, kernels, time -------------------------------------------------------------


def spawn_all(hub: Hub, options: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Spawn every user's server at once; returns when each was first seen ready."""
    for user in options:
        hub.create_user(user)
    with ThreadPoolExecutor(len(options)) as pool:  # the hub answers a spawn when it is done
        answers = list(pool.map(lambda u: hub.spawn(u, options[u]), options))
    for r in answers:
        assert r.status_code in (201, 202), r.text
    ready: dict[str, float] = {}
    deadline = time.monotonic() + 240
    while len(ready) < len(options) and time.monotonic() < deadline:
        for user in options.keys() - ready.keys():
            s = hub.server(user)
            if s and s.get("ready"):
                ready[user] = time.monotonic()
            elif not s or not s.get("pending"):
                raise AssertionError(f"server of {user} failed to start:\n{hub.log_tail()}")
        time.sleep(0.2)
    assert len(ready) == len(options), f"not ready in time:\n{hub.log_tail()}"
    return ready


def kernel_states(hub: Hub, user: str) -> list[str]:
    r = httpx.get(
        f"{hub.url}/user/{user}/api/kernels",
        params={"no_track_activity": "1"},
        headers={"Authorization": f"token {hub.token}"},
        timeout=30,
    )
    r.raise_for_status()
    return [k["execution_state"] for k in r.json()]


def judged_idle_for(hub: Hub, user: str, seconds: float) -> str | None:
    """The culler's first decision about ``user`` made at least ``seconds`` after the
    user's last hub activity: kept for hub activity that long ago, or judged on the GPU
    (which the culler does only once the hub activity is a whole timeout old)."""
    for line in decisions(hub, user):
        recent = re.fullmatch(rf"Keeping {user}: hub activity (\d+) ?s ago", line)
        if (recent and int(recent[1]) >= seconds) or line.startswith(f"Keeping {user}: GPU "):
            return line
    return None


def culled_line(hub: Hub, user: str) -> str | None:
    return next((d for d in decisions(hub, user) if d.startswith("Culling")), None)


# -- the tests --------------------------------------------------------------------------


def test_idle_gpu_server_is_culled_and_working_ones_are_kept(
    make_hub: Callable[..., Hub], engines: list[Engine], start_agents: StartAgents, tmp_path: Path
) -> None:
    node_a, node_b = engines[0], engines[2]  # test_multinode stops node-b; leave it
    inventory = [
        gpu_inventory(node_a.name, "aaaaaaaa", [RTX, RTX, RTX]),
        gpu_inventory(node_b.name, "bbbbbbbb", [A100]),
    ]
    agents = start_agents(inventory)
    culler_dir = tmp_path / "culler"
    hub = make_hub([node_a, node_b], inventory, culler_extra(culler_dir, agents), agents)

    rtx, a100 = {**OPTIONS, "gpu_model": RTX[0]}, {**OPTIONS, "gpu_model": A100[0]}
    ready = spawn_all(hub, {"ann": rtx, "bob": rtx, "carol": rtx, "dave": a100})
    all_ready = datetime.now(timezone.utc)
    servers = {u: hub.server(u) or {} for u in ready}
    gpu = {u: s["state"]["gpu_uuids"][0] for u, s in servers.items()}
    assert servers["dave"]["state"]["node"] == node_b.name
    assert {servers[u]["state"]["node"] for u in ("ann", "bob", "carol")} == {node_a.name}

    agents[node_a.name].set_state(gpu["carol"], utilization_pct=90)  # (c) a training
    start_busy_kernel(hub, "bob")  # (b) a long cell nobody watches
    # (d) dave's GPU is observed idle for half his timeout, then his node's agent goes away:
    # the event is the culler's round that judged him that long after his last activity
    # (his GPU observed all along: its agent still answers), not the time alone
    wait_until(
        lambda: judged_idle_for(hub, "dave", TIMEOUT / 2),
        ready["dave"] + TIMEOUT - time.monotonic(),
        "a culler round that judged dave idle for half his timeout",
        details=hub.log_tail,
    )
    agents[node_b.name].stop()
    late = {u: time.monotonic() - ready[u] for u in ("bob", "dave")}
    assert max(late.values()) < TIMEOUT - INTERVAL, f"set-up too slow for the timeline: {late}"
    assert all(hub.server(u) for u in ready), "a server was stopped before its timeout"

    # (a) ann: every GPU of the cluster is held: nobody else gets an RTX until the culler
    # frees one (how clearly a full cluster refuses is test_spawner's business)
    hub.create_user("erin")
    assert culled_line(hub, "ann") is None, "set-up too slow for the timeline"
    refused = hub.spawn("erin", rtx)
    assert refused.status_code >= 400, refused.text
    assert hub.server("erin") is None

    # the culler decides within timeout + interval of her last activity ...
    line = wait_until(
        lambda: culled_line(hub, "ann"),
        ready["ann"] + TIMEOUT + INTERVAL + 3 - time.monotonic(),
        "the culler to cull ann",
        details=hub.log_tail,
    )
    decided = time.monotonic()
    last_seen = parse_time(servers["ann"]["last_activity"])  # as the hub had it once ready
    assert last_seen is not None
    idle_for = (logged_at(hub, line) - last_seen).total_seconds()
    assert idle_for >= TIMEOUT, f"culled {idle_for:.1f}s after her last activity: too early"
    # ... the hub stops her server, and the GPU goes to the next user right away
    wait_until(
        lambda: hub.server("ann") is None,
        decided + STOP_SLACK - time.monotonic(),
        "ann's server to go",
        details=hub.log_tail,
    )
    r = hub.spawn("erin", rtx)
    assert r.status_code in (201, 202), r.text
    erin = hub.wait_ready("erin", timeout=240)
    assert erin["state"]["gpu_uuids"] == [gpu["ann"]], "erin did not get ann's freed GPU"

    # the others: given three more whole rounds past the last one's timeout (the timeout
    # is time; the rounds after it are events: the first counted may have begun before)
    time.sleep(max(max(ready.values()) + TIMEOUT - time.monotonic(), 0))
    hub.wait_log(ROUND_DONE, after=hub.log_offset(), count=4, timeout=4 * INTERVAL + 60)
    for user in ("bob", "carol", "dave"):
        s = hub.server(user)
        assert s and s["ready"], f"{user}'s server was stopped: {decisions(hub, user)}"
        assert culled_line(hub, user) is None, decisions(hub, user)
    assert kernel_states(hub, "bob") == ["busy"]

    # one line per decision, with its reason: every round judged each server once
    rounds = {u: len(decisions(hub, u, since=all_ready)) for u in ("bob", "carol", "dave")}
    assert max(rounds.values()) - min(rounds.values()) <= 1, rounds
    assert line.startswith("Culling ann: idle: no hub activity for "), line
    assert "kernels idle" in line and "1 GPU under 10% for" in line, line
    assert line.endswith(f"(timeout {int(TIMEOUT)} s)"), line
    kept = [d for d in decisions(hub, "ann") if d.startswith("Keeping")]
    assert len(kept) >= 2 and all(re.match(r"Keeping ann: \S", d) for d in kept), kept
    assert [d for d in decisions(hub, "ann") if d.startswith("Culling")] == [line]

    def kept_for(user: str, pattern: str) -> list[str]:
        return [d for d in decisions(hub, user) if re.fullmatch(pattern, d)]

    assert kept_for("bob", r"Keeping bob: 1 kernel\(s\) busy"), decisions(hub, "bob")
    assert kept_for(
        "carol", rf"Keeping carol: GPU {gpu['carol'][:12]} active \d+ s ago, .*\(now \d+%\)"
    ), decisions(hub, "carol")
    dave_kept = kept_for("dave", rf"Keeping dave: GPU {gpu['dave'][:12]}.*agent.*")
    assert len(dave_kept) >= 2, decisions(hub, "dave")
    warnings = [m for _, lvl, m in culler_log(hub) if lvl == "W"]
    assert any(m.startswith(f"Agent of {node_b.name} unreachable") for m in warnings), warnings

    # ann is told why: the culler's note carries the logged reason
    (note,) = notes_for(load_notes(culler_dir / "notes.json"), "ann")
    assert note.server == "" and f"Culling ann: {note.reason}" == line

    # (d) continued: dave's agent comes back. His GPU is observed afresh (what happened
    # while nobody watched is unknown), so his server goes one full timeout after the
    # agent's return, not at once
    agents[node_b.name].start()
    back_line = wait_until(
        lambda: f"Agent of {node_b.name} answers again" in [m for _, _, m in culler_log(hub)],
        10,
        "the culler to see dave's agent again",
        details=hub.log_tail,
    )
    assert back_line and culled_line(hub, "dave") is None
    dave_line = wait_until(
        lambda: culled_line(hub, "dave"),
        TIMEOUT + INTERVAL + 5,
        "the culler to cull dave once his agent is back",
        details=hub.log_tail,
    )
    back = logged_at(hub, f"Agent of {node_b.name} answers again")
    after = (logged_at(hub, dave_line) - back).total_seconds()
    assert after >= TIMEOUT - 1, f"dave culled {after:.1f}s after his agent came back"
    assert "1 GPU under 10% for " in dave_line, dave_line


def test_spawn_form_tells_the_user_why_the_server_stopped(
    make_hub: Callable[..., Hub], engines: list[Engine], tmp_path: Path
) -> None:
    """A CPU-only server, culled for real by the service; then its owner opens the spawn
    form and reads why (the hub reads the culler's notes file), and the accounting record
    (the hub's default SQLite file) ends as culled, not stopped."""
    node = engines[0]
    culler_dir = tmp_path / "culler"
    extra = culler_extra(culler_dir, {}, entry="script")
    extra += f"c.GPUCluster.cull_notes_file = {str(culler_dir / 'notes.json')!r}\n"
    hub = make_hub([node], [gpu_inventory(node.name, "cccccccc", [RTX])], extra)
    ready = spawn_all(hub, {"zoe": {**OPTIONS, "image": "demo-cpu", "gpu_count": 0}})
    wait_until(
        lambda: hub.server("zoe") is None,
        ready["zoe"] + TIMEOUT + INTERVAL + STOP_SLACK - time.monotonic(),
        "the culler to stop zoe's server",
        details=hub.log_tail,
    )
    (note,) = notes_for(load_notes(culler_dir / "notes.json"), "zoe")
    store = AccountingStore(f"sqlite:///{hub.workdir / 'jupyterhub-gpu-accounting.sqlite'}")
    try:
        (record,) = wait_until(
            lambda: [r for r in zoes_records(store) if r.ended_at],
            30,
            "zoe's accounting record to close",
            details=hub.log_tail,
        )
    finally:
        store.engine.dispose()
    assert record.end_reason == "culled", record

    with httpx.Client(base_url=hub.url, timeout=60, follow_redirects=True) as browser:
        login = browser.get("/hub/login")
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', login.text)
        assert xsrf, login.text
        data = {"username": "zoe", "password": "any", "_xsrf": xsrf[1]}
        assert browser.post("/hub/login", data=data).status_code == 200
        page = browser.get("/hub/spawn/zoe")
    assert page.status_code == 200 and 'id="jhgpu-form"' in page.text, page.text[-2000:]
    # the sentence a student reads (its time in UTC here: the page's script, not run by
    # httpx, shows it in the browser's zone; test_cull_warning_hub.py reads it in Chromium)
    words = stopped_words("", note.at, note.reason, datetime.now(timezone.utc))
    assert words.text.startswith("Your server was stopped at ") and "UTC because" in words.text
    assert words.text in page.text.replace("&#39;", "'")


def zoes_records(store: AccountingStore) -> list[AllocationRow]:
    with store.session() as session:
        return list(session.scalars(select(AllocationRow).where(AllocationRow.user == "zoe")))


def culler_pids(config: Path) -> set[int]:
    """Processes running the culler with this config file (the hub's service)."""
    needle = f"--config={config}".encode()
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes().split(b"\0"):
                    pids.add(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return pids


def test_dry_run_logs_what_it_would_do_and_stops_nothing(
    make_hub: Callable[..., Hub], engines: list[Engine], tmp_path: Path
) -> None:
    node = engines[0]
    culler_dir = tmp_path / "culler"
    extra = culler_extra(culler_dir, {}, args=("--dry-run",))
    hub = make_hub([node], [gpu_inventory(node.name, "eeeeeeee", [RTX])], extra)
    ready = spawn_all(hub, {"yan": {**OPTIONS, "image": "demo-cpu", "gpu_count": 0}})["yan"]

    def would_cull() -> list[str]:
        return [m for _, _, m in culler_log(hub) if m.startswith("Would cull yan (dry run): ")]

    wait_until(
        would_cull,
        ready + TIMEOUT + INTERVAL + 3 - time.monotonic(),
        "a dry-run decision about yan",
        details=hub.log_tail,
    )
    # two more whole rounds (the first round done may be the one that said it): each says
    # it again, none acts
    hub.wait_log(ROUND_DONE, after=hub.log_offset(), count=3, timeout=3 * INTERVAL + 60)
    server = hub.server("yan")
    assert server and server["ready"], f"the dry run stopped yan's server:\n{hub.log_tail()}"
    lines = would_cull()
    assert len(lines) >= 2 and all(" idle: no hub activity for " in m for m in lines), lines
    assert not [m for _, _, m in culler_log(hub) if m.startswith("Culling ")]
    assert "Dry run: decisions are logged, no server is stopped" in [
        m for _, _, m in culler_log(hub)
    ]
    assert not notes_for(load_notes(culler_dir / "notes.json"), "yan"), "a note for no cull"
    with node.client() as client:
        (container,) = client.containers.list(
            ignore_removed=True,
            filters={"label": [f"jupyterhub-gpu.hub={hub.hub_id}", "jupyterhub-gpu.owner=yan"]}
        )
        assert container.status == "running"


def test_culler_survives_its_own_crash_and_a_frozen_hub(
    make_hub: Callable[..., Hub], engines: list[Engine], start_agents: StartAgents, tmp_path: Path
) -> None:
    """Restart-safe and hub outages, for real. The culler's process is killed: the hub
    starts it again (JupyterHub polls its services every ~30 s) and it goes on from its
    state file. Then the hub freezes (SIGSTOP) for more than two rounds: the culler says
    so and carries on. The idle server is still culled on time, its GPU's idle time
    counted from before the restart."""
    node = engines[0]
    inventory = [gpu_inventory(node.name, "dddddddd", [RTX])]
    agents = start_agents(inventory)
    culler_dir = tmp_path / "culler"
    timeout, request_timeout = 75.0, 4.0
    extra = culler_extra(
        culler_dir,
        agents,
        timeout=timeout,
        settings=f"c.GPUIdleCuller.request_timeout = {request_timeout}",
    )
    hub = make_hub([node], inventory, extra, agents)
    ready = spawn_all(hub, {"ivy": {**OPTIONS, "gpu_model": RTX[0]}})["ivy"]
    config = culler_dir / "culler_config.py"

    # two rounds judged and saved, then the culler dies
    wait_until(
        lambda: len(decisions(hub, "ivy")) >= 2,
        ready + 4 * INTERVAL - time.monotonic(),
        "two rounds",
        details=hub.log_tail,
    )
    assert (culler_dir / "state.json").exists()
    (first,) = culler_pids(config)
    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    # the hub notices and starts it again; its first round comes from the saved state
    (second,) = wait_until(
        lambda: culler_pids(config) - {first},
        killed + 45 - time.monotonic(),
        "the hub to restart the culler",
        details=hub.log_tail,
    )
    (restored,) = wait_until(
        lambda: [m for _, _, m in culler_log(hub) if m.startswith("Restored the history of ")],
        10,
        "the restarted culler to load its state",
        details=hub.log_tail,
    )
    assert restored.startswith("Restored the history of 1 GPU(s) from "), restored
    assert culled_line(hub, "ivy") is None, "culled before its timeout"

    # the hub freezes for more than two rounds: the culler can't list servers, says so
    assert hub.proc is not None
    frozen_at, since = datetime.now(timezone.utc), hub.log_offset()
    os.kill(hub.proc.pid, signal.SIGSTOP)
    try:  # two rounds fail to list the servers (the culler still writes to the hub's log)
        wait = 2 * (INTERVAL + request_timeout) + 60
        hub.wait_log(HUB_UNAVAILABLE, after=since, count=2, timeout=wait)
    finally:
        os.kill(hub.proc.pid, signal.SIGCONT)
    outage = [
        m
        for at, level, m in culler_log(hub)
        if at >= frozen_at and level == "W" and m.startswith("Hub API unavailable (")
    ]
    assert outage, culler_log(hub)[-10:]
    assert f"no answer within {request_timeout:g}s" in outage[0], outage[0]
    assert culler_pids(config) == {second}, "the culler died in the hub's outage"

    # ivy is culled on time: the GPU's idle time includes what was seen before the restart
    line = wait_until(
        lambda: culled_line(hub, "ivy"),
        ready + timeout + INTERVAL + request_timeout + 3 - time.monotonic(),
        "the culler to cull ivy",
        details=hub.log_tail,
    )
    decided = time.monotonic()
    idle = re.search(r"1 GPU under 10% for (\d+) s", line)
    assert idle, line
    gpu_idle = int(idle[1])  # seconds up to 2 min: the wait is ~75-90 s
    # a culler that forgot its history would have observed the GPU only since it restarted
    since_restart = (logged_at(hub, line) - logged_at(hub, restored)).total_seconds()
    assert gpu_idle >= timeout and gpu_idle > since_restart, (line, since_restart)
    wait_until(
        lambda: hub.server("ivy") is None,
        decided + STOP_SLACK - time.monotonic(),
        "ivy's server to go",
        details=hub.log_tail,
    )
