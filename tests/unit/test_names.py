"""Usernames and server names too long for a container name or a path are refused first."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest

from jupyterhub_gpu.core.names import (
    CONTAINER_NAME,
    CONTAINER_NAME_MAX,
    NAME_MAX,
    PATH,
    NameTooLong,
    check_name_lengths,
    names_fit,
)
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner, derived_names

pytestmark = pytest.mark.unit


def _spawner(user: str, server: str = "", **config: object) -> GPUDockerSpawner:
    orm = SimpleNamespace(name=server, server=None, user_options={}, last_activity=None)
    return GPUDockerSpawner(user=SimpleNamespace(name=user, groups=[]), orm_spawner=orm, **config)


def _check(spawner: GPUDockerSpawner) -> None:
    check_name_lengths(
        partial(derived_names, spawner), spawner.user.name, spawner.name, spawner.escape
    )


@pytest.mark.parametrize("user", ["alice", "Alice", "al.ice@example.org", "a" * 200, "ü" * 20])
@pytest.mark.parametrize("server", ["", "gpu2"])
def test_the_derived_container_name_is_dockerspawners(user: str, server: str) -> None:
    spawner = _spawner(user, server)
    (kind, name), *_ = derived_names(spawner, user, server)
    assert kind == CONTAINER_NAME and name == spawner.container_name


@pytest.mark.parametrize(
    "user, server, config",
    [
        ("alice", "", {}),
        ("a" * 240, "", {"home_template": "/mnt/home/{username}"}),  # jupyter- + 240 < 255
        ("Ω" * 20, "gpu", {"home_template": "/mnt/home/{username}"}),  # 120 once escaped
        ("alice", "s" * 200, {}),
    ],
)
def test_names_that_fit_pass(user: str, server: str, config: dict[str, object]) -> None:
    _check(_spawner(user, server, **config))


@pytest.mark.parametrize(
    "user, server, config, message",
    [
        (  # 248 + "jupyter-" is past 255
            "a" * 248,
            "",
            {},
            "Your username is 248 characters; this hub's containers allow at most 247. "
            "Ask an admin.",
        ),
        (  # each emoji is 4 bytes, 12 characters once escaped
            "\U0001f600" * 30,
            "",
            {},
            "Your username is 30 characters (360 once made safe for container and folder "
            "names, where characters other than a-z and 0-9 take 3 or more); this hub's "
            "containers allow at most 247. Ask an admin.",
        ),
        (  # the home folder: a component of at most 255 bytes, with "home-" before it
            "b" * 252,
            "",
            {"home_template": "/mnt/cephfs/home-{username}", "prefix": "j"},
            "Your username is 252 characters; this hub's containers allow at most 250. "
            "Ask an admin.",
        ),
        (  # a hostile name: a path-looking name is escaped, then too long
            "../" * 100,
            "",
            {},
            "Your username is 300 characters (900 once made safe for container and folder "
            "names, where characters other than a-z and 0-9 take 3 or more); this hub's "
            "containers allow at most 247. Ask an admin.",
        ),
        (
            "alice",
            "s" * 250,
            {},
            "The server name is 250 characters; with your username this hub's containers "
            "allow at most 240. Choose a shorter name.",
        ),
    ],
)
def test_names_too_long_are_refused_with_the_numbers(
    user: str, server: str, config: dict[str, object], message: str
) -> None:
    with pytest.raises(NameTooLong) as e:
        _check(_spawner(user, server, **config))
    assert str(e.value) == message
    assert e.value.status_code == 400 and e.value.reason == "name_too_long"


def test_the_limit_given_is_exact() -> None:
    """The most the message offers fits; one more does not."""
    spawner = _spawner("x", "", home_template="/mnt/cephfs/home-{username}", prefix="j")
    assert names_fit(partial(derived_names, spawner), "u" * 250, "")
    assert not names_fit(partial(derived_names, spawner), "u" * 251, "")


def test_a_template_too_long_for_any_name_is_the_admins() -> None:
    spawner = _spawner("alice", "", prefix="p" * 300)
    with pytest.raises(NameTooLong, match="tell an admin"):
        _check(spawner)


@pytest.mark.parametrize(
    "kind, text, fits",
    [
        (CONTAINER_NAME, "c" * CONTAINER_NAME_MAX, True),
        (CONTAINER_NAME, "c" * (CONTAINER_NAME_MAX + 1), False),
        (PATH, "/mnt/" + "p" * NAME_MAX, True),
        (PATH, "/mnt/" + "p" * (NAME_MAX + 1), False),
        (PATH, "/mnt/" + "é" * 128, False),  # 256 bytes: NAME_MAX counts bytes
        (PATH, "/" + "/".join(["d" * 200] * 20), True),  # 4020 bytes
        (PATH, "/" + "/".join(["d" * 200] * 21), False),  # past PATH_MAX
    ],
)
def test_limits(kind: str, text: str, fits: bool) -> None:
    assert names_fit(lambda _u, _s: [(kind, text)], "u", "") is fits
