"""Which index each saved package is taken from: the rule (pure) and the lookups of the
indexes' simple API (an edge, against httpx's ``MockTransport``)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from jupyterhub_gpu.core.saving.data import FetchFailed, PipRequirement
from jupyterhub_gpu.core.saving.indexes import (
    IndexPolicy,
    IndexRun,
    index_for,
    lookups,
    pinned_index,
    route,
    shown_index,
)
from jupyterhub_gpu.edges.builder.index_lookup import READ_MAX, lists_project

pytestmark = pytest.mark.unit
PUBLIC, TORCH, LAB = "https://pypi.org/simple", "https://torch.example/cu121", "https://lab/simple"
R = {n: PipRequirement(n, "1.0") for n in ("torch", "numpy", "ourlab-utils", "ourlab-x")}


def test_first_extra_that_lists_the_name_then_the_default() -> None:
    policy = IndexPolicy(PUBLIC, (LAB, TORCH))
    listed = {(TORCH, "torch"), (TORCH, "numpy"), (LAB, "numpy"), (LAB, "ourlab-utils")}
    assert index_for("torch", policy, listed) == TORCH
    assert index_for("NumPy", policy, listed) == LAB  # the first extra listing it wins
    assert index_for("ourlab_utils", policy, listed) == LAB
    assert index_for("ourlab-x", policy, listed) == PUBLIC  # no extra lists it
    assert index_for("ourlab-x", IndexPolicy(None, (LAB,)), listed) is None  # pip's own


def test_pins_win_exact_names_before_patterns_in_the_admins_order() -> None:
    policy = IndexPolicy(PUBLIC, (TORCH,), (("ourlab-*", LAB), ("OurLab_X", PUBLIC), ("*", TORCH)))
    assert pinned_index("ourlab-x", policy) == PUBLIC  # exact, though a pattern comes first
    assert pinned_index("ourlab.utils", policy) == LAB
    assert pinned_index("numpy", policy) == TORCH
    # a pinned name is never looked up anywhere else, listed or not
    assert index_for("ourlab-utils", policy, {(TORCH, "ourlab-utils")}) == LAB
    assert lookups(list(R.values()), policy) == []
    assert lookups([R["torch"], R["ourlab-x"]], IndexPolicy(PUBLIC, (LAB, TORCH))) == [
        (LAB, "torch"),
        (TORCH, "torch"),
        (LAB, "ourlab-x"),
        (TORCH, "ourlab-x"),
    ]


def test_one_run_per_index() -> None:
    policy = IndexPolicy(PUBLIC, (TORCH,), (("ourlab-*", LAB),))
    runs = route(list(R.values()), policy, {(TORCH, "torch")})
    assert runs == (
        IndexRun(TORCH, (R["torch"],)),
        IndexRun(LAB, (R["ourlab-utils"], R["ourlab-x"])),
        IndexRun(PUBLIC, (R["numpy"],)),
    )
    assert route([R["numpy"]], IndexPolicy(), set()) == (IndexRun(None, (R["numpy"],)),)


def test_credentials_never_reach_a_message() -> None:
    assert shown_index("https://bot:s3cret@lab.example/simple") == "https://***@lab.example/simple"
    assert shown_index(None) == "the site's index"


def _client(handler: httpx.MockTransport) -> httpx.Client:
    return httpx.Client(transport=handler)


def ask(response: httpx.Response | Exception, name: str = "ourlab-utils") -> bool:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if isinstance(response, Exception):
            raise response
        # a fresh, streamed copy, as a real transport gives
        stream = httpx.ByteStream(b"".join(response.stream))  # type: ignore[arg-type]
        return httpx.Response(response.status_code, headers=response.headers, stream=stream)

    with _client(httpx.MockTransport(handle)) as client:
        answer = lists_project(client, LAB, name, time.monotonic() + 10, 5)
    assert str(seen[0].url) == f"{LAB}/{name}/"
    assert "application/vnd.pypi.simple.v1+json" in seen[0].headers["accept"]
    assert seen[0].headers["accept-encoding"] == "identity"
    return answer


@pytest.mark.parametrize(
    ("response", "listed"),
    [
        (httpx.Response(200, text='<html><a href="../f/x-1.0.whl">x</a></html>'), True),
        (httpx.Response(200, json={"name": "x", "files": [{"filename": "x-1.0.whl"}]}), True),
        (httpx.Response(200, json={"name": "x", "files": []}), False),  # no file: not listed
        (httpx.Response(200, text="<html><body></body></html>"), False),
        (httpx.Response(404), False),
        (httpx.Response(410), False),
    ],
)
def test_what_listing_a_project_means(response: httpx.Response, listed: bool) -> None:
    assert ask(response) is listed


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(500),
        httpx.Response(401),
        httpx.Response(403),
        httpx.Response(200, content=gzip.compress(b"<a>"), headers={"content-encoding": "gzip"}),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
)
def test_an_index_that_cant_say_stops_the_save(response: httpx.Response | Exception) -> None:
    """Never fall through to the next index: that is the substitution itself."""
    with pytest.raises(FetchFailed, match=r"^The package index https://lab/simple could not"):
        ask(response)


def test_a_huge_project_page_is_read_only_up_to_the_bound() -> None:
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(1000):  # 64 MiB of a page that never names a file
            sent += 65536
            yield b" " * 65536

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())

    with _client(httpx.MockTransport(handle)) as client:
        assert lists_project(client, LAB, "x", time.monotonic() + 10, 5) is False
    assert sent <= READ_MAX + 65536


def test_the_json_form_is_asked_for_first() -> None:
    page = json.dumps({"meta": {"api-version": "1.1"}, "name": "x", "files": [{"filename": "f"}]})
    assert ask(httpx.Response(200, text=page, headers={"content-type": "application/json"}))
