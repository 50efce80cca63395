"""Does a package index list a project? Asked of its simple API (an edge: httpx).

:mod:`jupyterhub_gpu.core.saving.indexes` decides which index each name is taken from;
it needs to know which extra indexes list which names. :func:`listed_pairs` asks each
index's project page (``<index>/<name>/``, PEP 503 HTML or PEP 691 JSON, whichever the
index sends, uncompressed) with a time limit, reading at most :data:`READ_MAX` bytes: a page
lists the project when it answers 200 and names at least one file within that prefix.
404 and 410 mean "not listed". Anything else (an error status, no answer, a timeout)
stops the save with a sentence: falling through to the next index would be the very
substitution the policy prevents. ``file://`` indexes are folders (``<name>/`` in them).
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from jupyterhub_gpu.core.saving.data import FetchFailed
from jupyterhub_gpu.core.saving.indexes import shown_index

READ_MAX = 1024 * 1024  #: bytes of a project page read at most
WORKERS = 8  #: lookups at once
ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
    "text/html;q=0.01"
)
_FILE = re.compile(rb'<a\s|"filename"\s*:', re.IGNORECASE)


def _unreachable(index: str) -> FetchFailed:
    return FetchFailed(
        f"The package index {shown_index(index)} could not be asked which packages it "
        "has, so your packages were not fetched; try again later or tell your admin."
    )


def _folder_lists(index: str, name: str) -> bool:
    folder = Path(unquote(urlsplit(index).path)) / name
    return folder.is_dir() and any(folder.iterdir())


def lists_project(
    client: httpx.Client, index: str, name: str, deadline: float, timeout_s: float
) -> bool:
    """Whether ``index`` lists the (canonical) project ``name``; :class:`FetchFailed`
    when it can't say."""
    if index.startswith("file:"):
        return _folder_lists(index, name)
    left = deadline - time.monotonic()
    if left <= 0:
        raise _unreachable(index)
    url = index.rstrip("/") + f"/{name}/"
    try:
        with client.stream(
            "GET",
            url,
            headers={"Accept": ACCEPT, "Accept-Encoding": "identity"},
            timeout=min(timeout_s, left),
        ) as response:
            if response.status_code in (404, 410):
                return False
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if response.status_code != 200 or encoding not in ("", "identity"):
                raise _unreachable(index)  # compressed though not asked: never decompressed
            head = bytearray()
            for chunk in response.iter_raw():
                head += chunk
                if _FILE.search(head) or len(head) >= READ_MAX:
                    break
            return _FILE.search(head[:READ_MAX]) is not None
    except httpx.HTTPError:
        raise _unreachable(index) from None


def listed_pairs(
    pairs: Sequence[tuple[str, str]],
    deadline: float,
    timeout_s: float,
    verify: str | bool = True,
    trusted_hosts: Collection[str] = (),
) -> set[tuple[str, str]]:
    """The (index, name) pairs of ``pairs`` whose index lists the name, asked at most
    :data:`WORKERS` at a time. ``verify``: a CA bundle path or ``True``; hosts in
    ``trusted_hosts`` are not verified (pip's ``--trusted-host``)."""
    if not pairs:
        return set()
    strict = httpx.Client(verify=verify, follow_redirects=True, max_redirects=5)
    lax = httpx.Client(verify=False, follow_redirects=True, max_redirects=5)  # pip's --trusted-host

    def ask(pair: tuple[str, str]) -> bool:
        index, name = pair
        host = urlsplit(index).hostname or ""
        client = lax if host in trusted_hosts else strict
        return lists_project(client, index, name, deadline, timeout_s)

    with strict, lax, ThreadPoolExecutor(WORKERS) as pool:
        answers = list(pool.map(ask, pairs))
    return {pair for pair, listed in zip(pairs, answers, strict=True) if listed}
