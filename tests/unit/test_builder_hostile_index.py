"""A save whose package index is hostile (issue 24, items 2 and 5, hub side): a download
that grows past the limit, pip flooding its output, a wheel that unpacks past the limit, a
zip bomb, and dependency confusion between two indexes.

Each test runs a whole save (fake home, fake engine) as the hub runs it, so it fails on
the code before the fix too. pip is the real one against local folders or two local
simple indexes on 127.0.0.1, or a stand-in ``pip`` package put first on ``PYTHONPATH``
(the hub runs ``python -m pip``) that writes or prints as an attacker's index would make
it; the stand-in records how much it wrote in a file outside the watched folder.
"""

from __future__ import annotations

import functools
import os
import threading
import tracemalloc
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jupyterhub_gpu.core.saving.data import InvalidPackage, LimitReached, SaveError
from jupyterhub_gpu.core.saving.limits import Limits
from jupyterhub_gpu.edges.builder.save import SaveSettings, save_environment
from jupyterhub_gpu.edges.builder.wheelhouse import IndexSettings
from tests.unit.test_builder_recipe import make_wheel
from tests.unit.test_builder_records import dist
from tests.unit.test_builder_save import SITE, Engine, request

pytestmark = pytest.mark.unit
MIB = 2**20

FAKE_PIP = """
import os, sys, tempfile, time
argv = sys.argv
log = os.environ["FAKE_PIP_LOG"]
mode = os.environ["FAKE_PIP_MODE"]
if mode == "flood":
    line = b"x" * 1023 + b"\\n"
    for _ in range(int(os.environ["FAKE_PIP_MB"])):
        sys.stderr.buffer.write(line * 1024)
    sys.stderr.buffer.write(b"ERROR: No matching distribution found for tiny-pkg==0.1\\n")
    sys.exit(1)
# "grow": what a hostile index makes pip do: one download that never ends
if mode == "grow-tmp":
    folder = tempfile.mkdtemp(prefix="pip-unpack-")  # where pip writes a download
else:
    folder = argv[argv.index("--dest") + 1]
cap, written, chunk = int(os.environ["FAKE_PIP_MB"]) * 2**20, 0, b"\\0" * 65536
fd = os.open(log, os.O_WRONLY | os.O_CREAT)
with open(os.path.join(folder, "tiny_pkg-0.1-py3-none-any.whl"), "wb") as f:
    while written < cap:
        f.write(chunk)
        f.flush()
        written += len(chunk)
        os.pwrite(fd, b"%020d" % written, 0)
        time.sleep(0.002)
time.sleep(3600)
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    dist(home / SITE, "tiny_pkg", "0.1")
    return home


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``pip`` package first on ``PYTHONPATH``; returns the file it logs bytes to."""
    package = tmp_path / "fakepip" / "pip"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(FAKE_PIP)
    log = tmp_path / "written"
    monkeypatch.setenv("PYTHONPATH", str(package.parent))
    monkeypatch.setenv("FAKE_PIP_LOG", str(log))
    return log


def settings(index: IndexSettings, **limits: int) -> SaveSettings:
    return SaveSettings(registry="reg.example", index=index, limits=Limits(**limits))


@pytest.mark.parametrize("where", ["grow-tmp", "grow-dest"])
def test_a_download_growing_past_the_limit_is_stopped_while_it_grows(
    home: Path, fake_pip: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    """Before the fix: no bound but the deadline; the download grew to the stand-in's
    own cap (48 MiB against a 2 MiB limit) and the save failed only at 20 s, "took more
    than 20 s"."""
    monkeypatch.setenv("FAKE_PIP_MODE", where)
    monkeypatch.setenv("FAKE_PIP_MB", "48")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "hub-tmp"))  # the hub's own temp folder
    (tmp_path / "hub-tmp").mkdir()
    engine = Engine()
    with pytest.raises(LimitReached) as failure:
        save_environment(
            engine,
            request(home),
            settings(IndexSettings(no_index=True, timeout_s=20), max_image_bytes=2 * MIB),
            [],
            print,
        )
    assert str(failure.value).startswith(
        "Your packages are larger than the limit of 2.0 MiB a saved image may add: the hub "
        "stopped fetching them at "
    )
    assert "Nothing was saved" in str(failure.value) or "nothing was saved" in str(failure.value)
    written = int(fake_pip.read_text())
    assert 2 * MIB < written < 12 * MIB  # stopped while it grew, far below its 48 MiB
    assert "build" not in engine.names()
    assert list((tmp_path / "hub-tmp").iterdir()) == []  # nothing left in the hub's temp


def test_the_limit_left_of_the_users_total_bounds_the_download(
    home: Path, fake_pip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import datetime, timezone

    from jupyterhub_gpu.core.saving.data import SavedImage

    monkeypatch.setenv("FAKE_PIP_MODE", "grow-tmp")
    monkeypatch.setenv("FAKE_PIP_MB", "48")
    old = SavedImage("Alice", "old", "s", "b", "r", (), 9 * MIB, datetime.now(timezone.utc))
    index = IndexSettings(no_index=True, timeout_s=20)
    with pytest.raises(LimitReached, match=r"larger than the 1\.0 MiB left of the 10 MiB your"):
        save_environment(
            Engine(), request(home), settings(index, max_total_bytes=10 * MIB), [old], print
        )
    assert int(fake_pip.read_text()) < 10 * MIB


def test_pip_flooding_its_output_stays_bounded_in_the_hub(
    home: Path, fake_pip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the fix: ``capture_output`` held all of it; the hub's peak was 192 MiB for
    64 MiB of output (read, decoded, joined) and the test failed on the bound."""
    monkeypatch.setenv("FAKE_PIP_MODE", "flood")
    monkeypatch.setenv("FAKE_PIP_MB", "64")
    tracemalloc.start()
    try:
        with pytest.raises(SaveError, match=r"Package 'tiny-pkg==0\.1' was not found"):
            save_environment(
                Engine(), request(home), settings(IndexSettings(no_index=True)), [], print
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MIB, f"the hub held {peak / MIB:.0f} MiB of pip's output"


def acgt(n: int) -> bytes:
    """``n`` random letters of four: compresses about 4 to 1 (no zip bomb)."""
    return os.urandom(n).translate(bytes(b"ACGT"[i % 4] for i in range(256)))


def wheel_with(folder: Path, name: str, member: str, data_or_zeros: bytes | int) -> Path:
    """A valid wheel of ``name`` 0.1 that also holds ``member``: the bytes given, or that
    many zeros written in chunks (a zip bomb)."""
    path = make_wheel(folder, name, "0.1", {f"{name}/__init__.py": ""})
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as z:
        if isinstance(data_or_zeros, bytes):
            z.writestr(member, data_or_zeros)
        else:
            with z.open(member, "w", force_zip64=True) as f:
                for _ in range(data_or_zeros // MIB):
                    f.write(bytes(MIB))
    return path


def test_a_wheel_that_unpacks_past_the_limit_is_refused_before_any_build(
    home: Path, tmp_path: Path
) -> None:
    """Before the fix: the wheel (1.7 MiB compressed, 6 MiB unpacked) passed the 3 MiB
    limit, which only counted the wheels' compressed size; the build got it."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    wheel = wheel_with(mirror, "tiny_pkg", "tiny_pkg/genome.txt", acgt(6 * MIB))
    assert wheel.stat().st_size < 3 * MIB
    index = IndexSettings(no_index=True, find_links=(str(mirror),), timeout_s=120)
    engine = Engine()
    with pytest.raises(LimitReached) as failure:
        save_environment(engine, request(home), settings(index, max_image_bytes=3 * MIB), [], print)
    assert str(failure.value) == (
        "Your packages unpack to 6.0 MiB, more than the limit of 3.0 MiB a saved image may "
        "add (the largest is 'tiny-pkg==0.1', 6.0 MiB); remove some packages and save "
        "again. Nothing was saved."
    )
    assert "build" not in engine.names()


def test_a_zip_bomb_is_refused_before_it_is_unpacked_anywhere(home: Path, tmp_path: Path) -> None:
    """Before the fix: the wheel (65 KiB, unpacking to 64 MiB of zeros, 1000 to 1) went
    into the build context under the default 20 GiB limit."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    wheel = wheel_with(mirror, "tiny_pkg", "tiny_pkg/zeros.bin", 64 * MIB)
    assert wheel.stat().st_size < 256 * 1024
    index = IndexSettings(no_index=True, find_links=(str(mirror),), timeout_s=120)
    engine = Engine()
    with pytest.raises(InvalidPackage) as failure:
        save_environment(engine, request(home), settings(index), [], print)
    assert str(failure.value).startswith(
        "The wheel of 'tiny-pkg==0.1' from the site's index (tiny_pkg-0.1-py3-none-any.whl) "
        "would unpack 'tiny_pkg/zeros.bin' to 64 MiB from "
    )
    assert "(a zip bomb); it was not unpacked" in str(failure.value)
    assert "build" not in engine.names()


# --- dependency confusion -----------------------------------------------------------


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[functools.partial[str]]:
    """Serves folders on 127.0.0.1 (a PEP 503 simple index each); yields a function
    that returns a folder's index URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(folder: Path) -> str:
        handler = functools.partial(_Quiet, directory=str(folder))
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/simple/"

    yield functools.partial(start)
    for server in servers:
        server.shutdown()
        server.server_close()


def simple_index(root: Path, wheels: list[Path]) -> Path:
    """A PEP 503 index under ``root``: ``simple/<name>/index.html`` and ``files/``."""
    (root / "files").mkdir(parents=True)
    for wheel in wheels:
        name = wheel.name.split("-")[0].replace("_", "-")
        page = root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        wheel.rename(root / "files" / wheel.name)
        (page / "index.html").write_text(
            f'<html><body><a href="../../files/{wheel.name}">{wheel.name}</a></body></html>'
        )
    return root


def _wheel(folder: Path, name: str, marker: str, build_tag: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = make_wheel(folder, name, "1.0", {f"{name}/__init__.py": f"WHO = {marker!r}\n"})
    if build_tag:
        path = path.rename(path.with_name(f"{name}-1.0-{build_tag}-py3-none-any.whl"))
    return path


def context_wheel(engine: Engine, name: str) -> bytes:
    import io

    (member,) = [k for k in engine.context if k.startswith(f"wheelhouse/{name}-")]
    with zipfile.ZipFile(io.BytesIO(engine.context[member])) as z:
        return z.read(f"{name}/__init__.py")


def test_a_private_name_is_taken_from_the_private_index_only(
    tmp_path: Path, serve: functools.partial[str]
) -> None:
    """Public (``index_url``, anyone publishes) and private (``extra_index_urls``) both
    serve ``ourlab-utils==1.0``; the public one adds a build tag, which pip prefers.
    Before the fix: pip asked both and the build got the public (attacker's) wheel."""
    home = tmp_path / "home"
    dist(home / SITE, "ourlab-utils", "1.0")
    dist(home / SITE, "public-only", "1.0")
    staging = tmp_path / "staging"
    public = simple_index(
        tmp_path / "public",
        [
            _wheel(staging / "pub", "ourlab_utils", "attacker", build_tag="99"),
            _wheel(staging / "pub", "public_only", "public"),
        ],
    )
    private = simple_index(
        tmp_path / "private", [_wheel(staging / "priv", "ourlab_utils", "our lab")]
    )
    index = IndexSettings(
        index_url=serve(public), extra_index_urls=(serve(private),), timeout_s=120, retries=0
    )
    engine = Engine()
    save_environment(engine, request(home), settings(index), [], print)
    assert context_wheel(engine, "ourlab_utils") == b"WHO = 'our lab'\n"
    assert "wheelhouse/ourlab_utils-1.0-py3-none-any.whl" in engine.context
    assert context_wheel(engine, "public_only") == b"WHO = 'public'\n"  # from the default


def test_a_name_pinned_to_an_index_is_taken_from_it_found_or_not(
    tmp_path: Path, serve: functools.partial[str]
) -> None:
    home = tmp_path / "home"
    dist(home / SITE, "ourlab-utils", "1.0")
    staging = tmp_path / "staging"
    public = simple_index(
        tmp_path / "public", [_wheel(staging / "pub", "ourlab_utils", "attacker", "99")]
    )
    private = simple_index(tmp_path / "private", [_wheel(staging / "priv", "other", "x")])
    private_url = serve(private)
    index = IndexSettings(
        index_url=serve(public),
        index_for=(("ourlab-*", private_url),),
        timeout_s=120,
        retries=0,
    )
    engine = Engine()
    missing = r"'ourlab-utils==1\.0' was not found as a wheel"
    with pytest.raises(SaveError, match=missing) as failure:
        save_environment(engine, request(home), settings(index), [], print)
    assert private_url in str(failure.value)  # said where it was looked for
    assert "build" not in engine.names()
