"""The sweep of expired checkpoints (hub/suspend_sweep.py) over JupyterHub's own tables
(its ORM on an in-memory SQLite): which servers it forgets, and what it leaves. The
forgetting itself (container and checkpoint removed, token revoked) is the spawner's
``_forget_suspended``, which tests/integration/test_suspend_hub.py runs for real."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from jupyterhub import orm

from jupyterhub_gpu.hub.suspend_sweep import DAY, held_on, sweep_expired
from jupyterhub_gpu.wire.server_state import decode_suspension, encode_suspension
from tests.unit.test_suspend_decisions import NOW, SAVED

pytestmark = pytest.mark.unit

KEEP = 7 * DAY


class FakeSpawner:
    """What the sweep uses of a spawner: whether it runs, its state, and forgetting."""

    def __init__(self, state: dict[str, Any], active: bool = False, fails: bool = False) -> None:
        self.state, self.active, self.pending, self.fails = state, active, None, fails
        self.forgotten = 0
        self.suspended = decode_suspension(state)[0]

    async def forget_expired(self) -> None:
        if self.fails:
            raise OSError("node-b does not answer")
        self.forgotten += 1
        self.state = {k: v for k, v in self.state.items() if k != "suspended"}

    def get_state(self) -> dict[str, Any]:
        return dict(self.state)


def _db() -> Any:
    return orm.new_session_factory("sqlite://")()


def _add(db: Any, user: str, name: str, state: dict[str, Any], running: bool = False) -> Any:
    found = db.query(orm.User).filter_by(name=user).first()
    if found is None:
        found = orm.User(name=user)
        db.add(found)
        db.commit()
    row = orm.Spawner(user=found, name=name, state=state)
    if running:
        row.server = orm.Server()
    db.add(row)
    db.commit()
    return row


def test_only_stopped_servers_with_an_expired_checkpoint_are_swept() -> None:
    db = _db()
    old = encode_suspension(replace(SAVED, at=NOW - timedelta(days=8)), "")
    young = encode_suspension(replace(SAVED, at=NOW - timedelta(days=6)), "")
    spawners = {
        ("alice", ""): FakeSpawner({**old, "other": 1}),
        ("alice", "young"): FakeSpawner(young),
        ("bob", ""): FakeSpawner(old, active=True),  # starting again right now
        ("carol", ""): FakeSpawner({"other": 1}),  # not suspended
        ("dave", ""): FakeSpawner(old, fails=True),  # its node does not answer
        ("erin", "running"): FakeSpawner(old),
        ("fay", ""): FakeSpawner(old),  # suspended again since the row was read: not this one
    }
    for (user, name), spawner in spawners.items():
        _add(db, user, name, spawner.state, running=name == "running")
    users = {
        u: type("U", (), {"spawners": {n: s for (v, n), s in spawners.items() if v == u}})()
        for u in {u for u, _ in spawners}
    }

    spawners[("fay", "")].suspended = replace(SAVED, at=NOW)

    class Users:
        def __getitem__(self, row: Any) -> Any:
            return users[row.name]

    swept = asyncio.run(sweep_expired(Users(), db, KEEP, NOW, logging.getLogger("t")))
    assert swept == ["alice/"]
    assert [k for k, s in spawners.items() if s.forgotten] == [("alice", "")]
    rows = {(r.user.name, r.name): r.state for r in db.query(orm.Spawner).all()}
    assert rows[("alice", "")] == {"other": 1}  # the state saved without the suspension
    assert decode_suspension(rows[("alice", "young")])[0] is not None
    assert decode_suspension(rows[("dave", "")])[0] is not None  # next sweep
    # no limit: nothing is ever swept
    assert asyncio.run(sweep_expired(Users(), db, 0, NOW, logging.getLogger("t"))) == []


def test_what_a_nodes_checkpoints_hold_is_read_from_the_hubs_database() -> None:
    db = _db()
    big = replace(SAVED, size_bytes=3 * 2**30)
    _add(db, "alice", "", encode_suspension(big, ""))
    _add(db, "bob", "", encode_suspension(replace(big, size_bytes=2**30), ""))
    _add(db, "carol", "", encode_suspension(replace(big, node="node-c"), ""))
    _add(db, "dave", "", {"other": 1})  # not suspended
    _add(db, "erin", "running", encode_suspension(big, ""), running=True)  # resumed: none
    assert held_on(db, "node-b") == 4 * 2**30
    assert held_on(db, "node-c") == 3 * 2**30
    assert held_on(db, "node-a") == 0
