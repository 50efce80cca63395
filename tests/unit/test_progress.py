"""Progress messages of a spawn (pure parts)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.progress import PullProgress, describe_gpus, pull_error

pytestmark = pytest.mark.unit


def downloading(layer: str, current: int, total: int) -> dict:
    return {
        "id": layer,
        "status": "Downloading",
        "progressDetail": {"current": current, "total": total},
    }


def pull_percent(events: list[dict]) -> int | None:
    """The percentage after folding all of ``events``."""
    progress = PullProgress()
    for event in events:
        progress.add(event)
    return progress.percent


def test_pull_percent_aggregates_layers_by_bytes() -> None:
    events = [
        {"status": "Pulling from library/x", "id": "1.0"},
        downloading("a", 50, 100),
        downloading("b", 0, 300),
    ]
    assert pull_percent(events) == 12  # 50 of 400 bytes
    events += [{"id": "a", "status": "Download complete"}, downloading("b", 150, 300)]
    assert pull_percent(events) == 62  # 250 of 400
    events += [{"id": "b", "status": "Pull complete"}]
    assert pull_percent(events) == 100


def test_pull_percent_unknown_until_a_size_is_known() -> None:
    assert pull_percent([{"status": "Pulling fs layer", "id": "a"}]) is None
    assert pull_percent([]) is None


def test_describe_gpus_reads_like_the_issue_asks() -> None:
    text = describe_gpus("gpu-b", [(1, "NVIDIA GeForce RTX 3090", 24576)])
    assert text == "node gpu-b, GPU 1 (RTX 3090, 24 GiB)"
    assert describe_gpus("n", []) == "node n, no GPU (CPU only)"
    assert "GPU 0 (A100-SXM4-80GB, 80 GiB), GPU 1" in describe_gpus(
        "n", [(0, "NVIDIA A100-SXM4-80GB", 81920), (1, "NVIDIA A100-SXM4-80GB", 81920)]
    )


def test_pull_progress_one_event_at_a_time_matches_the_whole_list() -> None:
    events = [
        downloading("a", 10, 100),
        downloading("b", 30, 300),
        downloading("a", 60, 100),
        {"id": "c", "status": "Already exists"},
        {"id": "a", "status": "Download complete"},
        downloading("b", 299, 300),
        {"id": "b", "status": "Pull complete"},
    ]
    progress = PullProgress()
    seen = [progress.add(e) for e in events]
    assert seen == [pull_percent(events[: i + 1]) for i in range(len(events))]
    assert seen == [10, 10, 22, 22, 32, 99, 100]


def test_pull_error_reads_in_band_errors() -> None:
    assert pull_error({"error": "unauthorized", "errorDetail": {"message": "unauthorized"}}) == (
        "unauthorized"
    )
    assert pull_error({"errorDetail": {"message": "blob unknown"}}) == "blob unknown"
    assert pull_error(downloading("a", 1, 2)) is None
