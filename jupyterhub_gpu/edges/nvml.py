"""The NVML probe: reads this host's GPUs through the NVIDIA driver (``nvidia-ml-py``).

NVML is initialised once per process (the first :class:`NVMLProbe` does it) and every
:meth:`NVMLProbe.read` only queries; gpustat-style re-initialisation per poll costs far more.
What never changes while the driver is loaded (uuid, index, model, total memory, compute
capability, PCI address, topology, driver versions) is read once in ``__init__``.

Health (``GPU.healthy``):

- ``False`` when any supported check fails: uncorrected volatile ECC errors, retired pages
  pending, a row-remapping failure, a critical Xid event since the agent started, or an
  NVML query on the GPU failing (e.g. "GPU is lost");
- ``True`` when at least one check is supported and none fails;
- ``None`` (unknown) when the card supports none of them.

``NOT_SUPPORTED`` (GeForce cards answer it for ECC, retired pages and remapped rows) means
"this check can't tell", never "broken". Xids 13, 31, 43, 45, 68 and 109 are faults of the
application (as the Kubernetes device plugin treats them) and are ignored; any other Xid
marks the GPU unhealthy until the agent restarts (an operator resets the GPU, then restarts
the agent).

Processes: ``nvmlDeviceGetComputeRunningProcesses`` gives host pids; ``/proc/<pid>/cgroup``
names the Docker container (``docker-<id>.scope`` with the systemd cgroup driver,
``/docker/<id>`` with cgroupfs). A process in no container, or whose cgroup can't be read,
is reported as ``""``: someone is using the GPU outside the hub. The agent therefore needs
the host's pid namespace.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from jupyterhub_gpu.core.attribution.processes import MAX_CGROUP_TEXT, container_id_from_cgroup
from jupyterhub_gpu.core.inventory import GPU, GpuProcess, NodeInventory
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.wire.agent import MAX_PROCESSES

log = logging.getLogger(__name__)

#: Xids caused by the application, not the GPU (Kubernetes device plugin's list).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

_MIB = 1024 * 1024


# --- pure helpers (unit-tested without a GPU) -------------------------------------------


def _used_bytes(proc: Any) -> int | None:
    """A process's ``usedGpuMemory`` (pynvml gives ``None`` when NVML can't tell)."""
    used = getattr(proc, "usedGpuMemory", None)
    return None if used is None else int(used)


def read_proc_cgroup(pid: int) -> str | None:
    """The text of ``/proc/<pid>/cgroup``, or ``None`` when it can't be read."""
    try:
        with open(f"/proc/{int(pid)}/cgroup", encoding="utf-8", errors="replace") as f:
            return f.read(MAX_CGROUP_TEXT)
    except OSError:
        return None


def containers_of_pids(
    pids: Iterable[int], read_cgroup: Callable[[int], str | None] = read_proc_cgroup
) -> tuple[str, ...]:
    """Distinct container ids running ``pids``, sorted; ``""`` stands for a process in no
    container or one whose owner can't be told (unreadable cgroup): treat it as foreign."""
    found: set[str] = set()
    for pid in pids:
        text = read_cgroup(pid)
        found.add("" if text is None else container_id_from_cgroup(text) or "")
    return tuple(sorted(found))


def fold_process_samples(
    samples: Iterable[tuple[int, int, int]], since_us: int
) -> tuple[dict[int, float], int]:
    """NVML's per-process utilisation samples ``(pid, timestamp us, smUtil)`` newer than
    ``since_us`` -> (each pid's mean SM utilisation, the newest timestamp seen).

    A value outside 0-100 (drivers answer garbage for exited processes) is dropped."""
    sums: dict[int, list[float]] = {}
    newest = since_us
    for pid, stamp, sm in samples:
        if stamp <= since_us or not 0 <= sm <= 100:
            continue
        newest = max(newest, stamp)
        acc = sums.setdefault(pid, [0.0, 0.0])
        acc[0] += sm
        acc[1] += 1
    return {pid: total / count for pid, (total, count) in sums.items()}, newest


def gpu_processes(
    procs: Iterable[tuple[int, int | None]],
    utilization: Mapping[int, float] | None,
    read_cgroup: Callable[[int], str | None] = read_proc_cgroup,
) -> tuple[GpuProcess, ...] | None:
    """NVML's compute processes ``(pid, used bytes or None)`` -> what the agent reports.

    ``utilization`` is :func:`fold_process_samples`'s answer (a pid without a sample did
    not run: 0 %), or ``None`` when the card can't tell (each process's is then ``None``).
    More than :data:`~jupyterhub_gpu.wire.agent.MAX_PROCESSES` processes: ``None`` (no
    per-process data; the culler then judges by the whole GPU, never by a partial list).
    """
    listed = list(itertools.islice(procs, MAX_PROCESSES + 1))
    if len(listed) > MAX_PROCESSES:
        return None
    out: dict[int, GpuProcess] = {}
    for pid, used in listed:
        text = read_cgroup(pid)
        container = "" if text is None else container_id_from_cgroup(text) or ""
        util = None if utilization is None else min(utilization.get(pid, 0.0), 100.0)
        memory = None if used is None or used < 0 else int(used) // _MIB
        out[pid] = GpuProcess(pid, container, memory, util)
    return tuple(out[pid] for pid in sorted(out))


def format_cuda_version(value: int) -> str:
    """NVML's CUDA driver version integer -> ``"major.minor"`` (``12040`` -> ``"12.4"``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1000:
        raise ValueError(f"not an NVML CUDA version number: {value!r}")
    return f"{value // 1000}.{(value % 1000) // 10}"


def is_critical_xid(xid: int) -> bool:
    """Whether an Xid event means the GPU itself is in trouble (not an application fault)."""
    return xid not in APPLICATION_XIDS


def judge_health(checks: Iterable[bool | None]) -> bool | None:
    """Combine health checks (``True`` passed, ``False`` failed, ``None`` not supported):
    ``False`` if any failed, ``True`` if one passed, ``None`` if none could tell."""
    results = list(checks)
    if any(c is False for c in results):
        return False
    if any(c is True for c in results):
        return True
    return None


def topology_groups(count: int, links: Mapping[tuple[int, int], str]) -> list[str | None]:
    """Group GPUs ``0..count-1`` joined by ``links`` (``(i, j) -> "nvlink" | "pcie"``).

    Returns one name per GPU: ``"nvlink<k>"`` for a group with an NVLink edge, else
    ``"pcie<k>"``; ``None`` for a GPU that shares nothing with another.
    """
    parent = list(range(count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in links:
        parent[root(i)] = root(j)
    members: dict[int, list[int]] = {}
    for i in range(count):
        members.setdefault(root(i), []).append(i)
    kinds: dict[int, set[str]] = {root(i): set() for i in range(count)}
    for (i, _j), kind in links.items():
        kinds[root(i)].add(kind)
    names: list[str | None] = [None] * count
    counters = {"nvlink": 0, "pcie": 0}
    for r, group in sorted(members.items(), key=lambda kv: kv[1][0]):
        if len(group) < 2:
            continue
        kind = "nvlink" if "nvlink" in kinds[r] else "pcie"
        name = f"{kind}{counters[kind]}"
        counters[kind] += 1
        for i in group:
            names[i] = name
    return names


# --- NVML access ------------------------------------------------------------------------

_init_lock = threading.Lock()
_initialised = False
_UNKNOWN_CODES = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
)


def _init_nvml() -> None:
    """``nvmlInit`` once per process; a clear :class:`ProbeError` when there is no driver."""
    global _initialised
    with _init_lock:
        if _initialised:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise ProbeError(_init_error_message(e)) from None
        _initialised = True


def _init_error_message(error: Any) -> str:
    fix = "install the NVIDIA driver, or run the agent with --probe declared --inventory FILE"
    code = getattr(error, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return f"NVML is not available: libnvidia-ml.so.1 was not found on this host; {fix}"
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return f"NVML is not available: the NVIDIA kernel driver is not loaded; {fix}"
    return f"NVML could not be initialised ({error}); {fix}"


def _query(fn: Callable[..., Any], *args: Any) -> Any:
    """Call an NVML function; ``None`` when the card or driver can't answer (NOT_SUPPORTED,
    NO_PERMISSION, FUNCTION_NOT_FOUND). Any other NVML error propagates."""
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        if getattr(e, "value", None) in _UNKNOWN_CODES:
            return None
        raise


@dataclass
class _Device:
    """What is read once about a GPU."""

    handle: Any
    uuid: str
    index: int
    model: str
    memory_mib: int
    compute_capability: tuple[int, int]
    pci: tuple[int, int, int]
    topology_group: str | None = None
    xid_events: bool = False


class NVMLProbe:
    """Reads this host's GPUs through NVML; see the module docstring for what it reports."""

    def __init__(self, node_name: str | None = None) -> None:
        _init_nvml()
        self.node_name = node_name or socket.gethostname()
        try:
            self.driver_version: str = pynvml.nvmlSystemGetDriverVersion()
            cuda = _query(pynvml.nvmlSystemGetCudaDriverVersion)
            self._devices = self._discover()
        except pynvml.NVMLError as e:
            raise ProbeError(f"NVML could not list this host's GPUs ({e})") from None
        self.cuda_driver_version = None if cuda is None else format_cuda_version(int(cuda))
        if not self._devices:
            raise ProbeError("NVML answers but found no usable GPU on this host")
        self._assign_topology()
        self._event_set = self._register_xid_events()
        self._xid_failures: dict[str, int] = {}
        self._reported: dict[str, str] = {}
        self._util_seen: dict[str, int] = {}  # uuid -> newest process sample read (us)

    def read(self) -> NodeInventory:
        self._drain_xid_events()
        return NodeInventory(
            name=self.node_name,
            driver_version=self.driver_version,
            cuda_driver_version=self.cuda_driver_version,
            gpus=tuple(self._read_gpu(d) for d in self._devices),
        )

    def close(self) -> None:
        """Free the Xid event set (NVML itself stays initialised for the process)."""
        if self._event_set is not None:
            _query(pynvml.nvmlEventSetFree, self._event_set)
            self._event_set = None

    # --- set-up (once) ------------------------------------------------------------------

    def _discover(self) -> list[_Device]:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                pci = pynvml.nvmlDeviceGetPciInfo(h)
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                devices.append(
                    _Device(
                        handle=h,
                        uuid=pynvml.nvmlDeviceGetUUID(h),
                        index=i,
                        model=pynvml.nvmlDeviceGetName(h),
                        memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total) // _MIB,
                        compute_capability=(int(major), int(minor)),
                        pci=(int(pci.domain), int(pci.bus), int(pci.device)),
                    )
                )
            except pynvml.NVMLError as e:
                log.warning("GPU %d can't be read through NVML (%s); it is left out", i, e)
        return devices

    def _assign_topology(self) -> None:
        links: dict[tuple[int, int], str] = {}
        by_pci = {d.pci: n for n, d in enumerate(self._devices)}
        on_switch: list[int] = []
        for n, d in enumerate(self._devices):
            for peer in self._nvlink_peers(d, by_pci, on_switch, n):
                links[(min(n, peer), max(n, peer))] = "nvlink"
        for a, b in itertools.pairwise(on_switch):
            links[(a, b)] = "nvlink"
        for a in range(len(self._devices)):
            for b in range(a + 1, len(self._devices)):
                level = self._common_ancestor(a, b)
                if level is not None and level <= pynvml.NVML_TOPOLOGY_MULTIPLE:
                    links.setdefault((a, b), "pcie")
        names = topology_groups(len(self._devices), links)
        for d, name in zip(self._devices, names, strict=True):
            d.topology_group = name

    def _common_ancestor(self, a: int, b: int) -> int | None:
        try:
            level = _query(
                pynvml.nvmlDeviceGetTopologyCommonAncestor,
                self._devices[a].handle,
                self._devices[b].handle,
            )
        except pynvml.NVMLError:
            return None
        return None if level is None else int(level)

    @staticmethod
    def _nvlink_peers(
        d: _Device, by_pci: Mapping[tuple[int, int, int], int], on_switch: list[int], n: int
    ) -> list[int]:
        """GPUs joined to ``d`` by an active NVLink; ``n`` joins ``on_switch`` when a link
        ends at an NVSwitch (every GPU on the switch can reach every other)."""
        peers = []
        try:
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                active = _query(pynvml.nvmlDeviceGetNvLinkState, d.handle, link)
                if active is None:
                    break
                if not active:
                    continue
                kind = _query(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, d.handle, link)
                if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    if n not in on_switch:
                        on_switch.append(n)
                    continue
                pci = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(d.handle, link)
                peer = by_pci.get((int(pci.domain), int(pci.bus), int(pci.device)))
                if peer is not None and peer != n:
                    peers.append(peer)
        except pynvml.NVMLError as e:
            log.debug("NVLink topology of %s not read: %s", d.uuid, e)
        return peers

    def _register_xid_events(self) -> Any:
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            log.warning("NVML events unavailable (%s): Xid errors won't be seen", e)
            return None
        for d in self._devices:
            try:
                supported = int(_query(pynvml.nvmlDeviceGetSupportedEventTypes, d.handle) or 0)
                if supported & pynvml.nvmlEventTypeXidCriticalError:
                    pynvml.nvmlDeviceRegisterEvents(
                        d.handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                    )
                    d.xid_events = True
            except pynvml.NVMLError as e:
                log.info("Xid events not supported on %s (%s)", d.uuid, e)
        return event_set

    # --- every read ---------------------------------------------------------------------

    def _drain_xid_events(self, limit: int = 1000) -> None:
        """Take every pending Xid event without waiting (timeout 0)."""
        if self._event_set is None:
            return
        for _ in range(limit):
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, 0)
            except pynvml.NVMLError as e:
                if getattr(e, "value", None) != pynvml.NVML_ERROR_TIMEOUT:
                    log.warning("reading NVML Xid events failed: %s", e)
                return
            if int(data.eventType) != pynvml.nvmlEventTypeXidCriticalError:
                continue
            self._record_xid(int(data.eventData), data.device)

    def _record_xid(self, xid: int, handle: Any) -> None:
        try:
            uuids = [pynvml.nvmlDeviceGetUUID(handle)]
        except pynvml.NVMLError:  # an event for no particular device concerns them all
            uuids = [d.uuid for d in self._devices]
        if not is_critical_xid(xid):
            log.info("Xid %d on %s: an application fault, GPU stays healthy", xid, uuids)
            return
        for uuid in uuids:
            if uuid not in self._xid_failures:
                log.error("Xid %d on %s: GPU marked unhealthy until restart", xid, uuid)
                self._xid_failures[uuid] = xid

    def _read_gpu(self, d: _Device) -> GPU:
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(d.handle)
            util = _query(pynvml.nvmlDeviceGetUtilizationRates, d.handle)
            temp = _query(pynvml.nvmlDeviceGetTemperature, d.handle, pynvml.NVML_TEMPERATURE_GPU)
            procs = _query(pynvml.nvmlDeviceGetComputeRunningProcesses, d.handle) or []
            checks = self._health_checks(d)
        except pynvml.NVMLError as e:
            self._report(d.uuid, f"NVML query failed ({e}): GPU marked unhealthy")
            return self._gpu(d, healthy=False)
        failed = sorted(name for name, ok in checks.items() if ok is False)
        self._report(d.uuid, f"unhealthy: {', '.join(failed)}" if failed else "")
        processes = gpu_processes(
            ((int(p.pid), _used_bytes(p)) for p in procs), self._process_utilization(d)
        )
        containers = (
            containers_of_pids(int(p.pid) for p in procs)
            if processes is None  # too many to list: each cgroup read, none kept
            else tuple(sorted({p.container for p in processes}))
        )
        return self._gpu(
            d,
            utilization_pct=float(min(max(util.gpu, 0), 100)) if util is not None else 0.0,
            memory_used_mib=int(mem.used) // _MIB,
            temperature_c=None if temp is None else float(temp),
            healthy=judge_health(checks.values()),
            process_containers=containers,
            processes=processes,
        )

    def _process_utilization(self, d: _Device) -> dict[int, float] | None:
        """Each process's mean SM utilisation since the last read; ``None`` when the card
        can't tell (NOT_SUPPORTED, e.g. MIG instances) or the query fails."""
        since = self._util_seen.get(d.uuid, 0)
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(d.handle, since)
        except pynvml.NVMLError as e:
            code = getattr(e, "value", None)
            if code in (pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_FOUND):
                return {}  # no sample since the last read: nothing ran
            log.debug("per-process utilisation of %s unavailable: %s", d.uuid, e)
            return None
        util, self._util_seen[d.uuid] = fold_process_samples(
            ((int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in samples), since
        )
        return util

    def _health_checks(self, d: _Device) -> dict[str, bool | None]:
        h = d.handle
        ecc = _query(
            pynvml.nvmlDeviceGetTotalEccErrors,
            h,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        pending = _query(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
        rows = _query(pynvml.nvmlDeviceGetRemappedRows, h)
        xid = self._xid_failures.get(d.uuid)
        xid_ok = False if xid is not None else (True if d.xid_events else None)
        return {
            "uncorrected ECC errors": None if ecc is None else int(ecc) == 0,
            "retired pages pending": None
            if pending is None
            else (int(pending) != pynvml.NVML_FEATURE_ENABLED),
            "row remapping failure": None if rows is None else int(rows[3]) == 0,
            f"Xid {xid}": xid_ok,
        }

    def _report(self, uuid: str, problem: str) -> None:
        """Log a GPU's health problem when it changes, not on every poll."""
        if self._reported.get(uuid, "") != problem:
            if problem:
                log.warning("GPU %s: %s", uuid, problem)
            else:
                log.info("GPU %s: healthy again", uuid)
            self._reported[uuid] = problem

    @staticmethod
    def _gpu(d: _Device, **live: Any) -> GPU:
        return GPU(
            uuid=d.uuid,
            index=d.index,
            model=d.model,
            memory_mib=d.memory_mib,
            compute_capability=d.compute_capability,
            topology_group=d.topology_group,
            **live,
        )
