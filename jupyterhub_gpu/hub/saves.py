"""The hub's side of saved images (an edge): saves running in the background with their
progress, the records in the accounting database, sharing and deleting.

One :class:`MyImages` per hub process (:func:`my_images`), on the spawner's
:class:`~jupyterhub_gpu.hub.cluster.Cluster`. A save runs the builder's blocking
:func:`~jupyterhub_gpu.edges.builder.save.save_environment` in a thread pool of its own
(``SavedImages.concurrent_saves``), with a Docker client of its own for the node that
runs the server (the base image is there). A user has at most one save running or
waiting, and waiting saves start in the order they were asked, whoever asked
(:class:`SaveSlots`); a slot is free again only when its build's thread has ended. Nothing
is half-saved: the builder leaves nothing on a failure, and an image pushed but not
recorded (the database refused it) is deleted from the registry again.

The conda environments a user's home offers (the "My images" page lists them) are found
off the event loop, bounded (:func:`~jupyterhub_gpu.edges.builder.home_records.list_conda_envs`),
one walk per user at a time, and kept for :data:`CONDA_LIST_SECONDS`.

Nodes keep no saved image nobody can start: the build node's copy is removed after the
push (the builder), and :meth:`MyImages.sweep` removes from every node the saved images
that no record names and no container uses, at once after a delete and every
``SavedImages.node_sweep_interval`` (for a node that was down, or a container that still
used the image then; :func:`~jupyterhub_gpu.core.saving.identity.stale_images`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jupyterhub_gpu.core.saving.data import Progress, SavedImage, SaveError
from jupyterhub_gpu.core.saving.identity import SavedRegistry, saved_registry
from jupyterhub_gpu.core.saving.limits import Limits, check_added_size, check_new_save
from jupyterhub_gpu.core.saving.stream import condense
from jupyterhub_gpu.core.saving.validate import image_name_from
from jupyterhub_gpu.edges.accounting.store import AccountingStore, AccountingUnavailable
from jupyterhub_gpu.edges.builder.home_records import LIST_SECONDS, list_conda_envs
from jupyterhub_gpu.edges.builder.node_images import sweep_node
from jupyterhub_gpu.edges.builder.registry import delete_image
from jupyterhub_gpu.edges.builder.save import SaveRequest, save_environment
from jupyterhub_gpu.errors import (
    NotFound,
    NotYourGroup,
    SaveBusy,
    SavingOff,
    StoreDown,
    UserFacingError,
)
from jupyterhub_gpu.hub.saved_images import SavedImages

if TYPE_CHECKING:
    from jupyterhub_gpu.hub.cluster import Cluster

T = TypeVar("T")
RESOLVE_TTL_S = 300.0  #: how long the registry's resolved addresses are trusted

#: how long a user's list of conda environments is reused before their home is looked
#: at again (a page that polls, or many requests, walk it once)
CONDA_LIST_SECONDS = 30.0
#: how long a request waits for that walk (it stops itself at LIST_SECONDS; a file server
#: that hangs inside one call can hold its thread longer): then it answers no environment
CONDA_LIST_WAIT = LIST_SECONDS + 2.0


@dataclass(frozen=True)
class ServerFacts:
    """What a save needs to know of the running server it saves (from its spawner)."""

    owner: str
    server: str
    node: str
    image: str  # the reference the server runs
    base_slug: str  # the catalog entry it stands on
    home: Path | None
    parent_bytes: int = 0  # a saved image's own size, when the server runs one
    conda_envs: tuple[str, ...] = ()  # the home's conda environments to save too


@dataclass
class SaveJob:
    """One save, as the user follows it (``GET /hub/api/gpu/users/{user}/save``)."""

    id: str
    owner: str
    name: str
    server: str
    node: str
    started: float
    state: str = "running"  # "running", "saved", "failed"
    message: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    image: SavedImage | None = None
    finished: float | None = None

    def add(self, progress: Progress) -> None:
        event: dict[str, Any] = {"phase": progress.phase, "message": progress.message}
        if progress.percent is not None:
            event["percent"] = progress.percent
        if self.events and self.events[-1] == event:
            return  # the engine repeats itself (a push's layers each say "100%")
        if self.events and progress.phase == "done" == self.events[-1]["phase"]:
            self.events[-1] = event  # the builder's "Saved": the hub's sentence says more
            return
        self.events.append(event)
        del self.events[:-200]  # the newest 200 lines are what a user reads

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "server": self.server,
            "node": self.node,
            "state": self.state,
            "message": self.message,
            "events": condense(self.events),
            "elapsed_s": round((self.finished or time.time()) - self.started, 1),
            "image": image_json(self.image) if self.image else None,
        }


def image_json(image: SavedImage) -> dict[str, Any]:
    return {
        "owner": image.owner,
        "name": image.name,
        "base": image.base_slug,
        "base_image": image.base_image,
        "reference": image.reference,
        "digest": image.digest,
        "packages": list(image.packages),
        "size_bytes": image.size_bytes,
        "created": image.created.isoformat(),
        "shared_with": image.shared_with,
    }


class SaveSlots:
    """The hub's save slots: at most ``size`` saves run at once, a user holds at most one
    slot or one place in the queue, and waiting saves get a slot in the order they asked
    for one, whoever asked (first come, first served across users).

    A slot is given back by :meth:`release` when its save's thread has ended, never
    before: a save the hub stops waiting for keeps its slot while its build runs on.
    Used from the event loop only."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.running: set[str] = set()
        self.waiting: dict[str, asyncio.Future[None]] = {}  # in the order asked

    def ask(self, owner: str) -> asyncio.Future[None]:
        """A slot for ``owner``: a future done now, or when the saves ahead have ended."""
        if owner in self.running or owner in self.waiting:
            raise SaveBusy("Your save is still running; wait until it ends, then save again.")
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(self.running) < self.size and not self.waiting:
            self.running.add(owner)
            ticket.set_result(None)
        else:
            self.waiting[owner] = ticket
        return ticket

    def ahead(self, owner: str) -> int:
        """How many saves run or wait before ``owner``'s (0 when it runs)."""
        if owner in self.running:
            return 0
        order = list(self.waiting)
        return len(self.running) + (order.index(owner) if owner in order else len(order))

    def leave(self, owner: str) -> None:
        """``owner`` stops waiting (out of the queue), or gives its slot back."""
        ticket = self.waiting.pop(owner, None)
        if ticket is not None:
            ticket.cancel()
        else:
            self.release(owner)

    def release(self, owner: str) -> None:
        """``owner``'s save has ended: its slot goes to the first save waiting."""
        self.running.discard(owner)
        while self.waiting and len(self.running) < self.size:
            first = next(iter(self.waiting))
            ticket = self.waiting.pop(first)
            if not ticket.done():
                self.running.add(first)
                ticket.set_result(None)


class MyImages:
    def __init__(self, cluster: Cluster, settings: SavedImages, log: logging.Logger) -> None:
        self.cluster = cluster
        self.settings = settings
        self.log = log
        # saves at once; each runs in a daemon thread, so a hub that stops does not
        # wait for a build of up to build_timeout (the save is lost, docs/my-images.md)
        self._slots = SaveSlots(settings.concurrent_saves)
        self._jobs: dict[str, SaveJob] = {}  # owner -> their latest save
        self._starting: set[str] = set()  # owners whose save is being checked
        self._tasks: set[asyncio.Task[None]] = set()
        # owner -> (when, home, environments); owner -> the walk under way
        self._envs: dict[str, tuple[float, Path, tuple[str, ...]]] = {}
        self._listing: dict[str, asyncio.Future[tuple[str, ...]]] = {}
        self._registry: tuple[float, SavedRegistry] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._sweep_lock = asyncio.Lock()
        self.sweeps = 0  # finished sweeps (each logs what it removed)

    # ------------------------------------------------------------------ records
    async def _store(self, fn: Callable[[AccountingStore], T]) -> T:
        recorder = self.cluster.recorder
        if recorder is None:
            raise SavingOff(
                "Saved images need the accounting database (GPUCluster.accounting_url); "
                "tell your admin."
            )
        try:
            return await asyncio.wrap_future(recorder.call(fn))
        except AccountingUnavailable as e:
            self.log.warning("Saved images: %s", e)
            raise StoreDown(
                "The hub's database for saved images does not answer; try again in a "
                "minute, or tell your admin."
            ) from None

    async def images(self) -> list[SavedImage]:
        """Every saved image of the hub."""
        return await self._store(lambda store: store.saved_images())

    def job(self, owner: str) -> SaveJob | None:
        return self._jobs.get(owner)

    # ------------------------------------------------------------------ conda listing
    async def conda_envs(self, owner: str, home: Path) -> tuple[str, ...]:
        """The conda environments of ``owner``'s ``home``: from a walk of the last
        :data:`CONDA_LIST_SECONDS`, else from one walk in a thread of its own (requests
        that come meanwhile wait for the same walk), waited for at most
        :data:`CONDA_LIST_WAIT`; ``()`` for a home that can't be read (or not in time)."""
        cached = self._envs.get(owner)
        if cached and cached[1] == home and time.monotonic() - cached[0] < CONDA_LIST_SECONDS:
            return cached[2]
        walk = self._listing.get(owner)
        if walk is None:
            walk = asyncio.wrap_future(daemon_thread(lambda: list_conda_envs(home), "jhgpu-conda"))
            self._listing[owner] = walk
            walk.add_done_callback(lambda done: self._listed(owner, home, done))
        try:
            return await asyncio.wait_for(asyncio.shield(walk), CONDA_LIST_WAIT)
        except Exception:  # no home yet, not in time, or a failure _listed logged
            return ()

    def _listed(self, owner: str, home: Path, walk: asyncio.Future[tuple[str, ...]]) -> None:
        if self._listing.get(owner) is walk:
            del self._listing[owner]
        if walk.cancelled():
            return
        error = walk.exception()
        if error is not None and not isinstance(error, OSError):
            self.log.error("Listing %s's conda environments failed", owner, exc_info=error)
        envs = walk.result() if error is None else ()
        self._envs[owner] = (time.monotonic(), home, envs)

    # ------------------------------------------------------------------ save
    async def start(self, server: ServerFacts, name: str) -> SaveJob:
        """Check what can be checked at once (saving on, the name, no other save of this
        user running, the limits) and start the save in the background."""
        if not self.settings.enabled:
            raise SavingOff(
                "Saving environments is not set up on this hub (SavedImages.registry); "
                "ask your admin."
            )
        name = image_name_from(name)  # "My Einops env" is saved as my-einops-env
        running = self._jobs.get(server.owner)
        if server.owner in self._starting or (running is not None and running.state == "running"):
            what = f"of {running.name!r} " if running and running.state == "running" else ""
            raise SaveBusy(
                f"Your save {what}is still running; wait until it ends, then save again."
            )
        if server.home is None:
            raise SaveError(
                "This hub has no shared home folders (GPUDockerSpawner.home_template), so "
                "it can't read what you installed; tell your admin."
            )
        self._starting.add(server.owner)  # claimed before the first await: one at a time
        try:
            existing = await self.images()
            limits = self.settings.save_settings().limits
            check_new_save(existing, server.owner, name, limits)
            check_added_size(existing, server.owner, server.parent_bytes, limits)
            ticket = self._slots.ask(server.owner)  # in the order asked, whoever asks
            job = SaveJob(
                uuid.uuid4().hex[:16], server.owner, name, server.server, server.node,
                time.time(),
            )  # fmt: skip
            which = f"your server {server.server!r}" if server.server else "your server"
            job.add(Progress("start", f"Saving {which} as {name!r}"))
            if not ticket.done():
                ahead = self._slots.ahead(server.owner)
                job.add(Progress("queue", _queue_text(ahead, self._slots.size)))
            self._jobs[server.owner] = job
        finally:
            self._starting.discard(server.owner)
        task = asyncio.ensure_future(self._run(job, server, existing, ticket))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _run(
        self,
        job: SaveJob,
        server: ServerFacts,
        existing: list[SavedImage],
        ticket: asyncio.Future[None],
    ) -> None:
        loop = asyncio.get_running_loop()
        settings = self.settings.save_settings()
        assert server.home is not None
        request = SaveRequest(
            owner=server.owner,
            name=job.name,
            base_slug=server.base_slug,
            base_image=server.image,
            home=server.home,
            conda_envs=server.conda_envs,
        )

        def report(progress: Progress) -> None:
            loop.call_soon_threadsafe(job.add, progress)

        def blocking() -> SavedImage:
            client = self.cluster.new_client(server.node, settings.build.idle_timeout_s)
            try:
                return save_environment(client, request, settings, existing, report)
            finally:
                client.close()

        try:
            image = await self._in_slot(job.owner, ticket, blocking)
            # built on a saved image: it holds that image's layers too (they stay in the
            # registry while this one uses them), so it counts them
            image = replace(image, size_bytes=image.size_bytes + server.parent_bytes)
            await self._record(image, settings.limits)
        except SaveError as e:
            self._end(job, "failed", str(e))
            self.log.info("Save %s of %s failed: %s", job.name, job.owner, e)
            return
        except Exception:
            self.log.exception("Save %s of %s failed", job.name, job.owner)
            self._end(
                job,
                "failed",
                f"The save failed on node {server.node} for a reason the hub did not expect; "
                "nothing was saved. Try again; if it fails again, tell your admin.",
            )
            return
        job.image = image
        self._end(job, "saved", f"Saved as {image.name!r}: start it under My images in the form.")
        self.log.info("%s saved %s (%s, %d bytes)", job.owner, image.name, image.reference,
                      image.size_bytes)  # fmt: skip

    async def _in_slot(
        self, owner: str, ticket: asyncio.Future[None], fn: Callable[[], SavedImage]
    ) -> SavedImage:
        """``fn()`` in a daemon thread once ``ticket`` gives ``owner`` a slot; the slot is
        given back when the thread ends (a caller that stops waiting does not free it)."""
        loop = asyncio.get_running_loop()
        try:
            await ticket
            thread = daemon_thread(fn, "jhgpu-save")
        except BaseException:  # cancelled while waiting, or no thread: nothing runs
            self._slots.leave(owner)
            raise

        def ended(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the hub stopped
                loop.call_soon_threadsafe(self._slots.release, owner)

        thread.add_done_callback(ended)
        return await asyncio.wrap_future(thread)

    async def _record(self, image: SavedImage, limits: Limits) -> None:
        """Record a pushed image, checking the name and the limits again in the same
        transaction (another hub on the database may have saved meanwhile); if the
        database refuses, take it out of the registry."""

        def add(store: AccountingStore) -> None:
            store.add_saved_image(
                image,
                uuid.uuid4().hex,
                check=lambda mine: _check_record(mine, image, limits),
            )

        try:
            await self._store(add)
        except SaveError:
            await self._delete_pushed(image)
            raise

    async def _delete_pushed(self, image: SavedImage) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._delete, image)
        except SaveError as e:
            self.log.warning("Pushed image %s not recorded and not deleted: %s",
                             image.reference, e)  # fmt: skip

    def _delete(self, image: SavedImage) -> None:
        delete_image(self.settings.registry_url, image, auth=self.settings.credentials)

    @staticmethod
    def _end(job: SaveJob, state: str, message: str) -> None:
        job.state, job.message, job.finished = state, message, time.time()
        job.add(Progress("done" if state == "saved" else "failed", message))

    # ------------------------------------------------------------------ nodes' copies
    async def registry(self) -> SavedRegistry:
        """Every spelling of the saved images' registry: as configured, and the same port
        on each address its host name resolves to (cached :data:`RESOLVE_TTL_S`)."""
        now = time.monotonic()
        if self._registry is not None and now - self._registry[0] < RESOLVE_TTL_S:
            return self._registry[1]
        host = self.settings.registry.rsplit(":", 1)[0] if self.settings.registry else ""
        addresses: list[str] = []
        if host and not host.replace(".", "").isdigit():
            try:
                infos = await asyncio.wait_for(
                    asyncio.get_running_loop().getaddrinfo(host, None), 5.0
                )
                addresses = sorted({str(info[4][0]) for info in infos})
            except (OSError, asyncio.TimeoutError) as e:
                self.log.warning("Could not resolve the saved images' registry %s: %s", host, e)
        found = saved_registry(self.settings.registry, self.settings.namespace, addresses)
        self._registry = (now, found)
        return found

    def start_sweeping(self) -> None:
        """Start the periodic sweep of the nodes if it isn't running (needs the loop)."""
        interval = self.settings.node_sweep_interval
        wanted = self.settings.enabled and interval > 0 and self.cluster.recorder is not None
        if wanted and self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_forever(interval))

    async def _sweep_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except UserFacingError as e:  # the database is down: nothing is removed
                self.log.info("Sweep of saved images skipped: %s", e)
            except Exception:
                self.log.exception("Sweep of saved images failed; will retry")

    async def sweep(self) -> dict[str, list[str]]:
        """Remove from every reachable node the saved images no record names and no
        container uses; node -> the image IDs removed. Reads every record first: a
        database that does not answer removes nothing (raises)."""
        async with self._sweep_lock:
            records = await self.images()
            registry = await self.registry()
            grace = self.settings.build_timeout + self.settings.push_timeout
            nodes = [spec.name for spec in self.cluster.specs()]
            results = await asyncio.gather(
                *(self._sweep_node(n, records, registry, grace) for n in nodes)
            )
            self.sweeps += 1
        removed = {n: r for n, r in zip(nodes, results, strict=True) if r}
        for node, ids in removed.items():
            self.log.info("Removed %d saved image(s) no record names from node %s: %s",
                          len(ids), node, ", ".join(i[7:19] for i in ids))  # fmt: skip
        return removed

    async def _sweep_node(
        self, node: str, records: list[SavedImage], registry: SavedRegistry, grace: float
    ) -> list[str]:
        if not await self.cluster.engine_ok(node):
            return []  # swept again at the next round

        def work() -> list[str]:
            client = self.cluster.client(node)
            return sweep_node(client, records, registry, time.time(), grace)

        try:
            return await self.cluster.run(node, work, 60.0)
        except Exception as e:
            self.log.warning("Sweep of saved images on node %s failed: %s", node, e)
            return []

    # ------------------------------------------------------------------ share, delete
    async def share(
        self, owner: str, name: str, group: str | None, owner_groups: Collection[str]
    ) -> SavedImage:
        if group is not None and group not in owner_groups:
            mine = ", ".join(sorted(owner_groups)) or "none"
            raise NotYourGroup(
                f"You can share an image only with one of your groups ({mine}), not {group!r}."
            )
        shared = await self._store(lambda store: store.share_saved_image(owner, name, group))
        if shared is None:
            raise NotFound(f"You have no saved image named {name!r}.")
        return shared

    async def delete(self, owner: str, name: str) -> None:
        """Delete from the registry first, then the record (a registry that fails keeps
        the record, so the user can try again)."""
        found = [i for i in await self.images() if i.owner == owner and i.name == name]
        if not found:
            raise NotFound(f"You have no saved image named {name!r}.")
        await asyncio.get_running_loop().run_in_executor(None, self._delete, found[0])
        await self._store(lambda store: store.delete_saved_image(owner, name))
        self.log.info("%s deleted saved image %s (%s)", owner, name, found[0].reference)
        self.start_sweeping()
        try:  # the nodes' copies; a node down or a container using one: the next sweep
            await self.sweep()
        except UserFacingError as e:
            self.log.info("Nodes not swept after a delete: %s", e)


def daemon_thread(fn: Callable[[], T], name: str) -> concurrent.futures.Future[T]:
    """``fn()`` started in a daemon thread of its own (an executor's threads are joined when
    the interpreter exits: a stopping hub would wait for the build). The future is marked
    running first, so it can't be cancelled: it ends when ``fn`` does."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as e:  # handed to the awaiting side
            future.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _queue_text(ahead: int, size: int) -> str:
    saves = "1 save" if ahead == 1 else f"{ahead} saves"
    return (
        f"Waiting for a save slot: {saves} ahead of yours (this hub runs {size} at once); "
        "yours starts when one ends."
    )


def _check_record(mine: list[SavedImage], image: SavedImage, limits: Limits) -> None:
    """The owner's images as the database has them now, before ``image`` is added."""
    check_new_save(mine, image.owner, image.name, limits)
    check_added_size(mine, image.owner, image.size_bytes, limits)


def my_images(cluster: Cluster, config: Any, log: logging.Logger) -> MyImages:
    """A :class:`MyImages` made from ``config`` (``c.SavedImages.*``); the hub's one is
    its runtime's (:meth:`jupyterhub_gpu.hub.runtime.HubRuntime.saved_images`)."""
    return MyImages(cluster, SavedImages(config=config, log=log), log)
