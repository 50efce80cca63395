"""Saving an environment as an image on the test cluster's real engines, pushed to a real
registry (Debian's docker-registry), without a hub (issue 14, docs/my-images.md).

The user's packages are small wheels made by hand (tests/support/wheels.py) in a
find-links folder, so nothing needs a network. ``pip install --user`` installs them into a
home folder in a container of the test image on node-a, as a non-root uid, from that
folder: the home holds pip's own records, as a user's would. Then
:func:`save_environment` probes the base on node-a's engine, fetches the wheels on this
side with ``pip download --no-index --find-links``, builds on node-a with no network and
pushes to the registry; node-b pulls the image by digest and runs it with an empty home.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker
import pytest
from docker.errors import APIError, NotFound

from jupyterhub_gpu.core.saving.data import (
    BuildFailed,
    FetchFailed,
    InvalidPackage,
    LimitReached,
    Progress,
    SavedImage,
    SaveError,
)
from jupyterhub_gpu.core.saving.limits import Limits
from jupyterhub_gpu.core.saving.recipe import BUILD_ID_LABEL, LABEL, STAGING, WHEELHOUSE
from jupyterhub_gpu.edges.builder import save as save_module
from jupyterhub_gpu.edges.builder.output import read_output
from jupyterhub_gpu.edges.builder.probe import OUTPUT_MAX
from jupyterhub_gpu.edges.builder.save import SaveRequest, SaveSettings, save_environment
from jupyterhub_gpu.edges.builder.wheelhouse import IndexSettings
from tests.support.cluster import SITE_ADDRESS, TEST_IMAGE, Engine
from tests.support.distribution import Distribution, free_port_on
from tests.support.wheels import make_wheel, module_name, package_wheel

# alone: its checks that a save leaves no probe behind count node-a's save probes,
# which another test's save there adds meanwhile (scripts/test.sh)
pytestmark = [pytest.mark.integration, pytest.mark.alone]

UID = 10001  #: the user's uid and gid in every container here: never root
#: the owner of every save here: one per session, so that engines shared with other
#: sessions' saves never mix theirs with ours
OWNER = f"alice{secrets.randbelow(10**6):06d}"
NAMESPACE = "jupyterhub-gpu/saved"
#: (name, version, bytes of source): what the user installed
PACKAGES = (
    ("alpha-pkg", "1.0", 200_000),
    ("Beta_Tools", "2.3", 120_000),
    ("gamma", "0.9.1", 80_000),
)
SPECS = tuple(f"{name}=={version}" for name, version, _ in PACKAGES)
TEST_LABELS = {"io.jupyterhub-gpu.test": "save-engine"}
PROBE_LABEL = "io.jupyterhub-gpu.probe"
SITE = "/opt/venv/lib/python3.11/site-packages"
#: what a user runs in their server, with the site's wheels in /links
PIP_INSTALL = [
    "python",
    "-m",
    "pip",
    "install",
    "--user",
    "--no-index",
    "--find-links",
    "/links",
    "--no-deps",
    "--disable-pip-version-check",
    "--no-warn-script-location",
]

# Run in the saved image: where each package comes from, and what the container sees.
INSPECT = (
    f"LEFTOVERS = {(WHEELHOUSE, STAGING)!r}\n"
    + """
import importlib, importlib.metadata as md, json, os, sys
found = {}
for arg in sys.argv[1:]:
    dist, module = arg.split(":")
    m = importlib.import_module(module)
    found[dist] = {"file": m.__file__, "version": m.VERSION, "metadata": md.version(dist)}
print(json.dumps({
    "packages": found,
    "uid": os.getuid(),
    "home": sorted(os.listdir(os.environ["HOME"])),
    "leftovers": [p for p in LEFTOVERS if os.path.exists(p)],
    "env": sorted(k for k in os.environ if k.startswith(("NVIDIA_", "CUDA_"))),
}))
"""
)


def api(engine: Engine) -> closing[docker.APIClient]:
    """The low-level client the hub gives the builder (one per node)."""
    return closing(docker.APIClient(base_url=engine.url, version="auto", timeout=300))


def settings(registry: str, links: Path, limits: Limits | None = None) -> SaveSettings:
    return SaveSettings(
        registry=registry,
        namespace=NAMESPACE,
        index=IndexSettings(no_index=True, find_links=(str(links),), timeout_s=120),
        limits=limits or Limits(),
    )


def repository_of(name: str, owner: str = OWNER) -> str:
    """The repository path in the registry (docs/my-images.md: namespace/u-<owner>/<name>)."""
    return f"{NAMESPACE}/u-{owner}/{name}"


def tree_bytes(folder: Path) -> int:
    """The bytes of the regular files below ``folder`` (what a layer's size counts)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def pip_install_home(
    engine: Engine, home: Path, links: Path, specs: Sequence[str], *options: str
) -> Path:
    """``pip install --user`` of ``specs`` into ``home`` from ``links``, in the test image on
    ``engine``, as :data:`UID`, with no network: pip's own records in ``~/.local``."""
    home.mkdir(parents=True)
    os.chown(home, UID, UID)
    with engine.client() as client:
        client.containers.run(
            TEST_IMAGE,
            [*PIP_INSTALL, *options, "--", *specs],
            user=f"{UID}:{UID}",
            environment={"HOME": "/home/user"},
            volumes={
                str(home): {"bind": "/home/user", "mode": "rw"},
                str(links): {"bind": "/links", "mode": "ro"},
            },
            network_mode="none",
            labels=TEST_LABELS,
            remove=True,
        )
    return home


def add_record(home: Path, name: str, version: str) -> None:
    """A dist-info as pip writes it, for a package whose wheel is nowhere."""
    site = next((home / ".local" / "lib").glob("python3.*")) / "site-packages"
    info = site / f"{module_name(name)}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "REQUESTED").write_text("")


def stage_of(engine: Engine, build_id: str) -> set[str]:
    """What build ``build_id`` left on ``engine``: its install stage's images and
    containers (both carry its build-id label)."""
    label = {"label": f"{BUILD_ID_LABEL}={build_id}"}
    with engine.client() as client:
        images = client.api.images(all=True, filters=label)
        containers = client.api.containers(all=True, filters=label)
    return {i["Id"] for i in images} | {c["Id"] for c in containers}


def probes(engine: Engine) -> set[str]:
    """The probe containers on ``engine`` (a probe removes its own)."""
    with engine.client() as client:
        return {c["Id"] for c in client.api.containers(all=True, filters={"label": PROBE_LABEL})}


@contextmanager
def known_build_id() -> Iterator[str]:
    """Saves in the body take this build id (a save draws one at random), so that a test
    can look for what exactly that build left on the node."""
    value = secrets.token_hex(8)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(save_module, "secrets", SimpleNamespace(token_hex=lambda nbytes: value))
        yield value


def images_of(engine: Engine, registry: Distribution, name: str) -> list[str]:
    """The images on ``engine`` tagged in ``name``'s repository, or labelled as it."""
    repo = f"{registry.address}/{repository_of(name)}"
    mine = [f"{LABEL}owner={OWNER}", f"{LABEL}name={name}"]
    with engine.client() as client:
        labelled = client.api.images(all=True, filters={"label": mine})
        everything = client.api.images(all=True)
    tagged = [i for i in everything if any(t.startswith(f"{repo}:") for t in i["RepoTags"] or ())]
    return sorted({i["Id"] for i in labelled + tagged})


def remove_image(engine: Engine, reference: str) -> None:
    with engine.client() as client, suppress(NotFound):
        client.api.remove_image(reference, force=True)


def run(engine: Engine, image: str, command: list[str], home: Path) -> str:
    """``command`` in ``image`` on ``engine`` as :data:`UID`, no network, ``home`` as HOME."""
    with engine.client() as client:
        out = client.containers.run(
            image,
            command,
            user=f"{UID}:{UID}",
            environment={"HOME": "/home/user"},
            volumes={str(home): {"bind": "/home/user", "mode": "rw"}},
            network_mode="none",
            labels=TEST_LABELS,
            remove=True,
        )
    return out.decode() if isinstance(out, bytes) else str(out)


@dataclass
class Saved:
    image: SavedImage
    events: list[Progress]
    seconds: float
    build_id: str
    probes: set[str]  # probes() on node-a before the save
    left: list[str]  # images_of() node-a right after the save


@pytest.fixture(scope="module")
def links(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site's offline index: a folder of wheels."""
    folder = tmp_path_factory.mktemp("find-links")
    for name, version, size in PACKAGES:
        package_wheel(folder, name, version, size)
    # the base has six 1.17.0: a user's 1.16.0 replaces it
    make_wheel(folder, "six", "1.16.0", {"six.py": "__version__ = '1.16.0'\nFAKE = True\n"})
    # pip download takes it; pip install refuses it (a file outside the environment)
    make_wheel(folder, "escaper", "1.0", {"escaper.py": "", "../../../../escaped.py": ""})
    folder.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def home(engines: list[Engine], links: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """alice's home after ``pip install`` of :data:`SPECS` on node-a."""
    return pip_install_home(engines[0], tmp_path_factory.mktemp("alice") / "home", links, SPECS)


@pytest.fixture(scope="module")
def saved(
    engines: list[Engine], real_registry: Distribution, links: Path, home: Path
) -> Iterator[Saved]:
    """alice's environment saved as ``my-env`` on node-a (removed from node-a after the
    module; the registry is the session's)."""
    node_a = engines[0]
    request = SaveRequest(
        owner=OWNER, name="my-env", base_slug="singleuser-test", base_image=TEST_IMAGE, home=home
    )
    events: list[Progress] = []
    before = probes(node_a)
    with known_build_id() as build_id, api(node_a) as client:
        start = time.monotonic()
        image = save_environment(
            client, request, settings(real_registry.address, links), [], events.append
        )
        seconds = time.monotonic() - start
    print(f"\nsaved {image.reference} in {seconds:.1f} s")
    left = images_of(node_a, real_registry, "my-env")  # the build's copy: gone after the push
    with node_a.client() as client:  # node-a runs it again: pulled by digest, as a spawn does
        client.api.pull(image.pinned.split("@")[0], tag=image.digest)
    yield Saved(image, events, seconds, build_id, before, left)
    remove_image(node_a, image.pinned)


def save_fails(
    engine: Engine,
    registry: Distribution,
    request: SaveRequest,
    config: SaveSettings,
    error: type[SaveError],
    match: str,
) -> None:
    """The save fails with ``error`` matching ``match``, and leaves nothing on the node or
    in the registry: no image, no build stage, no probe, no tag, no repository."""
    before = probes(engine)
    with known_build_id() as build_id, api(engine) as client, pytest.raises(error, match=match):
        save_environment(client, request, config, [], lambda p: None)
    assert stage_of(engine, build_id) == set()
    assert probes(engine) <= before
    assert images_of(engine, registry, request.name) == []
    repo = repository_of(request.name)
    assert registry.tags(repo) == []
    assert repo not in registry.catalog()


# ---------------------------------------------------------------- (a) a save, used elsewhere


def test_the_image_is_in_the_registry_under_the_owners_name(
    saved: Saved, real_registry: Distribution
) -> None:
    image = saved.image
    repo = repository_of("my-env")
    assert image.reference.startswith(f"{real_registry.address}/{repo}:")
    tag = image.reference.rsplit(":", 1)[1]
    assert real_registry.tags(repo) == [tag]
    assert repo in real_registry.catalog()
    assert real_registry.manifest_digest(repo, tag) == image.digest
    assert image.packages == ("pip:alpha-pkg==1.0", "pip:beta-tools==2.3", "pip:gamma==0.9.1")
    assert image.skipped == ()
    phases = [e.phase for e in saved.events]
    assert phases[0] == "fetch" and phases[-1] == "done"
    assert "build" in phases and "push" in phases
    assert saved.events[-1] == Progress("done", "Saved", 100)


def test_another_node_pulls_it_and_runs_it_with_an_empty_home(
    saved: Saved, engines: list[Engine], tmp_path: Path
) -> None:
    node_a, node_b = engines[0], engines[1]
    image = saved.image
    repo = image.reference.rsplit(":", 1)[0]
    empty = tmp_path / "empty-home"
    empty.mkdir()
    os.chown(empty, UID, UID)
    with node_b.client() as client:
        with suppress(NotFound):
            client.api.remove_image(image.pinned, force=True)
        client.api.pull(repo, tag=image.digest)  # by digest: what a spawn would pull
        pulled = client.api.inspect_image(image.pinned)["Id"]
    try:
        with node_a.client() as client:
            assert pulled == client.api.inspect_image(image.pinned)["Id"]
        args = [f"{name}:{module_name(name)}" for name, _, _ in PACKAGES]
        seen = json.loads(run(node_b, image.pinned, ["python", "-c", INSPECT, *args], empty))
        for name, version, _ in PACKAGES:
            module = module_name(name)
            assert seen["packages"][name] == {
                "file": f"{SITE}/{module}/__init__.py",
                "version": version,
                "metadata": version,
            }
        assert seen["uid"] == UID and seen["home"] == [] and seen["leftovers"] == []
        assert seen["env"] == []
        # pip's console script came along, runnable by the user
        assert run(node_b, image.pinned, ["alpha_pkg-hello"], empty) == "alpha_pkg 1.0\n"
        assert list(empty.iterdir()) == []
    finally:
        remove_image(node_b, pulled)


def test_labels_say_what_it_is_and_nothing_else_changed(
    saved: Saved, engines: list[Engine]
) -> None:
    with engines[0].client() as client:
        image = client.api.inspect_image(saved.image.pinned)
        base = client.api.inspect_image(TEST_IMAGE)
    labels = image["Config"]["Labels"]
    assert labels[LABEL + "owner"] == OWNER
    assert labels[LABEL + "name"] == "my-env"
    assert labels[LABEL + "base-image"] == TEST_IMAGE
    assert labels[LABEL + "base-slug"] == "singleuser-test"
    assert json.loads(labels[LABEL + "packages"]) == list(saved.image.packages)
    assert labels[LABEL + "created"] == saved.image.created.isoformat(timespec="seconds")
    assert labels["io.jupyterhub-gpu.catalog-slug"] == ""
    assert BUILD_ID_LABEL not in labels
    # the base's environment exactly: no NVIDIA_VISIBLE_DEVICES, nothing new
    assert image["Config"]["Env"] == base["Config"]["Env"]
    for key in ("User", "Entrypoint", "Cmd", "WorkingDir", "ExposedPorts", "Volumes"):
        assert image["Config"].get(key) == base["Config"].get(key), key
    assert image["Config"]["User"] == "65534:65534"
    # one layer on top of the base's: the installed files
    assert image["RootFS"]["Layers"][:-1] == base["RootFS"]["Layers"]


def test_the_image_adds_the_packages_and_little_else(
    saved: Saved, engines: list[Engine], home: Path
) -> None:
    with engines[0].client() as client:
        size = int(client.api.inspect_image(saved.image.pinned)["Size"])
        base = int(client.api.inspect_image(TEST_IMAGE)["Size"])
    added = size - base
    packages = tree_bytes(home / ".local")  # what pip installed for the user
    ratio = added / packages
    figures = f"added {added} bytes, packages {packages} bytes, ratio {ratio:.3f}"
    print(f"\nsaved image: {figures} ({saved.seconds:.1f} s)")
    assert saved.image.size_bytes == added
    assert packages * 0.9 <= added <= packages * 1.10, figures


def test_a_save_leaves_nothing_of_its_build_on_the_node(
    saved: Saved, engines: list[Engine]
) -> None:
    assert saved.image.reference.endswith("-" + saved.build_id[:6])  # the tag names the build
    assert stage_of(engines[0], saved.build_id) == set()
    assert probes(engines[0]) <= saved.probes
    assert saved.left == []  # nor its image: it is in the registry (issue 24)


# ---------------------------------------------------------------- (b) failures leave nothing


def test_a_package_missing_from_the_index_is_named(
    engines: list[Engine], real_registry: Distribution, links: Path, home: Path, tmp_path: Path
) -> None:
    mine = tmp_path / "home"
    shutil.copytree(home, mine)
    add_record(mine, "absent-pkg", "4.2")
    request = SaveRequest(OWNER, "missing", "singleuser-test", TEST_IMAGE, mine)
    save_fails(
        engines[0],
        real_registry,
        request,
        settings(real_registry.address, links),
        FetchFailed,
        r"^Package 'absent-pkg==4\.2' was not found as a wheel for Python 3\.11 \(x86_64\)",
    )


def test_a_wheel_that_writes_outside_its_folder_is_refused_before_the_build(
    engines: list[Engine], real_registry: Distribution, links: Path, tmp_path: Path
) -> None:
    """The wheel's zip directory names ``../../../../escaped.py``: refused on the hub from
    the directory alone (it was a build failure, in pip, before the archive checks)."""
    mine = pip_install_home(engines[0], tmp_path / "home", links, ["gamma==0.9.1"])
    add_record(mine, "escaper", "1.0")
    request = SaveRequest(OWNER, "escape", "singleuser-test", TEST_IMAGE, mine)
    save_fails(
        engines[0],
        real_registry,
        request,
        settings(real_registry.address, links),
        InvalidPackage,
        r"^The wheel of 'escaper==1\.0' .* holds a file named '\.\./\.\./\.\./\.\./escaped\.py', "
        "outside the folder it installs to",
    )


def test_over_the_size_limit_after_the_build_nothing_is_pushed(
    engines: list[Engine], real_registry: Distribution, links: Path, home: Path
) -> None:
    # more than the wheels (checked before the build), less than they install
    wheels = sum(p.stat().st_size for p in links.glob("*.whl"))
    limit = tree_bytes(home / ".local") // 2
    assert wheels < limit
    request = SaveRequest(OWNER, "too-big", "singleuser-test", TEST_IMAGE, home)
    save_fails(
        engines[0],
        real_registry,
        request,
        settings(real_registry.address, links, Limits(max_image_bytes=limit)),
        LimitReached,
        r"^Your environment adds .* to its base image, more than the .* Nothing was saved\.$",
    )


def test_a_registry_that_cannot_be_reached_leaves_nothing(
    engines: list[Engine], real_registry: Distribution, links: Path, home: Path
) -> None:
    nowhere = f"{SITE_ADDRESS}:{free_port_on(SITE_ADDRESS)}"
    request = SaveRequest(OWNER, "no-registry", "singleuser-test", TEST_IMAGE, home)
    with (
        known_build_id() as build_id,
        api(engines[0]) as client,
        pytest.raises(BuildFailed, match="registry") as failed,
    ):
        save_environment(client, request, settings(nowhere, links), [], lambda p: None)
    assert "Nothing was saved" in str(failed.value)
    assert stage_of(engines[0], build_id) == set()
    with engines[0].client() as c:
        tagged = [t for i in c.api.images() for t in i.get("RepoTags") or () if nowhere in t]
    assert tagged == []


def test_a_container_that_prints_endlessly_is_read_up_to_the_limit(engines: list[Engine]) -> None:
    """Issue 24: a saved image's Python can flood its stdout within the probe's timeout;
    the hub's bounded read (what the probe reads with) keeps :data:`OUTPUT_MAX` of it and
    kills the container, long before the timeout. ``yes`` stands in for that Python, as
    the probe runs it: an entrypoint, as nobody, with no network."""
    node_a = engines[0]
    before = probes(node_a)
    with api(node_a) as client:
        host = client.create_host_config(network_mode="none", cap_drop=["ALL"])
        cid = client.create_container(
            TEST_IMAGE,
            command=["flood"],
            entrypoint=["/usr/bin/yes"],
            user="65534:65534",
            host_config=host,
            labels={PROBE_LABEL: "1", **TEST_LABELS},
        )["Id"]
        try:
            client.start(cid)
            start = time.monotonic()
            out = read_output(client, cid, OUTPUT_MAX, timeout=120)
            seconds = time.monotonic() - start
            assert out.cut and not out.timed_out
            assert len(out.data) == OUTPUT_MAX
            assert set(out.data.split(b"\n")[:-1]) == {b"flood"}
            assert seconds < 60
            assert client.wait(cid, timeout=30)["StatusCode"] != 0  # killed, not exited
        finally:
            client.remove_container(cid, force=True)
    assert probes(node_a) <= before


def test_a_prune_on_the_node_does_not_leave_the_build_behind(
    engines: list[Engine], real_registry: Distribution, links: Path, home: Path
) -> None:
    """An engine runs one image prune at a time and refuses the others (409): a save must
    not need one to remove its install stage (another save, or an admin, may prune)."""
    node_a = engines[0]
    stop = threading.Event()
    refused: list[int | None] = []

    def prune() -> None:  # matches nothing: it only keeps the engine's prune busy
        with api(node_a) as client:
            for _ in range(10_000):
                if stop.is_set():
                    return
                try:
                    client.prune_images(filters={"dangling": True, "label": "jhgpu-test=none"})
                except APIError as e:
                    refused.append(e.status_code)

    pruners = [threading.Thread(target=prune, daemon=True) for _ in range(2)]
    request = SaveRequest(OWNER, "while-pruning", "singleuser-test", TEST_IMAGE, home)
    for t in pruners:
        t.start()
    try:
        with known_build_id() as build_id, api(node_a) as client:
            image = save_environment(
                client, request, settings(real_registry.address, links), [], lambda p: None
            )
    finally:
        stop.set()
        for t in pruners:
            t.join(60)
    remove_image(node_a, image.reference)
    assert 409 in refused  # the prunes did overlap: the engine was busy pruning
    assert stage_of(node_a, build_id) == set()


# ---------------------------------------------------------------- a base package replaced


def test_a_newer_base_package_is_replaced_by_the_users_version(
    engines: list[Engine], real_registry: Distribution, links: Path, tmp_path: Path
) -> None:
    node_a = engines[0]
    # pip refuses a --user copy of a package the image's environment has, unless told to
    # ignore it; the user's server then still imports the base's (its site-packages come
    # first), but the saved image has the user's version only
    mine = pip_install_home(node_a, tmp_path / "home", links, ["six==1.16.0"], "--ignore-installed")
    request = SaveRequest(OWNER, "old-six", "singleuser-test", TEST_IMAGE, mine)
    with api(node_a) as client:
        image = save_environment(
            client, request, settings(real_registry.address, links), [], lambda p: None
        )
    try:
        assert image.packages == ("pip:six==1.16.0",)
        empty = tmp_path / "empty"
        empty.mkdir()
        os.chown(empty, UID, UID)
        check = (
            "import glob, importlib.metadata as md, json, six\n"
            f"print(json.dumps([six.__version__, six.FAKE, md.version('six'), "
            f"sorted(glob.glob('{SITE}/six*'))]))"
        )
        seen: list[Any] = json.loads(run(node_a, image.pinned, ["python", "-c", check], empty))
        files = [f"{SITE}/six-1.16.0.dist-info", f"{SITE}/six.py"]
        assert seen == ["1.16.0", True, "1.16.0", files]  # 1.17.0's files are gone
    finally:
        remove_image(node_a, image.pinned)
