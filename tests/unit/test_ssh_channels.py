"""What an SSH session or channel may open (issue 33): a ``direct-tcpip`` channel's bounds,
legacy scp recognised, the sftp and scp processes' sentences where the image lacks them,
the relay a forwarded connection runs in the container (run here for real, against a
local TCP server), and the SSH activity the gateway reports for the culler."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from jupyterhub_gpu.core.ssh.activity import ActivityBook
from jupyterhub_gpu.core.ssh.channels import (
    LEGACY_SCP_MISSING,
    SFTP_MISSING,
    forward_refusal,
    legacy_scp,
    legacy_scp_argv,
    sftp_argv,
)
from jupyterhub_gpu.core.ssh.logins import Login
from jupyterhub_gpu.core.ssh.sessions import server_stopped, subsystem_refused
from jupyterhub_gpu.services.ssh.relay import RELAY, relay_argv

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("host", "port", "open_now", "why"),
    [
        ("127.0.0.1", 8888, 0, None),
        ("localhost", 22, 31, None),
        ("[::1]", 80, 0, None),
        ("127.0.0.1", 8888, 32, "at most 32 forwarded connections may be open at once"),
        ("", 80, 0, "not a host name or address"),
        ("a" * 256, 80, 0, "not a host name or address"),
        ("-oProxyCommand=x", 80, 0, "not a host name or address"),
        ("host name", 80, 0, "not a host name or address"),
        ("h\x00", 80, 0, "not a host name or address"),
        ("127.0.0.1", 0, 0, "not a port (1-65535)"),
        ("127.0.0.1", 70000, 0, "not a port (1-65535)"),
    ],
)
def test_forward_refusal(host: str, port: int, open_now: int, why: str | None) -> None:
    assert forward_refusal(host, port, open_now) == why


@pytest.mark.parametrize(
    ("command", "legacy"),
    [
        ("scp -t old.txt", True),
        ("scp -v -f -- up.bin", True),
        ("scp -pt .", True),
        ("scp -r -d -t dir", True),
        ("scp up.bin", False),
        ("echo scp -t", False),
        ("ls -t", False),
        ("scp 'unterminated", False),
        ("", False),
    ],
)
def test_legacy_scp(command: str, legacy: bool) -> None:
    assert legacy_scp(command) is legacy


def test_sftp_and_scp_say_what_the_image_lacks(tmp_path) -> None:
    # an image without sftp-server: the sentence, status 1 (the path is fixed; only where
    # this machine lacks it too can the refusal be run, else its check is read)
    argv = sftp_argv()
    assert argv[:2] == ["sh", "-c"] and argv[3] == SFTP_MISSING
    assert "openssh-sftp-server" in SFTP_MISSING
    # no scp on PATH: the sentence, and the command never runs
    marker = tmp_path / "ran"
    argv = legacy_scp_argv(f"touch {marker}")
    done = subprocess.run(
        ["/bin/sh", *argv[1:]], capture_output=True, text=True, env={"PATH": str(tmp_path)}
    )
    assert done.returncode == 1 and done.stderr.strip() == LEGACY_SCP_MISSING
    assert not marker.exists()


def _server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    return srv, srv.getsockname()[1]


def test_relay_carries_both_ways_and_half_closes() -> None:
    srv, port = _server()
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):  # until the relay's EOF
                data += chunk
            got.append(data)
            conn.sendall(b"answer:" + data[:10])

    t = threading.Thread(target=serve)
    t.start()
    payload = b"x" * 200_000
    done = subprocess.run(
        [sys.executable, "-c", RELAY, "127.0.0.1", str(port)],
        input=payload,
        capture_output=True,
        timeout=30,
    )
    t.join(10)
    srv.close()
    assert done.returncode == 0, done.stderr
    assert got == [payload]
    assert done.stdout == b"+answer:xxxxxxxxxx"


def test_relay_says_why_it_did_not_connect() -> None:
    srv, port = _server()
    srv.close()  # nothing listens there now
    done = subprocess.run(
        [sys.executable, "-c", RELAY, "127.0.0.1", str(port)],
        capture_output=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr.decode() == "Connection refused"


def test_relay_argv_passes_host_and_port_as_arguments() -> None:
    argv = relay_argv("$(reboot)", 80)
    assert argv[0:2] == ["sh", "-c"] and argv[3:] == [RELAY, "$(reboot)", "80"]


def test_activity_is_sent_at_most_once_per_interval_and_only_after_input() -> None:
    book = ActivityBook(interval=60)
    assert book.due(0) == []
    book.saw("alice", "", 10)
    book.saw("alice", "", 12)
    book.saw("bob", "exp", 11)
    assert sorted(book.due(13)) == [("alice", "", 12), ("bob", "exp", 11)]
    book.saw("alice", "", 20)
    assert book.due(30) == []  # sent 17 s ago: it waits
    assert book.due(73) == [("alice", "", 20)]
    assert book.due(200) == []  # no input since: nothing keeps the server
    book.saw("alice", "", 201)
    assert book.due(201) == [("alice", "", 201)]  # its last report is old: at once


def test_activity_book_is_bounded() -> None:
    book = ActivityBook(interval=1, max_keys=3)
    for i in range(10):
        book.saw(f"u{i}", "", i)
    assert [u for u, _, _ in book.due(100)] == ["u7", "u8", "u9"]


def test_stop_and_subsystem_sentences() -> None:
    hub = "https://hub.example.org"
    assert server_stopped(hub, Login("alice")) == (
        "Your server stopped, so this session ended: start it again at "
        "https://hub.example.org/hub/spawn."
    )
    assert "'exp'" in server_stopped(hub, Login("alice", "exp"))
    assert subsystem_refused("x" * 100).startswith("The 'xxxxxxxx")
    assert len(subsystem_refused("x" * 10_000)) < 120


def test_the_gateway_reads_its_config_file(tmp_path) -> None:
    # configure_ssh(config_file=...) passes --config=FILE: its settings apply
    from jupyterhub_gpu.services.ssh.app import GPUSSHGateway

    settings = tmp_path / "ssh_config.py"
    settings.write_text("c.GPUSSHGateway.activity_interval = 2.5\n")
    app = GPUSSHGateway()
    app.initialize([f"--config={settings}"])
    assert app.activity_interval == 2.5


def test_start_sentences_and_last_options_round_trip() -> None:
    from jupyterhub_gpu.core.ssh.sessions import start_refused, starting_line
    from jupyterhub_gpu.errors import ProbeError
    from jupyterhub_gpu.wire.ssh_target import SSHTarget, decode_target, encode_target

    assert "with the options of its last start" in starting_line(True)
    assert "with the defaults" in starting_line(False)
    hub = "https://hub.example.org"
    said = start_refused(hub, Login("alice"), "No GPU of that model is free." + "x" * 500)
    assert said.startswith("Your server could not be started (No GPU of that model is free")
    assert said.endswith("start it at https://hub.example.org/hub/spawn.") and len(said) < 300
    target = SSHTarget("alice", "", True, "stopped", last_options={"image": "demo-cpu"})
    assert decode_target(encode_target(target)).last_options == {"image": "demo-cpu"}
    assert decode_target(encode_target(SSHTarget("a", "", True, "stopped"))).last_options is None
    with pytest.raises(ProbeError, match="last_options"):
        decode_target({**encode_target(target), "last_options": ["image"]})
