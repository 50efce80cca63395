"""The SSH gateway's open sessions for the dashboard and the metrics (issue 33): the
gateway's census, the list it sends the hub (bounded on reading), the counts per server
and per charge group (no user names), the hub's copy going stale, the dashboard's words
and its redaction (clients' addresses for admins only)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.core.dashboard.view import Viewer, redact, server_view, ssh_words
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.core.ssh.census import (
    Census,
    OpenChannel,
    ServerSSH,
    SSHReport,
    per_group,
    per_server,
)
from jupyterhub_gpu.errors import BadInput
from jupyterhub_gpu.wire.cluster import ServerInfo, build_payload, decode_payload
from jupyterhub_gpu.wire.ssh_sessions import decode_sessions, encode_sessions

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0
NOW = datetime.fromtimestamp(T0 + 300, timezone.utc)


def chan(
    user: str, kind: str = "shell", server: str = "", at: float = T0, peer: str = ""
) -> OpenChannel:
    return OpenChannel(user, server, kind, at, peer or f"192.0.2.{len(user)}:5000")


def test_the_census_counts_what_is_open() -> None:
    census = Census()
    a = census.opened(chan("alice", at=T0 + 10))
    b = census.opened(chan("alice", "forward", at=T0))
    v = census.version
    census.closed(a)
    assert census.version == v + 1 and census.channels() == [chan("alice", "forward", at=T0)]
    census.closed(a)  # twice: nothing moves
    assert census.version == v + 1
    census.closed(b)
    assert census.channels() == []


def test_per_server_and_per_group() -> None:
    channels = [
        chan("alice", at=T0 + 5, peer="192.0.2.1:1"),
        chan("alice", "sftp", at=T0, peer="192.0.2.1:2"),
        chan("alice", "forward", at=T0 + 9, peer="192.0.2.1:1"),
        chan("alice", server="exp", at=T0 + 1),
        chan("bob", "forward", at=T0 + 2),
    ]
    by_server = per_server(channels)
    assert by_server[("alice", "")] == ServerSSH(2, 1, T0, ("192.0.2.1:1", "192.0.2.1:2"))
    assert by_server[("alice", "exp")].sessions == 1
    assert by_server[("bob", "")] == ServerSSH(0, 1, T0 + 2, ("192.0.2.3:5000",))
    groups = {("alice", ""): "vision", ("alice", "exp"): "none", ("bob", ""): "vision"}
    assert per_group(channels, lambda u, s: groups[(u, s)]) == {"vision": (2, 2), "none": (1, 0)}


def test_the_list_round_trips_and_is_bounded() -> None:
    channels = [chan("alice", at=T0), chan("bob", "forward", "gpu", T0 + 1)]
    assert decode_sessions(encode_sessions(channels, 30)) == (channels, 30.0)
    good = encode_sessions(channels, 30)
    item = good["channels"][0]
    for bad, field in [
        ({**good, "interval": 0}, "interval"),
        ({**good, "interval": True}, "interval"),
        ({**good, "channels": [item] * 10_001}, "channels"),
        ({**good, "channels": [{**item, "kind": "x11"}]}, "kind"),
        ({**good, "channels": [{**item, "user": "u" * 256}]}, "user"),
        ({**good, "channels": [{**item, "peer": 7}]}, "peer"),
        ({**good, "channels": [{**item, "since": "yesterday"}]}, "since"),
        ([], "object"),
    ]:
        with pytest.raises(BadInput, match=field):
            decode_sessions(bad)


def test_the_hubs_copy_goes_stale_after_three_intervals() -> None:
    report = SSHReport(channels=(chan("alice"),), received=100.0, interval=10.0,
                       groups={"g": (1, 0)})  # fmt: skip
    assert report.current(130.0) and report.current_groups(130.0)
    assert report.current(130.5) == () and report.current_groups(130.5) == {}


def _payload(ssh: ServerSSH | None) -> object:
    info = ServerInfo(user="alice", server="", node="n1", ready=True, ssh=ssh)
    return build_payload(ClusterSnapshot(nodes=()), (), [info], {}, now=NOW)


def test_the_dashboard_shows_sessions_and_addresses_only_to_admins() -> None:
    payload = decode_payload(_payload(ServerSSH(2, 1, T0, ("192.0.2.1:51234",))))
    (server,) = payload.servers
    assert (server.ssh_sessions, server.ssh_forwards, server.ssh_from) == (
        2, 1, ("192.0.2.1:51234",))  # fmt: skip
    admin = server_view(redact(payload, Viewer("root", admin=True), False).servers[0],
                        Viewer("root", admin=True), NOW)  # fmt: skip
    assert admin.ssh == "SSH: 2 sessions, 1 forward, since 5 min ago (from 192.0.2.1:51234)"
    for show_names in (True, False):
        for viewer in (Viewer("alice"), Viewer("bob")):
            seen = redact(payload, viewer, show_names).servers[0]
            words = server_view(seen, viewer, NOW).ssh
            assert words == "SSH: 2 sessions, 1 forward, since 5 min ago", (viewer, words)
    # none open: no key in the payload, no words
    (server,) = decode_payload(_payload(None)).servers
    assert server.ssh_sessions == 0 and ssh_words(server, NOW) == ""
    assert ssh_words(replace(server, ssh_sessions=1, ssh_since=None), NOW) == (
        "SSH: 1 session, since unknown")  # fmt: skip
