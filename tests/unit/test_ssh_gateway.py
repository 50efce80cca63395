"""The SSH gateway's pure parts (issue 33): sshd's StrictModes over stat results, what a
login names, the failure limiter, the session log lines (no secret), a token's scopes,
Docker's exec stream, the hub's answer; and the host key and authorized_keys files."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import pytest

from jupyterhub_gpu.core.ssh.access import PathFacts, strict_modes, token_grants_server
from jupyterhub_gpu.core.ssh.limits import FailureLimiter
from jupyterhub_gpu.core.ssh.logins import Login, login_candidates
from jupyterhub_gpu.core.ssh.sessions import (
    SessionRecord,
    ended_line,
    not_running,
    refused_line,
    started_line,
)
from jupyterhub_gpu.errors import BadInput, ProbeError
from jupyterhub_gpu.wire.docker_stream import Demuxer
from jupyterhub_gpu.wire.nodes_file import NodeSpec
from jupyterhub_gpu.wire.ssh_target import SSHTarget, decode_target, encode_target

pytestmark = pytest.mark.unit

UID = 10001
DIR, REG, LNK = stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK


def facts(name: str, kind: int, mode: int, uid: int = UID, size: int = 100) -> PathFacts:
    return PathFacts(name=name, uid=uid, mode=kind | mode, size=size)


GOOD = (facts("home", DIR, 0o755), facts(".ssh", DIR, 0o700), facts("keys", REG, 0o600))


@pytest.mark.parametrize(
    ("which", "replacement", "why"),
    [
        (None, None, None),
        (2, facts("keys", REG, 0o644), None),  # world-readable is fine, as for sshd
        (0, facts("home", DIR, 0o755, uid=0), None),  # a home owned by root
        (2, facts("keys", REG, 0o620), "writable by its group"),
        (2, facts("keys", REG, 0o602), "writable by its group or by everyone"),
        (1, facts(".ssh", DIR, 0o770), ".ssh is writable"),
        (0, facts("home", DIR, 0o777), "home is writable"),
        (2, facts("keys", REG, 0o600, uid=10002), "owned by uid 10002"),
        (1, facts(".ssh", DIR, 0o700, uid=10002), "owned by uid 10002"),
        (2, facts("keys", LNK, 0o777), "not a regular file"),
        (2, facts("keys", DIR, 0o700), "not a regular file"),
        (1, facts(".ssh", REG, 0o600), "not a folder"),
        (2, facts("keys", REG, 0o600, size=64 * 1024 + 1), "larger than 65536 bytes"),
    ],
)
def test_strict_modes(which: int | None, replacement: PathFacts | None, why: str | None) -> None:
    paths = list(GOOD)
    if which is not None and replacement is not None:
        paths[which] = replacement
    got = strict_modes(UID, *paths)
    if why is None:
        assert got is None
    else:
        assert got is not None and why in got, got


@pytest.mark.parametrize(
    ("login", "readings"),
    [
        ("alice", [Login("alice")]),
        ("alice.exp", [Login("alice.exp"), Login("alice", "exp")]),
        (
            "jane.doe.gpu",
            [Login("jane.doe.gpu"), Login("jane.doe", "gpu"), Login("jane", "doe.gpu")],
        ),
        ("a_b-c@x", [Login("a_b-c@x")]),
    ],
)
def test_login_readings(login: str, readings: list[Login]) -> None:
    assert login_candidates(login) == readings


@pytest.mark.parametrize(
    "login", ["", ".alice", "alice.", "al..ice", "al ice", "a/b", "x" * 200, "é"]
)
def test_bad_logins_are_refused(login: str) -> None:
    with pytest.raises(BadInput, match="not a user name"):
        login_candidates(login)


def test_limiter_blocks_after_max_failures_then_forgets() -> None:
    limiter = FailureLimiter(max_failures=3, window=60)
    key = ("user", "alice")
    for t in (0.0, 10.0, 20.0):
        assert not limiter.blocked(key, t)
        limiter.failed(key, t)
    assert limiter.blocked(key, 21.0)
    assert not limiter.blocked(("user", "bob"), 21.0)  # per key
    assert limiter.blocked(key, 59.9)
    assert not limiter.blocked(key, 60.0)  # the first failure left the window
    limiter.forget_old(200.0)
    assert not limiter._failures


def test_limiter_bounds_its_keys() -> None:
    limiter = FailureLimiter(max_failures=1, window=60, max_keys=2)
    for i in range(5):
        limiter.failed(("addr", f"10.0.0.{i}"), 1.0)
    assert len(limiter._failures) == 2
    assert limiter.blocked(("addr", "10.0.0.4"), 2.0)


def test_session_lines_hold_no_secret() -> None:
    secret = "c0ffee" * 6
    record = SessionRecord(
        Login("alice", "exp"), "203.0.113.7:5123", "token", "node-a", "4f2c" * 16, "command"
    )
    started, ended = started_line(record), ended_line(record, 125.0, 3)
    for line in (started, ended):
        assert secret not in line
        assert "user=alice server=exp from=203.0.113.7:5123 auth=token node=node-a" in line
        assert "container=4f2c4f2c4f2c kind=command" in line
    assert ended.endswith("after 2 min exit=3")
    refused = refused_line("x" * 500, "203.0.113.7:5123", "no such user")
    assert len(refused) < 200 and refused.endswith("no such user")


def test_the_sentences() -> None:
    hub = "https://hub.example.org/"
    assert not_running(hub, Login("alice"), pending=False) == (
        "Your server is not running: start it at https://hub.example.org/hub/spawn, then ssh again."
    )
    assert "https://hub.example.org/hub/spawn/alice/exp" in not_running(
        hub, Login("alice", "exp"), pending=True
    )
    assert not_running(hub, Login("alice", "exp"), False, exists=False).startswith(
        "You have no server named 'exp'"
    )


@pytest.mark.parametrize(
    ("scopes", "server", "ok"),
    [
        (["access:servers!user=alice"], "", True),
        (["access:servers!server=alice/"], "", True),
        (["access:servers!server=alice/exp"], "", False),
        (["access:servers!server=alice/exp"], "exp", True),
        (["access:servers!user=bob"], "", False),
        (["read:users!user=alice", "read:servers!user=alice"], "", False),
        ([], "", False),
    ],
)
def test_token_scopes(scopes: list[str], server: str, ok: bool) -> None:
    assert token_grants_server(scopes, "alice", server) is ok


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def test_demuxer_splits_frames_fed_in_pieces() -> None:
    raw = frame(1, b"hello ") + frame(2, b"oops") + frame(1, b"world")
    demux, got = Demuxer(), []
    for i in range(0, len(raw), 5):
        got += demux.feed(raw[i : i + 5])
    assert got == [(1, b"hello "), (2, b"oops"), (1, b"world")] and demux.pending == 0
    with pytest.raises(ProbeError):
        Demuxer().feed(b"GARBAGE!")


def test_target_round_trip_and_bad_answers() -> None:
    node = NodeSpec("node-a", "unix:///run/a.sock", "", {"ca_cert": "/x/ca.pem"})
    target = SSHTarget("alice", "", True, "running", 10001, 5000, "/h/alice", node, "abc")
    back = decode_target(encode_target(target))
    assert back.running and back.node is not None and back.node.tls == {"ca_cert": "/x/ca.pem"}
    assert (back.uid, back.gid, back.home, back.container) == (10001, 5000, "/h/alice", "abc")
    for bad in ({**encode_target(target), "state": "up"}, {**encode_target(target), "uid": -1},
                {**encode_target(target), "node": {"name": "a", "docker_url": "x",
                                                   "tls": {"password": "p"}}}, []):  # fmt: skip
        with pytest.raises(ProbeError):
            decode_target(bad)


# --- the files (edges/ssh_keys.py): real files in a temporary folder ------------------
asyncssh = pytest.importorskip("asyncssh")
from jupyterhub_gpu.edges.ssh_keys import (  # noqa: E402
    KeysRefused,
    load_or_make_host_key,
    parse_authorized_keys,
    read_authorized_keys,
)

PUB = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()


def home_with_keys(tmp_path: Path, text: str = PUB) -> Path:
    home = tmp_path / "alice"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text(text)
    home.chmod(0o755)
    (home / ".ssh").chmod(0o700)
    (home / ".ssh" / "authorized_keys").chmod(0o600)
    return home


def test_authorized_keys_read_when_safe(tmp_path: Path) -> None:
    home = home_with_keys(tmp_path, "# mine\nnot a key\n" + PUB)
    text = read_authorized_keys(home, os.getuid())
    assert PUB in text
    assert parse_authorized_keys(text) is not None  # the bad line is skipped


def test_authorized_keys_symlink_is_not_followed(tmp_path: Path) -> None:
    home = home_with_keys(tmp_path)
    keys = home / ".ssh" / "authorized_keys"
    real = tmp_path / "elsewhere"
    keys.rename(real)
    keys.symlink_to(real)
    with pytest.raises(KeysRefused, match="can't be opened"):
        read_authorized_keys(home, os.getuid())


def test_authorized_keys_group_writable_or_too_big_refused(tmp_path: Path) -> None:
    home = home_with_keys(tmp_path)
    (home / ".ssh" / "authorized_keys").chmod(0o660)
    with pytest.raises(KeysRefused, match="writable by its group"):
        read_authorized_keys(home, os.getuid())
    (home / ".ssh" / "authorized_keys").chmod(0o600)
    with pytest.raises(KeysRefused, match="larger than 10 bytes"):
        read_authorized_keys(home, os.getuid(), max_bytes=10)
    with pytest.raises(KeysRefused, match="does not exist"):
        read_authorized_keys(tmp_path / "nobody", os.getuid())
    with pytest.raises(KeysRefused, match="no key"):
        parse_authorized_keys("# nothing\n")


def test_host_key_made_once_0600(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ssh_host_ed25519_key"
    first = load_or_make_host_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_or_make_host_key(path)
    assert again.export_public_key() == first.export_public_key()
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="mode 0600"):
        load_or_make_host_key(path)
