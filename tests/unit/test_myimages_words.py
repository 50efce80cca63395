"""My images for a student (issue 36): a name as people type it is saved under a valid
tag (or refused with the rule), the save's log is short (one line for a push's figures)
and in the student's words (never the engine's build lines), and "Based on" is the
catalog's name for the image."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jupyterhub_gpu.core.saving.data import InvalidPackage, PipRequirement, Plan, Progress, Target
from jupyterhub_gpu.core.saving.recipe import WHEELHOUSE, dockerfile
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
    reqs = [PipRequirement(f"pkg{k}", "1.0") for k in range(30)]
    build = BuildLog(reqs)
    pip = 'RUN ["/opt/venv/bin/python", "-m", "pip", "install", "--", "pkg0==1.0"]'
    lines = [build.add(parse_message({"stream": f"Step 2/5 : {pip}\n"}))]
    lines += [
        build.add(parse_message({"stream": f"Processing {WHEELHOUSE}/pkg{k}-1.0-py3-none-any.whl"}))
        for k in range(30)
    ]
    push = PushLog()
    for done in range(0, 101):  # a real push: one message per chunk, 100 percents
        message = {
            "status": "Pushing",
            "id": "layer1",
            "progressDetail": {"current": done * 10, "total": 1000},
        }
        lines.append(push.add(parse_message(message)))
    events = events_of(lines)
    assert sum(e["message"].startswith("Uploading") for e in events) > 90  # one per percent
    shown = condense(events)
    assert len(shown) == SHOWN_LINES
    others = sum(not e["message"].startswith("Uploading") for e in events)  # 31 build lines
    hidden = others + 1 - (SHOWN_LINES - 1)  # the push's run is one line
    assert shown[0]["message"] == f"... {hidden} earlier lines"
    pushing = [e for e in shown if e["message"].startswith("Uploading")]
    assert pushing == [{"phase": "push", "message": "Uploading: 100%", "percent": 100}]
    assert shown[-2]["message"] == "Installing pkg29 1.0 (30 of 30)"
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


# what the engine's classic builder prints: its lines, which the user must never read
RAW = re.compile(
    r"^Step \d+/\d+ :|--->|^Successfully (built|tagged)|sha256:|^Removing interm|RUN \["
)


def engine_stream(text: str, reqs: list[PipRequirement]) -> list[dict[str, Any]]:
    """The build's stream for a Dockerfile, as a real engine answers: each instruction
    ("Step k/n : ...", then its container and layer), pip's lines in its install step."""
    instructions = [x for x in text.splitlines() if x and not x.startswith("#")]
    out: list[dict[str, Any]] = []
    for k, line in enumerate(instructions, 1):
        out.append({"stream": f"Step {k}/{len(instructions)} : {line}\n"})
        out.append({"stream": f" ---> Running in {k:012x}\n"})
        if '"pip", "install"' in line:
            for r in reqs:
                wheel = f"{r.name.replace('-', '_')}-{r.version}-py3-none-any.whl"
                out.append({"stream": f"Processing {WHEELHOUSE}/{wheel}\n"})
            names = ", ".join(r.name for r in reqs)
            out.append({"stream": f"Installing collected packages: {names}\n"})
            done = " ".join(f"{r.name}-{r.version}" for r in reqs)
            out.append({"stream": f"Successfully installed {done}\n"})
        out.append({"stream": f"Removing intermediate container {k:012x}\n ---> {k:012x}\n"})
    out.append({"aux": {"ID": "sha256:" + "e" * 64}})
    out.append({"stream": "Successfully built eeeeeeeeeeee\n"})
    out.append({"stream": "Successfully tagged reg.example:5000/saved/u-alice/env:1\n"})
    return out


@pytest.mark.parametrize("replaces", [(), ("six",)])
def test_a_whole_build_of_the_real_recipe_reads_as_sentences(replaces: tuple[str, ...]) -> None:
    reqs = [PipRequirement("first-hour", "1.0"), PipRequirement("six", "1.17.0")]
    plan = Plan(pip=tuple(reqs), replaces=replaces)
    text = dockerfile("lab/python:3.11", plan, Target((3, 11), "x86_64", (2, 36)), "ab" * 8, "")
    build = BuildLog(reqs)
    events = events_of([build.add(parse_message(m)) for m in engine_stream(text, reqs)])
    assert build.image_id == "sha256:" + "e" * 64  # the engine's answer is still read
    assert [e["message"] for e in events] == [
        "Installing 2 packages into the image",
        "Installing first-hour 1.0 (1 of 2)",
        "Installing six 1.17.0 (2 of 2)",
        *(["Removing the base image's copies of the packages you replaced"] if replaces else []),
        "Adding the installed packages to your image",
    ]
    assert not [e for e in events if RAW.search(e["message"])]
    percents = [e["percent"] for e in events]
    assert percents == sorted(percents) and percents[0] > 0 and percents[-1] < 100
    assert any(RAW.search(line) for line in build.tail)  # kept, to name what failed
