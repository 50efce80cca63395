"""Third-party exceptions of a node call become ours once, at the boundary
(edges/node_errors.py): callers catch NodeUnreachable / NodeRefused / NotOnNode."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import docker
import pytest
import requests

from jupyterhub_gpu.edges.node_errors import node_calls, node_error
from jupyterhub_gpu.errors import (
    ImageUnavailable,
    NodeRefused,
    NodeTimedOut,
    NodeUnreachable,
    NotOnNode,
)

pytestmark = pytest.mark.unit


def _response(status: int) -> SimpleNamespace:
    return SimpleNamespace(status_code=status, reason="", url="http://node")


@pytest.mark.parametrize(
    ("error", "expected", "status"),
    [
        (docker.errors.NotFound("404", response=_response(404)), NotOnNode, 404),
        (docker.errors.APIError("409", response=_response(409), explanation="in use"),
         NodeRefused, 409),
        (requests.exceptions.HTTPError("500", response=_response(500)), NodeRefused, 500),
        (requests.exceptions.ConnectionError("refused"), NodeUnreachable, None),
        (requests.exceptions.ReadTimeout("slow"), NodeUnreachable, None),
        (docker.errors.DockerException("no API version"), NodeUnreachable, None),
        (ConnectionResetError("reset"), NodeUnreachable, None),
        (asyncio.TimeoutError(), NodeTimedOut, None),
    ],
)  # fmt: skip
def test_each_library_error_becomes_one_of_ours(
    error: BaseException, expected: type, status: int | None
) -> None:
    mapped = node_error("gpu-1", error)
    assert type(mapped) is expected, mapped
    assert getattr(mapped, "node", None) == "gpu-1"
    assert getattr(mapped, "status_code", None) == status
    assert "gpu-1" in str(mapped)


def test_a_refusals_explanation_is_the_engines_words_and_its_message_one_line() -> None:
    error = docker.errors.APIError("500", explanation="no such image\n[I hub] forged")
    mapped = node_error("gpu-1", error)
    assert isinstance(mapped, NodeRefused)
    assert mapped.explanation == "no such image\n[I hub] forged"
    assert "\n" not in str(mapped)


@pytest.mark.parametrize("error", [ImageUnavailable("ours"), KeyError("a bug"), ValueError("x")])
def test_ours_and_unknown_errors_pass_unchanged(error: BaseException) -> None:
    assert node_error("gpu-1", error) is error


def test_a_timeout_is_still_a_timeout_error() -> None:
    """Code that bounds a call with ``except TimeoutError`` keeps working."""
    with pytest.raises(TimeoutError), node_calls("gpu-1"):
        raise asyncio.TimeoutError


def test_node_calls_raises_ours_with_the_librarys_as_its_cause() -> None:
    cause = requests.exceptions.ConnectionError("refused")
    with pytest.raises(NodeUnreachable) as raised, node_calls("gpu-1"):
        raise cause
    assert raised.value.__cause__ is cause
