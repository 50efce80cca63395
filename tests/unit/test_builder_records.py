"""Reading pip's and conda's records from a home full of traps (temp dirs, no network)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.saving.data import PipRecord
from jupyterhub_gpu.edges.builder import home_records as records
from jupyterhub_gpu.edges.builder.home_records import (
    direct_url_source,
    list_conda_envs,
    metadata_fields,
    read_home,
)

pytestmark = pytest.mark.unit
PY = (3, 11)
SITE = ".local/lib/python3.11/site-packages"


def dist(
    site: Path,
    name: str,
    version: str,
    installer: str | None = "pip",
    direct_url: dict | str | None = None,
    requested: bool = True,
    folder: str | None = None,
) -> Path:
    d = site / (folder or f"{name.replace('-', '_')}-{version}.dist-info")
    d.mkdir(parents=True)
    (d / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nName: nope\n"
    )
    if installer is not None:
        (d / "INSTALLER").write_text(installer + "\n")
    if requested:
        (d / "REQUESTED").write_text("")
    if direct_url is not None:
        text = direct_url if isinstance(direct_url, str) else json.dumps(direct_url)
        (d / "direct_url.json").write_text(text)
    return d


def conda_env(root: Path, packages: list[tuple[str, str, str, list[str]]]) -> Path:
    meta = root / "conda-meta"
    meta.mkdir(parents=True)
    (meta / "history").write_text("")
    for name, version, build, files in packages:
        doc = {
            "name": name,
            "version": version,
            "build": build,
            "channel": "https://conda.anaconda.org/conda-forge/linux-64",
            "files": files,
        }
        (meta / f"{name}-{version}-{build}.json").write_text(json.dumps(doc))
    return root


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home" / "alice"
    h.mkdir(parents=True)
    return h


def names(found: tuple[PipRecord, ...]) -> list[tuple[str, str]]:
    return sorted((r.name, r.version) for r in found)


def test_user_site_records_are_read_with_installer_and_source(home: Path) -> None:
    site = home / SITE
    dist(site, "requests", "2.32.3")
    dist(site, "Foo_Bar", "1.0", installer="uv", requested=False)
    dist(
        site,
        "mylib",
        "0.1",
        direct_url={"url": "file:///home/alice/mylib", "dir_info": {"editable": True}},
    )
    found = read_home(home, PY)
    assert names(found.pip) == [("Foo_Bar", "1.0"), ("mylib", "0.1"), ("requests", "2.32.3")]
    by_name = {r.name: r for r in found.pip}
    assert by_name["requests"] == PipRecord(
        "requests", "2.32.3", "pip", "~/" + SITE, source="", url="", requested=True
    )
    assert by_name["Foo_Bar"].installer == "uv" and not by_name["Foo_Bar"].requested
    assert by_name["mylib"].source == "editable"
    assert found.skipped == ()


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (None, ("", "")),
        ({"url": "https://x/a.whl", "archive_info": {}}, ("archive", "https://x/a.whl")),
        ({"url": "git+https://x/r", "vcs_info": {"vcs": "git"}}, ("vcs", "git+https://x/r")),
        ({"url": "file:///p", "dir_info": {}}, ("directory", "file:///p")),
        ({"url": "file:///p", "dir_info": {"editable": True}}, ("editable", "file:///p")),
        ({"url": "file:///p", "dir_info": {"editable": "yes"}}, ("directory", "file:///p")),
        ({"url": 3}, ("unknown", "")),
        ({"url": "x"}, ("unknown", "x")),
        ("not json", ("unknown", "")),
        ([1, 2], ("unknown", "")),
    ],
)
def test_direct_url_json(doc: object, expected: tuple[str, str]) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    data = None if doc is None else text.encode()
    assert direct_url_source(data) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Name: a\nVersion: 1\n", ("a", "1")),
        ("Metadata-Version: 2.1\nVersion: 2\nName:  b \n\nName: c", ("b", "2")),
        ("Name: a\n\nVersion: 1\n", None),  # Version only in the body
        ("Name: a\n", None),
        ("", None),
        ("Name: a\nVersion: 1\nName: evil\n", ("a", "1")),  # first wins
    ],
)
def test_metadata_header_fields(text: str, expected: tuple[str, str] | None) -> None:
    assert metadata_fields(text.encode()) == expected


def test_other_python_versions_are_reported_not_read(home: Path) -> None:
    dist(home / ".local/lib/python3.10/site-packages", "old", "1.0")
    dist(home / SITE, "new", "1.0")
    found = read_home(home, PY)
    assert names(found.pip) == [("new", "1.0")]
    assert len(found.skipped) == 1
    assert "Python 3.10" in found.skipped[0].reason and "3.11" in found.skipped[0].reason


def test_a_symlinked_local_to_elsewhere_is_not_followed(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "hub-secrets"
    dist(outside / "lib/python3.11/site-packages", "secret-token-abc", "1.0")
    (home / ".local").symlink_to(outside)
    assert read_home(home, PY).pip == ()


def test_symlinks_inside_site_packages_are_not_followed(home: Path, tmp_path: Path) -> None:
    site = home / SITE
    dist(site, "good", "1.0")
    outside = dist(tmp_path / "elsewhere", "stolen", "9.9")
    (site / "stolen-9.9.dist-info").symlink_to(outside)
    linked = dist(site, "linkedmeta", "1.0")
    (linked / "METADATA").unlink()
    (linked / "METADATA").symlink_to(outside / "METADATA")
    (site / "python3.11").symlink_to(site)  # a loop
    found = read_home(home, PY)
    assert names(found.pip) == [("good", "1.0")]
    reasons = sorted(s.reason for s in found.skipped)
    assert any("no readable METADATA" in r for r in reasons)
    assert any("is a link or not a folder" in r for r in reasons)


def test_a_fifo_or_huge_file_does_not_block_or_exhaust(home: Path) -> None:
    site = home / SITE
    fifo = dist(site, "fifo", "1.0", installer=None)
    os.mkfifo(fifo / "INSTALLER")  # a blocking read would hang the hub
    huge = dist(site, "huge", "1.0")
    with (huge / "direct_url.json").open("wb") as f:
        f.truncate(records.SMALL_FILE + 1)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read_home, home, PY)
        try:
            result = reading.result(timeout=20)
        except FutureTimeout:
            os.close(os.open(fifo / "INSTALLER", os.O_WRONLY | os.O_NONBLOCK))  # unblock it
            pytest.fail("reading a home with a FIFO in it blocked")
    found = {r.name: r for r in result.pip}
    assert found["fifo"].installer == ""
    assert found["huge"].source == "unknown"


def test_metadata_is_read_only_up_to_its_head(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = dist(home / SITE, "big", "1.0")
    with (d / "METADATA").open("a") as f:
        f.write("x" * 10_000)
    monkeypatch.setattr(records, "METADATA_HEAD", 200)
    assert names(read_home(home, PY).pip) == [("big", "1.0")]


def test_the_read_budget_stops_reading(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        dist(home / SITE, f"p{i}", "1.0")
    monkeypatch.setattr(records, "READ_BUDGET", 250)
    found = read_home(home, PY)
    assert 0 < len(found.pip) < 5
    assert any("no readable METADATA" in s.reason for s in found.skipped)


def test_too_many_packages_are_capped(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(4):
        dist(home / SITE, f"p{i}", "1.0")
    monkeypatch.setattr(records, "MAX_DISTS", 2)
    found = read_home(home, PY)
    assert len(found.pip) == 2
    assert any("over 2 packages" in s.reason for s in found.skipped)


def test_legacy_installs_are_reported(home: Path) -> None:
    site = home / SITE
    site.mkdir(parents=True)
    (site / "oldpkg-1.0-py3.11.egg-info").mkdir()
    (site / "devpkg.egg-link").write_text("/home/alice/src/devpkg\n.")
    found = read_home(home, PY)
    assert found.pip == ()
    assert len(found.skipped) == 2
    assert all("without pip's records" in s.reason for s in found.skipped)


def test_hostile_folder_names_are_shown_escaped(home: Path) -> None:
    site = home / SITE
    site.mkdir(parents=True)
    (site / "evil\n$(id)\x1b[31m.dist-info").mkdir()
    found = read_home(home, PY)
    (skip,) = found.skipped
    assert "\n" not in skip.what and "\x1b" not in skip.what
    assert "\\n" in skip.what


def test_hostile_metadata_values_are_returned_raw_for_validation(home: Path) -> None:
    dist(home / SITE, "x; rm -rf /", "1.0 --index-url=https://evil.example", folder="x.dist-info")
    (record,) = read_home(home, PY).pip
    assert record.name == "x; rm -rf /"  # plan.py refuses it; records only reads


def conda_files(dist_info: str) -> list[str]:
    return [f"lib/python3.11/site-packages/{dist_info}/METADATA", "lib/libx.so"]


def test_conda_environments_are_listed_and_read(home: Path) -> None:
    base = conda_env(home / "miniconda3", [("python", "3.11.9", "h1_0", ["bin/python3.11"])])
    env = conda_env(
        home / "miniconda3/envs/torch",
        [
            ("numpy", "1.26.4", "py311h_0", conda_files("numpy-1.26.4.dist-info")),
            ("libsndfile", "1.2.2", "hc_1", ["lib/libsndfile.so"]),
        ],
    )
    dist(env / "lib/python3.11/site-packages", "numpy", "1.26.4", installer="conda")
    dist(env / "lib/python3.11/site-packages", "einops", "0.8.0")
    conda_env(home / ".conda/envs/other", [])
    (home / "miniconda3/envs/notanenv").mkdir()
    assert base.is_dir()
    assert list_conda_envs(home) == (".conda/envs/other", "miniconda3", "miniconda3/envs/torch")
    found = read_home(home, PY, ["miniconda3/envs/torch"])
    assert names(found.pip) == [("einops", "0.8.0"), ("numpy", "1.26.4")]
    assert {r.location for r in found.pip} == {
        "~/miniconda3/envs/torch/lib/python3.11/site-packages"
    }
    by_name = {r.name: r for r in found.conda}
    assert by_name["numpy"].python_dists == ("numpy-1.26.4.dist-info",)
    assert by_name["libsndfile"].python_dists == ()
    assert by_name["numpy"].env == "miniconda3/envs/torch"


@pytest.mark.parametrize("env", ["../bob/miniconda3", "/etc", "miniconda3/envs/../../..", "x"])
def test_only_listed_conda_environments_are_opened(home: Path, env: str) -> None:
    conda_env(home / "miniconda3", [])
    found = read_home(home, PY, [env])
    assert found.conda == () and found.pip == ()
    assert found.skipped[0].reason == "is not a conda environment in your home"


def test_a_symlinked_conda_env_is_not_an_env(home: Path, tmp_path: Path) -> None:
    other = conda_env(tmp_path / "bob-env", [("secret", "1", "0", [])])
    (home / ".conda/envs").mkdir(parents=True)
    (home / ".conda/envs/stolen").symlink_to(other)
    assert list_conda_envs(home) == ()


@pytest.mark.parametrize(
    ("filename", "doc", "expected"),
    [
        (
            "a-1.0-0.json",
            {"name": "a", "version": "1.0", "build": "0", "channel": "c"},
            ("a", "1.0", "0"),
        ),
        ("foo-bar-2.1-py_0.json", {"channel": "c"}, ("foo-bar", "2.1", "py_0")),
        ("x-1-0.json", {"name": 3}, None),
        ("x-1-0.json", [1], None),
        ("nodashes.json", {}, None),
        ("x-1-0.json", {"channel": ["not", "a", "string"]}, None),
    ],
)
def test_conda_record_fields(filename: str, doc: object, expected: tuple | None) -> None:
    found = records.conda_record(json.dumps(doc).encode(), filename, "e")
    assert (found and (found.name, found.version, found.build)) == (expected or None)


def test_unreadable_conda_records_are_reported(home: Path) -> None:
    env = conda_env(home / "miniconda3", [("ok", "1", "0", [])])
    (env / "conda-meta/broken-1-0.json").write_text("{not json")
    found = read_home(home, PY, ["miniconda3"])
    assert [r.name for r in found.conda] == ["ok"]
    assert [s.reason for s in found.skipped] == ["is not a readable conda record"]


# ------------------------------------------------------------------ a hostile home's costs
class _Counting:
    """``os.scandir`` counting the entries a reader takes from every folder it lists."""

    def __init__(self) -> None:
        self.entries = 0
        self.real = os.scandir

    def __call__(self, path: Any) -> Any:
        counter, inner = self, self.real(path)

        class _It:
            def __enter__(self) -> _It:
                return self

            def __exit__(self, *exc: object) -> None:
                inner.close()

            def __iter__(self) -> _It:
                return self

            def __next__(self) -> os.DirEntry[str]:
                entry = next(inner)
                counter.entries += 1
                return entry

        return _It()


@pytest.fixture
def scandir(monkeypatch: pytest.MonkeyPatch) -> _Counting:
    counting = _Counting()
    monkeypatch.setattr(os, "scandir", counting)
    return counting


def test_finding_environments_opens_conda_meta_without_listing_it(
    home: Path, scandir: _Counting
) -> None:
    for n in range(3):
        meta = home / f"miniconda3/envs/e{n}/conda-meta"
        meta.mkdir(parents=True)
        for i in range(300):
            (meta / f"p{i}-1-0.json").write_text("{}")
    assert list_conda_envs(home) == ("miniconda3/envs/e0", "miniconda3/envs/e1",
                                     "miniconda3/envs/e2")  # fmt: skip
    assert scandir.entries < 20  # was every record of every environment: 900


def test_other_pythons_are_noticed_without_listing_them(home: Path, scandir: _Counting) -> None:
    for minor in range(20, 40):
        site = home / f".local/lib/python3.{minor}/site-packages"
        site.mkdir(parents=True)
        for i in range(100):
            (site / f"f{i}").write_text("")
    dist(home / SITE, "mine", "1.0")
    found = read_home(home, PY)
    assert names(found.pip) == [("mine", "1.0")]
    assert scandir.entries < 100  # was every file of every other Python: 2,000
    assert 0 < len(found.skipped) <= records.MAX_OTHER_PYTHONS + 1
    assert "Python 3.20" in found.skipped[0].reason


def test_reading_one_environment_does_not_walk_all_of_them(home: Path, scandir: _Counting) -> None:
    for n in range(500):
        (home / f"miniconda3/envs/e{n:03}/conda-meta").mkdir(parents=True)
    conda_env(home / "miniconda3/envs/mine", [("ok", "1", "0", [])])
    found = read_home(home, PY, ["miniconda3/envs/mine"])
    assert [r.name for r in found.conda] == ["ok"]
    assert scandir.entries < 50  # was every environment of the home: over 500


def test_the_listing_is_capped(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(12):
        (home / f".conda/envs/e{n:02}/conda-meta").mkdir(parents=True)
    monkeypatch.setattr(records, "MAX_ENVS", 5, raising=False)
    assert list_conda_envs(home) == tuple(f".conda/envs/e{n:02}" for n in range(5))


def test_only_plain_environment_names_are_listed_or_read(home: Path) -> None:
    envs = home / "miniconda3/envs"
    for name in ("ok-1.2_x", "a\nb", "<img src=x>", "x" * 120):
        (envs / name / "conda-meta").mkdir(parents=True)
    os.makedirs(os.fsencode(envs) + b"/\xff\xfe/conda-meta")
    assert list_conda_envs(home) == ("miniconda3/envs/ok-1.2_x",)
    found = read_home(home, PY, ["miniconda3/envs/a\nb"])
    assert found.skipped[0].reason == "is not a conda environment in your home"


def test_the_packages_read_from_a_home_are_capped_in_all(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for env in ("miniconda3", "miniconda3/envs/a"):
        conda_env(home / env, [])
        for i in range(3):
            dist(home / env / "lib/python3.11/site-packages", f"{env[-1]}p{i}", "1.0")
    for i in range(3):
        dist(home / SITE, f"local{i}", "1.0")
    monkeypatch.setattr(records, "MAX_DISTS_TOTAL", 5, raising=False)
    found = read_home(home, PY, ["miniconda3", "miniconda3/envs/a"])
    assert len(found.pip) == 5  # was all 9
    assert any("over 5 packages in all" in s.reason for s in found.skipped)


def test_deeply_nested_json_is_unreadable_not_a_crash(home: Path) -> None:
    dist(home / SITE, "deep", "1.0", direct_url="[" * 60_000)
    env = conda_env(home / "miniconda3", [("ok", "1", "0", [])])
    (env / "conda-meta/deep-1-0.json").write_text("[" * 200_000)
    found = read_home(home, PY, ["miniconda3"])  # was RecursionError out of json.loads
    assert [r.source for r in found.pip] == ["unknown"]
    assert [r.name for r in found.conda] == ["ok"]
    assert [s.reason for s in found.skipped] == ["is not a readable conda record"]


def test_a_conda_record_of_millions_of_tiny_items_is_not_parsed(home: Path) -> None:
    import tracemalloc

    env = conda_env(home / "miniconda3", [])
    # 3 MiB of '[],' is a million lists: about 64 MiB in the hub once parsed (the cap
    # was 32 MiB per record, over 700 MiB in the hub)
    body = b'{"name": "bomb", "version": "1", "build": "0", "channel": "c", "files": ['
    (env / "conda-meta/bomb-1-0.json").write_bytes(body + b"[]," * 1_000_000 + b"[]]}")
    tracemalloc.start()
    try:
        found = read_home(home, PY, ["miniconda3"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found.conda == ()
    assert [s.reason for s in found.skipped] == ["is not a readable conda record"]
    assert peak < 16 * 2**20, f"reading the record took {peak / 2**20:.0f} MiB"


class _SlowOs:
    """``os`` as seen over a home on a slow file server: each open takes 5 ms."""

    def __init__(self) -> None:
        self.real_open = os.open

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def open(self, *args: Any, **kwargs: Any) -> int:
        import time

        time.sleep(0.005)
        return self.real_open(*args, **kwargs)


def test_reading_a_home_stops_at_its_deadline(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyterhub_gpu.errors import SaveError

    for i in range(400):  # ~3,000 opens: 15 s at 5 ms each
        dist(home / SITE, f"p{i}", "1.0")
    monkeypatch.setattr(records, "os", _SlowOs())
    monkeypatch.setattr(records, "READ_SECONDS", 0.5, raising=False)
    pool = ThreadPoolExecutor(1)
    reading = pool.submit(read_home, home, PY)
    try:
        with pytest.raises(SaveError, match="took longer than") as caught:
            reading.result(timeout=5)
    except FutureTimeout:
        pytest.fail("reading a slow home went on past its deadline (5 s and counting)")
    finally:
        pool.shutdown(wait=False)
    assert "Remove environments and packages you no longer use" in str(caught.value)


def test_listing_a_slow_home_stops_at_its_deadline_with_what_it_found(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(2000):
        (home / f".conda/envs/e{n:04}/conda-meta").mkdir(parents=True)
    monkeypatch.setattr(records, "os", _SlowOs())
    monkeypatch.setattr(records, "LIST_SECONDS", 0.3, raising=False)
    pool = ThreadPoolExecutor(1)
    listing = pool.submit(list_conda_envs, home)
    try:
        found = listing.result(timeout=5)
    except FutureTimeout:
        pytest.fail("listing a slow home went on past its deadline (5 s and counting)")
    finally:
        pool.shutdown(wait=False)
    assert 0 < len(found) < 2000


def test_thousands_of_fake_environment_folders_are_not_all_opened(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(1500):
        (home / f"miniconda3/envs/fake{n:04}").mkdir(parents=True)  # no conda-meta
    conda_env(home / ".conda/envs/real", [])
    opened: list[object] = []

    class _CountingOs:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def open(self, *args: Any, **kwargs: Any) -> int:
            opened.append(args[0])
            return os.open(*args, **kwargs)

    monkeypatch.setattr(records, "os", _CountingOs())
    assert list_conda_envs(home) == (".conda/envs/real",)
    # four opens per folder looked into (no link followed): was all 1,500 folders, 6,023 opens
    assert len(opened) < 4 * records.MAX_ENV_CANDIDATES + 50


def test_names_not_utf8_or_very_long_are_shown_escaped_and_short(home: Path) -> None:
    site = home / SITE
    site.mkdir(parents=True)
    os.mkdir(os.fsencode(site) + b"/\xff\xfe-1.0.dist-info")  # no METADATA: skipped
    (site / ("x" * 240 + ".dist-info")).mkdir()
    (site / ("y" * 245 + ".egg-info")).mkdir()
    found = read_home(home, PY)
    assert found.pip == () and len(found.skipped) == 3
    for skip in found.skipped:
        assert len(skip.what) <= 130 and skip.what.isascii() and skip.what.isprintable()
    assert any("\\udcff\\udcfe" in s.what for s in found.skipped)


def test_the_notes_on_what_was_left_out_are_capped(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = home / SITE
    site.mkdir(parents=True)
    for i in range(300):  # a note each: legacy installs and folders with no METADATA
        (site / f"old{i}-1.0.egg-info").mkdir()
        (site / f"bare{i}-1.0.dist-info").mkdir()
    monkeypatch.setattr(records, "MAX_SKIPPED", 50, raising=False)
    found = read_home(home, PY)
    assert len(found.skipped) == 51  # was 600
    assert "550 more" in found.skipped[-1].what
