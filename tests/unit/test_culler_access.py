"""Which credential the culler sends to which server (``culler/access.py``): pure, no I/O.

A single-user server is its user's process: whatever it receives, she can record. So the
only token a server may get from the culler is its own (from its spawner state), and a
server without one is not read at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from jupyterhub_gpu.core.culling.access import (
    SERVER_TOKEN_KEY,
    ServerAccess,
    server_access,
    server_token,
    server_url,
)

pytestmark = pytest.mark.unit

PROXY = "http://127.0.0.1:8000/"


def model(url: str = "/user/alice/", **state: Any) -> dict[str, Any]:
    return {"url": url, "state": state}


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        (model(server_token="own"), ServerAccess("http://127.0.0.1:8000/user/alice/", "own")),
        (model("/user/bob/lab/", server_token="bob-lab"),
         ServerAccess("http://127.0.0.1:8000/user/bob/lab/", "bob-lab")),
        (model(server_token="t", server_url="http://10.250.1.2:32771/user/alice/"),
         ServerAccess("http://10.250.1.2:32771/user/alice/", "t")),
        # no token of its own: not read at all (never some other credential instead)
        (model(), None),
        (model(server_url="http://10.250.1.2:32771/user/alice/"), None),
        (model(server_token=""), None),
        (model(server_token="   "), None),
        (model(server_token=None), None),
        (model(server_token=["a", "b"]), None),
        (model(server_token={"token": "t"}), None),
        ({"url": "/user/alice/"}, None),  # the culler was not granted admin:server_state
        ({"url": "/user/alice/", "state": "opaque"}, None),
        ({"url": "/user/alice/", "state": None}, None),
    ],
)  # fmt: skip
def test_each_server_gets_only_its_own_token(server: dict[str, Any], expected: Any) -> None:
    assert server_access(server, PROXY) == expected


def test_the_token_comes_from_that_servers_state_only() -> None:
    alice = model(server_token="alice-tok")
    bob = model("/user/bob/", server_token="bob-tok")
    assert server_token(alice) == "alice-tok" and server_token(bob) == "bob-tok"
    assert server_access(bob, PROXY) == ServerAccess("http://127.0.0.1:8000/user/bob/", "bob-tok")
    assert SERVER_TOKEN_KEY == "server_token"  # the key GPUDockerSpawner.get_state writes


def test_urls() -> None:
    assert server_url(model(), "http://proxy:8000") == "http://proxy:8000/user/alice/"
    assert server_url({"url": None}, "http://proxy:8000/") == "http://proxy:8000/"
    assert server_url(model(server_url="http://n:1/user/alice/"), PROXY) == "http://n:1/user/alice/"


def test_the_token_stays_out_of_repr() -> None:
    access = ServerAccess("http://n:1/user/alice/", "s3cr3t-token")
    assert "s3cr3t-token" not in repr(access) and "s3cr3t-token" not in str(access)
    assert "http://n:1/user/alice/" in repr(access)
