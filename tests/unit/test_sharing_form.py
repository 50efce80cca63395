"""The spawn form's share and the share's environment (issue 26): a tampered form gets
one sentence; the spawner's limits come last and never from the user."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.containers import share_env, share_from_state
from jupyterhub_gpu.core.form.shares import check_share, share_choices
from jupyterhub_gpu.core.sharing import Share, parse_policy
from jupyterhub_gpu.errors import InvalidRequest

pytestmark = pytest.mark.unit

RTX3090 = "NVIDIA GeForce RTX 3090"
A100 = "NVIDIA A100-SXM4-80GB"
POLICY = parse_policy({RTX3090: {"shares": 4, "mode": "mps"}}, {})


def test_the_form_offers_a_quarter_with_its_memory() -> None:
    (choice,) = share_choices(POLICY, [(RTX3090, 24576), (A100, 81920)])
    assert choice.value == "1/4"
    assert choice.label == "a quarter of an RTX 3090: 6 GiB, for light work"


@pytest.mark.parametrize(
    ("value", "count", "model", "message"),
    [
        ("1/2", 1, RTX3090, "split into 4 shares; ask for 1 of 4 (or a whole GPU)"),
        ("4/4", 1, RTX3090, "ask for 1 of 4 (or a whole GPU)"),
        ("9/4", 1, RTX3090, "must look like '1/4'"),
        ("lots", 1, RTX3090, "must look like '1/4'"),
        (3, 1, RTX3090, "must look like '1/4'"),
        ("1/4", 1, A100, "A100-SXM4-80GB GPUs are not shared on this hub"),
        ("1/4", 2, RTX3090, "ask for 1 GPU to take a share"),
        ("1/4", 1, None, "Choose the GPU model"),
    ],
)
def test_a_tampered_share_is_refused_with_a_sentence(
    value: object, count: int, model: str | None, message: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_share(value, count, model, POLICY)
    assert message in str(caught.value)


def test_a_valid_share_and_no_share() -> None:
    assert check_share("1/4", 1, RTX3090, POLICY) == "1/4"
    assert check_share(None, 1, RTX3090, POLICY) == ""


def test_mps_env_carries_the_shares_limits() -> None:
    env = share_env(Share(1, 4, 6144, "mps"))
    assert env == {
        "JUPYTERHUB_GPU_SHARE": "1/4",
        "JUPYTERHUB_GPU_SHARE_MEMORY_MIB": "6144",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=6144M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PIPE_DIRECTORY": "/run/jupyterhub-gpu/mps",  # our daemon's (c.GPUSharing)
    }
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in share_env(Share(1, 4, 6144, "time-slicing"))


@pytest.mark.parametrize(
    ("raw", "share"),
    [
        ([1, 4, 6144, "mps"], Share(1, 4, 6144, "mps")),
        ([5, 4, 6144, "mps"], None),
        ([1, 4, 6144, "vgpu"], None),
        ([True, 4, 6144, "mps"], None),
        (None, None),
    ],
)
def test_the_state_keeps_the_share(raw: object, share: Share | None) -> None:
    assert share_from_state(raw) == share
