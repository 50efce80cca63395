"""The hub's node checks: engine, user network and firewall of every node it sees, in the
background, each on a thread of its own with a Docker client of its own (never a
spawn's); a node that fails takes no new servers until a check passes (decided by
:func:`jupyterhub_gpu.core.nodecheck.hub_verdict`; the checks themselves are
``edges/nodecheck.py``'s, the same as ``jupyterhub-gpu check-node``'s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import urlsplit

from jupyterhub_gpu.core import nodecheck as rules
from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.edges.nodecheck import CheckSettings, check_node
from jupyterhub_gpu.errors import ConfigError, NodeError
from jupyterhub_gpu.hub.cluster_settings import GPUCluster, NodeAccess
from jupyterhub_gpu.wire.nodes_file import NodeSpec


def hub_check_settings(
    site: GPUCluster,
    catalog: Callable[[], Catalog],
    *,
    api_url: str,
    proxy_api_url: str,
    image: str,
    gpu_device_driver: str,
) -> CheckSettings | None:
    """What the hub's node checks need (``GPUCluster.check_nodes``), None when they are
    off: the hub's API (``api_url``) and the proxy's API port on the hub's address, which
    no user container may reach, the catalog (the probe's image) and ``image`` besides."""
    if not site.check_nodes:
        return None
    hub_api = rules.hub_api_target(api_url) if api_url else None
    private: tuple[tuple[str, int, str], ...] = ()
    try:  # the proxy's API port, tried on the hub's address (the command does the same)
        proxy_port = urlsplit(proxy_api_url).port
    except ValueError:
        proxy_port = None
    if hub_api is not None and proxy_port:
        private = ((hub_api[0], proxy_port, "the proxy's API on the hub's machine"),)
    try:
        entries = tuple(catalog())
    except (ConfigError, OSError):
        entries = ()  # the spawns will say what is wrong with it
    return CheckSettings(
        user_network=site.user_network,
        user_bridge=site.user_bridge,
        gpu_device_driver=gpu_device_driver,
        catalog=entries,
        hub_api=hub_api,
        hub_private=private,
        images=(image,) if image else (),
        timeout=site.docker_timeout,
        only=rules.HUB_CHECKS,
        owner=site.hub_id,
    )


class NodeChecks:
    """One cluster's node checks: each node's verdict, its last check (when, of which
    entry, next in), the checks running now, and the loop that starts them."""

    def __init__(self, cluster: NodeAccess) -> None:
        self.cluster = cluster
        self.verdicts: dict[str, rules.NodeVerdict] = {}
        self.checked: dict[str, tuple[float, NodeSpec, float]] = {}
        self.checking: dict[str, asyncio.Future[None]] = {}
        self.task: asyncio.Task[None] | None = None
        self.changes = 0  # verdicts that changed whether a node takes servers
        self._pool: ThreadPoolExecutor | None = None

    def failures(self) -> dict[str, str]:
        """The nodes whose checks keep servers off them: node -> why and what to do."""
        return {n: v.note for n, v in self.verdicts.items() if not v.schedulable}

    def schedulable(self, node: str) -> bool:
        """Whether the checks let servers go to ``node`` (yes until it was checked)."""
        verdict = self.verdicts.get(node)
        return verdict is None or verdict.schedulable

    def again_when_up(self, node: str) -> None:
        """``node`` stopped answering: check it again once it does (a reboot may have lost
        its firewall)."""
        self.checked.pop(node, None)

    def start(self) -> None:
        """Start the checks' loop if they are on and it isn't running (needs the event
        loop; the cluster's first snapshot and the spawners' polls call it)."""
        if self.cluster.settings.node_checks is not None and self.task is None:
            self.task = asyncio.ensure_future(self._forever())

    async def _forever(self) -> None:
        """Start each node's check when it is due: a node not checked yet (a new one in the
        nodes file included), one whose entry changed, one whose engine answers again
        after it did not, and every ``node_check_interval`` s (sooner after a check that
        could not judge). The nodes file is looked at every few seconds."""
        pause = max(0.5, min(5.0, self.cluster.settings.node_check_interval, rules.RETRY_S))
        while True:
            try:
                self.start_due()
            except Exception:
                self.cluster.log.exception("Node checks: could not start them; will retry")
            await asyncio.sleep(pause)

    def start_due(self) -> None:
        now = time.monotonic()
        for spec in self.cluster.specs():
            name = spec.name
            if name in self.checking or self.cluster.known_down(name):
                continue  # a node that does not answer is checked once it does
            last = self.checked.get(name)
            if last is None or last[1] != spec or now >= last[0] + last[2]:
                self.checking[name] = asyncio.ensure_future(self._check(spec))

    async def _check(self, spec: NodeSpec) -> None:
        """One node's checks, on the checks' own threads; its verdict decides whether
        servers go there, and a change is logged."""
        cluster = self.cluster
        settings = cluster.settings.node_checks
        assert settings is not None
        name = spec.name
        try:
            # the hub's user network exists before its firewall is probed from it (as the
            # first server placed there would make it); an unfit one is the check's to say
            with contextlib.suppress(ConfigError, NodeError):
                await cluster.ensure_user_network(name, settings.user_network, settings.user_bridge)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(2, thread_name_prefix="node-check")
            run = f"hub-{secrets.token_hex(4)}"
            hub_settings = replace(settings, only=rules.HUB_CHECKS)
            try:
                report = await asyncio.get_running_loop().run_in_executor(
                    self._pool, check_node, spec, hub_settings, run
                )
                checks = report.checks
            except Exception as e:  # whatever it was, it judged nothing
                checks = [rules.not_run(name, "firewall", f"the check raised {e!r}")]
            self.judge(spec, checks)
        except Exception:
            cluster.log.exception("Node %s: its checks failed; will retry", name)
        finally:
            self.checking.pop(name, None)

    def judge(self, spec: NodeSpec, checks: list[rules.Check]) -> None:
        name, log = spec.name, self.cluster.log
        previous = self.verdicts.get(name)
        verdict = rules.hub_verdict(name, checks, previous)
        next_in = rules.next_check_in(verdict, self.cluster.settings.node_check_interval)
        self.verdicts[name] = verdict
        self.checked[name] = (time.monotonic(), spec, next_in)
        if previous is None or previous.schedulable != verdict.schedulable:
            self.changes += 1  # a snapshot cached before it is out of date
        line = rules.verdict_log(previous, verdict, next_in)
        log.debug("Node %s checked: %s%s", name, verdict.state, " (kept)" * verdict.kept)
        if line is not None:
            level, message = line
            log.log(logging.WARNING if level == "warning" else logging.INFO, message)


__all__ = ["NodeChecks"]
