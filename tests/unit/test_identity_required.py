"""require_identity: on whenever auth_state is kept, so no server silently runs as the
fallback uid; an explicit setting wins."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.core.identity import (
    Identity,
    IdentityError,
    identity_required,
    resolve_identity,
)
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner

pytestmark = pytest.mark.unit

LDAP_STATE = {"uid": 2001, "gid": 2000, "groups": ["ml-lab"], "home_directory": "/home/alice"}


@pytest.mark.parametrize(
    "setting, auth_state_enabled, required",
    [
        (None, True, True),
        (None, False, False),
        (True, False, True),
        (False, True, False),
        (True, True, True),
        (False, False, False),
    ],
)
def test_identity_required(setting: bool | None, auth_state_enabled: bool, required: bool) -> None:
    assert identity_required(setting, auth_state_enabled) is required


@pytest.mark.parametrize(
    "auth_state, required, expected",
    [
        (LDAP_STATE, True, Identity("alice", 2001, 2000, ("ml-lab", "hub"), "/home/alice")),
        (LDAP_STATE, False, Identity("alice", 2001, 2000, ("ml-lab", "hub"), "/home/alice")),
        (None, False, Identity("alice", 1000, 100, ("hub", "ml-lab"))),
        ({"groups": ["x"]}, False, Identity("alice", 1000, 100, ("hub", "ml-lab"))),
    ],
)
def test_resolve_identity(
    auth_state: dict[str, Any] | None, required: bool, expected: Identity
) -> None:
    got = resolve_identity(
        "alice",
        auth_state,
        required=required,
        fallback=(1000, 100),
        hub_groups=["hub", "ml-lab"],
    )
    assert got == expected


@pytest.mark.parametrize(
    "auth_state, fragment",
    [
        (None, "Log out and log in again; if this keeps happening, ask an admin."),
        ({}, "Log out and log in again"),
        ({"gid": 2000, "groups": []}, "no POSIX user id (uidNumber)"),
        ({"uid": 0, "gid": 2000}, "reserved for the system"),
    ],
)
def test_required_identity_refuses_with_what_to_do(
    auth_state: dict[str, Any] | None, fragment: str
) -> None:
    with pytest.raises(IdentityError) as e:
        resolve_identity("alice", auth_state, required=True, fallback=(1000, 100))
    assert fragment in str(e.value)
    assert e.value.status_code == 403


def _spawner(auth_state: dict[str, Any] | None, enable_auth_state: bool, **config: Any) -> Any:
    async def get_auth_state() -> dict[str, Any] | None:
        return auth_state

    user = SimpleNamespace(name="alice", groups=[], get_auth_state=get_auth_state)
    authenticator = SimpleNamespace(enable_auth_state=enable_auth_state)
    return GPUDockerSpawner(user=user, authenticator=authenticator, **config)


async def test_spawner_refuses_a_user_without_uid_when_auth_state_is_kept() -> None:
    with pytest.raises(IdentityError):
        await _spawner({"groups": []}, enable_auth_state=True).identity()


async def test_spawner_falls_back_without_auth_state_or_when_told() -> None:
    assert (await _spawner(None, enable_auth_state=False).identity()).uid == 1000
    told = _spawner({"groups": []}, enable_auth_state=True, require_identity=False)
    assert (await told.identity()).uid == 1000
    strict = _spawner(None, enable_auth_state=False, require_identity=True)
    with pytest.raises(IdentityError):
        await strict.identity()


async def test_spawner_uses_the_uid_from_auth_state() -> None:
    ident = await _spawner(LDAP_STATE, enable_auth_state=True).identity()
    assert (ident.uid, ident.gid, ident.groups) == (2001, 2000, ("ml-lab",))
