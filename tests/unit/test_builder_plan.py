"""From records to what a saved image contains (pure)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.saving.data import (
    BuilderPolicy,
    CondaRecord,
    HomeRecords,
    InvalidPackage,
    PipRecord,
    PipRequirement,
    Skipped,
    Target,
)
from jupyterhub_gpu.core.saving.plan import plan_save

pytestmark = pytest.mark.unit
LOC = "~/.local/lib/python3.11/site-packages"
TARGET = Target(python=(3, 11), machine="x86_64", glibc=(2, 36))
TORCH_INDEX = "https://download.pytorch.org/whl/"


def rec(name: str, version: str, **kw: str) -> PipRecord:
    return PipRecord(name, version, kw.pop("installer", "pip"), kw.pop("location", LOC), **kw)  # type: ignore[arg-type]


def plan(*pip: PipRecord, target: Target = TARGET, **policy: object):  # type: ignore[no-untyped-def]
    return plan_save(HomeRecords(pip=pip), BuilderPolicy(**policy), target)  # type: ignore[arg-type]


def test_index_installs_become_pinned_sorted_requirements() -> None:
    p = plan(rec("Requests", "2.32.3"), rec("einops", "0.8.0", installer="uv"))
    assert [r.spec for r in p.pip] == ["einops==0.8.0", "requests==2.32.3"]
    assert p.packages == ("pip:einops==0.8.0", "pip:requests==2.32.3")
    assert p.skipped == () and p.replaces == () and not p.empty


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (rec("x", "1", installer="debian"), "was installed by 'debian'"),
        (rec("x", "1", installer=""), "was installed by an unknown tool"),
        (rec("x", "1", source="editable", url="file:///home/a/x"), "editable install"),
        (rec("x", "1", source="directory", url="file:///home/a/x"), "from a folder"),
        (rec("x", "1", source="vcs", url="git+https://evil/x"), "version-control URL"),
        (rec("x", "1", source="archive", url="https://evil.example/x-1.whl"), "not one of"),
        (rec("x", "1", source="archive", url="file:///home/a/x-1.whl"), "not one of"),
        (rec("x", "1", source="unknown"), "unreadable record"),
        (rec("x", "1", source="whatever"), "unreadable record"),
        (rec("jupyterhub", "5.0.0"), "keeps its own jupyterhub"),
        (rec("Pip", "24.0"), "keeps its own pip"),
        (rec("x; rm -rf /", "1"), "not a valid Python package name"),
        (rec("--index-url=https://evil/simple", "1"), "not a valid Python package name"),
        (rec("x", "1 --extra-index-url https://evil"), "not a valid Python package version"),
        (rec("x", "1." * 40), "not a valid Python package version"),
        (rec("\u212aeras", "1"), "not a valid Python package name"),
    ],
)
def test_what_is_left_out_says_why(record: PipRecord, reason: str) -> None:
    p = plan(record, rec("ok", "1.0"))
    assert [r.spec for r in p.pip] == ["ok==1.0"]
    (skip,) = p.skipped
    assert reason in skip.reason
    assert "\n" not in skip.what and len(skip.what) < 200


def test_a_direct_url_under_an_allowed_index_is_fetched_by_name_and_version() -> None:
    r = rec("torch", "2.3.1+cu121", source="archive", url=TORCH_INDEX + "cu121/torch-2.3.1.whl")
    assert plan(r).skipped != ()
    p = plan(r, allowed_index_urls=(TORCH_INDEX,))
    assert p.pip == (PipRequirement("torch", "2.3.1+cu121"),) and p.skipped == ()


def test_packages_the_base_has_are_dropped_or_replaced() -> None:
    target = Target((3, 11), "x86_64", (2, 36), installed=(("numpy", "1.26.4"), ("six", "1.16.0")))
    p = plan(rec("numpy", "1.26.4"), rec("six", "1.17.0"), rec("idna", "3.10"), target=target)
    assert [r.spec for r in p.pip] == ["idna==3.10", "six==1.17.0"]
    assert p.replaces == ("six",)


def test_the_same_package_twice_in_one_version_is_one_requirement() -> None:
    p = plan(rec("a", "1.0"), rec("A", "1.0", location="~/miniconda3/lib/python3.11/site-packages"))
    assert [r.spec for r in p.pip] == ["a==1.0"]


def test_the_same_package_in_two_versions_is_the_users_choice() -> None:
    with pytest.raises(
        InvalidPackage, match=r"installed twice: 1.0 in ~/.local.* and 2.0 in ~/mini"
    ):
        plan(rec("a", "1.0"), rec("a", "2.0", location="~/miniconda3/lib/python3.11/site-packages"))


def test_too_many_packages_are_refused_with_the_numbers() -> None:
    with pytest.raises(
        InvalidPackage, match="adds 3 Python packages; a saved image may add at most 2"
    ):
        plan(rec("a", "1"), rec("b", "1"), rec("c", "1"), max_packages=2)


def test_conda_packages_python_or_not() -> None:
    found = HomeRecords(
        pip=(
            rec("numpy", "1.26.4", installer="conda", location="~/mc/lib/python3.11/site-packages"),
        ),
        conda=(
            CondaRecord(
                "numpy", "1.26.4", "py311_0", "conda-forge", "mc", ("numpy-1.26.4.dist-info",)
            ),
            CondaRecord("python", "3.11.9", "h_0", "conda-forge", "mc"),
            CondaRecord("openssl", "3.3", "h_0", "conda-forge", "mc"),
            CondaRecord("libsndfile", "1.2.2", "h_0", "conda-forge", "mc"),
        ),
    )
    p = plan_save(found, BuilderPolicy(), TARGET)
    assert [r.spec for r in p.pip] == ["numpy==1.26.4"]
    assert [s.what for s in p.skipped] == [
        "conda package 'libsndfile' '1.2.2' in ~/mc",
        "2 conda package(s) of the Python runtime (python, openssl, ...)",
    ]


def test_records_skipped_while_reading_are_kept() -> None:
    found = HomeRecords(skipped=(Skipped("~/x", "is a link"),))
    p = plan_save(found, BuilderPolicy(), TARGET)
    assert p.skipped == (Skipped("~/x", "is a link"),) and p.empty


def test_debian_packages_must_be_on_the_list() -> None:
    policy = BuilderPolicy(apt_allowlist=frozenset({"ffmpeg"}))
    assert plan_save(HomeRecords(), policy, TARGET, apt=["ffmpeg"]).apt == ("ffmpeg",)
    with pytest.raises(InvalidPackage, match="'curl' is not on this hub's list"):
        plan_save(HomeRecords(), policy, TARGET, apt=["ffmpeg", "curl"])
    with pytest.raises(InvalidPackage, match="not on this hub's list"):
        plan_save(HomeRecords(), BuilderPolicy(), TARGET, apt=["ffmpeg"])
