"""A GPU server's part of its spawner's state: one encoder, one decoder (wire/)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.sharing import Share
from jupyterhub_gpu.wire.server_state import ServerState, decode_state, encode_state

pytestmark = pytest.mark.unit


def test_a_placed_server_round_trips() -> None:
    placed = ServerState(
        node="gpu-a",
        gpu_uuids=("GPU-1",),
        share=Share(1, 4, 6144, "mps"),
        allocation="a" * 32,
        charge_group="ml-lab",
        gpu_model="RTX 3090",
        host_port=32768,
        server_token="tok",
        ended_note="Stopped for a reservation.",
    )
    state = encode_state(placed)
    assert state["share"] == [1, 4, 6144, "mps"] and state["host_port"] == 32768
    assert decode_state(state) == placed


def test_an_unplaced_server_keeps_only_its_token_and_note() -> None:
    state = encode_state(ServerState(gpu_uuids=("GPU-1",), server_token="t", ended_note="n"))
    assert state == {"server_token": "t", "ended_note": "n"}
    assert decode_state({}) == ServerState()


@pytest.mark.parametrize("share", [[1, 4], [5, 4, 1, "mps"], [1, 4, 1, "nope"], "1/4", None])
def test_a_malformed_share_is_none_so_the_gpu_is_held_whole(share: object) -> None:
    assert decode_state({"node": "n", "gpu_uuids": ["G"], "share": share}).share is None


def test_a_culled_server_s_freed_words_and_i_m_still_here_survive_the_state() -> None:
    # the culler reads "cull_postponed_at" from the hub's spawner state (culler/app.py)
    kept = ServerState(node="gpu-a", gpu_uuids=("GPU-1",), cull_postponed_at="2026-01-02T03:04:05")
    assert encode_state(kept)["cull_postponed_at"] == "2026-01-02T03:04:05"
    assert decode_state(encode_state(kept)) == kept
    stopped = ServerState(freed="1 GPU (RTX 3090), 2 CPUs and 8 GiB of memory")
    assert encode_state(stopped) == {"freed": stopped.freed}
    assert decode_state({"freed": "x" * 1000}).freed == "x" * 200  # bounded
