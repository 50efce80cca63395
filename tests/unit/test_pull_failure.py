"""What a failed pull tells the user and the log (core/progress.py ``pull_failure``): the
engine's error text, sorted by cause, each cause with its own advice."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.progress import (
    DISK_FULL,
    MISSING,
    OTHER,
    REGISTRY_DOWN,
    pull_failure,
    registry_of,
)

pytestmark = pytest.mark.unit

IMAGE = "10.250.0.1:5000/jhgpu/torch:2.8"


@pytest.mark.parametrize(
    ("why", "cause", "says"),
    [  # the engines' own words (Docker 20.10, registry 2.8)
        (
            "manifest for 10.250.0.1:5000/jhgpu/torch:2.8 not found: manifest unknown: "
            "manifest unknown",
            MISSING,
            "manifest unknown. Ask an admin to check this image's catalog entry and its registry.",
        ),
        (
            "pull access denied for jhgpu/torch, repository does not exist or may require "
            "'docker login'",
            MISSING,
            "Ask an admin to check this image's catalog entry",
        ),
        (
            'Get "http://10.250.0.1:5000/v2/": dial tcp 10.250.0.1:5000: connect: connection '
            "refused",
            REGISTRY_DOWN,
            "its registry 10.250.0.1:5000 did not answer (connection refused). It may be down: "
            "try again later",
        ),
        (
            'Get "https://reg.example.org/v2/": dial tcp: lookup reg.example.org: no such host',
            REGISTRY_DOWN,
            "(no such host)",
        ),
        (
            "write /var/lib/docker/tmp/GetImageBlob2318142091: no space left on device",
            DISK_FULL,
            "the node's disk is full (no space left on device). Try again later; ask an admin "
            "to free space on node gpu-1",
        ),
        (
            "failed to register layer: Error processing tar file(exit status 1): write "
            "/opt/x.bin: no space left on device",
            DISK_FULL,
            "docker image prune",
        ),
        ("unknown blob", OTHER, ": unknown blob. Ask an admin"),
    ],
)
def test_each_cause_has_its_sentence(why: str, cause: str, says: str) -> None:
    got, sentence = pull_failure(IMAGE, "gpu-1", why)
    assert got == cause
    assert sentence.startswith(f"Could not pull {IMAGE} on node gpu-1: "), sentence
    assert says in sentence, sentence
    assert sentence.endswith("."), sentence


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("10.250.0.1:5000/jhgpu/torch:2.8", "10.250.0.1:5000"),
        ("reg.example.org/jhgpu/torch", "reg.example.org"),
        ("localhost/x:1", "localhost"),
        ("jupyter/base-notebook:latest", "Docker Hub"),
        ("python:3.11", "Docker Hub"),
    ],
)
def test_the_registry_is_named_as_the_engine_reaches_it(image: str, registry: str) -> None:
    assert registry_of(image) == registry
