"""The GPU-aware idle culler: a JupyterHub-managed service (see docs/culler.md).

Modelled on jupyterhub-idle-culler 2.0 (a traitlets ``Application`` that lists users
with ``?state=ready`` and pagination, bounded by a semaphore), plus two signals it
lacks: the servers' kernels and their GPUs' utilisation from the node agents. Two loops
run side by side: one polls every agent every ``gpu_poll_interval`` seconds into a
:class:`~jupyterhub_gpu.core.culling.tracker.GpuTracker` per GPU; the other, every ``interval``
seconds, judges each ready server with :func:`~jupyterhub_gpu.core.culling.idleness.judge`
and stops the idle ones through the hub API.

Kernels are read only for servers every other signal already calls idle: reading a
server through the proxy counts as activity in the proxy's books, which the hub then
copies into ``last_activity``. A server whose spawner state has ``server_url`` is read
directly, bypassing the proxy. A server is read with its own API token from its spawner
state, never with the culler's (:mod:`~jupyterhub_gpu.core.culling.access`); one without is not
read, and kept. Each agent is sent its own node's token, derived from the site secret
(:mod:`~jupyterhub_gpu.core.tokens`), and its answer is read by the agents' one parser
(:mod:`~jupyterhub_gpu.wire.agent`). What a server says about itself is its user's
claim: ``max_age`` (on by default) bounds it. Nothing here raises out of a loop: the hub
API down means "try again next interval", an agent down means its GPUs have no fresh
readings, so their servers are kept.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import ssl
from collections.abc import Mapping
from dataclasses import fields, replace
from datetime import datetime, timezone
from typing import Any

import httpx
from traitlets import (
    Bool,
    Callable,
    Dict,
    Enum,
    Float,
    Instance,
    Int,
    Unicode,
    Union,
    default,
    validate,
)

from jupyterhub_gpu.core.attribution.labels import Share, ShareLabelError
from jupyterhub_gpu.core.attribution.memory import (
    ACTIONS,
    MemoryPolicy,
    MemoryState,
)
from jupyterhub_gpu.core.culling.access import server_access
from jupyterhub_gpu.core.culling.idleness import (
    Deadline,
    Decision,
    GpuSummary,
    Policy,
    ServerObservation,
    Signal,
    earliest_cull,
    judge,
    resolve_policy,
    validate_overrides,
)
from jupyterhub_gpu.core.culling.tracker import GpuTracker
from jupyterhub_gpu.core.culling.warning import (
    POSTPONED_KEY,
    CullWarning,
    shortened,
    warn_step,
    with_postponement,
)
from jupyterhub_gpu.core.times import parse_time
from jupyterhub_gpu.core.tokens import node_token, site_secret_from
from jupyterhub_gpu.edges.files import (
    save_cull_warnings,
    save_deadlines,
    save_share_notices,
)
from jupyterhub_gpu.errors import ConfigError, ProbeError
from jupyterhub_gpu.services.base import HubService
from jupyterhub_gpu.services.culler import state as culler_state
from jupyterhub_gpu.services.culler.client import (
    HubAPI,
    describe_failure,
    read_agent,
    read_kernels,
)
from jupyterhub_gpu.services.culler.mail import WarningMail
from jupyterhub_gpu.services.culler.reclaim import SuspendOrStop
from jupyterhub_gpu.services.culler.shares import (
    SEPARATOR,
    ShareWatch,
    gpu_of_key,
    share_of_state,
)
from jupyterhub_gpu.wire.cull_notes import CullNote
from jupyterhub_gpu.wire.share_notices import ShareNotice

_D = Policy()
NO_TOKEN = "kernels not read: no server_token in its spawner state"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class GPUIdleCuller(HubService, WarningMail, SuspendOrStop):
    """Stop idle single-user servers, reading the hub, the kernels and the GPUs (and mail
    their users the warnings before, where the site turns it on: :mod:`.mail`); suspend
    them instead where the site turns that on (:mod:`.reclaim`)."""

    name = "jupyterhub-gpu-culler"
    description = "GPU-aware idle culler for jupyterhub-gpu (a hub-managed service)."

    proxy_url = Unicode(
        "http://127.0.0.1:8000",
        help="""Where single-user servers are reached when their spawner state has no
        ``server_url``: the proxy's address (a server's ``url`` path is appended).""",
    ).tag(config=True)
    timeout = Float(
        _D.timeout, help="Idle timeout (s) of CPU-only servers; 0: never by idleness."
    ).tag(config=True)
    gpu_timeout = Float(
        _D.gpu_timeout,
        help="""Idle timeout (s) of servers holding GPUs, shorter than ``timeout`` by default
        because a GPU is the scarce thing; 0: never cull them by idleness.""",
    ).tag(config=True)
    gpu_threshold = Float(
        _D.gpu_threshold,
        help="Mean GPU utilisation (%) over ``gpu_window`` at or above which a GPU is active.",
    ).tag(config=True)
    gpu_window = Float(_D.gpu_window, help="Window (s) of the utilisation mean.").tag(config=True)
    gpu_memory_change = Float(
        _D.gpu_memory_change,
        help="GPU memory use moving by this many MiB between readings counts as activity.",
    ).tag(config=True)
    gpu_pause_factor = Float(
        _D.gpu_pause_factor,
        help="""A GPU must stay idle this many times the longest pause it took between two
        active stretches (for this server) before it counts as idle; 0: off.""",
    ).tag(config=True)
    gpu_pause_cap = Float(_D.gpu_pause_cap, help="Upper bound (s) of the pause-based wait.").tag(
        config=True
    )
    gpu_loaded_idle = Float(
        _D.gpu_loaded_idle,
        help="""A GPU that still holds ``gpu_memory_change`` MiB or more but has had no
        reading at or above ``gpu_threshold`` since its server started (a model loaded,
        its first run not started) counts as idle only this long (s) after its last
        activity, if longer than the timeout; 0: off.""",
    ).tag(config=True)
    gpu_held_idle = Float(
        _D.gpu_held_idle,
        help="""A GPU with a reading at or above ``gpu_threshold`` since its server started
        that still holds ``gpu_memory_change`` MiB or more (a paused training or serving
        loop, or a forgotten kernel keeping its memory) counts as idle only this long (s)
        after its last busy reading, if longer than the timeout; 0: off.""",
    ).tag(config=True)
    max_age = Float(
        _D.max_age,
        help="""Stop any server older than this (s), busy or not; 0: off. Default: 7 days.
        What keeps a server (its kernels' and its own activity as it reports them, its hub
        activity, its GPU use) is under its user's control, so this is the one limit a
        user cannot talk her way past; lower it per group (a course: 8 h) or turn it off
        for a group that runs week-long trainings (``max_age: 0``).""",
    ).tag(config=True)
    interval = Float(120.0, help="Seconds between two culling rounds.").tag(config=True)
    gpu_poll_interval = Float(15.0, help="Seconds between two polls of the node agents.").tag(
        config=True
    )
    gpu_stale_after = Float(
        help="A GPU reading older than this (s) is missing data. Default: 3 polls, at least 60 s."
    ).tag(config=True)
    concurrency = Int(10, help="Most requests in flight at once to the hub and the servers.").tag(
        config=True
    )
    api_page_size = Int(0, help="Users per page of /users (0: the hub's default).").tag(config=True)
    request_timeout = Float(30.0, help="Timeout (s) of hub API requests.").tag(config=True)
    server_timeout = Float(10.0, help="Timeout (s) of requests to single-user servers.").tag(
        config=True
    )
    agent_timeout = Float(5.0, help="Timeout (s) of requests to node agents.").tag(config=True)
    dry_run = Bool(
        False, help="Log what would be stopped (and every keep, at INFO) and stop nothing."
    ).tag(config=True)
    group_overrides = Union(
        [Callable(), Dict()],
        default_value={},
        help="""Per-group policies, in the shape of JupyterHub's ``Spawner.group_overrides``:
        ``{"10-staff": {"groups": ["staff"], "policy_override": {"gpu_timeout": 7200}}}``;
        applied in sorted key order, later entries win. Keys of ``policy_override``:
        timeout, gpu_timeout, gpu_pause_factor, gpu_pause_cap, gpu_loaded_idle,
        gpu_held_idle, max_age. A callable gets the hub's user model and returns such a
        dict (it may be async).""",
    ).tag(config=True)
    agent_urls = Dict(
        value_trait=Unicode(),
        help="""Node agent per node name, as the spawner state's ``node`` names it:
        ``{"gpu-a": "http://10.0.0.11:9450"}``. Empty (the default): the hub's own list of
        nodes, read from ``/hub/api/gpu/agents`` at each poll (scope
        ``custom:gpu-agents:read``, which ``configure_culler`` grants), so that a node is
        named in one place. GPUs of a node without an agent are never culled.""",
    ).tag(config=True)
    agent_token = Unicode(
        help="""The node agents' site secret, the hub's ``GPUCluster.agent_token``
        (default: $JUPYTERHUB_GPU_SITE_SECRET, or the older $JUPYTERHUB_GPU_AGENT_TOKEN),
        at least 16 characters. It is never sent:
        each agent gets its own node's token, derived from it
        (:func:`~jupyterhub_gpu.core.tokens.node_token`).""",
    ).tag(config=True)
    agent_ca_cert = Unicode(
        "",
        help="""CA bundle (PEM) that ``https://`` agents' certificates must chain to: the
        site's CA, the hub's ``AgentClient.ca_cert`` (``configure_culler`` passes it).
        Empty: the system's CAs.""",
    ).tag(config=True)

    @validate("agent_ca_cert")
    def _readable_ca(self, proposal: Any) -> str:
        path = str(proposal["value"])
        if path and not os.access(path, os.R_OK):
            raise ConfigError(
                f"GPUIdleCuller.agent_ca_cert: {path} can't be read; name the site's CA "
                "(the hub's AgentClient.ca_cert), or leave it empty"
            )
        return path

    notes_file = Unicode(
        "jupyterhub-gpu-cull-notes.json",
        help="JSON file of recent cull reasons per user, read by the hub to tell users; '' = off.",
    ).tag(config=True)
    notes_keep = Int(5, help="Cull notes kept per user.").tag(config=True)
    deadlines_file = Unicode(
        "",
        help="""JSON file the culler rewrites each round: for every server it keeps, the
        earliest time it would stop it ({"alice/": {"at": ISO time, "why": "idle" or
        "max_age"}}). The hub reads it (GPUCluster.cull_deadlines_file) for the
        queue's estimates and the dashboard's "culled at the earliest". '' = off.""",
    ).tag(config=True)
    warn_before = Float(
        600.0,
        help="""Seconds before an idle cull that its user is warned on the hub's pages
        ("Your server will be stopped at 14:05 because it has been idle for 50 min", with
        "I'm still here" once per server start). An idle server is stopped only once it
        has been warned this long: the warning comes ``warn_before`` before the timeout
        ends (a timeout shorter than that: at once, and the cull waits). Written to
        ``warnings_file``, which the hub shows. Default 600 (10 minutes); 0: no warnings,
        idle servers go at their timeout. ``max_age`` culls are not warned here.""",
    ).tag(config=True)
    warnings_file = Unicode(
        "",
        help="""JSON file the culler rewrites each round with the servers it warned
        (wire/cull_warnings.py); the hub shows them to their users
        (GPUCluster.cull_warnings_file; configure_culler sets both). '' = not
        written (the warning still delays the cull, and is logged).""",
    ).tag(config=True)
    policy_file = Unicode(
        "",
        help="""JSON file the culler rewrites each round with the terms it runs with (its
        timeouts, each user's own where group overrides change them, its warning, whether
        it suspends: wire/cull_policy.py); the hub's spawn form tells each user hers
        (GPUCluster.cull_policy_file; configure_culler sets both). '' = not written.""",
    ).tag(config=True)
    share_memory_action = Enum(
        list(ACTIONS),
        default_value="warn",
        help="""What happens to a GPU share whose own processes hold more memory than its
        share (``share_memory_mib`` + ``share_memory_tolerance_mib``), as the node agent
        attributes them: ``warn`` (the default) tells its user on every hub page,
        ``stop`` also stops it once it has stayed over for ``share_memory_grace``
        seconds, ``off`` never looks. Whole-GPU servers are never judged by memory.""",
    ).tag(config=True)
    share_memory_grace = Float(
        600.0, help="Seconds a share may stay over its memory before ``stop`` stops it."
    ).tag(config=True)
    share_memory_tolerance_mib = Float(
        64.0, help="MiB a share may hold beyond its memory before it counts as over."
    ).tag(config=True)
    share_notices_file = Unicode(
        "",
        help="""JSON file the culler rewrites each round with the shares over their memory
        and what their users are told (wire/share_notices.py); the hub shows them
        (GPUCluster.share_notices_file). '' = off (the log only).""",
    ).tag(config=True)
    state_file = Unicode(
        "jupyterhub-gpu-culler-state.json",
        help="""Where GPU histories and the shares' episodes over their memory survive a
        restart of the culler (read up to 64 MiB; a bad file is one warning and a fresh
        start); '' = off.""",
    ).tag(config=True)
    http_client = Instance(
        httpx.AsyncClient, allow_none=True, help="The HTTP client (default: a new one)."
    )

    aliases = {
        "config": "GPUIdleCuller.config_file",
        "timeout": "GPUIdleCuller.timeout",
        "gpu-timeout": "GPUIdleCuller.gpu_timeout",
        "gpu-threshold": "GPUIdleCuller.gpu_threshold",
        "max-age": "GPUIdleCuller.max_age",
        "interval": "GPUIdleCuller.interval",
        "concurrency": "GPUIdleCuller.concurrency",
        "url": "GPUIdleCuller.api_url",
        "log-level": "Application.log_level",
    }
    flags = {"dry-run": ({"GPUIdleCuller": {"dry_run": True}}, "Log decisions, stop nothing.")}

    @default("agent_token")
    def _agent_token(self) -> str:
        return site_secret_from(os.environ)

    @default("gpu_stale_after")
    def _gpu_stale_after(self) -> float:
        return max(3 * self.gpu_poll_interval, 60.0)

    @validate("group_overrides")
    def _check_overrides(self, proposal: Any) -> Any:
        value = proposal["value"]
        return value if callable(value) else validate_overrides(value)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._trackers: dict[str, GpuTracker] = {}
        self._holders: dict[str, str] = {}  # GPU uuid -> "user/server@started"
        self._agent_ok: dict[str, bool] = {}
        self._hub_agents: dict[str, str] = {}  # the hub's list, when agent_urls is not set
        self._listed: dict[str, frozenset[str]] = {}  # node -> GPUs its agent's last answer listed
        self._warned: set[str] = set()
        self._deadlines: dict[str, Deadline | None] = {}  # kept holder -> earliest cull
        self._shares = ShareWatch()
        self._share_notices: dict[str, ShareNotice] = {}  # holder -> over its memory
        self._cull_warnings: dict[str, CullWarning] = {}  # "holder@started" -> warning
        self._warned_now: dict[str, CullWarning] = {}  # this round's, by holder
        self._new_warnings: dict[str, CullWarning] = {}  # issued this round: mailed once
        # "holder@started" -> why the hub did not suspend it: judged as a stop from then on
        self._suspend_refused: dict[str, str] = {}
        self._mailed: dict[str, str] = {}  # "holder@started" -> idle stretch mailed (.mail)
        self.rounds = 0  # cull rounds finished (one DEBUG line each: tests wait on it)

    # -- configuration ---------------------------------------------------------------

    def memory_policy(self) -> MemoryPolicy:
        return MemoryPolicy(
            action=self.share_memory_action,
            grace=self.share_memory_grace,
            tolerance_mib=self.share_memory_tolerance_mib,
        )

    def base_policy(self) -> Policy:
        """The policy the traits describe, before group overrides."""
        return Policy(**{f.name: float(getattr(self, f.name)) for f in fields(Policy)})

    async def policy_for(self, user: Mapping[str, Any]) -> Policy:
        overrides: Any = self.group_overrides
        if callable(overrides):
            overrides = overrides(user)
            if inspect.isawaitable(overrides):
                overrides = await overrides
            overrides = validate_overrides(overrides)
        return resolve_policy(self.base_policy(), overrides, user.get("groups") or ())

    def _client(self) -> httpx.AsyncClient:
        if self.http_client is None:
            verify = ssl.create_default_context(cafile=self.agent_ca_cert or None)
            self.http_client = httpx.AsyncClient(verify=verify)
        return self.http_client

    def _tracker(self, uuid: str) -> GpuTracker:
        if uuid not in self._trackers:
            self._trackers[uuid] = GpuTracker(
                uuid,
                threshold=self.gpu_threshold,
                window=self.gpu_window,
                memory_change=self.gpu_memory_change,
                max_gap=self.gpu_stale_after,
            )
        return self._trackers[uuid]

    # -- GPU polling -----------------------------------------------------------------

    async def poll_gpus_once(self, now: datetime | None = None) -> None:
        """Read every agent once and feed its readings to the GPUs' trackers."""
        at = now or utcnow()

        async def poll(node: str, url: str) -> None:
            try:
                answered, readings = await read_agent(
                    self._client(), url, self._agent_token_of(node), self.agent_timeout
                )
                if answered != node:  # a wrong URL: not this node's GPUs
                    raise ProbeError(f"the agent at {url} answers for node {answered!r}")
            except (httpx.HTTPError, ProbeError) as e:
                if self._agent_ok.get(node, True):
                    why = describe_failure(e, self.agent_timeout)
                    self.log.warning(
                        "Agent of %s unreachable (%s): its servers are kept", node, why
                    )
                self._agent_ok[node] = False
                self._missed(self._listed.pop(node, frozenset()))
                return
            if not self._agent_ok.get(node, True):
                self.log.info("Agent of %s answers again", node)
            self._agent_ok[node] = True
            listed = frozenset(r.uuid for r in readings)
            self._missed(self._listed.get(node, frozenset()) - listed)
            self._listed[node] = listed
            for r in readings:
                self._tracker(r.uuid).add(at, r.utilization_pct, r.memory_used_mib)
                self._shares.feed(r, at, self._tracker)

        agents = await self._read_agent_list()
        await asyncio.gather(*(poll(n, u) for n, u in sorted(agents.items())))

    def _agents(self) -> dict[str, str]:
        """The agents polled: ``agent_urls`` when set, else the hub's list as last read."""
        return dict(self.agent_urls) if self.agent_urls else self._hub_agents

    async def _read_agent_list(self) -> dict[str, str]:
        """The agents to poll now: ``agent_urls``, or the hub's nodes read again (on a
        failure, the list read last, and one warning until it works again)."""
        if self.agent_urls:
            return dict(self.agent_urls)
        try:
            loaded, agents = await self._hub().agents()
        except (httpx.HTTPError, ProbeError) as e:
            forbidden = isinstance(e, httpx.HTTPStatusError) and e.response.status_code == 403
            why = (
                "the culler's role lacks custom:gpu-agents:read (configure_culler grants it; "
                "or set GPUIdleCuller.agent_urls)"
                if forbidden
                else describe_failure(e, self.request_timeout)
            )
            self._warn_once(f"agent-list:{why}", f"Could not read the hub's agent list: {why}")
            return self._hub_agents
        self._warned = {w for w in self._warned if not w.startswith("agent-list:")}
        if loaded and agents != self._hub_agents:
            self.log.info(
                "Agents from the hub: %s",
                ", ".join(f"{n} {u}" for n, u in sorted(agents.items())) or "none",
            )
            self._hub_agents = agents
        return self._hub_agents

    def _agent_token_of(self, node: str) -> str:
        """``node``'s own agent token, derived from the site secret; without a usable
        secret, a :class:`ProbeError` and nothing is sent to the agent."""
        try:
            return node_token(self.agent_token, node)
        except ValueError as e:
            raise ProbeError(
                f"no agent token: {e}; set GPUIdleCuller.agent_token "
                "(or $JUPYTERHUB_GPU_SITE_SECRET) to the hub's site secret"
            ) from None

    def _missed(self, uuids: frozenset[str]) -> None:
        """These GPUs' readings were missed: unobserved time must not count as idle time."""
        for key, tracker in self._trackers.items():
            if gpu_of_key(key) in uuids:  # the GPU's tracker and its shares'
                tracker.interrupt()

    def _unobserved(self, state: Mapping[str, Any], uuid: str) -> bool:
        """Whether ``uuid`` has no current reading: its node's agent failed its latest poll
        or did not list it. A reading from before is not used then, however recent."""
        node = state.get("node")
        if not isinstance(node, str) or node not in self._agents():
            return False  # no agent to ask: the reading's age alone decides
        return self._agent_ok.get(node) is not True or uuid not in self._listed.get(node, ())

    # -- culling ---------------------------------------------------------------------

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning("%s", message)

    def _gpus_of(self, full: str, server: Mapping[str, Any]) -> dict[str, GpuSummary | None] | None:
        state = server.get("state")
        if not isinstance(state, Mapping) or not isinstance(state.get("gpu_uuids"), list):
            if "state" not in server:
                self._warn_once(
                    "no-state",
                    "The hub shows no spawner state: grant the culler admin:server_state, "
                    "or servers are never culled (their GPUs are unknown)",
                )
            return None
        started = parse_time(server.get("started"))
        holder = f"{full}@{server.get('started')}"
        share = self._share_of(full, state)
        gpus: dict[str, GpuSummary | None] = {}
        for uuid in map(str, state["gpu_uuids"]):
            # a share is judged by its own processes' tracker, a whole GPU by the GPU's
            key = uuid if share is None else self._shares.watch(uuid, share[1])
            tracker = self._trackers.get(key)
            if self._holders.get(key) != holder:
                # first sight of this holder: earlier readings belong to another server
                self._holders[key] = holder
                if tracker is not None and started is not None:
                    tracker.forget_before(started)
            missing = tracker is None or self._unobserved(state, uuid)
            gpus[uuid] = None if missing or tracker is None else tracker.summary()
        return gpus

    def _share_of(self, full: str, state: Mapping[str, Any]) -> tuple[Share, str] | None:
        """A share server's share and container; ``None`` for a whole GPU, and for a
        malformed share (warned once): judged by the GPU's readings, which can keep it
        longer, never cull it early."""
        try:
            return share_of_state(state)
        except ShareLabelError as e:
            self._warn_once(f"share:{full}", f"{full}: judged as a whole GPU: {e}")
            return None

    def _judge_share_memory(
        self, full: str, server: Mapping[str, Any], decision: Decision, now: datetime
    ) -> Decision:
        """Warn a share over its memory (a notice), or stop it by policy."""
        state = server.get("state")
        share = self._share_of(full, state) if isinstance(state, Mapping) else None
        if share is None or not isinstance(state, Mapping) or decision.cull:
            return decision
        holder = full if "/" in full else f"{full}/"
        uuids = [str(u) for u in state.get("gpu_uuids") or ()]
        over = self._shares.judge_server(
            holder,
            *share,
            uuids,
            now,
            self.memory_policy(),
            str(server.get("started") or ""),
        )
        if over is not None and over.state is MemoryState.STOP:
            return Decision(True, over.message, Signal.SHARE_MEMORY)
        if over is not None:
            self.log.info("Share %s over its memory: %s", full, over.message)
            self._share_notices[holder] = over.notice
        return decision

    async def _decide(
        self,
        sem: asyncio.Semaphore,
        user: Mapping[str, Any],
        full: str,
        server: Mapping[str, Any],
        now: datetime,
    ) -> Decision:
        """Judge ``full`` by idleness, then (a share) by its memory."""
        decision = await self._decide_idle(sem, user, full, server, now)
        return self._judge_share_memory(full, server, decision, now)

    async def _decide_idle(
        self,
        sem: asyncio.Semaphore,
        user: Mapping[str, Any],
        full: str,
        server: Mapping[str, Any],
        now: datetime,
    ) -> Decision:
        """Judge ``full`` (``user`` or ``user/server``), reading its kernels only if needed."""
        state = server.get("state")
        state = state if isinstance(state, Mapping) else {}
        postponed = parse_time(state.get(POSTPONED_KEY))
        obs = ServerObservation(
            name=full,
            started=parse_time(server.get("started")),
            last_activity=parse_time(server.get("last_activity")),
            gpus=self._gpus_of(full, server),
            kernels=None,
        )
        obs = with_postponement(obs, postponed)
        policy = await self.policy_for(user)
        early_policy = shortened(policy, self.warn_before) if self.warn_before > 0 else policy
        holder = full if "/" in full else f"{full}/"
        # suspending: the first idle gap of the kernels' GPU work (core/culling/idleness.py)
        cells = self.suspend_reclaims_cells and self._suspending(holder, server)
        decision = judge(obs, policy, now, suspending=cells)
        early = judge(obs, early_policy, now, suspending=cells)
        deadline = earliest_cull(obs, policy, now, suspending=cells)
        self._deadlines[holder] = deadline  # dropped if culled
        if Signal.KERNELS_MISSING in (decision.signal, early.signal):  # else all idle
            access = server_access(server, self.proxy_url)
            if access is None:  # never our own token instead: the server's user reads it
                self._warn_once(
                    "no-server-token",
                    "Servers whose spawner state has no server_token (started before the "
                    "spawner recorded it, or another spawner) are not read: kept up to max_age",
                )
                return replace(decision, reason=NO_TOKEN)
            try:
                async with sem:
                    kernels = await read_kernels(
                        self._client(), access.url, access.token, self.server_timeout
                    )
            except (httpx.HTTPError, ProbeError, ValueError) as e:
                why = describe_failure(e, self.server_timeout)
                self.log.info("Keeping %s: its kernels could not be read (%s)", full, why)
                return decision
            obs = replace(obs, kernels=kernels)
            decision = judge(obs, policy, now, suspending=cells)
            early = judge(obs, early_policy, now, suspending=cells)
            deadline = earliest_cull(obs, policy, now, suspending=cells)
            self._deadlines[holder] = deadline
        return self._with_warning(holder, server, obs, decision, early, deadline, postponed, now)

    def _with_warning(
        self,
        holder: str,
        server: Mapping[str, Any],
        obs: ServerObservation,
        decision: Decision,
        early: Decision,
        deadline: Deadline | None,
        postponed: datetime | None,
        now: datetime,
    ) -> Decision:
        """The decision once warnings are counted (core/culling/warning.py): an idle server
        is warned ``warn_before`` ahead, and stopped only once its warning's time passed."""
        key = self._key(holder, server)
        decision, warning = warn_step(
            decision,
            early,
            self._cull_warnings.get(key),
            deadline=deadline.at if deadline is not None and deadline.why == "idle" else None,
            idle_since=obs.last_activity or obs.started or now,
            now=now,
            warn_before=self.warn_before,
            postponable=postponed is None,
            suspend=self._suspending(holder, server),
        )
        if warning is None:
            self._cull_warnings.pop(key, None)
            return decision
        if key not in self._cull_warnings:
            self._new_warnings[holder] = warning
            self.log.info(
                "Warning %s: stopped at %s at the earliest if it stays idle",
                holder.rstrip("/"),
                warning.at.isoformat(timespec="seconds"),
            )
        self._cull_warnings[key] = warning
        self._warned_now[holder] = warning
        return decision

    async def _handle(
        self,
        sem: asyncio.Semaphore,
        user: Mapping[str, Any],
        name: str,
        server: Mapping[str, Any],
        now: datetime,
    ) -> tuple[str, Decision, CullNote | None]:
        full = f"{user['name']}/{name}" if name else str(user["name"])
        if server.get("pending") or not server.get("ready"):
            return full, Decision(False, f"pending {server.get('pending')}", Signal.HUB), None
        decision = await self._decide(sem, user, full, server, now)
        if not decision.cull:
            (self.log.info if self.dry_run else self.log.debug)(
                "Keeping %s: %s", full, decision.reason
            )
            return full, decision, None
        if self.dry_run:
            self.log.info("Would cull %s (dry run): %s", full, decision.reason)
            return full, decision, None
        return await self._cull(sem, user, name, server, decision, now)

    def _hub(self) -> HubAPI:
        return HubAPI(
            self._client(),
            self.api_url,
            self.api_token,
            page_size=self.api_page_size,
            timeout=self.request_timeout,
        )

    async def cull_once(self, now: datetime | None = None) -> dict[str, Decision]:
        """One round over every ready server; returns ``{"user[/server]": decision}``.

        Never raises for an unreachable hub, server or agent: it logs and returns what it
        decided (nothing, when the hub's user list could not be read)."""
        at = now or utcnow()
        try:
            users = await self._hub().ready_users()
        except (httpx.HTTPError, ProbeError, ValueError) as e:
            why = describe_failure(e, self.request_timeout)
            self.log.warning("Hub API unavailable (%s); next try in %.0fs", why, self.interval)
            self.save_state(at)
            return {}
        sem = asyncio.Semaphore(max(self.concurrency, 1))
        self._deadlines = {}
        self._share_notices = {}
        self._warned_now = {}
        self._new_warnings = {}
        jobs = [
            self._handle(sem, user, name, server, at)
            for user in users
            for name, server in sorted((user.get("servers") or {}).items())
        ]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        decisions: dict[str, Decision] = {}
        for result in results:
            if isinstance(result, BaseException):
                self.log.error("Error judging a server: %r", result)
                continue
            full, decision, _ = result
            decisions[full] = decision
            if decision.cull:
                self._deadlines.pop(full if "/" in full else f"{full}/", None)
        self._write_deadlines()
        await culler_state.write_policy(self, users)
        self._write_warnings(decisions)
        self._end_refusals(users, decisions)
        await self.mail_round(users, decisions, self._new_warnings, at)
        self._end_share_round(decisions)
        self.save_state(at)
        self.rounds += 1
        self.log.debug("Cull round %d done: %d server(s) judged", self.rounds, len(decisions))
        return decisions

    def _end_share_round(self, decisions: Mapping[str, Decision]) -> None:
        """Drop the trackers of shares whose servers are gone; write the notices."""
        kept = [full if "/" in full else f"{full}/" for full, d in decisions.items() if not d.cull]
        current = self._shares.end_round(kept)
        for key in [k for k in self._trackers if SEPARATOR in k and k not in current]:
            del self._trackers[key]
            self._holders.pop(key, None)
        self._share_notices = {h: n for h, n in self._share_notices.items() if h in kept}
        if not self.share_notices_file or self.dry_run:
            return
        try:
            save_share_notices(self.share_notices_file, self._share_notices)
        except OSError as e:
            self.log.warning("Could not write share notices to %s: %s", self.share_notices_file, e)

    # -- files -----------------------------------------------------------------------

    def _write_deadlines(self) -> None:
        if not self.deadlines_file or self.dry_run:
            return
        try:
            save_deadlines(self.deadlines_file, self._deadlines)
        except OSError as e:
            self.log.warning("Could not write cull deadlines to %s: %s", self.deadlines_file, e)

    def _write_warnings(self, decisions: Mapping[str, Decision]) -> None:
        """Forget the warnings of servers gone (or culled); write this round's for the hub."""
        live = {full if "/" in full else f"{full}/" for full, d in decisions.items() if not d.cull}
        self._cull_warnings = {
            k: w for k, w in self._cull_warnings.items() if k.rsplit("@", 1)[0] in live
        }
        if not self.warnings_file or self.dry_run:
            return
        warned = {h: w for h, w in self._warned_now.items() if h in live}
        try:
            save_cull_warnings(self.warnings_file, warned)
        except OSError as e:
            self.log.warning("Could not write cull warnings to %s: %s", self.warnings_file, e)

    def save_state(self, now: datetime | None = None) -> None:
        """Persist GPU histories and holders so a restart keeps its patience, and the
        warnings standing so that it warns no one twice (.state)."""
        culler_state.save_state(self, now or utcnow())

    def load_state(self, now: datetime | None = None) -> None:
        """Restore :meth:`save_state`'s file (a bad one: one warning, a fresh start)."""
        culler_state.load_state(self, now or utcnow())

    # -- running ---------------------------------------------------------------------

    def check_config(self) -> None:
        """Refuse to start on a configuration that can't work; warn on one that culls nothing."""
        if not self.api_token:
            raise ConfigError(
                "no hub token: run the culler as a hub service (JUPYTERHUB_API_TOKEN)"
            )
        if self.interval <= 0 or self.gpu_poll_interval <= 0:
            raise ConfigError("interval and gpu_poll_interval must be > 0")
        self.base_policy()
        self.check_mail_config()
        if not self.agent_urls:
            self.log.info("The agents to poll are the hub's nodes (/hub/api/gpu/agents)")
        if self.dry_run:
            self.log.info("Dry run: decisions are logged, no server is stopped")

    async def run(self) -> None:
        """Both loops, until SIGINT or SIGTERM (handled even when inherited ignored); the
        GPU histories are saved on the way out."""
        self.check_config()
        self.load_state()
        await self.every_until_stopped(
            (self.gpu_poll_interval, self.poll_gpus_once), (self.interval, self.cull_once)
        )
        self.save_state()


def main(argv: list[str] | None = None) -> None:
    GPUIdleCuller.launch_instance(argv)
