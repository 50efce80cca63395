"""Unit tests of the spawn form's outlook: where a would-be spawn stands, and when."""

from __future__ import annotations

import json
import re
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.core.form.offer import Offer, wait_outlooks
from jupyterhub_gpu.core.scheduling import estimates, positions
from jupyterhub_gpu.core.scheduling.outlook import Outlook, WaitView, outlook
from tests.unit.test_scheduling import NOW, RTX3090, TITANX, lab, req, snap, state
from tests.unit.test_scheduling_estimate import FIFO, FULL, RELEASES

pytestmark = pytest.mark.unit

PARIS = ZoneInfo("Europe/Paris")
WAITING = (req("one", models=[RTX3090], at=NOW - 20), req("two", models=[RTX3090], at=NOW - 10))


def view(waiting: tuple = WAITING, releases: tuple = tuple(RELEASES)) -> WaitView:
    return WaitView(waiting, state(snap(lab(), FULL)), releases, FIFO)


def test_a_newcomer_stands_behind_those_waiting_for_the_same_gpus() -> None:
    got = outlook(view(), req("me", models=[RTX3090]))
    # two wait ahead for an RTX 3090; the releases at 20 and 50 min go to them: none left
    assert got == Outlook(2, f"an {RTX3090}", None)
    assert got.sentence(NOW) == (
        f"About 2 others wait for an {RTX3090} ahead of you; no estimate yet."
    )


def test_the_same_numbers_as_the_waiting_page() -> None:
    me = req("me", models=[RTX3090])
    queue = [*WAITING[:1], me]
    v = view(WAITING[:1])
    got = outlook(v, me)
    place = next(p for p in positions(queue, v.state, FIFO) if p.request.id == "me")
    assert got.ahead == place.position - 1 == 1
    assert got.at == estimates(queue, v.state, RELEASES, FIFO)["me"].at == NOW + 50 * 60
    assert got.sentence(NOW) == (
        f"About 1 other waits for an {RTX3090} ahead of you; yours should free up around 12:50 UTC."
    )
    assert got.said(NOW, PARIS) == "13:50 CET"  # the form's script shows it in local time
    assert got.sentence(NOW, PARIS).endswith("around 13:50 CET.")


def test_other_models_do_not_stand_in_the_way() -> None:
    got = outlook(view(), req("me", models=[TITANX]))
    assert got == Outlook(0, f"an {TITANX}", NOW + 10 * 60)
    assert got.sentence(NOW).startswith(f"Nobody waits for an {TITANX} ahead of you; ")


def test_an_empty_queue_without_releases_has_no_estimate() -> None:
    got = outlook(view((), ()), req("me", count=2))
    assert got.ahead == 0 and got.at is None
    assert got.sentence(NOW) == "Nobody waits for 2 GPUs ahead of you; no estimate yet."


def test_the_form_gets_one_outlook_per_offer() -> None:
    offers = {
        "any": {5: Offer("Only 0 ...", 0)},
        RTX3090: {1: Offer("No RTX 3090 ...", 0), 2: Offer("No RTX 3090 ...", 0)},
    }
    got = wait_outlooks(view(), offers, "any", "me", "g1")
    assert set(got) == {"any", RTX3090} and set(got[RTX3090]) == {1, 2}
    assert got[RTX3090][1] == outlook(view(), req("form:me", user="me", models=[RTX3090]))
    assert got[RTX3090][1].ahead == 2
    assert got["any"][5].at is None  # no node has 5 GPUs free by any known release


def test_the_form_carries_each_offers_outlook_for_its_script() -> None:
    from jupyterhub_gpu.core.catalog.compat import ImageAvailability
    from jupyterhub_gpu.core.catalog.entries import Catalog, CatalogEntry
    from jupyterhub_gpu.core.form.availability import ModelAvailability
    from jupyterhub_gpu.core.form.render import render_form
    from jupyterhub_gpu.core.form.resources import policy_from_config, resolve_bounds

    entry = CatalogEntry("pt", "PyTorch", "pytorch", "2.3.1", "12.1", "img:1")
    info = ImageAvailability("pt", True, "", nodes=("a", "b"), models=(RTX3090, TITANX))
    bounds = resolve_bounds(policy_from_config({"max_gpus": 1}), ["g1"])
    models = [
        ModelAvailability(RTX3090, total=4, free=0, memory_mib=24576),
        ModelAvailability(TITANX, total=2, free=0, memory_mib=12288),
    ]
    common = dict(models=models, charge_groups=["g1"])
    html = render_form(Catalog((entry,)).entries, {"pt": info}, bounds, **common)  # type: ignore[arg-type]
    offers = json.loads(re.search(r'id="jhgpu-offers">(.*?)</script>', html)[1])  # type: ignore[index]
    assert "wait" not in offers[TITANX]["1"]  # no queue: the offer alone, as before
    html = render_form(
        Catalog((entry,)).entries, {"pt": info}, bounds,
        wait_view=view(), user="me", tz=PARIS, **common,  # type: ignore[arg-type]
    )  # fmt: skip
    offers = json.loads(re.search(r'id="jhgpu-offers">(.*?)</script>', html)[1])  # type: ignore[index]
    titan = offers[TITANX]["1"]
    assert titan["text"].startswith("No TITAN X (Pascal) is free now: ")
    assert titan["wait"] == (
        f"Nobody waits for an {TITANX} ahead of you; yours should free up around 13:10 CET."
    )
    assert (titan["said"], titan["at"]) == ("13:10 CET", "2026-11-24T12:10:00Z")
    assert offers[RTX3090]["1"]["wait"].startswith(f"About 2 others wait for an {RTX3090} ")
    assert offers[RTX3090]["1"]["said"] == ""
