"""Progress messages of a spawn (pure parts)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.progress import (
    PullProgress,
    describe_gpus,
    pull_error,
    size_words,
    time_left,
)

pytestmark = pytest.mark.unit


def downloading(layer: str, current: int, total: int) -> dict:
    return {
        "id": layer,
        "status": "Downloading",
        "progressDetail": {"current": current, "total": total},
    }


def extracting(layer: str, current: int, total: int) -> dict:
    return {**downloading(layer, current, total), "status": "Extracting"}


def folded(events: list[dict]) -> PullProgress:
    progress = PullProgress()
    for event in events:
        progress.add(event)
    return progress


def pull_percent(events: list[dict]) -> int | None:
    """The percentage after folding all of ``events``."""
    return folded(events).percent


def test_pull_percent_aggregates_layers_by_bytes_downloading_then_unpacking() -> None:
    events = [
        {"status": "Pulling from library/x", "id": "1.0"},
        downloading("a", 50, 100),
        downloading("b", 0, 300),
    ]
    p = folded(events)
    assert (p.downloaded, p.unpacked, p.percent) == (12, 0, 6)  # 50 of 400 bytes, half-weight
    events += [{"id": "a", "status": "Download complete"}, downloading("b", 150, 300)]
    p = folded(events)
    assert (p.downloaded, p.unpacked, p.percent) == (62, 0, 31)  # 250 of 400
    events += [extracting("a", 100, 100), {"id": "b", "status": "Download complete"}]
    p = folded(events)
    assert (p.downloaded, p.unpacked, p.percent) == (100, 25, 62)  # 100 of 400 unpacked
    assert p.message("reg/img:1", "node-b", 60) == (
        "Pulling reg/img:1 on node node-b: 60% (downloaded 100% of 400 bytes, unpacked 25%)"
    )
    # 60% in 90 s: about 60 s left at that pace
    assert p.message("reg/img:1", "node-b", 60, elapsed=90.0) == (
        "Pulling reg/img:1 on node node-b: 60% (downloaded 100% of 400 bytes, unpacked 25%; "
        "about 60 s left)"
    )
    events += [{"id": "a", "status": "Pull complete"}, extracting("b", 150, 300)]
    assert pull_percent(events) == 81  # 250 of 400 unpacked
    events += [{"id": "b", "status": "Pull complete"}]
    assert pull_percent(events) == 100


def test_a_layer_seen_only_while_unpacking_counts_as_downloaded() -> None:
    events = [{"id": "t", "status": "Download complete"}, extracting("t", 10, 40)]
    p = folded(events)
    assert (p.downloaded, p.unpacked, p.percent) == (100, 25, 62)


def test_pull_percent_unknown_until_a_size_is_known() -> None:
    assert pull_percent([{"status": "Pulling fs layer", "id": "a"}]) is None
    assert pull_percent([]) is None
    assert pull_percent([{"id": "c", "status": "Already exists"}]) is None


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
        {"id": "a", "status": "Pull complete"},
    ]
    progress = PullProgress()
    seen = [progress.add(e) for e in events]
    assert seen == [pull_percent(events[: i + 1]) for i in range(len(events))]
    assert seen == [5, 5, 11, 11, 16, 49, 87, 100]  # a: downloaded, not yet unpacked


def test_pull_error_reads_in_band_errors() -> None:
    assert pull_error({"error": "unauthorized", "errorDetail": {"message": "unauthorized"}}) == (
        "unauthorized"
    )
    assert pull_error({"errorDetail": {"message": "blob unknown"}}) == "blob unknown"
    assert pull_error(downloading("a", 1, 2)) is None


def test_time_left_goes_by_the_pace_so_far_once_there_is_one() -> None:
    assert time_left(25, 120.0) == 360.0
    assert time_left(4, 120.0) is None  # too early to say
    assert time_left(50, 1.0) is None
    assert time_left(100, 300.0) is None  # done


@pytest.mark.parametrize(
    ("size", "words"),
    [(6_234_000_000, "6.2 GB"), (14_600_000_000, "15 GB"), (850_000_000, "850 MB"),
     (12_345, "12 kB"), (400, "400 bytes")],
)  # fmt: skip
def test_sizes_in_words(size: int, words: str) -> None:
    assert size_words(size) == words
