"""What the spawn form offers now (issue 36): quota left, what fits what is free, facts
in a student's order. Pure, table-driven."""

from __future__ import annotations

import json
import re

import pytest

from jupyterhub_gpu.core.form.availability import ModelAvailability
from jupyterhub_gpu.core.form.offer import (
    fit_offers,
    framework_label,
    gpu_allowance,
    student_facts,
)
from jupyterhub_gpu.core.form.user_quota import NO_QUOTA, Holdings, UserQuota

pytestmark = pytest.mark.unit

RTX = ModelAvailability("NVIDIA GeForce RTX 3090", total=2, free=1, memory_mib=24576)
TITAN = ModelAvailability("NVIDIA TITAN X (Pascal)", total=2, free=0, memory_mib=12288)


@pytest.mark.parametrize(
    ("max_gpus", "quota", "held", "most", "text"),
    [
        (2, NO_QUOTA, Holdings(), 2, "Up to 2 per server."),
        (2, UserQuota(3), Holdings(), 2, "Up to 2 per server; at most 3 at once in all yours."),
        (4, UserQuota(3), Holdings(), 3, "Up to 4 per server; at most 3 at once in all yours."),
        (
            2,
            UserQuota(3),
            Holdings(2, 1),
            1,
            "Up to 2 per server; you hold 2 of your 3, so 1 more now.",
        ),
        (
            2,
            UserQuota(2),
            Holdings(2, 2),
            0,
            "You hold all 2 GPUs you may have at once: stop one of your servers to use GPUs "
            "here, or start this one without.",
        ),
        (0, UserQuota(2), Holdings(), 0, "Your groups have no GPU allowance."),
    ],
)
def test_the_count_reflects_the_quota_left(
    max_gpus: int, quota: UserQuota, held: Holdings, most: int, text: str
) -> None:
    allowance = gpu_allowance(max_gpus, quota, held)
    assert (allowance.most, allowance.text) == (most, text)


def test_more_than_free_offers_what_starts_now_and_none_free_says_it_waits() -> None:
    offers = fit_offers([RTX, TITAN], most=2, any_model="any")
    assert set(offers) == {"any", RTX.model, TITAN.model}
    assert set(offers["any"]) == {2} and set(offers[RTX.model]) == {2}
    two = offers[RTX.model][2]
    assert two.text == (
        "Only 1 RTX 3090 is free now: with 2, your server waits in line until 2 are free."
    )
    assert (two.start_now, two.button) == (1, "Start with 1 GPU now")
    assert offers["any"][2].text.startswith("Only 1 GPU is free now")
    busy = offers[TITAN.model][1]
    assert busy.text == (
        "No TITAN X (Pascal) is free now: Start puts your server in line for one, and the "
        "waiting page shows your place and an estimate."
    )
    assert (busy.start_now, busy.button) == (0, "")
    assert fit_offers([RTX], most=1, any_model="any") == {}  # 1 asked, 1 free: nothing to say
    none = fit_offers([TITAN], most=1, any_model="any")["any"][1]
    assert none.text.startswith("No GPU is free now: Start puts your server in line")
    three = ModelAvailability("NVIDIA A100", total=4, free=3, memory_mib=40960)
    assert fit_offers([three], most=4, any_model="any")["any"][4].text.startswith(
        "Only 3 GPUs are free now: with 4, "
    )


@pytest.mark.parametrize(
    ("framework", "version", "label"),
    [("pytorch", "2.3.1", "PyTorch 2.3.1"), ("python", "3.11", "Python 3.11"),
     ("mxnet", "1.9", "mxnet 1.9")],
)  # fmt: skip
def test_framework_label(framework: str, version: str, label: str) -> None:
    assert framework_label(framework, version) == label


def test_facts_put_the_students_first_and_the_admins_last() -> None:
    facts = student_facts(
        "pytorch", "2.3.1", "CUDA 12.1", "runs on gpu-a", "ready on 1 of 2 nodes",
        ["driver >= 525.60.13", "compute capability 5.0 to 9.0"],
    )  # fmt: skip
    assert facts == (
        "PyTorch 2.3.1 · CUDA 12.1 · runs on gpu-a · ready on 1 of 2 nodes · needs driver "
        ">= 525.60.13, compute capability 5.0 to 9.0"
    )


def test_the_form_lets_a_busy_model_be_chosen_and_carries_the_offers() -> None:
    from jupyterhub_gpu.core.catalog.compat import ImageAvailability
    from jupyterhub_gpu.core.catalog.entries import Catalog, CatalogEntry
    from jupyterhub_gpu.core.form.render import render_form
    from jupyterhub_gpu.core.form.resources import policy_from_config, resolve_bounds

    entry = CatalogEntry(
        "pt", "PyTorch", "pytorch", "2.3.1", "12.1", "img:1", min_driver="525.60.13"
    )
    info = ImageAvailability("pt", True, "", nodes=("gpu-a",), models=(RTX.model, TITAN.model))
    config = {"max_gpus": 2, "max_gpus_per_user": 3, "max_cpu": 8, "max_mem_gib": 32}
    bounds = resolve_bounds(policy_from_config(config), ["u"])
    html = render_form(
        Catalog((entry,)).entries,
        {"pt": info},
        bounds,
        models=[RTX, TITAN],
        held=Holdings(2, 1),
    )
    titan = re.search(r'<option value="NVIDIA TITAN X \(Pascal\)"[^>]*>', html)
    assert titan and "disabled" not in titan[0], titan
    assert "wait in line for one" in html
    assert "you hold 2 of your 3, so 1 more now." in html
    counts = re.findall(r'<option value="(\d)"', html)
    assert counts == ["0", "1"], counts  # no more than the quota leaves
    data = re.search(r'<script type="application/json" id="jhgpu-offers">(.*?)</script>', html)
    assert data, html[-500:]
    offers = json.loads(data[1])
    assert offers[TITAN.model]["1"]["now"] == 0 and RTX.model not in offers  # 1 left, 1 free
    assert 'data-facts="PyTorch 2.3.1 · CUDA 12.1 · runs on gpu-a · needs driver' in html
