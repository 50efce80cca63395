"""One save from start to end: a fake home, real pip against an offline folder of wheels,
and a fake engine that checks the build context it is given (no network, no Docker)."""

from __future__ import annotations

import json
import sys
import tarfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.saving.data import (
    FetchFailed,
    InvalidPackage,
    LimitReached,
    Progress,
    SavedImage,
)
from jupyterhub_gpu.core.saving.limits import Limits
from jupyterhub_gpu.edges.builder.save import SaveRequest, SaveSettings, save_environment
from jupyterhub_gpu.edges.builder.wheelhouse import IndexSettings
from tests.unit.test_builder_build import (
    BASE,
    DIGEST,
    FakeEngine,
    ProbeEngine,
    probe_output,
)
from tests.unit.test_builder_recipe import make_wheel
from tests.unit.test_builder_records import dist

pytestmark = pytest.mark.unit
PY = (sys.version_info.major, sys.version_info.minor)
SITE = f".local/lib/python{PY[0]}.{PY[1]}/site-packages"
WHEN = datetime(2026, 11, 24, 15, 30, tzinfo=timezone.utc)


class Engine(FakeEngine, ProbeEngine):
    """Probe, build and push; the build reads its context like an engine would."""

    def __init__(self) -> None:
        FakeEngine.__init__(self)
        ProbeEngine.__init__(self, output=probe_output(python=list(PY)))
        self.context: dict[str, bytes] = {}

    def build(self, **kw: Any) -> Any:
        with tarfile.open(fileobj=kw["fileobj"]) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    self.context[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
        events = [
            {"stream": "Step 1/9 : FROM x AS install\n"},
            {"aux": {"ID": "sha256:" + "e" * 64}},
            {"stream": f"Successfully tagged {kw['tag']}\n"},
        ]
        self.build_events = events
        return FakeEngine.build(self, **kw)


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, IndexSettings]:
    home = tmp_path / "home"
    dist(home / SITE, "tiny_pkg", "0.1")
    dist(home / SITE, "other-pkg", "2.0")
    dist(home / SITE, "jupyterhub", "5.0.0")  # protected: not saved
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    make_wheel(mirror, "tiny_pkg", "0.1", {"tiny_pkg/__init__.py": ""})
    make_wheel(mirror, "other_pkg", "2.0", {"other_pkg.py": ""})
    return home, IndexSettings(no_index=True, find_links=(str(mirror),), timeout_s=120)


def request(home: Path, name: str = "my-env") -> SaveRequest:
    return SaveRequest(owner="Alice", name=name, base_slug="python-cpu", base_image=BASE, home=home)


def test_a_save_from_home_to_registry(site: tuple[Path, IndexSettings]) -> None:
    home, index = site
    engine, events = Engine(), list[Progress]()
    settings = SaveSettings(registry="reg.example:5000", index=index)
    saved = save_environment(engine, request(home), settings, [], events.append, now=WHEN)
    assert saved.reference.startswith("reg.example:5000/jupyterhub-gpu/saved/u--41lice/my-env:")
    assert saved.reference.split(":")[-1].startswith("20261124-153000-")
    assert (saved.digest, saved.size_bytes) == (DIGEST, 5000)
    assert saved.packages == ("pip:other-pkg==2.0", "pip:tiny-pkg==0.1")
    assert [s.what for s in saved.skipped] == [f"jupyterhub==5.0.0 in ~/{SITE}"]
    assert sorted(engine.context) == [
        "Dockerfile",
        "wheelhouse/other_pkg-2.0-py3-none-any.whl",
        "wheelhouse/tiny_pkg-0.1-py3-none-any.whl",
    ]
    dockerfile = engine.context["Dockerfile"].decode()
    assert '"--", "other-pkg==2.0", "tiny-pkg==0.1"]' in dockerfile
    assert dockerfile.rstrip().endswith("USER 1000:100")  # the base's user
    (_, build_kw) = next(c for c in engine.calls if c[0] == "build")
    labels = build_kw["labels"]
    assert labels["io.jupyterhub-gpu.saved.owner"] == "Alice"
    assert json.loads(labels["io.jupyterhub-gpu.saved.packages"]) == list(saved.packages)
    assert events[0] == Progress("fetch", "Reading what you installed", None)
    assert events[-1] == Progress("done", "Saved", 100)


def test_nothing_to_save_or_over_the_limits(
    site: tuple[Path, IndexSettings], tmp_path: Path
) -> None:
    _, index = site
    empty = tmp_path / "empty"
    empty.mkdir()
    settings = SaveSettings(registry="reg.example", index=index)
    with pytest.raises(InvalidPackage, match="adds no package"):
        save_environment(Engine(), request(empty), settings, [], print)
    old = SavedImage("Alice", "my-env", "s", BASE, "r", (), 1, WHEN)
    with pytest.raises(LimitReached, match="already have a saved image named 'my-env'"):
        save_environment(Engine(), request(site[0]), settings, [old], print)
    small = SaveSettings(registry="reg.example", index=index, limits=Limits(max_image_bytes=4000))
    engine = Engine()
    with pytest.raises(LimitReached, match=r"more than the 3\.9 KiB"):
        save_environment(engine, request(site[0]), small, [], print)
    assert "push" not in engine.names()


def test_a_package_missing_from_the_index_is_named(site: tuple[Path, IndexSettings]) -> None:
    home, index = site
    dist(home / SITE, "torchx", "9.9")
    settings = SaveSettings(registry="reg.example", index=index)
    engine = Engine()
    with pytest.raises(FetchFailed, match=r"Package 'torchx==9\.9' was not found as a wheel"):
        save_environment(engine, request(home), settings, [], print)
    assert "build" not in engine.names()
