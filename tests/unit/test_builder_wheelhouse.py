"""Fetching wheels outside the build: pip's command line, its failures, the result check.

pip itself is replaced by an injected runner (no network); one test runs the real pip
against a local folder of wheels with ``--no-index`` (offline operation).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.saving.data import FetchFailed, PipRequirement, Target
from jupyterhub_gpu.edges.builder.wheelhouse import (
    MAX_PLATFORM_TAGS,
    IndexSettings,
    check_wheels,
    download_argv,
    failure_message,
    fetch_wheels,
    platform_tags,
)

pytestmark = pytest.mark.unit
TARGET = Target((3, 10), "x86_64", (2, 35))
REQS = [PipRequirement("einops", "0.8.0"), PipRequirement("torch", "2.3.1+cu121")]


def test_platform_tags_cover_every_manylinux_the_glibc_runs() -> None:
    tags = platform_tags(TARGET)
    assert tags[:2] == ["manylinux_2_35_x86_64", "manylinux_2_34_x86_64"]
    assert "manylinux2014_x86_64" in tags and "manylinux2010_x86_64" in tags
    assert tags[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]
    arm = platform_tags(Target((3, 11), "aarch64", (2, 17)))
    assert arm == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]


@pytest.mark.parametrize(
    "target",
    [
        Target((3, 11), "x86_64", None),
        Target((3, 11), "riscv64", (2, 36)),
        Target((3, 11), "x86_64", (3, 1)),
    ],
)
def test_unknown_libc_or_machine_means_pure_python_wheels_only(target: Target) -> None:
    assert platform_tags(target) == ["any"]


@pytest.mark.parametrize(
    "glibc", [(2, 1_000_000_000), (2, 10**100), (2, 100), (2, -5), (2, 4), (2, 0), (-1, 35)]
)
def test_platform_tags_are_bounded_whatever_the_target_says(glibc: tuple[int, int]) -> None:
    # the forged probe answer of issue 24: 2.1000000000 would loop a billion times
    for machine in ("x86_64", "aarch64", "i686"):
        assert platform_tags(Target((3, 11), machine, glibc)) == ["any"]


def test_platform_tags_never_yield_more_than_the_cap() -> None:
    for machine in ("x86_64", "i686", "aarch64", "ppc64le", "s390x", "riscv64"):
        for minor in range(-3, 200):
            tags = platform_tags(Target((3, 11), machine, (2, minor)))
            assert 1 <= len(tags) <= MAX_PLATFORM_TAGS
    newest = platform_tags(Target((3, 11), "x86_64", (2, 99)))
    assert newest[0] == "manylinux_2_99_x86_64" and newest[-1] == "manylinux1_x86_64"
    # under the machine's floor: no manylinux tag applies, never an empty list (pip would
    # then fetch for the hub's own platform)
    assert platform_tags(Target((3, 11), "aarch64", (2, 12))) == ["any"]


def test_the_download_command_line() -> None:
    index = IndexSettings(
        index_url="https://mirror.example/simple/",
        extra_index_urls=("https://download.pytorch.org/whl/cu121",),
        trusted_hosts=("mirror.example",),
        cert="/etc/ssl/site-ca.pem",
        socket_timeout_s=7,
        retries=0,
    )
    argv = download_argv(REQS, Path("/tmp/w"), TARGET, index, python="/hub/bin/python")
    assert argv[:9] == [
        "/hub/bin/python",
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--dest",
        "/tmp/w",
    ]
    joined = " ".join(argv)
    assert "--python-version 3.10 --implementation cp --abi cp310 --abi abi3 --abi none" in joined
    assert "--platform manylinux_2_35_x86_64" in joined
    assert "--timeout 7 --retries 1" in joined  # at least one retry: pip only says why then
    assert "--index-url" not in joined  # no index given: pip's configured one
    assert "--extra-index-url" not in joined  # never: one index per run
    argv = download_argv(REQS, Path("/w"), TARGET, index, "/p", "https://download.pytorch.org/w")
    assert argv[argv.index("--index-url") + 1] == "https://download.pytorch.org/w"
    assert "--extra-index-url" not in argv
    assert "--trusted-host mirror.example --cert /etc/ssl/site-ca.pem" in joined
    assert argv[-3:] == ["--", "einops==0.8.0", "torch==2.3.1+cu121"]


def test_offline_mirror_options() -> None:
    argv = download_argv(
        REQS,
        Path("/w"),
        TARGET,
        IndexSettings(no_index=True, index_url="https://ignored", find_links=("/srv/wheels",)),
    )
    assert "--no-index" in argv and "--index-url" not in argv
    assert argv[argv.index("--find-links") + 1] == "/srv/wheels"


NOT_FOUND = (
    "Looking in indexes: https://mirror.example/simple\n"
    "ERROR: Could not find a version that satisfies the requirement torch==2.3.1+cu121 "
    "(from versions: 2.3.0)\n"
    "ERROR: No matching distribution found for torch==2.3.1+cu121\n"
)
UNREACHABLE = (  # pip 26, an index on a closed port, --retries 1
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError(\"HTTPConnection(host='127.0.0.1', "
    "port=9): Failed to establish a new connection: [Errno 111] Connection refused\")': "
    "/simple/six/\n"
    "ERROR: Could not find a version that satisfies the requirement six==1.16.0 "
    "(from versions: none)\n"
    "ERROR: No matching distribution found for six==1.16.0\n"
)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            NOT_FOUND,
            "Package 'torch==2.3.1+cu121' was not found as a wheel for Python 3.10 "
            "(x86_64) in the site's index; remove it from your environment or ask your admin.",
        ),
        (UNREACHABLE, "The site's package index could not be reached from the hub"),
        ("ERROR: HTTP error 403 while getting https://m/x.whl", "refused the hub's request"),
        (
            "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.",
            "did not match its published hash",
        ),
        (
            "ERROR: Something odd at https://user:s3cret@mirror/simple",
            "Fetching your packages "
            "failed (Something odd at https://***@mirror/simple); tell your admin.",
        ),
        ("", "Fetching your packages failed (no error message); tell your admin."),
    ],
)
def test_pip_failures_become_sentences(output: str, expected: str) -> None:
    message = failure_message(output, REQS, TARGET)
    assert expected in message
    assert "s3cret" not in message


FAKE_PYTHON = """
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "fake.json")) as f:
    cfg = json.load(f)
env = {k: os.environ.get(k) for k in ("PIP_NO_INPUT", "PIP_EXTRA_INDEX_URL", "TMPDIR")}
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "env": env}) + "\\n")
dest = sys.argv[sys.argv.index("--dest") + 1]
for name in cfg["files"]:
    with open(os.path.join(dest, name), "wb") as f:
        f.write(b"PK\\x05\\x06" + bytes(18))  # an empty, valid zip
sys.stderr.write(cfg["stderr"])
time.sleep(cfg["sleep"])
sys.exit(cfg["returncode"])
"""


class FakePip:
    """The hub's Python running ``-m pip``, replaced by a script that records its command
    line and environment and leaves the files it is told to (as empty zips)."""

    def __init__(
        self,
        folder: Path,
        files: list[str],
        returncode: int = 0,
        stderr: str = "",
        sleep: float = 0,
    ) -> None:
        self.folder = folder / "fake-python"
        self.folder.mkdir()
        script = self.folder / "python"
        script.write_text(f"#!{sys.executable}\n{FAKE_PYTHON}")
        script.chmod(0o755)
        self.python = str(script)
        config = {"files": files, "returncode": returncode, "stderr": stderr, "sleep": sleep}
        (self.folder / "fake.json").write_text(json.dumps(config))

    @property
    def calls(self) -> list[dict[str, Any]]:
        path = self.folder / "calls.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]


WHEELS = ["einops-0.8.0-py3-none-any.whl", "torch-2.3.1+cu121-cp310-cp310-linux_x86_64.whl"]


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    folder = tmp_path / "dest"
    folder.mkdir()
    return folder


def test_fetch_returns_one_wheel_per_requirement(tmp_path: Path, dest: Path) -> None:
    pip = FakePip(tmp_path, WHEELS)
    found = fetch_wheels(REQS, dest, TARGET, IndexSettings(timeout_s=42), python=pip.python)
    assert [p.name for p in found] == WHEELS
    (call,) = pip.calls
    assert call["argv"][:3] == ["-m", "pip", "download"]
    assert call["env"]["PIP_NO_INPUT"] == "1"
    assert call["env"]["PIP_EXTRA_INDEX_URL"] == " "  # pip.conf's extra indexes: off
    assert call["env"]["TMPDIR"] == str(dest / ".pip-tmp")  # watched, then removed
    assert sorted(p.name for p in dest.iterdir()) == sorted(WHEELS)


@pytest.mark.parametrize(
    ("files", "match"),
    [
        (WHEELS[:1], "'torch==2.3.1\\+cu121' was not fetched"),
        ([*WHEELS, "evil-1.0-py3-none-any.whl"], "unexpected file 'evil-1.0"),
        ([*WHEELS, "einops-0.8.0.tar.gz"], "which is not a wheel"),
        (["einops-0.8.1-py3-none-any.whl", WHEELS[1]], "unexpected file"),
    ],
)
def test_fetch_checks_what_pip_left(
    tmp_path: Path, dest: Path, files: list[str], match: str
) -> None:
    pip = FakePip(tmp_path, files)
    with pytest.raises(FetchFailed, match=match):
        fetch_wheels(REQS, dest, TARGET, IndexSettings(), python=pip.python)


def test_a_symlink_in_the_wheelhouse_is_refused(tmp_path: Path) -> None:
    (tmp_path / WHEELS[0]).write_bytes(b"PK")
    (tmp_path / WHEELS[1]).symlink_to("/etc/passwd")
    with pytest.raises(FetchFailed, match="unexpected file"):
        check_wheels(tmp_path, REQS)


def test_fetch_failures_and_timeouts(tmp_path: Path, dest: Path) -> None:
    failing = FakePip(tmp_path, [], returncode=1, stderr=NOT_FOUND)
    with pytest.raises(FetchFailed, match=r"'torch==2\.3\.1\+cu121' was not found"):
        fetch_wheels(REQS, dest, TARGET, IndexSettings(), python=failing.python)
    (tmp_path / "slow").mkdir()
    slow = FakePip(tmp_path / "slow", [], sleep=60)
    with pytest.raises(FetchFailed, match="took more than 1 s"):
        fetch_wheels(REQS, dest, TARGET, IndexSettings(timeout_s=1), python=slow.python)


def test_each_name_is_fetched_from_one_index_by_one_pip_run(tmp_path: Path, dest: Path) -> None:
    """``einops`` is listed by the first extra index (a ``file://`` folder here), so it
    is fetched from there only; ``torch`` by none, so from ``index_url``."""
    private = tmp_path / "private"
    (private / "einops").mkdir(parents=True)
    (private / "einops" / "index.html").write_text("<a href='x'>x</a>")
    (tmp_path / "empty").mkdir()
    pip = FakePip(tmp_path, [])
    index = IndexSettings(
        index_url="https://mirror.example/simple/",
        extra_index_urls=((tmp_path / "empty").as_uri(), private.as_uri()),
    )
    with pytest.raises(FetchFailed, match="not fetched"):  # the stand-in fetched nothing
        fetch_wheels(REQS, dest, TARGET, index, python=pip.python)
    runs = [(c["argv"][c["argv"].index("--index-url") + 1], c["argv"][-1]) for c in pip.calls]
    assert runs == [
        (private.as_uri(), "einops==0.8.0"),
        ("https://mirror.example/simple/", "torch==2.3.1+cu121"),
    ]
    assert not any("--extra-index-url" in c["argv"] for c in pip.calls)


def test_real_pip_fetches_from_an_offline_folder(tmp_path: Path) -> None:
    from tests.unit.test_builder_recipe import make_wheel

    mirror, dest = tmp_path / "mirror", tmp_path / "dest"
    mirror.mkdir()
    dest.mkdir()
    make_wheel(mirror, "tiny_pkg", "0.1", {"tiny_pkg/__init__.py": ""})
    make_wheel(mirror, "tiny_pkg", "0.2", {"tiny_pkg/__init__.py": ""})
    index = IndexSettings(no_index=True, find_links=(str(mirror),), timeout_s=120)
    here = Target((sys.version_info.major, sys.version_info.minor), "x86_64", (2, 36))
    found = fetch_wheels([PipRequirement("tiny-pkg", "0.1")], dest, here, index)
    assert [p.name for p in found] == ["tiny_pkg-0.1-py3-none-any.whl"]
    with pytest.raises(FetchFailed, match=r"'tiny-pkg==0\.3' was not found as a wheel"):
        fetch_wheels([PipRequirement("tiny-pkg", "0.3")], tmp_path, here, index)
