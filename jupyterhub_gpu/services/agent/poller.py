"""The agent's cache: the probe is read on an interval in one worker thread, and every
request is answered from the last snapshot, so a slow or hung probe never blocks the loop.

In declared mode, live values set at run time (``PUT /v1/gpus/{uuid}/state``) are kept
as overrides and applied to every reading, including the cached one at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.core.inventory import GPU, NodeInventory
from jupyterhub_gpu.edges.probe import DeclaredProbe, Probe
from jupyterhub_gpu.errors import UnknownGPU

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """One reading of the node: what the probe said (plus overrides) and when (Unix s)."""

    inventory: NodeInventory
    time: float


class SnapshotPoller:
    """Reads ``probe`` every ``interval`` seconds; :attr:`snapshot` is the latest good one."""

    def __init__(self, probe: Probe, interval: float) -> None:
        self.probe = probe
        self.interval = interval
        # one thread: probe reads never overlap, and NVML calls stay on one thread
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="gpu-probe")
        self.snapshot: Snapshot | None = None
        self.last_error: str | None = None
        self.read_errors = 0
        self._raw: Snapshot | None = None
        self._overrides: dict[str, dict[str, Any]] = {}

    @property
    def settable(self) -> bool:
        """Whether live values may be set (declared inventories only, never NVML)."""
        return isinstance(self.probe, DeclaredProbe)

    def read_now(self) -> Snapshot:
        """Read the probe on this thread (start-up, before the loop serves); errors raise."""
        self._store(self.probe.read())
        assert self.snapshot is not None
        return self.snapshot

    async def poll_once(self) -> None:
        """One reading in the worker thread; a failure keeps the previous snapshot."""
        loop = asyncio.get_running_loop()
        try:
            inventory = await loop.run_in_executor(self.executor, self.probe.read)
        except Exception as e:
            self.read_errors += 1
            message = f"{type(e).__name__}: {e}"
            if message != self.last_error:
                log.warning("reading the GPUs failed (serving the last snapshot): %s", message)
            self.last_error = message
            return
        if self.last_error is not None:
            log.info("reading the GPUs works again")
            self.last_error = None
        self._store(inventory)

    async def run(self) -> None:
        """Poll forever (cancel the task to stop)."""
        while True:
            await asyncio.sleep(self.interval)
            await self.poll_once()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        close = getattr(self.probe, "close", None)
        if callable(close):
            close()

    def set_live(self, uuid: str, values: Mapping[str, Any]) -> GPU:
        """Set live values of one GPU (already validated by ``parse_live_update``).

        Raises :class:`UnknownGPU` for a uuid the node lacks and ``ValueError`` when the
        values don't fit the GPU (more memory used than it has).
        """
        if self._raw is None or self._raw.inventory.gpu(uuid) is None:
            raise UnknownGPU(f"this node has no GPU {uuid}")
        gpu = self._raw.inventory.gpu(uuid)
        assert gpu is not None
        merged = {**self._overrides.get(uuid, {}), **values}
        used = merged.get("memory_used_mib", gpu.memory_used_mib)
        if used > gpu.memory_mib:
            raise ValueError(f"memory_used_mib {used} is more than the GPU's {gpu.memory_mib} MiB")
        self._overrides[uuid] = merged
        self._publish()
        assert self.snapshot is not None
        updated = self.snapshot.inventory.gpu(uuid)
        assert updated is not None
        return updated

    def _store(self, inventory: NodeInventory) -> None:
        self._raw = Snapshot(inventory, time.time())
        self._publish()

    def _publish(self) -> None:
        assert self._raw is not None
        inventory = self._raw.inventory
        if self._overrides:
            gpus = tuple(
                dataclasses.replace(g, **self._overrides[g.uuid])
                if g.uuid in self._overrides
                else g
                for g in inventory.gpus
            )
            inventory = dataclasses.replace(inventory, gpus=gpus)
        self.snapshot = Snapshot(inventory, self._raw.time)
