"""A save's build and probe treated as hostile code, on the test cluster's real engines
(issue 24, items 3 and 5): the build's RUN steps and the probe see no GPU and run under a
CPU and a process bound; a fork bomb in a build stage is stopped with a sentence, and
leaves nothing behind.

The spy is a base image like a CUDA one (``ENV NVIDIA_VISIBLE_DEVICES=all``) whose own
``.pth`` file runs at every Python start as root, as a saved image used as a base may
have: it records what each of the build's Python processes sees. Stage 1's record ends
in the saved image through a file of the user's package (the hook overwrites it before
stage 1 copies the package's files); the final stage's records are files it writes.
"""

from __future__ import annotations

import io
import json
import secrets
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyterhub_gpu.core.saving.data import BuildFailed
from jupyterhub_gpu.edges.builder.save import SaveRequest, save_environment
from tests.integration.test_save_engine import (
    OWNER,
    SITE,
    TEST_LABELS,
    api,
    images_of,
    known_build_id,
    pip_install_home,
    probes,
    remove_image,
    run,
    settings,
    stage_of,
)
from tests.support.cluster import TEST_IMAGE, Engine
from tests.support.distribution import Distribution
from tests.support.wheels import make_wheel

# alone: its checks that a save leaves no probe behind count node-a's save probes,
# which another test's save there adds meanwhile (scripts/test.sh)
pytestmark = [pytest.mark.integration, pytest.mark.alone]

SPY_HOOK = """
import json, os, sys

def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None

if os.getuid() == 0:
    doc = json.dumps({
        "argv": sys.argv[:4],
        "gpus": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        # cgroup v1 (the test cluster), else v2
        "cpu": _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or _read("/sys/fs/cgroup/cpu.max"),
        "period": _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    })
    with open("/var/tmp/spy-%d.json" % os.getpid(), "w") as f:
        f.write(doc)
    seen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "envspy_seen.json")
    if os.path.exists(seen):
        with open(seen, "w") as f:
            f.write(doc)
"""
#: a fork bomb, bounded so that it stops by itself on any engine: at most 600 processes
#: (each a ``sleep`` of 20 s), then the parent waits for them and goes on
FORK_BOMB = """
import os
if os.getuid() == 0:
    for _ in range(600):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.execv("/bin/sleep", ["sleep", "20"])
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
"""


def build_spy(engine: Engine, tag: str) -> None:
    """The spy base on ``engine`` (from the test image, on the node: no registry)."""
    files = {
        "Dockerfile": (
            f"FROM {TEST_IMAGE}\nCOPY spy.pth spy_hook.py {SITE}/\nENV NVIDIA_VISIBLE_DEVICES=all\n"
        ).encode(),
        "spy.pth": b"import spy_hook\n",
        "spy_hook.py": SPY_HOOK.encode(),
    }
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    with engine.client() as client:
        client.images.build(
            fileobj=context, custom_context=True, tag=tag, labels=TEST_LABELS,
            network_mode="none", rm=True, forcerm=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def spy(engines: list[Engine]) -> Iterator[str]:
    tag = f"jupyterhub-gpu/test-spy:{secrets.token_hex(4)}"
    build_spy(engines[0], tag)
    yield tag
    remove_image(engines[0], tag)


@pytest.fixture(scope="module")
def bound_links(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bound-links")
    make_wheel(
        folder, "envspy", "1.0", {"envspy.py": "VERSION = '1.0'\n", "envspy_seen.json": "{}"}
    )
    make_wheel(folder, "six", "1.16.0", {"six.py": "__version__ = '1.16.0'\n"})
    make_wheel(folder, "forker", "1.0", {"forker.py": FORK_BOMB, "forker.pth": "import forker\n"})
    folder.chmod(0o755)
    return folder


def test_the_builds_python_sees_no_gpu_and_two_cpus_and_the_image_keeps_the_base_env(
    engines: list[Engine],
    real_registry: Distribution,
    bound_links: Path,
    spy: str,
    tmp_path: Path,
) -> None:
    node_a = engines[0]
    # six 1.16.0 replaces the base's 1.17.0: the final stage runs pip uninstall (as root)
    home = pip_install_home(
        node_a, tmp_path / "home", bound_links, ["envspy==1.0", "six==1.16.0"],
        "--ignore-installed",
    )  # fmt: skip
    request = SaveRequest(OWNER, "spied", "singleuser-test", spy, home)
    with api(node_a) as client:
        image = save_environment(
            client, request, settings(real_registry.address, bound_links), [], lambda p: None
        )
    try:
        empty = tmp_path / "empty"
        empty.mkdir()
        show = (
            "import glob, json\n"
            f"stage1 = json.load(open('{SITE}/envspy_seen.json'))\n"
            "final = [json.load(open(p)) for p in sorted(glob.glob('/var/tmp/spy-*.json'))]\n"
            "print(json.dumps([stage1, final]))"
        )
        stage1, final = json.loads(run(node_a, image.reference, ["python", "-c", show], empty))
        with node_a.client() as c:
            env = c.api.inspect_image(image.reference)["Config"]["Env"]
            base_env = c.api.inspect_image(spy)["Config"]["Env"]
    finally:
        remove_image(node_a, image.reference)
    print(f"\nstage 1 saw {stage1}\nthe final stage saw {final}")
    # stage 1: the COLLECT step's Python (pip's own ran before the package was there)
    assert "-c" in stage1["argv"]
    assert stage1["gpus"] == "void"
    assert (stage1["cpu"], stage1["period"]) == ("200000", "100000")
    assert final, "the final stage's pip uninstall ran no Python of the base"
    for seen in final:
        assert seen["gpus"] == "void", seen
        assert (seen["cpu"], seen["period"]) == ("200000", "100000"), seen
    # the saved image's environment is the base's, NVIDIA_VISIBLE_DEVICES=all included
    assert env == base_env and "NVIDIA_VISIBLE_DEVICES=all" in env


def test_a_fork_bomb_in_the_build_is_stopped_and_leaves_nothing(
    engines: list[Engine], real_registry: Distribution, bound_links: Path, tmp_path: Path
) -> None:
    node_a = engines[0]
    home = pip_install_home(node_a, tmp_path / "home", bound_links, ["forker==1.0"])
    request = SaveRequest(OWNER, "forker", "singleuser-test", TEST_IMAGE, home)
    before = probes(node_a)
    start = time.monotonic()
    with (
        known_build_id() as build_id,
        api(node_a) as client,
        pytest.raises(BuildFailed, match=r"more than 256 processes") as failed,
    ):
        save_environment(
            client, request, settings(real_registry.address, bound_links), [], lambda p: None
        )
    seconds = time.monotonic() - start
    print(f"\nstopped after {seconds:.1f} s: {failed.value}")
    assert "Nothing was saved" in str(failed.value)
    with api(node_a) as client:
        assert client.ping()  # the node's engine still answers
    assert stage_of(node_a, build_id) == set()
    assert probes(node_a) <= before
    assert images_of(node_a, real_registry, "forker") == []
    assert real_registry.tags(f"jupyterhub-gpu/saved/u-{OWNER}/forker") == []
