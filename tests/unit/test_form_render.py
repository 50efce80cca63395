"""Rendering the spawn form: disabled images with reasons, live availability text,
preselected previous choices, bounds, and escaping of hostile text."""

from __future__ import annotations

import re
from html import unescape as html_unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.catalog import Catalog, catalog_availability
from jupyterhub_gpu.core.form import (
    ModelAvailability,
    UserBounds,
    gpu_model_availability,
    policy_from_config,
    render_form,
    resolve_bounds,
    spawn_form_html,
    visible_entries,
)
from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.adminfiles import load_catalog, load_inventory_file
from jupyterhub_gpu.wire.catalog_file import parse_catalog

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RTX = "NVIDIA GeForce RTX 3090"
HOSTILE = '<script>alert("pwned")</script> & "quotes"'


class Options(HTMLParser):
    """Collects every <select>'s options and every <input> of the form."""

    def __init__(self) -> None:
        super().__init__()
        self.selects: dict[str, list[dict[str, Any]]] = {}
        self.inputs: dict[str, dict[str, str | None]] = {}
        self._select: str | None = None
        self._option: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "select":
            self._select = a["name"]
            self.selects[a["name"] or ""] = []
        elif tag == "option" and self._select:
            self._option = {**a, "text": ""}
            self.selects[self._select].append(self._option)
        elif tag == "input":
            self.inputs[a["name"] or ""] = a

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        if tag == "option":
            self._option = None

    def handle_data(self, data: str) -> None:
        if self._option is not None:
            self._option["text"] = " ".join((self._option["text"] + " " + data).split())


def parse(html: str) -> Options:
    p = Options()
    p.feed(html)
    return p


def option(p: Options, select: str, value: str) -> dict[str, Any]:
    return next(o for o in p.selects[select] if o["value"] == value)


def selected(p: Options, select: str) -> str:
    chosen = [o["value"] for o in p.selects[select] if "selected" in o]
    assert len(chosen) == 1, chosen
    return chosen[0]


def _image(slug: str, cuda: str | None, **extra: Any) -> dict[str, Any]:
    entry = {
        "slug": slug,
        "display_name": slug.upper(),
        "framework": "pytorch",
        "framework_version": "1.0",
        "cuda_version": cuda,
        "image": f"jupyterhub-gpu/{slug}:1",
    }
    return {**entry, **extra}


@pytest.fixture(scope="module")
def snapshot() -> ClusterSnapshot:
    nodes = tuple(
        NodeState(n) for n in load_inventory_file(ROOT / "tests/data/cluster-hetero.yaml")
    )
    busy = {
        "GPU-aaaaaaaa-0000-4000-8000-000000000000": "bob/",
        "GPU-cccccccc-0000-4000-8000-000000000000": "carol/",
        "GPU-cccccccc-0000-4000-8000-000000000001": "carol/",
    }
    return ClusterSnapshot(nodes, allocations=busy)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return parse_catalog(
        {
            "images": [
                _image("pt-cuda12.1", "12.1", description="PyTorch for everyone"),
                _image("cuda13", "13.0"),
                _image("hostile", "11.8", display_name=HOSTILE, description=HOSTILE),
                _image("lab-only", "12.1", groups=["lab"]),
                _image("cpu", None),
            ]
        }
    )


@pytest.fixture(scope="module")
def bounds() -> UserBounds:
    return resolve_bounds(
        policy_from_config({"max_gpus": 2, "max_cpu": 8, "max_mem_gib": 32}), ["u"]
    )


@pytest.fixture(scope="module")
def models(snapshot: ClusterSnapshot) -> tuple[ModelAvailability, ...]:
    return gpu_model_availability(snapshot)


def render(
    catalog: Catalog,
    snapshot: ClusterSnapshot,
    bounds: UserBounds,
    models: Any,
    previous: dict[str, Any] | None = None,
) -> str:
    view = visible_entries(catalog, bounds)
    availability = catalog_availability(view, snapshot.nodes)
    return render_form(view, availability, bounds, previous, models=models)


def test_model_availability_counts(models: tuple[ModelAvailability, ...]) -> None:
    by_model = {m.model: m for m in models}
    assert by_model[RTX].text == "RTX 3090: 2 of 3 free"
    assert by_model["NVIDIA A100-SXM4-80GB"].text == "A100-SXM4-80GB: 0 of 2 free"
    assert by_model["NVIDIA TITAN X (Pascal)"].text == "TITAN X (Pascal): 2 of 2 free"
    assert by_model[RTX].memory_gib == 24


def test_free_counts_from_placement_override(snapshot: ClusterSnapshot) -> None:
    models = gpu_model_availability(snapshot, free_counts={RTX: 1, "nope": 9})
    assert {m.model: m.free for m in models}[RTX] == 1
    assert {m.model: m.free for m in models}["NVIDIA TITAN X (Pascal)"] == 0


def test_foreign_processes_and_offline_nodes_are_not_free(snapshot: ClusterSnapshot) -> None:
    a, b, c = snapshot.nodes
    gpus = list(a.inventory.gpus)
    gpus[1] = type(gpus[1])(**{**gpus[1].__dict__, "process_containers": ("",)})
    a2 = NodeState(type(a.inventory)(**{**a.inventory.__dict__, "gpus": tuple(gpus)}))
    snap = ClusterSnapshot((a2, NodeState(b.inventory, reachable=False), c))
    by_model = {m.model: m for m in gpu_model_availability(snap)}
    assert by_model[RTX].free == 2  # a host process holds one
    assert by_model["NVIDIA TITAN X (Pascal)"].text == "TITAN X (Pascal): 0 of 2 free"


def test_disabled_image_shows_the_reason(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds, models: Any
) -> None:
    p = parse(render(catalog, snapshot, bounds, models))
    cuda13 = option(p, "image", "cuda13")
    assert "disabled" in cuda13
    assert (
        "unavailable: No node can run it: it needs NVIDIA driver >= 580 for CUDA 13.0"
        in cuda13["text"]
    )
    assert cuda13["title"].startswith("No node can run it")
    assert "disabled" not in option(p, "image", "pt-cuda12.1")
    assert [o["value"] for o in p.selects["image"]] == ["pt-cuda12.1", "cuda13", "hostile", "cpu"]
    assert option(p, "image", "cpu")["data-gpu"] == "0"
    assert option(p, "image", "pt-cuda12.1")["data-models"] == (
        '["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 3090"]'
    )


def test_availability_text_and_defaults(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds, models: Any
) -> None:
    html = render(catalog, snapshot, bounds, models)
    p = parse(html)
    assert option(p, "gpu_model", RTX)["text"] == "RTX 3090: 2 of 3 free · 24 GiB"
    assert option(p, "gpu_model", "any")["text"] == "Any model (6 of 9 free)"
    busy = option(p, "gpu_model", "NVIDIA A100-SXM4-80GB")  # none free: chosen to wait
    assert "disabled" not in busy and busy["text"].endswith("· wait in line for one"), busy
    assert [o["value"] for o in p.selects["gpu_count"]] == ["0", "1", "2"]
    assert selected(p, "image") == "pt-cuda12.1"
    assert selected(p, "gpu_count") == "1"
    assert selected(p, "gpu_model") == "any"
    assert p.inputs["cpu"]["value"] == "2" and p.inputs["cpu"]["max"] == "8"
    assert p.inputs["mem_gib"]["value"] == "8" and p.inputs["mem_gib"]["max"] == "32"
    assert p.inputs["min_gpu_memory_gib"]["max"] == "80"
    assert "PyTorch for everyone" in html


def test_previous_choices_are_preselected(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds, models: Any
) -> None:
    previous = {
        "image": "hostile",
        "gpu_count": 2,
        "gpu_model": RTX,
        "min_gpu_memory_gib": 16,
        "cpu": 6,
        "mem_gib": 24.5,
    }
    p = parse(render(catalog, snapshot, bounds, models, previous))
    assert selected(p, "image") == "hostile"
    assert selected(p, "gpu_count") == "2"
    assert selected(p, "gpu_model") == RTX
    assert p.inputs["min_gpu_memory_gib"]["value"] == "16"
    assert p.inputs["cpu"]["value"] == "6"
    assert p.inputs["mem_gib"]["value"] == "24.5"


def test_stale_or_tampered_previous_choices_fall_back(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds, models: Any
) -> None:
    previous = {
        "image": "cuda13",  # no node can run it now
        "gpu_count": 99,
        "gpu_model": "NVIDIA A100-SXM4-80GB",  # none free
        "cpu": "nan",
        "mem_gib": 1e9,
    }
    p = parse(render(catalog, snapshot, bounds, models, previous))
    assert selected(p, "image") == "pt-cuda12.1"
    assert selected(p, "gpu_count") == "1"
    assert selected(p, "gpu_model") == "any"
    assert p.inputs["cpu"]["value"] == "2" and p.inputs["mem_gib"]["value"] == "8"
    cpu_prev = parse(render(catalog, snapshot, bounds, models, {"image": "cpu", "gpu_count": 2}))
    assert selected(cpu_prev, "gpu_count") == "0"  # a CPU-only image gets no GPU


def test_hostile_display_name_is_escaped(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds, models: Any
) -> None:
    html = render(catalog, snapshot, bounds, models, {"image": "hostile"})
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; &amp; &#34;quotes&#34;" in html
    assert html.count("<script>") == 1  # only the form's own script
    p = parse(html)
    assert option(p, "image", "hostile")["data-description"] == HOSTILE


def test_groups_and_zero_gpu_allowance(catalog: Catalog, snapshot: ClusterSnapshot) -> None:
    policy = policy_from_config({"max_gpus": 0, "default_gpu_count": 0})
    lab = resolve_bounds(policy, ["lab"])
    view = visible_entries(catalog, lab)
    assert [e.slug for e in view] == ["pt-cuda12.1", "cuda13", "hostile", "lab-only", "cpu"]
    html = spawn_form_html(catalog, snapshot, lab)
    p = parse(html)
    assert [o["value"] for o in p.selects["gpu_count"]] == ["0"]
    assert "Your groups have no GPU allowance." in html


def test_models_outside_the_users_bounds_are_hidden(
    catalog: Catalog, snapshot: ClusterSnapshot
) -> None:
    rtx_only = resolve_bounds(policy_from_config({"allowed_models": ["*RTX 3090"]}), [])
    p = parse(spawn_form_html(catalog, snapshot, rtx_only))
    assert [o["value"] for o in p.selects["gpu_model"]] == ["any", RTX]
    assert option(p, "gpu_model", "any")["text"] == "Any model (2 of 3 free)"


def test_shipped_catalog_renders(snapshot: ClusterSnapshot, bounds: UserBounds) -> None:
    catalog = load_catalog(ROOT / "images" / "catalog.yaml")
    p = parse(spawn_form_html(catalog, snapshot, bounds, {"image": "chainer-7.8-cuda11.8"}))
    assert len(p.selects["image"]) == len(catalog)
    assert selected(p, "image") == "chainer-7.8-cuda11.8"
    assert all("disabled" not in o for o in p.selects["image"])  # every entry fits somewhere


def test_no_image_for_the_user(snapshot: ClusterSnapshot, bounds: UserBounds) -> None:
    only_lab = parse_catalog({"images": [_image("lab-only", "12.1", groups=["lab"])]})
    html = spawn_form_html(only_lab, snapshot, bounds)
    assert "No image is available to you; ask an admin." in html


def test_the_newest_note_is_shown_above_the_form(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds
) -> None:
    """Why the culler stopped the server: the newest note, escaped, in a dismissable alert
    before the first field; no alert without notes (the default, as before)."""
    older = "Your server was stopped at 2026-01-01 09:00 UTC to free its resources: idle."
    newest = f"Your server was stopped at 2026-01-01 11:59 UTC to free its resources: {HOSTILE}"
    html = spawn_form_html(catalog, snapshot, bounds, None, None, notes=[older, newest])
    alert = re.search(
        r'<div id="jhgpu-notice" class="([^"]*)" role="alert"\s+'
        r'data-said="" data-at="">(.*?)</div>',
        html,
        re.S,
    )
    assert alert is not None, html[:800]
    assert alert[1].split() == ["alert", "alert-info", "alert-dismissible", "fade", "show"]
    assert 'data-bs-dismiss="alert"' in alert[2] and 'type="button"' in alert[2]
    text = " ".join(re.sub(r"<[^>]+>", " ", alert[2]).split())
    assert html_unescape(text) == newest
    assert "09:00" not in html and "<script>alert" not in html
    timed = spawn_form_html(
        catalog, snapshot, bounds, notes=[newest], notice_time=("11:59 UTC", "2026-01-01T11:59:00")
    )
    assert 'data-said="11:59 UTC" data-at="2026-01-01T11:59:00"' in timed  # the script's
    assert html.index('id="jhgpu-notice"') < html.index('id="jhgpu-image"')
    assert parse(html).selects == parse(spawn_form_html(catalog, snapshot, bounds)).selects
    for plain in (
        spawn_form_html(catalog, snapshot, bounds),
        spawn_form_html(catalog, snapshot, bounds, notes=[]),
    ):
        assert 'id="jhgpu-notice"' not in plain and "alert-dismissible" not in plain


@pytest.mark.parametrize(
    ("groups", "previous", "shown", "chosen"),
    [
        ((), None, None, None),  # in no group: nothing to choose
        (("ml-lab",), {"charge_group": "ml-lab"}, None, None),  # one: no select either
        (("ml-lab", "vision"), None, ["ml-lab", "vision"], "ml-lab"),  # the default first
        (("ml-lab", "vision"), {"charge_group": "vision"}, ["ml-lab", "vision"], "vision"),
        (("ml-lab", "vision"), {"charge_group": "gone"}, ["ml-lab", "vision"], "ml-lab"),
        (("a", "b", "c"), {"charge_group": 3}, ["a", "b", "c"], "a"),
    ],
)
def test_the_charge_group_select_is_there_only_with_a_choice(
    catalog: Catalog,
    snapshot: ClusterSnapshot,
    bounds: UserBounds,
    groups: tuple[str, ...],
    previous: dict[str, Any] | None,
    shown: list[str] | None,
    chosen: str | None,
) -> None:
    """A user with two or more chargeable groups picks one (the previous choice if still
    allowed, else the default); with one or none there is no field (the default applies)."""
    html = spawn_form_html(catalog, snapshot, bounds, previous, charge_groups=groups)
    p = parse(html)
    if shown is None:
        assert "charge_group" not in p.selects and "jhgpu-charge-group" not in html
        return
    assert [o["value"] for o in p.selects["charge_group"]] == shown
    assert selected(p, "charge_group") == chosen
    assert [o["text"] for o in p.selects["charge_group"]] == shown


def test_reserved_gpus_are_a_notice_before_the_form(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds
) -> None:
    """Reservations of other groups that affect the user: one escaped line each, in a
    warning above the first field; nothing without any."""
    lines = [
        "2 x NVIDIA A100-SXM4-80GB (likely on gpu-c) for group course, 14:00 to 18:00 UTC",
        f"all GPUs of gpu-a for group {HOSTILE}, now until 18:00 UTC",
    ]
    html = spawn_form_html(catalog, snapshot, bounds, reserved=lines)
    box = re.search(r'<div id="jhgpu-reserved"[^>]*>(.*?)</div>', html, re.S)
    assert box is not None
    items = [html_unescape(i.strip()) for i in re.findall(r"<li>(.*?)</li>", box[1], re.S)]
    assert items == lines
    assert "<script>alert" not in html
    assert html.index('id="jhgpu-reserved"') < html.index('id="jhgpu-image"')
    assert "jhgpu-reserved" not in spawn_form_html(catalog, snapshot, bounds)


def test_a_share_is_offered_beside_whole_gpus(
    catalog: Catalog, snapshot: ClusterSnapshot, bounds: UserBounds
) -> None:
    """Issue 26: with the RTX 3090 shared in 4, the form offers a quarter of it (its
    memory said), preselects the last choice, and offers nothing without a policy."""
    from jupyterhub_gpu.core.sharing import parse_policy

    policy = parse_policy({"NVIDIA GeForce RTX 3090": {"shares": 4}}, {})
    html = spawn_form_html(catalog, snapshot, bounds, {"gpu_share": "1/4"}, sharing=policy)
    p = parse(html)
    assert len(p.selects["gpu_share"]) == 2
    assert selected(p, "gpu_share") == "1/4"
    assert "a quarter of an RTX 3090: 6 GiB, for light work" in html_unescape(html)
    assert "gpu_share" not in parse(spawn_form_html(catalog, snapshot, bounds)).selects
