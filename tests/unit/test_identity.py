"""Identity from auth_state, group policies, safe home mapping (pure) and home creation."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from tornado import web

from jupyterhub_gpu.core.identity import (
    Identity,
    IdentityError,
    identity_from_auth_state,
    map_home,
)
from jupyterhub_gpu.edges.home_dirs import ensure_home, verify_home_path
from jupyterhub_gpu.errors import ConfigError, UnsafePath
from jupyterhub_gpu.hub.auth.ldap import GPULDAPAuthenticator
from jupyterhub_gpu.hub.auth.oauth import (
    claims_to_identity_state,
    make_identity_hook,
    make_reconcile_hook,
)

pytestmark = pytest.mark.unit

ALICE = {
    "uid": 10001,
    "gid": 5000,
    "home_directory": "/home/alice",
    "groups": ["a100-users", "gpu-users", "wheel"],
    "group_gids": {"a100-users": 5001, "gpu-users": 5000, "wheel": 10, "other": 7000},
}

# --------------------------------------------------------------------------- identity


def test_identity_from_ldap_auth_state() -> None:
    ident = identity_from_auth_state("alice", ALICE)
    assert ident == Identity(
        username="alice",
        uid=10001,
        gid=5000,
        groups=("a100-users", "gpu-users", "wheel"),
        home_directory="/home/alice",
        supplementary_gids=(),
    )


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ((), ()),
        (("*",), (5001,)),  # primary 5000 and system gid 10 left out; "other" not a member
        (("a100-users",), (5001,)),
        (("gpu-users",), ()),
        (("wheel",), ()),
        (("other",), ()),
    ],
)
def test_supplementary_gids_only_where_configured(
    wanted: tuple[str, ...], expected: tuple[int, ...]
) -> None:
    ident = identity_from_auth_state("alice", ALICE, supplementary_groups=wanted)
    assert ident.supplementary_gids == expected


def test_ids_may_be_decimal_strings() -> None:
    ident = identity_from_auth_state("bob", {"uid": "10002", "gid": " 5000 "})
    assert (ident.uid, ident.gid, ident.groups, ident.home_directory) == (10002, 5000, (), None)


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (None, "no POSIX user id"),
        ({}, "no POSIX user id"),
        ({"uid": None, "gid": 5000}, "no POSIX user id"),
        ({"uid": "abc", "gid": 5000}, "no POSIX user id"),
        ({"uid": True, "gid": 5000}, "no POSIX user id"),
        ({"uid": 10.5, "gid": 5000}, "no POSIX user id"),
        ({"uid": 10001}, "no POSIX group id"),
        ({"uid": 0, "gid": 5000}, "user id 0 is reserved"),
        ({"uid": "0", "gid": 0}, "user id 0 is reserved"),
        ({"uid": 999, "gid": 5000}, "user id 999 is reserved"),
        ({"uid": -1, "gid": 5000}, "user id -1 is reserved"),
        ({"uid": 2**32, "gid": 5000}, "reserved"),
        ({"uid": 10001, "gid": 0}, "group id 0 is reserved"),
        ({"uid": 10001, "gid": 27}, "group id 27 is reserved"),
    ],
)
def test_unusable_identities_are_refused(state: dict[str, Any] | None, words: str) -> None:
    with pytest.raises(IdentityError, match=words) as info:
        identity_from_auth_state("mallory", state)
    assert info.value.status_code == 403
    assert "administrator" in str(info.value)


# --------------------------------------------------------------------------- home mapping

ROOT = "/mnt/cephfs/home"


@pytest.mark.parametrize(
    ("home", "username", "template", "expected"),
    [
        ("/home/alice", "alice", "{username}", "/mnt/cephfs/home/alice"),
        ("/home/lab1/alice", "alice", "{username}", "/mnt/cephfs/home/lab1/alice"),
        ("/home//alice/", "alice", "{username}", "/mnt/cephfs/home/alice"),
        ("/home/./alice", "alice", "{username}", "/mnt/cephfs/home/alice"),
        (None, "alice", "{username}", "/mnt/cephfs/home/alice"),
        ("", "bob", "users/{username}", "/mnt/cephfs/home/users/bob"),
        (None, "a..b", "{username}", "/mnt/cephfs/home/a..b"),
        (None, "alice@example.org", "{username}", "/mnt/cephfs/home/alice@example.org"),
    ],
)
def test_homes_map_under_the_shared_root(
    home: str | None, username: str, template: str, expected: str
) -> None:
    assert map_home(home, username, ROOT, template) == Path(expected)


@pytest.mark.parametrize(
    "home",
    [
        "/home/../etc",
        "/home/alice/../../etc",
        "/home/alice/..",
        "/home/./../etc",
        "/etc",
        "/etc/passwd",
        "/root",
        "/",
        "/home",
        "/home/",
        "/homework/alice",  # shares a string prefix with /home, not a path prefix
        "//home/alice",
        "home/alice",
        "../../etc",
        "/home/alice\x00/../../etc",
        "/home/alice\x00",
        "/home/alice\n",
        "/home/al\x1bice",
        "/home/" + "a" * 5000,
    ],
)
def test_hostile_home_directories_are_refused(home: str) -> None:
    with pytest.raises(UnsafePath):
        map_home(home, "alice", ROOT)


@pytest.mark.parametrize(
    "username",
    ["", ".", "..", "../etc", "a/b", "/etc", "alice\x00", "alice\n", "\x00", "al\x7fice"],
)
def test_hostile_usernames_are_refused(username: str) -> None:
    with pytest.raises(UnsafePath):
        map_home(None, username, ROOT)
    with pytest.raises(UnsafePath):  # refused even when LDAP gives a good home
        map_home("/home/alice", username, ROOT)


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("../{username}", UnsafePath),
        ("{username}/../..", UnsafePath),
        ("/etc/{username}", UnsafePath),
        ("{uid}", ConfigError),
        ("{username.__class__}", ConfigError),
        ("{username}}", ConfigError),
    ],
)
def test_bad_templates_are_refused(template: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        map_home(None, "alice", ROOT, template)


@pytest.mark.parametrize("root", ["relative/home", "/", "/mnt/../etc", "/mnt/home\x00"])
def test_bad_shared_roots_are_config_errors(root: str) -> None:
    with pytest.raises(ConfigError):
        map_home("/home/alice", "alice", root)


def test_other_prefix() -> None:
    got = map_home("/users/alice", "alice", ROOT, home_prefix="/users")
    assert got == Path("/mnt/cephfs/home/alice")
    with pytest.raises(UnsafePath):
        map_home("/home/alice", "alice", ROOT, home_prefix="/users")


# --------------------------------------------------------------------------- home I/O


def test_verify_refuses_symlinks_out_and_across(tmp_path: Path) -> None:
    root = tmp_path / "home"
    (root / "bob").mkdir(parents=True)
    (root / "out").symlink_to("/etc")
    (root / "alice").symlink_to(root / "bob")  # points at another user's home
    (root / "lab").symlink_to(tmp_path)
    for name in ("out", "alice", "lab/carol"):
        with pytest.raises(UnsafePath, match="symbolic link"):
            verify_home_path(root / name, root)
    assert verify_home_path(root / "bob", root) == (root / "bob").resolve()
    assert verify_home_path(root / "new" / "dave", root) == (root / "new" / "dave").resolve()
    with pytest.raises(UnsafePath):
        verify_home_path(tmp_path / "elsewhere", root)


def test_root_itself_may_be_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    got = verify_home_path(tmp_path / "link" / "alice", tmp_path / "link")
    assert got == (tmp_path / "real" / "alice").resolve()


def _ids() -> tuple[int, int]:
    return (12345, 23456) if os.geteuid() == 0 else (os.getuid(), os.getgid())


def test_ensure_home_creates_with_owner_and_mode(tmp_path: Path) -> None:
    uid, gid = _ids()
    old = os.umask(0o022)
    try:
        assert ensure_home(tmp_path / "alice", uid, gid, shared_root=tmp_path) is True
    finally:
        os.umask(old)
    st = os.stat(tmp_path / "alice")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, 0o700)
    assert ensure_home(tmp_path / "alice", uid, gid) is False  # idempotent


def test_ensure_home_refuses_links_files_and_missing_parents(tmp_path: Path) -> None:
    uid, gid = _ids()
    (tmp_path / "link").symlink_to(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafePath, match="symbolic link"):
        ensure_home(tmp_path / "link", uid, gid)
    with pytest.raises(UnsafePath, match="not a folder"):
        ensure_home(tmp_path / "file", uid, gid)
    with pytest.raises(UnsafePath, match="does not exist"):
        ensure_home(tmp_path / "missing" / "alice", uid, gid)
    with pytest.raises(ValueError):
        ensure_home(tmp_path / "root-home", 0, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder owned by another uid")
def test_ensure_home_refuses_someone_elses_folder(tmp_path: Path) -> None:
    (tmp_path / "alice").mkdir()
    os.chown(tmp_path / "alice", 10002, 5000)  # bob's
    with pytest.raises(UnsafePath, match="belongs to uid 10002"):
        ensure_home(tmp_path / "alice", 10001, 5000)


# --------------------------------------------------------------------------- LDAP usernames


@pytest.mark.parametrize(
    "username",
    [
        "*",
        ")(uid=*",
        "admin)(|(uid=*",
        "alice)(|(uid=*",
        "*)(objectClass=*",
        "alice*",
        "\\00",
        "\x00",
        "alice\x00",
        "alice\n",
        "alice\r\nuid=bob",
        "uid=alice,ou=people",
        "alice,ou=people",
        "alice+cn=x",
        "../alice",
        " alice",
        "",
        "a" * 65,
        "zoë",
    ],
)
def test_ldap_injection_usernames_are_refused_before_ldap(username: str) -> None:
    assert GPULDAPAuthenticator().username_refusal(username) is not None


@pytest.mark.parametrize("username", ["alice", "bob-2", "c.d_e", "a" * 64])
def test_ordinary_usernames_pass(username: str) -> None:
    assert GPULDAPAuthenticator().username_refusal(username) is None


# --------------------------------------------------------------------------- OAuth claims


def test_claims_map_to_the_same_identity_keys() -> None:
    state = claims_to_identity_state(
        {"posix": {"uid": "10001", "gid": 5000}, "home": "/home/alice"},
        ["gpu-users", "gpu-users", "a100-users", 3],
        uid_claim="posix.uid",
        gid_claim="posix.gid",
        home_claim="home",
    )
    assert state == {
        "uid": 10001,
        "gid": 5000,
        "uid_source": "oauth",
        "home_directory": "/home/alice",
        "groups": ["a100-users", "gpu-users"],
        "group_gids": {},
    }
    assert identity_from_auth_state("alice", state).uid == 10001


class _FakeAuthenticator:
    user_auth_state_key = "oauth_user"
    log = logging.getLogger("test_identity")


def test_identity_hook_uses_managed_groups_or_a_key_and_refuses_no_uid() -> None:
    hook = make_identity_hook()
    model = {
        "name": "alice",
        "groups": ["gpu-users"],
        "auth_state": {"oauth_user": {"uidNumber": 10001, "gidNumber": "5000"}},
    }
    out = hook(_FakeAuthenticator(), None, model)
    assert out["auth_state"]["groups"] == ["gpu-users"]
    assert (out["auth_state"]["uid"], out["auth_state"]["gid"]) == (10001, 5000)

    hook = make_identity_hook(groups_key="oauth_user.google_groups", fallback_uid=20000)
    model = {
        "name": "g",
        "auth_state": {"oauth_user": {"google_groups": ["staff"], "gidNumber": 5000}},
    }
    out = hook(_FakeAuthenticator(), None, model)
    assert out["auth_state"]["groups"] == ["staff"]
    assert out["auth_state"]["uid_source"] == "fallback"

    with pytest.raises(web.HTTPError) as info:
        make_identity_hook()(_FakeAuthenticator(), None, {"name": "x", "auth_state": {}})
    assert info.value.status_code == 403
    assert "uidNumber" in str(info.value.log_message)


def test_reconcile_hook_maps_every_refresh_and_never_refuses_it() -> None:
    """OAuthenticator's refresh rebuilds auth_state without post_auth_hook: the reconcile
    hook puts the identity back, from the fresh claims."""
    hook = make_reconcile_hook()
    claims: dict[str, Any] = {"uidNumber": "10001", "gidNumber": 5000, "homeDirectory": "/home/a"}
    fresh = {
        "name": "alice",
        "groups": ["gpu-users"],
        "auth_state": {"access_token": "t", "oauth_user": claims},
    }
    old = {"uid": 10001, "gid": 5000, "groups": ["a100-users", "gpu-users"]}
    state = hook(_FakeAuthenticator(), fresh, old)
    assert state is not None
    assert (state["uid"], state["gid"], state["home_directory"]) == (10001, 5000, "/home/a")
    assert state["groups"] == ["gpu-users"] and state["access_token"] == "t"

    # the provider dropped the uid: the old one is not kept, and the refresh is not refused
    del claims["uidNumber"]
    state = hook(_FakeAuthenticator(), fresh, old)
    assert state is not None and state["uid"] is None
    with pytest.raises(IdentityError):
        identity_from_auth_state("alice", state)

    assert hook(_FakeAuthenticator(), {"name": "alice", "auth_state": None}, old) is None
