"""The node agent's JSON contract, shared by the agent, the hub's client and the culler.

``GET /v1/gpus`` answers::

    {"node": "gpu-b", "driver_version": "470.223.02", "cuda_driver_version": "11.4",
     "labels": {"site": "lab"}, "time": 1767225600.25,
     "gpus": [{"uuid": "GPU-...", "index": 0, "model": "NVIDIA TITAN X (Pascal)",
               "memory_mib": 12288, "memory_used_mib": 0, "utilization_pct": 0.0,
               "temperature_c": 41.0, "compute_capability": "6.1", "healthy": true,
               "process_containers": [], "topology_group": null,
               "processes": [{"pid": 4242, "container": "<64 hex>", "memory_mib": 3100,
                              "utilization_pct": 35.0}]}]}

``time`` is when the agent read its probe (Unix seconds); ``healthy`` is ``null`` when
the card can't tell; ``process_containers`` holds container ids, ``""`` for a process
outside any container. ``processes`` (newer agents; absent or ``null`` when the probe
reads no per-process data) lists each compute process: its host pid, its container id
(``""``: none), and its memory and utilisation (``null``: NVML can't tell); at most
:data:`MAX_PROCESSES` per GPU, a pid once per GPU, a container id ``""`` or 64 lowercase
hex digits. When only ``processes`` is sent, ``process_containers`` is derived from it.
Readers ignore fields they don't know (newer agents may add some)
and reject a known field with a wrong type, naming it.

An agent's answer is untrusted input (a node's root can serve anything):
:func:`parse_agent_body` reads the raw bytes strictly (UTF-8 only; no ``NaN``,
``Infinity`` or numbers that overflow; integers of at most 20 digits; bounded nesting,
strings, labels and GPU count) and raises :class:`ProbeError` naming the problem. It is
pure and CPU-bound: the hub runs it in a worker thread. Error texts never quote more than
a short excerpt of what the agent sent.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from jupyterhub_gpu.core.inventory import (
    GPU,
    GpuProcess,
    NodeInventory,
    parse_compute_capability,
    parse_version,
)
from jupyterhub_gpu.errors import ProbeError, _BadNumber

#: The live fields a declared-mode agent lets a caller set (``PUT /v1/gpus/{uuid}/state``).
LIVE_FIELDS = (
    "utilization_pct",
    "memory_used_mib",
    "temperature_c",
    "healthy",
    "process_containers",
    "processes",
)


def gpu_to_json(gpu: GPU) -> dict[str, Any]:
    major, minor = gpu.compute_capability
    return {
        "uuid": gpu.uuid,
        "index": gpu.index,
        "model": gpu.model,
        "memory_mib": gpu.memory_mib,
        "memory_used_mib": gpu.memory_used_mib,
        "utilization_pct": gpu.utilization_pct,
        "temperature_c": gpu.temperature_c,
        "compute_capability": f"{major}.{minor}",
        "healthy": gpu.healthy,
        "process_containers": list(gpu.process_containers),
        "topology_group": gpu.topology_group,
        **({} if gpu.processes is None else {"processes": processes_to_json(gpu.processes)}),
    }


def processes_to_json(processes: Iterable[GpuProcess]) -> list[dict[str, Any]]:
    return [
        {
            "pid": p.pid,
            "container": p.container,
            "memory_mib": p.memory_mib,
            "utilization_pct": p.utilization_pct,
        }
        for p in processes
    ]


def inventory_to_json(inventory: NodeInventory, taken_at: float | None = None) -> dict[str, Any]:
    """A node's inventory as the agent serves it; ``taken_at`` becomes ``time``."""
    return {
        "node": inventory.name,
        "driver_version": inventory.driver_version,
        "cuda_driver_version": inventory.cuda_driver_version,
        "labels": dict(inventory.labels),
        "time": taken_at,
        "gpus": [gpu_to_json(g) for g in inventory.gpus],
    }


#: Most GPUs one node may list (the hub's ``AgentClient.max_gpus`` default).
DEFAULT_MAX_GPUS = 256
#: Largest agent answer read, in bytes (the hub's ``AgentClient.max_body_size`` default;
#: the culler's cap): 2 MiB, ~6,000 GPUs' worth.
DEFAULT_MAX_BODY_SIZE = 2 * 1024 * 1024
MAX_TEXT = 256  # characters of any string in an answer (names, models, labels)
MAX_LABELS = 64
MAX_INT_DIGITS = 20
MAX_CONTAINERS = 1024  # containers with processes on one GPU
MAX_PROCESSES = 1024  # compute processes listed for one GPU
MAX_PID = 2**31 - 1
_CONTAINER_ID_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_MIB = 1 << 24  # 16 TiB: no GPU has more memory
MAX_ERROR_BODY = 4096  # bytes of an error answer worth reading for its ``error`` sentence


def inventory_from_json(data: Any, max_gpus: int = DEFAULT_MAX_GPUS) -> NodeInventory:
    """Validate an agent's (decoded) answer; :class:`ProbeError` names the bad field."""
    try:
        return _parse_inventory(data, max_gpus)
    except ValueError as e:
        raise ProbeError(f"invalid agent answer: {e}") from None


def parse_agent_body(
    body: bytes, max_gpus: int = DEFAULT_MAX_GPUS
) -> tuple[NodeInventory, float | None]:
    """An agent's raw ``GET /v1/gpus`` body -> (inventory, its ``time``).

    :class:`ProbeError` ("invalid agent answer: ...") for anything but a well-formed answer
    within the limits: not UTF-8, not JSON, nested too deeply, ``NaN``/``Infinity``, a
    number out of range, more than ``max_gpus`` GPUs, a field of the wrong type.
    """
    data = decode_json(body)
    return inventory_from_json(data, max_gpus), snapshot_time(data)


def decode_json(body: bytes) -> Any:
    """Strict JSON from untrusted bytes; :class:`ProbeError` says what is wrong."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"bad byte at offset {e.start}"
        raise ProbeError(f"invalid agent answer: not UTF-8 ({where})") from None
    try:
        return json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, parse_int=_short_int
        )
    except RecursionError:
        raise ProbeError("invalid agent answer: JSON nested too deeply") from None
    except _BadNumber as e:
        raise ProbeError(f"invalid agent answer: {e}") from None
    except ValueError as e:
        raise ProbeError(f"invalid agent answer: not JSON ({_excerpt(str(e))})") from None


def agent_error_text(body: bytes | None) -> str:
    """The ``error`` sentence of an agent's JSON error body, else a short printable excerpt
    (a large body is not parsed at all)."""
    raw = body or b""
    message: Any = None
    if len(raw) <= MAX_ERROR_BODY:
        try:
            data = decode_json(raw)
        except ProbeError:
            data = None
        message = data.get("error") if isinstance(data, Mapping) else None
    text = message if isinstance(message, str) and message else raw[:400].decode("utf-8", "replace")
    return _excerpt(text, 200)


def snapshot_time(data: Any) -> float | None:
    """The ``time`` of an agent's answer, or ``None`` when it has none or a bad one."""
    value = data.get("time") if isinstance(data, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def parse_live_update(body: Any) -> dict[str, Any]:
    """Validate the body of ``PUT /v1/gpus/{uuid}/state``: a JSON object with some of
    :data:`LIVE_FIELDS`. Returns the values to set; ``ValueError`` says what is wrong."""
    if not isinstance(body, Mapping) or not body:
        raise ValueError(f"the body must be a JSON object with some of {list(LIVE_FIELDS)}")
    unknown = sorted(set(body) - set(LIVE_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; settable: {list(LIVE_FIELDS)}")
    parsers = {
        "utilization_pct": lambda v, w: _number(v, w, 0.0, 100.0),
        "memory_used_mib": lambda v, w: _integer(v, w, 0),
        "temperature_c": lambda v, w: _optional(v, w, lambda x, y: _number(x, y, -273.0, 200.0)),
        "healthy": _health,
        "process_containers": _containers,
        "processes": parse_processes,
    }
    values = {key: parsers[key](value, key) for key, value in body.items()}
    if values.get("processes") is not None and "process_containers" not in values:
        values["process_containers"] = _containers_of(values["processes"])
    return values


# --- strict JSON decoding ----------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise _BadNumber(f"{name} is not a number an agent may send")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {_excerpt(text, 40)} is out of range")
    return value


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _BadNumber(f"an integer of {len(text)} digits is out of range")
    return int(text)


def _excerpt(text: str, limit: int = 60) -> str:
    """At most ``limit`` printable characters of ``text`` (safe for one log line)."""
    clean = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def _show(value: Any) -> str:
    """A short repr of a value the agent sent, for an error message."""
    if isinstance(value, list | dict):
        return f"a {type(value).__name__} of {len(value)}"
    return _excerpt(repr(value))


# --- validators: raise ValueError("<where> must ..., got ...") ---------------------------


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _field(obj: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise ValueError(f"{where}.{key} is missing")
    return obj[key]


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {_show(value)}")
    _text(value, where)
    return value


def _text(value: str, where: str) -> None:
    if len(value) > MAX_TEXT:
        raise ValueError(f"{where} must be at most {MAX_TEXT} characters, got {len(value)}")
    if not value.isprintable():
        raise ValueError(f"{where} must be printable text, got {_show(value)}")


def _integer(value: Any, where: str, minimum: int, maximum: int = 2**53) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where} must be an integer >= {minimum}, got {_show(value)}")
    if value > maximum:
        raise ValueError(f"{where} must be at most {maximum}, got {_show(value)}")
    return value


def _number(value: Any, where: str, low: float, high: float) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{where} must be a number from {low:g} to {high:g}, got {_show(value)}")
    return float(value)


def _optional(value: Any, where: str, parse: Any) -> Any:
    return None if value is None else parse(value, where)


def _version(value: Any, where: str) -> str:
    text = _string(value, where)
    try:
        parse_version(text)
    except ValueError:
        raise ValueError(
            f"{where} must be a dotted version such as '550.54.15', got {text!r}"
        ) from None
    return text


def _health(value: Any, where: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{where} must be true, false or null, got {_show(value)}")
    return value


def _containers(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise ValueError(f"{where} must be a list of container ids (strings), got {_show(value)}")
    if len(value) > MAX_CONTAINERS:
        raise ValueError(f"{where} lists {len(value)} containers, more than {MAX_CONTAINERS}")
    if any(len(c) > 128 for c in value):
        raise ValueError(f"{where}: a container id is at most 128 characters")
    if not all(c.isprintable() for c in value):
        raise ValueError(f"{where}: a container id must be printable text")
    return tuple(sorted(set(value)))


def _parse_gpu(raw: Any, where: str) -> GPU:
    obj = _object(raw, where)
    try:
        cc = parse_compute_capability(_string(_field(obj, "compute_capability", where), where))
    except ValueError as e:
        raise ValueError(f"{where}.compute_capability: {e}") from None
    group = obj.get("topology_group")
    processes = parse_processes(obj.get("processes"), f"{where}.processes")
    if "process_containers" in obj or processes is None:
        containers = _containers(obj.get("process_containers", []), f"{where}.process_containers")
    else:
        containers = _containers_of(processes)
    return GPU(
        uuid=_string(_field(obj, "uuid", where), f"{where}.uuid"),
        index=_integer(_field(obj, "index", where), f"{where}.index", 0, 65535),
        model=_string(_field(obj, "model", where), f"{where}.model"),
        memory_mib=_integer(_field(obj, "memory_mib", where), f"{where}.memory_mib", 1, MAX_MIB),
        compute_capability=cc,
        utilization_pct=_number(
            obj.get("utilization_pct", 0.0), f"{where}.utilization_pct", 0, 100
        ),
        memory_used_mib=_integer(
            obj.get("memory_used_mib", 0), f"{where}.memory_used_mib", 0, MAX_MIB
        ),
        temperature_c=_optional(
            obj.get("temperature_c"),
            f"{where}.temperature_c",
            lambda v, w: _number(v, w, -273.0, 200.0),
        ),
        healthy=_health(obj.get("healthy"), f"{where}.healthy"),
        process_containers=containers,
        topology_group=_optional(group, f"{where}.topology_group", _string),
        processes=processes,
    )


def _containers_of(processes: Iterable[GpuProcess]) -> tuple[str, ...]:
    return tuple(sorted({p.container for p in processes}))


def parse_processes(value: Any, where: str) -> tuple[GpuProcess, ...] | None:
    """A GPU's ``processes`` list (``None`` when absent or ``null``); ``ValueError`` names
    the bad entry. The one reader of this shape: the agent's answer, its state updates
    and the declared inventory file all use it."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list of processes, got {_show(value)}")
    if len(value) > MAX_PROCESSES:
        raise ValueError(f"{where} lists {len(value)} processes, more than {MAX_PROCESSES}")
    procs = tuple(_parse_process(p, f"{where}[{i}]") for i, p in enumerate(value))
    pids = [p.pid for p in procs]
    if len(set(pids)) != len(pids):
        repeated = sorted(v for v, n in Counter(pids).items() if n > 1)
        raise ValueError(
            f"{where}: a pid is listed once per GPU; repeated: {_excerpt(str(repeated))}"
        )
    return procs


def _parse_process(raw: Any, where: str) -> GpuProcess:
    obj = _object(raw, where)
    container = obj.get("container", "")
    if not isinstance(container, str) or not (container == "" or _CONTAINER_ID_RE.match(container)):
        raise ValueError(
            f"{where}.container must be a Docker container id (64 lowercase hex digits) or "
            f"'' for a process in no container, got {_show(container)}"
        )
    memory = obj.get("memory_mib")
    util = obj.get("utilization_pct")
    return GpuProcess(
        pid=_integer(_field(obj, "pid", where), f"{where}.pid", 1, MAX_PID),
        container=container,
        memory_mib=None if memory is None else _integer(memory, f"{where}.memory_mib", 0, MAX_MIB),
        utilization_pct=None if util is None else _number(util, f"{where}.utilization_pct", 0, 100),
    )


def _labels(value: Any) -> dict[str, str]:
    labels = _object(value or {}, "labels")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError("labels must map strings to strings")
    if len(labels) > MAX_LABELS:
        raise ValueError(f"labels: at most {MAX_LABELS} labels, got {len(labels)}")
    for key, text in labels.items():
        _text(key, "labels (a key)")
        _text(text, f"labels[{_excerpt(key, 40)!r}]")
    return dict(labels)


def _parse_inventory(data: Any, max_gpus: int) -> NodeInventory:
    obj = _object(data, "the answer")
    node = _string(_field(obj, "node", "answer"), "node")
    cuda = obj.get("cuda_driver_version")
    labels = _labels(obj.get("labels"))
    gpus_raw = _field(obj, "gpus", "answer")
    if not isinstance(gpus_raw, list):
        raise ValueError(f"gpus must be a list, got {type(gpus_raw).__name__}")
    if len(gpus_raw) > max_gpus:
        raise ValueError(f"gpus lists {len(gpus_raw)} GPUs, more than the {max_gpus} allowed")
    gpus = tuple(_parse_gpu(g, f"gpus[{i}]") for i, g in enumerate(gpus_raw))
    for attr in ("uuid", "index"):
        values = [getattr(g, attr) for g in gpus]
        if len(set(values)) != len(values):
            repeated = sorted(str(v) for v, n in Counter(values).items() if n > 1)
            raise ValueError(
                f"GPU {attr} values must be unique on a node; repeated: {_excerpt(str(repeated))}"
            )
    return NodeInventory(
        name=node,
        driver_version=_version(_field(obj, "driver_version", "answer"), "driver_version"),
        cuda_driver_version=_optional(cuda, "cuda_driver_version", _version),
        gpus=gpus,
        labels=labels,
    )
