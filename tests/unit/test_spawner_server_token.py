"""The spawner records the server's own API token in its state, for the culler
(``culler/access.py``): the one credential the culler may send to that server."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.culling.access import SERVER_TOKEN_KEY
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

pytestmark = pytest.mark.unit


def test_the_servers_token_is_in_its_state() -> None:
    spawner = GPUDockerSpawner()
    assert SERVER_TOKEN_KEY not in spawner.get_state()  # not started: no token
    spawner.api_token = "the-servers-own-token"  # what the hub hands a server at spawn
    assert spawner.get_state()[SERVER_TOKEN_KEY] == "the-servers-own-token"


def test_a_restarted_hub_keeps_it() -> None:
    """JupyterHub does not persist ``api_token``: a hub restarted with the server running
    loads it back from the state, so the state keeps it and the hub's stop revokes it."""
    spawner = GPUDockerSpawner()
    spawner.load_state({"object_name": "jhgpu-alice", SERVER_TOKEN_KEY: "t0k"})
    assert spawner.api_token == "t0k"
    assert spawner.get_state()[SERVER_TOKEN_KEY] == "t0k"
    fresh = GPUDockerSpawner()
    fresh.load_state({"object_name": "jhgpu-alice"})
    assert fresh.api_token == "" and SERVER_TOKEN_KEY not in fresh.get_state()
