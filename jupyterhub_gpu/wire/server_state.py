"""A GPU server's part of its spawner's state (JupyterHub keeps it in its database): one
encoder, one decoder. What a restarted hub re-adopts from (node, GPUs, share, allocation),
what the culler reads directly (``server_url``, ``server_token``: culler/access.py; when
its user pressed "I'm still here": ``cull_postponed_at``), why the hub itself ended the last
server (``ended_note``) and what a culled server gave back (``freed``), for the spawn form;
and a suspended server (``suspended``: :class:`~jupyterhub_gpu.core.suspend.SuspendedServer`)
or a resumed one's container's own allocation (``labelled_allocation``): :func:`encode_suspension`
and :func:`decode_suspension`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.core.accounting.records import AllocationRecord
from jupyterhub_gpu.core.containers import share_from_state
from jupyterhub_gpu.core.culling.warning import POSTPONED_KEY
from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.core.suspend import SuspendedServer
from jupyterhub_gpu.core.times import parse_time


@dataclass(frozen=True)
class ServerState:
    node: str = ""
    gpu_uuids: tuple[str, ...] = ()
    share: Share | None = None
    allocation: str = ""
    charge_group: str = ""
    gpu_model: str = ""
    host_port: int = 0
    server_url: str = ""  # where the culler reaches the server ("" unknown)
    server_token: str = ""  # the only token the culler may send this server
    ended_note: str = ""
    freed: str = ""  # what a culled server gave back, for the form until the next start
    cull_postponed_at: str = ""  # ISO, UTC: "I'm still here" (once per start; the culler)


def encode_state(s: ServerState) -> dict[str, Any]:
    """The keys of ``s`` that are set, as the spawner's state keeps them."""
    state: dict[str, Any] = {}
    if s.node:
        state.update(node=s.node, gpu_uuids=list(s.gpu_uuids))
        if s.share is not None:
            state["share"] = [s.share.count, s.share.of, s.share.memory_mib, s.share.mode]
        if s.allocation:
            state["allocation"] = s.allocation
            state["charge_group"], state["gpu_model"] = s.charge_group, s.gpu_model
        if s.host_port:
            state["host_port"] = s.host_port
        if s.server_url:
            state["server_url"] = s.server_url
    if s.server_token:
        state["server_token"] = s.server_token
    if s.ended_note:
        state["ended_note"] = s.ended_note
    if s.freed:
        state["freed"] = s.freed
    if s.cull_postponed_at:
        state[POSTPONED_KEY] = s.cull_postponed_at
    return state


def decode_state(state: Mapping[str, Any]) -> ServerState:
    """What a spawner's saved state says (missing keys empty; a malformed share: none, so
    its GPU is held whole)."""
    token = state.get("server_token")
    return ServerState(
        node=state.get("node", ""),
        gpu_uuids=tuple(state.get("gpu_uuids", [])),
        share=share_from_state(state.get("share")),
        allocation=str(state.get("allocation") or ""),
        charge_group=str(state.get("charge_group") or ""),
        gpu_model=str(state.get("gpu_model") or ""),
        host_port=int(state.get("host_port") or 0),
        server_token=token if isinstance(token, str) else "",
        ended_note=str(state.get("ended_note") or ""),
        freed=str(state.get("freed") or "")[:200],
        cull_postponed_at=str(state.get(POSTPONED_KEY) or ""),
    )


def rejoined_record(saved: ServerState, user: str, server: str, hub: str) -> AllocationRecord:
    """The record of the allocation a restarted hub rejoins from ``saved`` (its image and
    CUDA are the store's, not repeated here)."""
    return AllocationRecord(
        id=saved.allocation,
        user=user,
        server=server,
        group=saved.charge_group,
        node=saved.node,
        gpu_uuids=saved.gpu_uuids,
        gpu_model=saved.gpu_model,
        image="",
        cuda="",
        hub=hub,
    )


SUSPENDED_KEY = "suspended"
LABELLED_KEY = "labelled_allocation"


def encode_suspension(suspended: SuspendedServer | None, labelled: str) -> dict[str, Any]:
    """The state's keys of a suspended server, and of a resumed one whose container's
    labels carry another allocation id than its own (``labelled``, "" none)."""
    state: dict[str, Any] = {LABELLED_KEY: labelled} if labelled else {}
    if suspended is not None:
        s = suspended
        share = [s.share.count, s.share.of, s.share.memory_mib, s.share.mode] if s.share else None
        state[SUSPENDED_KEY] = {
            "node": s.node,
            "container_id": s.container_id,
            "checkpoint": s.checkpoint,
            "at": s.at.isoformat(),
            "size_bytes": s.size_bytes,
            "seconds": round(s.seconds, 3),
            "gpu_uuids": list(s.gpu_uuids),
            "share": share,
            "allocation": s.allocation,
            "options_key": s.options_key,
            "token": s.token,
        }
    return state


def _text(raw: Mapping[str, Any], key: str, limit: int = 256) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(key)
    return value


def _number(raw: Mapping[str, Any], key: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(key)
    return float(value)


def decode_suspension(state: Mapping[str, Any]) -> tuple[SuspendedServer | None, str]:
    """The suspended server a state keeps (None: none, or a malformed record, which is
    then forgotten: the next start is a fresh one) and the resumed container's allocation
    ("" none)."""
    labelled = state.get(LABELLED_KEY)
    labelled = labelled if isinstance(labelled, str) and len(labelled) <= 64 else ""
    raw = state.get(SUSPENDED_KEY)
    if not isinstance(raw, Mapping):
        return None, labelled
    try:
        at = parse_time(_text(raw, "at", 64))
        gpus = raw.get("gpu_uuids")
        if at is None or not isinstance(gpus, list) or len(gpus) > 64:
            raise ValueError("at")
        if not all(isinstance(u, str) and len(u) <= 128 for u in gpus):
            raise ValueError("gpu_uuids")
        suspended = SuspendedServer(
            node=_text(raw, "node"),
            container_id=_text(raw, "container_id", 128),
            checkpoint=_text(raw, "checkpoint", 64),
            at=at,
            size_bytes=int(_number(raw, "size_bytes")),
            seconds=_number(raw, "seconds"),
            gpu_uuids=tuple(gpus),
            share=share_from_state(raw.get("share")),
            allocation=_text(raw, "allocation", 64),
            options_key=_text(raw, "options_key", 64),
            token=_text(raw, "token", 512),
        )
    except ValueError:
        return None, labelled
    if not (suspended.node and suspended.container_id and suspended.checkpoint):
        return None, labelled
    return suspended, labelled


__all__ = [
    "LABELLED_KEY",
    "SUSPENDED_KEY",
    "ServerState",
    "decode_state",
    "decode_suspension",
    "encode_state",
    "encode_suspension",
    "rejoined_record",
]
