"""One canonical form of a saved image, and what a node no longer needs (issue 24):
core.saving.identity over plain data, as the node's engine would describe the images."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.core.saving.data import SavedImage
from jupyterhub_gpu.core.saving.identity import (
    NodeImage,
    in_registry,
    saved_registry,
    stale_images,
    start_refusal,
)
from jupyterhub_gpu.core.saving.recipe import LABEL
from jupyterhub_gpu.hub.saved_images import SavedImages

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
REG = saved_registry("Registry.Lab:443", "jupyterhub-gpu/saved", ["10.0.0.7", "fd00::7"])
REG_PORT = saved_registry("registry.lab:5000", "jupyterhub-gpu/saved", ["10.0.0.7"])
LABELS = {LABEL + "format": "1", LABEL + "owner": "alice", LABEL + "name": "env"}
REPO = "registry.lab/jupyterhub-gpu/saved/u-alice/env"


def alices(**kw: object) -> NodeImage:
    fields: dict = {"id": "sha256:" + "a" * 64, "repo_digests": (f"{REPO}@{D1}",),
                    "labels": LABELS}  # fmt: skip
    return NodeImage(**{**fields, **kw})


def record(digest: str = D1, reference: str = f"{REPO}:env-1") -> SavedImage:
    when = datetime(2026, 11, 26, tzinfo=timezone.utc)
    return SavedImage("alice", "env", "demo", "base:1", reference, (), 1, when, digest=digest)


@pytest.mark.parametrize(
    "reference, saved",
    [
        (f"{REPO}:env-1", True),
        (f"REGISTRY.LAB/jupyterhub-gpu/saved/u-alice/env@{D1}", True),
        ("registry.lab:443/jupyterhub-gpu/saved/u-alice/env:x", True),  # the default port
        ("10.0.0.7/jupyterhub-gpu/saved/u-alice/env:x", True),  # by its address
        ("10.0.0.7:443/JupyterHub-GPU/saved/u-alice/env:x", True),
        ("[fd00::7]/jupyterhub-gpu/saved/u-alice/env:x", True),
        ("registry.lab:5000/jupyterhub-gpu/saved/u-alice/env:x", False),  # another port
        ("registry.lab/jupyterhub-gpu/other/x:1", False),
        ("registry.lab/jupyterhub-gpu/savedx/x:1", False),
        ("jupyterhub-gpu/saved/u-alice/env:1", False),  # Docker Hub's
        ("sha256:" + "a" * 64, False),  # an ID names no repository: the inspect decides
        ("aaaaaaaaaaaa", False),
    ],
)
def test_every_spelling_of_the_registry_is_known(reference: str, saved: bool) -> None:
    assert in_registry(reference, REG) is saved


def test_docker_hub_aliases_and_ports_are_one_registry() -> None:
    hub = saved_registry("docker.io", "lab/saved")
    for spelling in (
        "lab/saved/u-a/x:1",
        "docker.io/lab/saved/u-a/x",
        "index.docker.io/lab/saved/x",
    ):
        assert in_registry(spelling, hub), spelling
    assert in_registry("10.0.0.7:5000/jupyterhub-gpu/saved/u-a/x:1", REG_PORT)
    assert not in_registry("10.0.0.7/jupyterhub-gpu/saved/u-a/x:1", REG_PORT)
    assert saved_registry(SavedImages(registry="r:5000").registry, "ns").hosts == {"r:5000"}


@pytest.mark.parametrize(
    "requested, image, chosen, refused",
    [
        # the engine's answer for another spelling is alice's image: refused for anyone
        ("sha256:" + "a" * 64, alices(), None, True),
        ("aaaaaaaaaaaa", alices(), None, True),
        ("mirror.example/x:1", alices(repo_digests=()), None, True),  # by its labels
        ("10.0.0.7/x/y:1", alices(labels={}), None, True),  # by its repo digest
        # a catalog or admin-allowed image that is no saved image starts
        ("python:3.11", NodeImage("sha256:" + "b" * 64, ("python:3.11",)), None, False),
        # by its slug: only if it is that image
        (f"{REPO}@{D1}", alices(), ("alice", "env"), False),
        (f"{REPO}@{D1}", alices(), ("alice", "other"), True),
        (f"{REPO}@{D1}", alices(labels={}), ("alice", "env"), True),
    ],
)
def test_a_saved_image_starts_only_by_its_slug(
    requested: str, image: NodeImage, chosen: tuple[str, str] | None, refused: bool
) -> None:
    why = start_refusal(requested, image, REG, chosen)
    assert (why is not None) is refused, why
    if refused and chosen is None:
        assert why == (
            f"The image {requested!r} is a saved image; start it by its name under My "
            "images (image 'saved:OWNER/NAME'), if its owner shares it with you."
        )


def test_the_engines_answers_are_read() -> None:
    created = "2026-11-26T10:00:00.123456789Z"  # as the engine writes it: nanoseconds
    inspected = {"Id": "sha256:x", "RepoTags": [], "RepoDigests": [f"{REPO}@{D1}"],
                 "Config": {"Labels": LABELS}, "Created": created}  # fmt: skip
    image = NodeImage.from_engine(inspected)
    assert image.labels == LABELS and image.repo_digests == (f"{REPO}@{D1}",)
    assert image.created == datetime(2026, 11, 26, 10, 0, 0, 123456, timezone.utc).timestamp()
    listed = {"Id": "sha256:y", "RepoTags": ["<none>:<none>"], "Labels": None, "Created": 5}
    assert NodeImage.from_engine(listed) == NodeImage("sha256:y", created=5.0)


NOW, GRACE = 10_000.0, 3600.0
OTHER = NodeImage("sha256:" + "c" * 64, ("python:3.11",), created=0)


@pytest.mark.parametrize(
    "image, records, in_use, removed",
    [
        (alices(), [record()], set(), False),  # recorded: kept (a node's cache)
        (alices(), [], set(), True),  # deleted: removed
        (alices(), [record(D2)], set(), True),  # same name saved again: the old one goes
        (alices(), [], {"sha256:" + "a" * 64}, False),  # a container uses it: later
        (
            alices(repo_digests=(f"10.0.0.7/jupyterhub-gpu/saved/u-alice/env@{D1}",)),
            [],
            set(),
            True,
        ),
        # built, not pushed yet: a save in progress, until the grace is over
        (alices(repo_digests=(), repo_tags=(f"{REPO}:t",), created=NOW - 60), [], set(), False),
        (alices(repo_digests=(), repo_tags=(f"{REPO}:t",), created=NOW - 4000), [], set(), True),
        (
            alices(repo_digests=(), repo_tags=(f"{REPO}:t",)),
            [record("", f"{REPO}:t")],
            set(),
            False,
        ),
        (OTHER, [], set(), False),  # not a saved image: never touched
        (alices(repo_digests=()), [], set(), False),  # saved labels, no name of ours
    ],
)
def test_the_sweep_removes_what_no_record_names_and_no_container_uses(
    image: NodeImage, records: list[SavedImage], in_use: set[str], removed: bool
) -> None:
    assert stale_images([image, OTHER], records, in_use, REG, NOW, GRACE) == (
        [image] if removed else []
    )


def test_a_saved_image_is_pinned_by_digest_alone() -> None:
    assert record().pinned == f"{REPO}@{D1}"
    assert record("", "r:5000/ns/x:1").pinned == "r:5000/ns/x:1"
    assert record(D1, "r:5000/ns/x:1").pinned == f"r:5000/ns/x@{D1}"


class _Engine:
    """A node's engine as the sweep uses it: listings, and removals that refuse (409)
    the last name of an image a container uses, as the real engine does."""

    def __init__(self, images: list[dict], containers: list[dict], late: list[dict]) -> None:
        self._images, self._containers = images, containers
        self._in_use = containers + late  # late: containers made after the listing
        self.removed: list[str] = []

    def images(self) -> list[dict]:
        return self._images

    def containers(self, all: bool = False) -> list[dict]:
        assert all  # stopped containers count too
        return self._containers

    def remove_image(self, reference: str) -> None:
        from docker.errors import APIError

        image = next(i for i in self._images if reference in i["RepoTags"] + i["RepoDigests"])
        if any(c["ImageID"] == image["Id"] for c in self._in_use):
            raise APIError("conflict", response=type("R", (), {"status_code": 409})())
        self.removed.append(reference)


def test_the_sweep_removes_by_name_and_leaves_what_a_container_uses() -> None:
    from jupyterhub_gpu.edges.builder.node_images import sweep_node

    gone = {"Id": "sha256:g", "RepoTags": [f"{REPO}:t"], "RepoDigests": [f"{REPO}@{D2}"],
            "Labels": LABELS, "Created": 0}  # fmt: skip
    used = {**gone, "Id": "sha256:u", "RepoTags": [], "RepoDigests": [f"{REPO}@{D2[:-1]}3"]}
    kept = {**gone, "Id": "sha256:k", "RepoTags": [], "RepoDigests": [f"{REPO}@{D1}"]}
    late = {**gone, "Id": "sha256:l", "RepoTags": [], "RepoDigests": [f"{REPO}@{D2[:-1]}4"]}
    base = {"Id": "sha256:b", "RepoTags": ["python:3.11"], "RepoDigests": [], "Created": 0}
    engine = _Engine([gone, used, kept, late, base], [{"ImageID": "sha256:u"}],
                     late=[{"ImageID": "sha256:l"}])  # fmt: skip
    assert sweep_node(engine, [record()], REG, NOW, GRACE) == ["sha256:g"]
    assert engine.removed == [f"{REPO}:t", f"{REPO}@{D2}"]
