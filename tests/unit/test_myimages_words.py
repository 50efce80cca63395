"""My images for a student (issue 36): a name as people type it is saved under a valid
tag (or refused with the rule), the save's log is short (one line for a push's figures),
and "Based on" is the catalog's name for the image."""

from __future__ import annotations

from typing import Any

import pytest

from jupyterhub_gpu.core.saving.data import InvalidPackage, Progress
from jupyterhub_gpu.core.saving.stream import (
    SHOWN_LINES,
    BuildLog,
    PushLog,
    condense,
    parse_message,
)
from jupyterhub_gpu.core.saving.validate import image_name, image_name_from
from jupyterhub_gpu.hub.api.my_images import base_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("typed", "saved"),
    [
        ("My Einops env", "my-einops-env"),
        ("my-env_2.1", "my-env_2.1"),  # valid as it is: kept
        ("  Thèse: résultats (v2)!  ", "these-resultats-v2"),
        ("A" * 80, "a" * 40),
        ("x" * 39 + " y", "x" * 39),  # never ends on a separator
    ],
)
def test_a_typed_name_is_saved_under_a_valid_tag(typed: str, saved: str) -> None:
    assert image_name_from(typed) == saved
    assert image_name(saved) == saved  # the registry's rule holds


@pytest.mark.parametrize("typed", ["", "   ", "日本語", "!!!", "x" * 500, 42])
def test_a_name_with_nothing_usable_is_refused_with_the_rule(typed: Any) -> None:
    with pytest.raises(InvalidPackage) as e:
        image_name_from(typed)
    assert "letters and digits" in str(e.value) and "'my-einops-env'" in str(e.value)


def events_of(progress: list[Progress | None]) -> list[dict[str, Any]]:
    out = []
    for p in progress:
        if p is not None:
            event: dict[str, Any] = {"phase": p.phase, "message": p.message}
            if p.percent is not None:
                event["percent"] = p.percent
            out.append(event)
    return out


def test_the_save_log_is_short_one_line_for_the_push() -> None:
    build = BuildLog()
    lines = [build.add(parse_message({"stream": f"Step {k}/5 : RUN thing {k}\n"})) for k in (1, 2)]
    lines += [build.add(parse_message({"stream": f"Collecting pkg{k}\n"})) for k in range(30)]
    push = PushLog()
    for done in range(0, 101):  # a real push: one message per chunk, 100 percents
        message = {
            "status": "Pushing",
            "id": "layer1",
            "progressDetail": {"current": done * 10, "total": 1000},
        }
        lines.append(push.add(parse_message(message)))
    events = events_of(lines)
    assert sum(e["message"].startswith("Pushing") for e in events) > 90  # what the engine says
    shown = condense(events)
    assert len(shown) == SHOWN_LINES
    others = sum(not e["message"].startswith("Pushing") for e in events)  # 32 build lines
    hidden = others + 1 - (SHOWN_LINES - 1)  # the push's run is one line
    assert shown[0]["message"] == f"... {hidden} earlier lines"
    pushing = [e for e in shown if e["message"].startswith("Pushing")]
    assert pushing == [{"phase": "push", "message": "Pushing: 100%", "percent": 100}]
    assert shown[-2]["message"] == "Collecting pkg29"
    assert condense(events[:3]) == events[:3]  # a short log is left as it is


class Entry:
    def __init__(self, name: str) -> None:
        self.display_name = name


class Catalog:
    def get(self, slug: str) -> Entry | None:
        return Entry("Python + PyTorch (CUDA 12)") if slug == "demo-cuda12" else None


def test_based_on_is_the_catalogs_name_for_the_image() -> None:
    assert base_name(Catalog(), "demo-cuda12") == "Python + PyTorch (CUDA 12)"
    assert base_name(Catalog(), "gone-from-catalog") == "gone-from-catalog"
