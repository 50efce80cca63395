"""A start inspects and checks its image once (review of issue 25): ``_create`` pulls it
before the start's time limit counts, and DockerSpawner's own ``start`` then calls
``pull_image`` again and ``get_command`` inspects the image: both are answered from the
first check, not the node. A new start checks afresh."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.hub import spawner as spawner_module
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

pytestmark = pytest.mark.unit


class Node:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.checks: list[tuple[str, bool]] = []

    async def docker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(method)
        assert method == "inspect_image", method
        return {"Id": "sha256:" + "1" * 64, "Config": {"Cmd": ["start-notebook.sh"]}}

    async def check_saved(self, image: str, info: dict[str, Any], pulled: bool) -> None:
        self.checks.append((image, pulled))


async def test_the_image_is_inspected_and_checked_once_per_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = Node()
    spawner: Any = GPUDockerSpawner(user=SimpleNamespace(name="alice", id=1))
    spawner._on_node, spawner.saved_images = node.docker, lambda: None

    async def check(
        saves: Any, image: str, info: dict[str, Any], *args: Any, untag: Any = None
    ) -> None:  # image_checks.check_image, as the node's stand-in sees it
        await node.check_saved(image, info, untag is not None)

    monkeypatch.setattr(spawner_module, "check_image", check)
    spawner.get_args = lambda: ["--debug"]  # the hub's arguments: not the point here
    spawner.image = "reg/torch:1"
    await spawner.pull_image("reg/torch:1")  # _create's
    await spawner.pull_image("reg/torch:1")  # DockerSpawner.start's
    assert await spawner.get_command() == ["start-notebook.sh", "--debug"]
    assert node.calls == ["inspect_image"] and node.checks == [("reg/torch:1", False)]
    await spawner.pull_image("reg/other:2")  # another image is not taken for this one
    assert node.calls == ["inspect_image"] * 2 and len(node.checks) == 2
    spawner._image_checked = None  # what start() does first
    await spawner.pull_image("reg/torch:1")
    assert len(node.calls) == 3 and len(node.checks) == 3
