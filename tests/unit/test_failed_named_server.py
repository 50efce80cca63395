"""A named server whose very first start fails is removed once the hub is done with the
failure (issue 36: no stale row on the home page), as JupyterHub removes one on
``DELETE .../servers/{name}`` with ``{"remove": true}``; a server that ran before, and
the default server, stay. The hub's user, database and server record are plain fakes
with the attributes JupyterHub's have."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest

from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

pytestmark = pytest.mark.unit


class Orm:
    def __init__(self, name: str, last_activity: datetime | None) -> None:
        self.name = name
        self.server = None
        self.last_activity = last_activity
        self.state: dict[str, Any] = {}
        self.user_options: dict[str, Any] = {}


class Db:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def delete(self, obj: Any) -> None:
        self.calls.append(("delete", obj))

    def commit(self) -> None:
        self.calls.append(("commit", None))

    def expire(self, obj: Any, attributes: list[str]) -> None:
        self.calls.append(("expire", tuple(attributes)))


class User:
    def __init__(self) -> None:
        self.db = Db()
        self.orm_user = object()
        self.spawners: dict[str, Any] = {}
        self.deleted: list[Any] = []
        self.name = "alice"

    async def _delete_spawner(self, spawner: Any) -> None:
        assert not spawner.active
        self.deleted.append(spawner)


class Failing(GPUDockerSpawner):
    async def _start(self) -> tuple[str, int]:
        raise RuntimeError("no such image")


async def failed_start(name: str, last_activity: datetime | None) -> tuple[User, Orm, set[Any]]:
    """A start that fails as the hub runs it; the tasks it left (the removal, if any),
    already run to their end once the hub is done with the failure."""
    user, orm = User(), Orm(name, last_activity)
    spawner = Failing(user=user, orm_spawner=orm, name=name)
    user.spawners[name] = spawner
    spawner._spawn_pending = True
    await spawner.run_auth_state_hook(None)
    orm.last_activity = datetime(2026, 12, 6, 0, 0)  # the hub stamps the start
    before = asyncio.all_tasks()
    with pytest.raises(RuntimeError):
        await spawner.start()
    left = asyncio.all_tasks() - before
    assert user.deleted == []  # while the hub handles the failure, nothing is removed
    spawner._spawn_pending = False  # the hub is done with it
    await asyncio.wait_for(asyncio.gather(*left), 10)
    return user, orm, left


async def test_a_new_named_server_whose_first_start_failed_is_removed() -> None:
    user, orm, left = await failed_start("broken", None)
    assert len(left) == 1 and user.deleted and "broken" not in user.spawners
    assert user.db.calls == [("delete", orm), ("commit", None), ("expire", ("_orm_spawners",))]


@pytest.mark.parametrize(
    ("name", "last_activity"),
    [("train", datetime(2026, 12, 1)), ("", None)],  # ran before; the default server
)
async def test_a_server_that_ran_before_and_the_default_one_stay(
    name: str, last_activity: datetime | None
) -> None:
    user, _, left = await failed_start(name, last_activity)
    assert left == set()  # no removal was even planned
    assert user.deleted == [] and user.db.calls == [] and name in user.spawners
