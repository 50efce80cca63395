"""What a failed pull tells the user and the log (core/progress.py ``pull_failure``): the
engine's error text, sorted by cause, each cause with its own advice."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from docker.errors import APIError

from jupyterhub_gpu.core.progress import (
    DISK_FULL,
    MISSING,
    OTHER,
    REGISTRY_DOWN,
    UNTRUSTED,
    pull_failure,
    registry_of,
)
from jupyterhub_gpu.edges.node_errors import node_calls
from jupyterhub_gpu.errors import ImageUnavailable
from jupyterhub_gpu.hub.pull import pull

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
        (  # the site's registry, its CA not in the node's /etc/docker/certs.d (Docker 20.10)
            'Error response from daemon: Get "https://10.250.0.1:5000/v2/": x509: certificate '
            "signed by unknown authority\n",  # as the docker CLI prints it
            UNTRUSTED,
            "the node does not trust the TLS certificate of the registry 10.250.0.1:5000 "
            "(certificate signed by unknown authority). Ask an admin to put that registry's CA "
            "in /etc/docker/certs.d/10.250.0.1:5000/ca.crt on node gpu-1 (for the site's own "
            "registry, running `jupyterhub-gpu node join` there again does it).",
        ),
        (
            'Get "https://10.250.0.1:5000/v2/": x509: certificate is valid for 10.0.0.9, not '
            "10.250.0.1",
            UNTRUSTED,
            "(certificate is valid for 10.0.0.9, not 10.250.0.1)",
        ),
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


FORGED = "\n[I 2026-01-01 hub] forged"


@pytest.mark.parametrize(
    "why",
    [
        'Get "http://10.250.0.1:5000/v2/": dial tcp: connect: connection refused' + FORGED,
        "manifest unknown" + FORGED,
        "unknown blob" + FORGED + "\x1b[31m\r",
    ],
)
def test_a_registrys_words_stay_on_one_line(why: str) -> None:
    """The registry chooses its error text; it reaches the hub's log (and the user): its
    newlines and control characters are shown escaped, never as a line of their own."""
    _, sentence = pull_failure(IMAGE, "gpu-1", why)
    assert sentence.isprintable(), sentence
    assert "\\n[I 2026-01-01 hub] forged" in sentence, sentence


class Refusing:
    """An engine whose pull fails: with an error answer, or an error inside its stream."""

    def __init__(self, why: str, in_stream: bool) -> None:
        self.why, self.in_stream = why, in_stream

    def pull(self, image: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        if not self.in_stream:
            raise APIError("500 Server Error", explanation=self.why)
        yield {"error": self.why, "errorDetail": {"message": self.why}}

    def close(self) -> None:
        pass


class Node:
    def __init__(self, client: Refusing) -> None:
        self.client = client

    def new_client(self, node: str, timeout: float) -> Refusing:
        return self.client

    async def run(
        self, node: str, fn: Callable[[], Any], timeout: float | None = None, *,
        executor: Any = None,
    ) -> Any:  # fmt: skip
        with node_calls(node):  # as Cluster.run: the library's errors become ours
            return await asyncio.get_running_loop().run_in_executor(executor, fn)


@pytest.mark.parametrize("in_stream", [False, True], ids=["answer", "stream"])
async def test_a_failed_pulls_log_line_cant_be_forged(
    in_stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    why = "manifest for jhgpu/torch:2.8 not found: manifest unknown" + FORGED
    log = logging.getLogger("test.pull.forged")
    cluster: Any = Node(Refusing(why, in_stream))
    with caplog.at_level(logging.WARNING, logger=log.name), pytest.raises(ImageUnavailable) as e:
        await pull(cluster, "gpu-1", IMAGE, 30, lambda p, m: None, log)
    (line,) = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert line.startswith("Pull failed (missing): Could not pull"), line
    assert "\n" not in line and "\\n[I 2026-01-01 hub] forged" in line, line
    assert "\n" not in str(e.value)  # JupyterHub logs the start's failure too
