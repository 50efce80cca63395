"""The pre-puller, run by the hub (docs/prepull.md): catalog images pulled ahead onto
the nodes that can run them, within a disk budget per node.

:class:`PrePuller` is the admin's policy (``c.PrePuller.*``, on with
:func:`~.extensions.configure_prepuller`); :class:`PrePullRunner` runs it. Every
``PrePuller.interval`` seconds a round reads the catalog and the nodes afresh (a new
catalog entry or a new node is served at the next round, without a restart), lists
each reachable node's images and containers, and asks the pure planner
(:func:`jupyterhub_gpu.core.prepull.plan`) what to pull and what to remove. Each node
then gets a worker of its own, one at a time per node: removals first (through the
engine, without force: it refuses, 409, when a container was created from the image
meanwhile), then one pull after the other, through the spawner's own
:func:`~.pull.pull` as a *background* pull, which never starts while a spawn pulls on
that node and stops as soon as one starts there (the rest waits for a later round). A
node whose worker is still busy is left alone by the next round.

What each node has, needs and is pulling, and its last error, are in
:meth:`PrePullRunner.state` (the dashboard's cluster payload and ``GET
/hub/api/gpu/prepull``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol

from docker.errors import APIError
from traitlets import Bool, Float, List, TraitError, Unicode, Union, validate
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.core.accounting.records import AllocationEvent, EventKind
from jupyterhub_gpu.core.catalog.entries import Catalog
from jupyterhub_gpu.core.prepull import (
    CUSTOM_LRU,
    GIB,
    HeldImage,
    NodeFacts,
    NodePlan,
    choose_entries,
    known_sizes,
    parse_selection,
    plan,
)
from jupyterhub_gpu.core.progress import DISK_FULL
from jupyterhub_gpu.core.saving.identity import NodeImage, SavedRegistry, is_saved
from jupyterhub_gpu.edges.adminfiles import load_catalog
from jupyterhub_gpu.errors import ConfigError, ImageUnavailable, NodeError, PullYielded
from jupyterhub_gpu.hub.cluster import Cluster
from jupyterhub_gpu.hub.pull import STALL_TIMEOUT, pull, pulls_on
from jupyterhub_gpu.hub.saves import MyImages


class PrePuller(LoggingConfigurable):
    """Pulling catalog images onto the nodes ahead of the spawns that need them."""

    enabled = Bool(
        False,
        config=True,
        help="""Whether the hub pre-pulls catalog images onto its nodes (configure_prepuller
        sets it). Off: nothing is pulled ahead and nothing is removed.""",
    )
    images = Union(
        [Unicode(), List(Unicode())],
        default_value="all",
        config=True,
        help="""Which catalog images to pre-pull: "all", a list of catalog slugs, or
        "most-used:N" (the N entries most spawned in the last most_used_days days, from
        the accounting database). Each goes only onto nodes whose driver and GPUs can run
        it (CPU-only images onto every node), highest priority first (catalog order, or
        most spawned first).""",
    )
    disk_budget_gib = Float(
        50.0,
        config=True,
        help="""GiB of catalog images the pre-puller keeps on a node. Over it, catalog
        images that no container uses are removed: those not chosen (images) first, then
        the least recently used; never an image a container (running or stopped) uses or
        a server is starting from, a saved image, or an image whose reference the catalog
        does not list (the io.jupyterhub-gpu.catalog-slug label alone does not make an
        image a catalog one: custom_disk_budget_gib bounds those). 0: no budget
        (everything chosen is pulled, nothing is removed).""",
    )
    custom_disk_budget_gib = Float(
        30.0,
        config=True,
        help="""GiB of custom images the pre-puller lets a node keep, apart from
        disk_budget_gib: images outside the catalog that the catalog's
        allowed_image_patterns let users spawn from, and images labelled
        io.jupyterhub-gpu.catalog-slug whose reference the catalog does not list (one
        taken out of it, or one a user labelled). Over it, those no container uses and
        no server is starting from are removed, least recently used first, at each
        round. Saved images and other images on the node are never touched. 0: no
        budget (custom images are never removed). Example: 100.""",
    )
    interval = Float(300.0, config=True, help="Seconds between two rounds of the pre-puller.")
    change_check_interval = Float(
        5.0,
        config=True,
        help="""Seconds between two looks, between rounds, at the catalog file and the
        nodes: when either changed (an image published, a node that joined or was
        undrained), a round starts at once rather than at the end of interval.""",
    )
    registry = Unicode(
        "",
        config=True,
        help="""Pre-pull only the catalog images of this registry (HOST[:PORT], as the
        catalog's references name it): the site's registry, where `jupyterhub-gpu images
        publish` puts them (the site's configuration sets it with the registry). The other
        catalog images count as not chosen (images). Empty: every catalog image.""",
    )
    pull_timeout = Float(
        3600.0, config=True, help="Seconds before a pre-puller's pull is abandoned."
    )
    pull_stall_timeout = Float(
        120.0,
        config=True,
        help="""Seconds a pre-puller's pull may go without progress (no new byte downloaded
        or unpacked) before it is abandoned, its connection to the engine closed; the image
        is tried again at a later round. As GPUCluster.pull_stall_timeout, for the
        pre-puller's own pulls.""",
    )
    most_used_days = Float(
        14.0,
        config=True,
        help='The days of spawns that "most-used:N" counts.',
    )

    @validate("images")
    def _valid_images(self, proposal: Any) -> Any:
        value = proposal["value"]
        try:
            parse_selection(value)
        except ValueError as e:
            raise TraitError(str(e)) from None
        return value

    @validate("disk_budget_gib", "custom_disk_budget_gib", "most_used_days")
    def _not_negative(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if value < 0:
            raise TraitError(
                f"PrePuller.{proposal['trait'].name} is {value}; it must be 0 or more."
            )
        return value

    @validate("registry")
    def _valid_registry(self, proposal: Any) -> str:
        import re

        value = str(proposal["value"]).strip()
        host_port = r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9a-fA-F:.]+\]:[0-9]{1,5}"
        if value and not re.fullmatch(host_port, value):
            raise TraitError(
                f"PrePuller.registry is {value!r}; write HOST[:PORT] as image references name "
                "the registry, e.g. 10.0.0.1:5443."
            )
        return value

    @validate("interval", "pull_timeout", "pull_stall_timeout", "change_check_interval")
    def _positive(self, proposal: Any) -> float:
        value = float(proposal["value"])
        if value <= 0:
            raise TraitError(
                f"PrePuller.{proposal['trait'].name} is {value}; it must be more than 0 seconds."
            )
        return value

    @property
    def budget_bytes(self) -> int:
        return int(self.disk_budget_gib * GIB)

    @property
    def custom_budget_bytes(self) -> int:
        return int(self.custom_disk_budget_gib * GIB)


class PullFunction(Protocol):
    async def __call__(
        self,
        cluster: Cluster,
        node: str,
        image: str,
        timeout: float,
        report: Callable[[int, str], None],
        log: logging.Logger,
        auth_config: Mapping[str, str] | None = None,
        *,
        background: bool = False,
        stall_timeout: float = STALL_TIMEOUT,
    ) -> None: ...


@dataclass
class NodeStatus:
    """One node as the pre-puller sees it (for the dashboard)."""

    has: tuple[str, ...] = ()  # chosen slugs the node holds
    needs: tuple[str, ...] = ()  # chosen slugs it should get (planned)
    skipped: dict[str, str] = field(default_factory=dict)  # slug -> why not there
    pulling: str = ""  # the slug being pulled now
    percent: int = 0
    last_error: str = ""
    removed: tuple[str, ...] = ()  # references removed at the last round
    used_bytes: int = 0
    budget_bytes: int = 0
    checked_at: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "has": list(self.has),
            "needs": list(self.needs),
            "skipped": dict(self.skipped),
            "pulling": self.pulling or None,
            "percent": self.percent,
            "last_error": self.last_error or None,
            "removed": list(self.removed),
            "used_gib": round(self.used_bytes / GIB, 2),
            "budget_gib": round(self.budget_bytes / GIB, 2),
            "checked_at": self.checked_at,
        }


def list_node(client: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(blocking) The node's images and its containers, running or stopped."""
    return list(client.images()), list(client.containers(all=True))


def remove_image(client: Any, image: HeldImage) -> bool:
    """(blocking) Remove ``image`` by its names (tags first, then digests), without
    force; False when the engine refuses because a container uses it (409)."""
    tags = [r for r in image.references if "@" not in r]
    names = [*tags, *(r for r in image.references if "@" in r)] or [image.id]
    for name in names:
        try:
            client.remove_image(name)
        except APIError as e:
            if e.status_code == 404:
                continue  # gone with the image's last name
            if e.status_code == 409:
                return False
            raise
    return True


class PrePullRunner:
    """The pre-puller of one hub (:func:`prepuller`)."""

    def __init__(
        self,
        cluster: Cluster,
        settings: PrePuller,
        catalog: Callable[[], Catalog],
        log: logging.Logger,
        *,
        pull_fn: PullFunction = pull,
        auth: Callable[[str], Mapping[str, str] | None] = lambda image: None,
        spawn_counts: Callable[[datetime], Awaitable[Mapping[str, int]]] | None = None,
        saved_registry: Callable[[], Awaitable[SavedRegistry | None]] | None = None,
        remove_fn: Callable[[Any, HeldImage], bool] = remove_image,
        changes: Callable[[], object] = lambda: None,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.catalog = catalog
        self.log = log
        self.pull_fn = pull_fn
        self.auth = auth
        self.spawn_counts = spawn_counts
        self.saved_registry = saved_registry
        self.remove_fn = remove_fn
        self.changes = changes  # what, once changed, starts a round early (catalog, nodes)
        self.nodes: dict[str, NodeStatus] = {}
        self.message = ""  # the last round's problem with the policy or the catalog
        self.rounds = 0
        self.workers: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._round_lock = asyncio.Lock()
        self._seen_in_use: dict[tuple[str, str], float] = {}  # (node, image ID) -> when
        self._sizes: dict[str, int] = {}  # slug -> size of a pull, once done
        # allocation -> (node, image chosen): servers placed whose container is not made
        self._starting: dict[str, tuple[str, str]] = {}
        cluster.ledger.subscribe(self._on_allocation)

    def _on_allocation(self, event: AllocationEvent) -> None:
        """Keep what servers are starting from (RESERVED until STARTED or RELEASED)."""
        if event.kind is EventKind.RESERVED and event.record is not None:
            self._starting[event.allocation] = (event.record.node, event.record.image)
        elif event.kind in (EventKind.STARTED, EventKind.RELEASED):
            self._starting.pop(event.allocation, None)

    def _pinned(self, node: str, catalog: Catalog) -> frozenset[str]:
        """The references of the images servers are starting from on ``node`` (a
        catalog slug as its entry's image, a custom image as the reference chosen)."""
        refs = set()
        for where, image in self._starting.values():
            if where == node:
                entry = catalog.get(image)
                refs.add(entry.image if entry is not None else image)
        return frozenset(refs)

    # ------------------------------------------------------------------ loop
    def start(self) -> None:
        """Start the rounds if the pre-puller is on and they aren't running (needs the loop)."""
        if self.settings.enabled and self._task is None:
            self._task = asyncio.ensure_future(self._forever())

    def stop(self) -> None:
        """Stop the rounds (the workers' pulls go on to their end: :meth:`idle`)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _forever(self) -> None:
        while True:
            seen = self._changes()
            try:
                await self.round()
            except Exception as e:  # a bad catalog edit, a database down: the next round
                self.message = f"The last round failed, it is tried again: {e}"
                self.log.exception("Pre-puller round failed; will retry")
            await self._until_next_round(seen)

    def _changes(self) -> object:
        try:
            return self.changes()
        except Exception:  # a catalog file gone for a moment: the round says why
            return None

    async def _until_next_round(self, seen: object) -> None:
        """``interval`` seconds, or less: until what :attr:`changes` watches differs from
        ``seen`` (looked at every ``change_check_interval`` seconds)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.interval
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(self.settings.change_check_interval, left))
            if self._changes() != seen:
                self.log.info("Pre-puller: the catalog or the nodes changed; a round now")
                return

    async def idle(self) -> None:
        """Until every node's worker has ended (tests, and a hub that stops)."""
        while self.workers:
            await asyncio.gather(*self.workers.values(), return_exceptions=True)

    def state(self) -> dict[str, Any]:
        return {
            "enabled": bool(self.settings.enabled),
            "images": self.settings.images,
            "budget_gib": self.settings.disk_budget_gib,
            "message": self.message or None,
            "rounds": self.rounds,
            "nodes": {name: s.as_json() for name, s in sorted(self.nodes.items())},
        }

    # ------------------------------------------------------------------ a round
    async def _chosen(self, catalog: Catalog) -> tuple[Any, ...]:
        selection = parse_selection(self.settings.images)
        counts: Mapping[str, int] = {}
        if selection.kind == "most-used":
            if self.spawn_counts is None:
                self.message = "most-used needs the accounting database; nothing is chosen."
                return ()
            since = datetime.now(timezone.utc) - timedelta(days=self.settings.most_used_days)
            counts = await self.spawn_counts(since.replace(tzinfo=None))
        chosen, missing = choose_entries(catalog, selection, counts, self.settings.registry)
        self.message = (
            f"PrePuller.images names slugs the catalog lacks: {', '.join(missing)}."
            if missing
            else ""
        )
        return chosen

    async def round(self) -> dict[str, NodePlan]:
        """One round: plan every reachable node, and start the workers of those idle."""
        async with self._round_lock:
            catalog = self.catalog()
            chosen = await self._chosen(catalog)
            registry = await self.saved_registry() if self.saved_registry else None
            snapshot = await self.cluster.snapshot()
            for gone in set(self.nodes) - {s.name for s in snapshot.nodes}:
                del self.nodes[gone]  # a node taken out of the configuration
            states = [s for s in snapshot.nodes if s.reachable]
            idle = [s for s in states if s.name not in self.workers]
            listed = await asyncio.gather(*(self._facts(s, registry, catalog) for s in idle))
            facts = [f for f in listed if f is not None]
            self._sizes.update(known_sizes(list(catalog), facts))
            plans = plan(
                facts,
                chosen,
                catalog,
                self.settings.budget_bytes,
                self._sizes,
                self.settings.custom_budget_bytes,
            )
            now = time.time()
            for name, node_plan in plans.items():
                status = self.nodes.setdefault(name, NodeStatus())
                status.has, status.skipped = node_plan.held, dict(node_plan.skipped)
                status.needs = tuple(e.slug for e in node_plan.pulls)
                status.used_bytes, status.budget_bytes = (
                    node_plan.used_bytes,
                    node_plan.budget_bytes,
                )
                status.checked_at = now
                if node_plan.pulls or node_plan.removals:
                    self.workers[name] = asyncio.ensure_future(self._work(name, node_plan))
            self.rounds += 1
            return plans

    async def _facts(
        self, state: Any, registry: SavedRegistry | None, catalog: Catalog
    ) -> NodeFacts | None:
        node = state.name
        try:
            images, containers = await self.cluster.run(
                node, lambda: list_node(self.cluster.client(node)), 30.0
            )
        except NodeError as e:
            self.nodes.setdefault(node, NodeStatus()).last_error = f"listing images failed: {e}"
            return None
        now = time.time()
        used_by: dict[str, float] = {}
        for c in containers:
            image_id = str(c.get("ImageID") or "")
            if image_id:
                used_by[image_id] = max(used_by.get(image_id, 0.0), float(c.get("Created") or 0))
                self._seen_in_use[(node, image_id)] = now
        held = []
        for info in images:
            engine = NodeImage.from_engine(info)
            saved = registry is not None and is_saved(engine, registry)
            last = max(used_by.get(engine.id, 0.0), self._seen_in_use.get((node, engine.id), 0.0))
            held.append(
                HeldImage(
                    id=engine.id,
                    references=engine.references,
                    size=int(info.get("Size") or 0),
                    in_use=engine.id in used_by,
                    saved=saved,
                    labels=engine.labels,
                    last_used=last,
                    created=engine.created,
                )
            )
        return NodeFacts(
            state.inventory,
            tuple(held),
            state.reachable,
            state.schedulable,
            self._pinned(node, catalog),  # read after the listing: a spawn placed meanwhile
        )

    # ------------------------------------------------------------------ a node's worker
    async def _work(self, node: str, node_plan: NodePlan) -> None:
        status = self.nodes[node]
        try:
            await self._remove(node, node_plan, status)
            await self._pulls(node, node_plan, status)
        except NodeError as e:
            status.last_error = f"node unreachable: {e}"
            self.log.warning("Pre-puller: node %s: %s", node, e)
        except Exception as e:  # the next round tries again
            status.last_error = str(e)
            self.log.exception("Pre-puller: node %s failed", node)
        finally:
            status.pulling, status.percent = "", 0
            self.workers.pop(node, None)

    async def _remove(self, node: str, node_plan: NodePlan, status: NodeStatus) -> None:
        removed = []
        for removal in node_plan.removals:
            image = removal.image
            name = (image.references or (image.id,))[0]
            client = self.cluster.client(node)
            gone = await self.cluster.run(
                node, functools.partial(self.remove_fn, client, image), 60.0
            )
            if gone:
                removed.append(name)
                custom = removal.why == CUSTOM_LRU
                budget = node_plan.custom_budget_bytes if custom else node_plan.budget_bytes
                self.log.info(
                    "Pre-puller removed %s (%.1f GiB, %s) from node %s to keep it within "
                    "its %.0f GiB %sbudget", name, image.size / GIB, removal.why, node,
                    budget / GIB, "custom images' " if custom else "",
                )  # fmt: skip
            else:
                self.log.info("Pre-puller kept %s on node %s: a container uses it", name, node)
        status.removed = tuple(removed)

    async def _pulls(self, node: str, node_plan: NodePlan, status: NodeStatus) -> None:
        pulls = pulls_on(self.cluster)
        for entry in node_plan.pulls:
            if pulls.spawning(node):
                self.log.info("Pre-puller: node %s is pulling for a spawn; later", node)
                return
            status.pulling, status.percent = entry.slug, 0

            def report(pct: int, _message: str) -> None:
                status.percent = pct

            started = time.monotonic()
            try:
                await self.pull_fn(
                    self.cluster,
                    node,
                    entry.image,
                    self.settings.pull_timeout,
                    report,
                    self.log,
                    self.auth(entry.image),
                    background=True,
                    stall_timeout=self.settings.pull_stall_timeout,
                )
            except PullYielded as e:
                self.log.info("Pre-pull of %s on node %s yields: %s", entry.image, node, e)
                return
            except ImageUnavailable as e:  # nothing counts as held: tried again next round
                status.last_error = str(e)
                self.log.warning("Pre-pull of %s on node %s failed: %s", entry.image, node, e)
                if e.cause == DISK_FULL:
                    return  # the node's other pulls would fill its disk too
                continue
            status.has = (*status.has, entry.slug)
            status.needs = tuple(s for s in status.needs if s != entry.slug)
            status.last_error = ""
            self.log.info(
                "Pre-pulled %s onto node %s in %.0f s",
                entry.image,
                node,
                time.monotonic() - started,
            )


def catalog_reader(path: str, log: logging.Logger) -> Callable[[], Catalog]:
    """The catalog at ``path``, re-read when the file changes (a bad edit keeps the
    previous one, as the spawner does)."""
    cached: list[tuple[float, Catalog]] = []

    def read() -> Catalog:
        mtime = Path(path).stat().st_mtime
        if cached and cached[0][0] == mtime:
            return cached[0][1]
        try:
            catalog = load_catalog(path)
        except ConfigError:
            if not cached:
                raise
            log.exception(
                "Image catalog %s is invalid; the pre-puller keeps the previous one", path
            )
            return cached[0][1]
        cached[:] = [(mtime, catalog)]
        return catalog

    return read


def prepuller(
    cluster: Cluster,
    config: Any,
    log: logging.Logger,
    catalog: Callable[[], Catalog],
    saves: MyImages,
    catalog_path: str = "",
) -> PrePullRunner:
    """A :class:`PrePullRunner` made from ``config`` (``c.PrePuller.*``), with the saved
    images' pull credentials and registry (whose images it never touches), the
    accounting database's spawn counts, and what starts a round early: the catalog file
    at ``catalog_path`` and the nodes (names, drains) changing; the hub's one is its
    runtime's (:meth:`jupyterhub_gpu.hub.runtime.HubRuntime.prepuller`)."""

    def changes() -> object:
        mtime = Path(catalog_path).stat().st_mtime if catalog_path else 0.0
        return mtime, tuple((spec.name, spec.drain) for spec in cluster.specs())

    async def registry() -> SavedRegistry | None:
        return await saves.registry() if saves.settings.enabled else None

    spawn_counts = None
    recorder = cluster.recorder
    if recorder is not None:

        async def spawn_counts(since: datetime) -> Mapping[str, int]:
            return await asyncio.wrap_future(recorder.call(lambda s: s.image_counts(since)))

    return PrePullRunner(
        cluster,
        PrePuller(config=config, log=log),
        catalog,
        log,
        auth=saves.settings.auth_config,
        spawn_counts=spawn_counts,
        saved_registry=registry,
        changes=changes,
    )


__all__ = [
    "NodeStatus",
    "PrePullRunner",
    "PrePuller",
    "catalog_reader",
    "list_node",
    "prepuller",
    "remove_image",
]
