"""Keys from LDAP for the SSH gateway (issue 33): the hub's bounds on ``sshPublicKey``
values, asyncssh's reading of them in the gateway (a bad one skipped with its reason, a
value's options never kept), and the bounded ``keys`` of the hub's answer."""

from __future__ import annotations

import asyncssh
import pytest

from jupyterhub_gpu.core.ssh.keys import bounded_key_values
from jupyterhub_gpu.edges.ssh_keys import ldap_key_lines, parse_authorized_keys
from jupyterhub_gpu.errors import ProbeError
from jupyterhub_gpu.wire.ssh_target import SSHTarget, decode_target, encode_target

pytestmark = pytest.mark.unit


def public(comment: str = "k") -> str:
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    return key.export_public_key("openssh").decode().strip()


def test_values_are_bounded_in_count_size_and_lines() -> None:
    a, b = public("a"), public("b")
    values = [a.encode(), "  ", "x" * 9000, "two\nlines", b"\xff\xfe", 7, b]
    kept, skipped = bounded_key_values(values, max_count=5, max_bytes=8192)
    assert kept == [a, b]
    assert skipped == [
        "value 3: longer than 8192 bytes",
        "value 4: more than one line",
        "value 5: not UTF-8 text",
        "value 6: not text",
    ]
    kept, skipped = bounded_key_values([a, b, public()], max_count=2)
    assert kept == [a, b] and skipped == ["value 3: more than 2 keys"]


def test_ldap_values_are_read_by_asyncssh_and_a_bad_one_skipped() -> None:
    a = public("alice@laptop")
    lines, skipped = ldap_key_lines([a, "ssh-ed25519 AAAAnotbase64", "hello"])
    assert lines == [a]
    assert [s.split(":")[0] for s in skipped] == ["value 2", "value 3"]
    assert all("not a public key" in s for s in skipped)
    # a value with authorized_keys options is not a bare key: skipped, its options never
    # applied (nor a forced command smuggled in)
    lines, skipped = ldap_key_lines([f'command="id" {a}'])
    assert lines == [] and len(skipped) == 1
    # the lines join a file's keys: both are trusted, a third key is not
    b, c = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    file_line = b.export_public_key("openssh").decode().strip()
    trusted = parse_authorized_keys("\n".join([file_line, *ldap_key_lines([a])[0]]))
    for key, ok in ((asyncssh.import_public_key(a), True), (b.convert_to_public(), True),
                    (c.convert_to_public(), False)):  # fmt: skip
        assert (trusted.validate(key, "host", "192.0.2.1") is not None) is ok


def test_the_answers_keys_are_bounded() -> None:
    target = SSHTarget(user="alice", server="", exists=True, state="stopped", keys=("k1",))
    assert decode_target(encode_target(target)).keys == ("k1",)
    raw = encode_target(target)
    del raw["keys"]  # an older hub: no keys
    assert decode_target(raw).keys == ()
    for bad in (["k"] * 33, ["x" * 9000], [1], "k"):
        with pytest.raises(ProbeError, match="'keys'"):
            decode_target({**encode_target(target), "keys": bad})
