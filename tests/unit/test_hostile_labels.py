"""Issue 30, findings 1, 2 and 7 (K/N): what an image's labels say can neither stop the
hub's reconciliation nor forge a share, a seal or a probe; ``K/N`` has one strict parser.

Docker copies an image's labels into every container made from it unless the create call
sets the same key: each test below builds the container's labels the way the engine does
(``{**image_labels, **create_labels}``)."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.allocation import (
    ALLOCATION_LABEL,
    OWNED_LABELS,
    SEAL_LABEL,
    SHARE_LABEL,
    SHARE_MEMORY_LABEL,
    Allocation,
    containers_from_docker,
    interrupted,
    seal_key,
)
from jupyterhub_gpu.core.attribution.labels import parse_share as parse_share_labels
from jupyterhub_gpu.core.containers import reserved_label_refusal, server_labels
from jupyterhub_gpu.core.form.shares import check_share
from jupyterhub_gpu.core.nodecheck import PROBE_LABEL
from jupyterhub_gpu.core.sharing.policy import parse_share
from jupyterhub_gpu.errors import InvalidRequest, ShareLabelError
from tests.unit.test_allocation import Engine, engine_cluster

pytestmark = pytest.mark.unit

KEY = seal_key(b"0123456789abcdef" * 4)
HUB = "hub1"
WHOLE = Allocation(HUB, "a" * 32, "alice", "", "node-c", ("GPU-c0",))
STARTED = datetime(2026, 12, 5, tzinfo=timezone.utc)


def created(image_labels: dict[str, str], claim: Allocation = WHOLE, cid: str = "c") -> dict:
    """A running container as ``docker ps`` lists it: the image's labels under the ones
    the hub's create call set (the engine's merge)."""
    labels = {**image_labels, **server_labels(claim, "img:1", STARTED, KEY)}
    return {"Id": cid * 64, "State": "running", "Labels": labels}


# ------------------------------------------------------------------ finding 1 (HIGH)
HOSTILE = [
    {SHARE_MEMORY_LABEL: "\u00b2"},  # "²".isdigit() is True, int("²") raises
    {SHARE_LABEL: "1/\u00b2", SHARE_MEMORY_LABEL: "6144"},
    {SHARE_LABEL: "1/4", SHARE_MEMORY_LABEL: "\u00b2"},
    {SHARE_LABEL: "\uff11/\uff14", SHARE_MEMORY_LABEL: "1024"},  # fullwidth 1/4
    {SHARE_LABEL: "1/4", SHARE_MEMORY_LABEL: "9" * 5000},
]


@pytest.mark.parametrize("labels", HOSTILE)
def test_labels_that_do_not_parse_never_raise_and_hold_the_gpu_whole(
    labels: dict[str, str],
) -> None:
    """An old container (made before the hub wrote every key) or one made by hand with
    hostile share labels: read without raising, held whole, the problem said."""
    base = {
        "jupyterhub-gpu.owner": "alice",
        "jupyterhub-gpu.server": "",
        "jupyterhub-gpu.gpus": "GPU-c0",
        ALLOCATION_LABEL: WHOLE.id,
    }
    (c,) = containers_from_docker("node-c", [{"Id": "c" * 64, "State": "running",
                                              "Labels": {**base, **labels}}])  # fmt: skip
    assert c.shares is None and c.share == "" and c.share_memory_mib == 0
    assert c.label_problem, c
    assert c.held_whole(HUB, KEY)


def test_a_listing_with_non_string_or_huge_labels_never_raises() -> None:
    listing: list[Any] = [
        "not a container",
        {"Id": 7, "Labels": {"jupyterhub-gpu.owner": "x"}},
        {"Id": "e" * 64, "State": "running", "Labels": None},
        {"Id": "f" * 64, "State": "running",
         "Labels": {"jupyterhub-gpu.owner": "bob", "jupyterhub-gpu.gpus": "G," * 4000,
                    SEAL_LABEL: "00" * 32}},
    ]  # fmt: skip
    (c,) = containers_from_docker("node-c", listing)
    assert c.owner == "bob" and c.gpus == () and c.seal == "" and "longer than" in c.label_problem


@pytest.mark.parametrize("image_labels", HOSTILE)
def test_an_image_label_never_reaches_a_container_the_hub_creates(
    image_labels: dict[str, str],
) -> None:
    """Every key of ours is written on every container: the image's share labels are
    overwritten with "" and the container is read as the whole GPU it was given."""
    (c,) = containers_from_docker("node-c", [created(image_labels)])
    assert (c.share, c.share_memory_mib, c.label_problem) == ("", 0, "")
    assert c.claim(HUB) == WHOLE and c.verified(HUB, KEY) == WHOLE


def test_server_labels_write_every_key_of_ours() -> None:
    labels = server_labels(WHOLE, "img:1", STARTED, None)
    assert set(OWNED_LABELS) <= set(labels)
    assert labels[SHARE_LABEL] == labels[SHARE_MEMORY_LABEL] == labels[SEAL_LABEL] == ""
    # and the agent's reader takes the empty pair as a whole GPU
    assert parse_share_labels(labels) is None


def test_a_hostile_image_does_not_stop_reconciliation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A restarted hub finds an old container with ``share_memory_mib="²"`` beside an
    interrupted spawn's: the round completes (the orphan is removed), the hostile one is
    held whole, and its problem is logged once over two rounds."""
    hostile = {
        "Id": "h" * 64,
        "State": "running",
        "Labels": {
            "jupyterhub-gpu.hub": HUB,
            "jupyterhub-gpu.owner": "mallory",
            "jupyterhub-gpu.server": "",
            "jupyterhub-gpu.gpus": "GPU-c1",
            ALLOCATION_LABEL: "m" * 32,
            SHARE_LABEL: "1/4",
            SHARE_MEMORY_LABEL: "\u00b2",
        },
    }
    engine = Engine([hostile, created({})])
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    with caplog.at_level(logging.WARNING):
        asyncio.run(cluster.reconcile())
        asyncio.run(cluster.reconcile())
    assert cluster.reconciler.rounds == 2
    assert engine.removed == ["c" * 64]  # alice's interrupted spawn, as before
    assert cluster.ledger.allocations() == {"GPU-c1": "mallory/"}
    assert cluster.ledger.shares_on("GPU-c1") == []  # whole: nothing offered beside it
    lines = [r.getMessage() for r in caplog.records if "do not parse" in r.getMessage()]
    assert len(lines) == 1 and "hhhhhhhhhhhh" in lines[0], lines


# ------------------------------------------------------------------ finding 2 (MEDIUM)
def old_forged_container() -> dict[str, Any]:
    """A whole-GPU container made before every key was written: the image's
    ``LABEL jupyterhub-gpu.share=1/4`` (with its memory) reached it beside the hub's seal."""
    labels = {
        k: v
        for k, v in server_labels(WHOLE, "img:1", STARTED, KEY).items()
        if k not in (SHARE_LABEL, SHARE_MEMORY_LABEL)
    }
    labels.update({SHARE_LABEL: "1/4", SHARE_MEMORY_LABEL: "1024"})
    return {"Id": "c" * 64, "State": "running", "Labels": labels}


def test_a_forged_share_on_a_whole_gpu_container_is_held_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = Engine([old_forged_container()])
    cluster = engine_cluster(engine, monkeypatch, tmp_path)
    cluster.ledger.place_server("alice/", "node-c", WHOLE.id)  # alice's server runs
    asyncio.run(cluster.reconcile())
    assert engine.removed == []
    assert cluster.ledger.allocations() == {"GPU-c0": "alice/"}
    assert cluster.ledger.share_use() == {}  # no 3/4 left to offer


def test_a_forged_share_does_not_save_an_interrupted_container() -> None:
    (c,) = containers_from_docker("node-c", [old_forged_container()])
    assert c.shares == (1, 4)  # what the labels claim ...
    assert c.verified(HUB, KEY) == WHOLE  # ... and what the hub sealed
    found = interrupted([c], hub_id=HUB, key=KEY, live=set(), pending=set())
    assert found == [c]


# ------------------------------------------------------------------ 1(a): the refusal
@pytest.mark.parametrize("key", [SHARE_LABEL, SEAL_LABEL, "jupyterhub-gpu.owner", PROBE_LABEL])
def test_an_image_carrying_a_label_of_ours_is_refused_with_a_sentence(key: str) -> None:
    refusal = reserved_label_refusal("evil:1", {key: "x", "maintainer": "m"})
    assert refusal is not None
    assert key in refusal and "evil:1" in refusal and "rebuild the image" in refusal


@pytest.mark.parametrize(
    "labels",
    [None, {}, {"jupyterhub-gpu.build": "abc"}, {"io.jupyterhub-gpu.catalog-slug": "cpu"}],
)
def test_images_with_other_labels_are_not_refused(labels: object) -> None:
    assert reserved_label_refusal("ok:1", labels) is None


# ------------------------------------------------------------------ 7: one strict K/N
@pytest.mark.parametrize(
    "text",
    ["01/4", "1/04", "\uff11/\uff14", "\u00b2/4", "1/\u00b2", " 1/4", "1/4 ", "1/4\n", "+1/4",
     "0/4", "5/4", "1000/1000", "1/", "/4", "1//4", "1/4/8", "", "\u0661/\u0664"],
)  # fmt: skip
def test_k_of_n_is_read_strictly(text: str) -> None:
    assert parse_share(text) is None
    with pytest.raises(ShareLabelError):
        parse_share_labels({SHARE_LABEL: text or "x", SHARE_MEMORY_LABEL: "1024"})


@pytest.mark.parametrize("text, parsed", [("1/4", (1, 4)), ("3/4", (3, 4)), ("64/64", (64, 64))])
def test_k_of_n_reads_what_the_hub_writes(text: str, parsed: tuple[int, int]) -> None:
    assert parse_share(text) == parsed


@pytest.mark.parametrize("value", ["01/4", "\uff11/\uff14", "1/4\n"])
def test_the_form_refuses_a_share_the_strict_parser_refuses(value: str) -> None:
    from jupyterhub_gpu.core.sharing.policy import NO_SHARING

    with pytest.raises(InvalidRequest, match="must look like '1/4'"):
        check_share(value, 1, "NVIDIA A100", NO_SHARING)


def test_the_forms_refusal_bounds_what_it_echoes() -> None:
    with pytest.raises(InvalidRequest) as e:
        check_share("9" * 10_000, 1, "NVIDIA A100", parse_nothing())
    assert len(str(e.value)) < 200


def parse_nothing() -> Any:
    from jupyterhub_gpu.core.sharing.policy import NO_SHARING

    return NO_SHARING
