"""SSH into one's own server (issue 33): a real OpenSSH client against a real hub running
the SSH gateway service (docs/ssh.md), into alice's real server on a node (the TLS node:
the gateway reaches its engine over TCP with the hub's client certificate).

Alice's key in her ``~/.ssh/authorized_keys`` runs a command in her running server, as
her uid, with her GPU, in her home, and its exit status comes back; a terminal session
runs too; a command reads its input to the end; ``sftp`` puts and gets, ``scp`` copies both
ways and legacy ``scp -O`` too, all as her; ``-L`` reaches her server's own port, while the
node's engine, its agent and carol's server fail from her container as from her notebook;
``-R`` is refused with its sentence. Bob's key does not open alice's server; bob, whose
server is not running, reads the sentence saying how to start it; a hub token of alice as
the password works, a wrong one does not; a group-writable authorized_keys is not
trusted. The host key the client checks is the one ``jupyterhub-gpu ssh fingerprint``
prints.

Then, with the real idle culler: a server used only over SSH is kept while its user types,
culled once the open session is idle, and the session ends with its sentence.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import gpu_inventory
from tests.support.cluster import TLS_NODE, Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

UID, GID = 10001, 5000
RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
#: the gateway's settings here: SSH input reported to the hub every 2 s (60 s by default)
SSH_SETTINGS = "c.GPUSSHGateway.activity_interval = 2.0\n"
#: what her notebook would run: connect to HOST at each PORT at once (the relay's timeout)
PROBE = """
import concurrent.futures, socket, sys
def attempt(port):
    try:
        socket.create_connection((sys.argv[1], int(port)), timeout=10).close()
        return f"{port}:open"
    except OSError:
        return f"{port}:refused"
print(*concurrent.futures.ThreadPoolExecutor(8).map(attempt, sys.argv[2:]))
"""
CULL_TIMEOUT = 12.0
CULL_INTERVAL = 2.0
CULLER_SCOPES = ["list:users", "read:servers", "admin:server_state", "delete:servers"]


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def authorize(home: Path, *public_keys: Path, mode: int = 0o600) -> Path:
    """``home/.ssh/authorized_keys`` holding ``public_keys``, owned by UID:GID as a user
    would have it (the home too)."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    keys = ssh / "authorized_keys"
    keys.write_text("".join(p.read_text() for p in public_keys))
    for path, m in ((home, 0o755), (ssh, 0o700), (keys, mode)):
        os.chown(path, UID, GID)
        path.chmod(m)
    return keys


def cli(*args: str) -> str:
    code = "import sys; from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return done.stdout


class Client:
    """The real ``ssh`` client, checking the gateway's host key (known_hosts)."""

    def __init__(self, port: int, known_hosts: Path) -> None:
        self.port, self.known_hosts = port, known_hosts

    def options(self, key: Path) -> list[str]:
        """The options every client here uses, with ``key`` (ssh, sftp and scp alike)."""
        return [
            "-F", "/dev/null",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=20", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "PreferredAuthentications=publickey", "-i", str(key),
        ]  # fmt: skip

    def tool(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``sftp``, ``scp`` or ``ssh`` with ``argv`` as given (no agent)."""
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip

    def run(
        self,
        login: str,
        command: str | None,
        key: Path | None = None,
        password: str | None = None,
        tty: bool = False,
        work: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        argv = [
            "ssh", "-F", "/dev/null", "-p", str(self.port),
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=20",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        if password is None:
            argv += ["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
            argv += ["-o", "PreferredAuthentications=publickey", "-i", str(key)]
        else:  # the real client's password prompt, answered by SSH_ASKPASS
            assert work is not None
            askpass = work / "askpass.sh"
            askpass.write_text(f"#!/bin/sh\necho '{password}'\n")
            askpass.chmod(0o700)
            env.update(SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
            argv += ["-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no"]
            argv += ["-o", "NumberOfPasswordPrompts=1"]
        argv += ["-tt"] if tty else ["-T"]
        argv += [f"{login}@127.0.0.1"]
        if command is not None:
            argv.append(command)
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env
        )


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def gateway_hub(
    make_hub: Callable[..., Hub],
    engine: Engine,
    tmp_path: Path,
    more: str = "",
    ssh_args: str = "",
) -> tuple[Hub, Client, int, str]:
    """A real hub with the SSH gateway on a free port (``more``: more hub config); the
    client trusting exactly the host key whose fingerprint the CLI printed."""
    port = free_port()
    host_key = tmp_path / "state" / "ssh_host_ed25519_key"
    printed = cli("ssh", "fingerprint", "--key", str(host_key), "--make")
    extra = f"""
c.GPUDockerSpawner.default_uid = {UID}
c.GPUDockerSpawner.default_gid = {GID}
{TOKEN_ROLE_CONFIG}
{more}
from jupyterhub_gpu.hub.extensions import configure_ssh
configure_ssh(c, port={port}, host_key_file={str(host_key)!r}, config_file=_ssh_config{ssh_args})
"""
    ssh_config = tmp_path / "ssh_config.py"
    ssh_config.write_text(SSH_SETTINGS)
    extra = f"_ssh_config = {str(ssh_config)!r}\n" + extra
    hub: Hub = make_hub([engine], [gpu_inventory(engine.name, "dddddddd", [RTX])], extra)
    hub.wait_log(rf"SSH gateway on 127\.0\.0\.1:{port}, host key SHA256:", after=0)
    public = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(host_key)], capture_output=True, text=True, check=True
    ).stdout.split()
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
    return hub, Client(port, known_hosts), port, printed


def test_ssh_gateway_with_a_real_client(make_hub, engines: list[Engine], tmp_path: Path) -> None:
    # the TLS node: the gateway reaches its engine over TCP with the hub's client
    # certificate, and the engine listens on the node's address:2376 (which a user's
    # container must not reach)
    engine = next(e for e in engines if e.name == TLS_NODE)
    hub, client, port, printed = gateway_hub(make_hub, engine, tmp_path)
    # the client trusts exactly the key whose fingerprint the command printed
    listed = subprocess.run(
        ["ssh-keygen", "-lf", str(client.known_hosts)], capture_output=True, text=True, check=True
    ).stdout
    assert printed.split()[1] in listed, (printed, listed)

    for user in ("alice", "bob", "carol"):
        hub.create_user(user)
    r = hub.spawn("alice", {"gpu_count": 1})
    assert r.status_code in (201, 202), r.text
    r = hub.spawn("carol", {"gpu_count": 0})  # another user's server, beside alice's
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")
    hub.wait_ready("carol")
    gpu = hub.api("GET", "/users/alice").json()["servers"][""]["state"]["gpu_uuids"][0]

    homes = tmp_path / "homes"
    alice_key, bob_key = keygen(tmp_path / "alice"), keygen(tmp_path / "bob")
    alice_keys = authorize(homes / "alice", tmp_path / "alice.pub")
    authorize(homes / "bob", tmp_path / "bob.pub")

    # alice's key: her uid, her GPU, her home; the time from ssh to the command's answer
    started = time.monotonic()
    done = client.run(
        "alice",
        "id -u; echo $NVIDIA_VISIBLE_DEVICES; pwd; whoami; command -v pip",
        key=alice_key,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, (done.stdout, done.stderr, hub.log_tail())
    # her name (libnss_wrapper, as in JupyterLab's terminal) and the image's pip
    assert done.stdout.split() == [str(UID), gpu, "/home/alice", "alice", "/opt/venv/bin/pip"], done
    print(f"\nssh alice@gateway 'id -u; ...' answered in {took:.2f} s")
    # the exit status comes back; stderr stays stderr
    done = client.run("alice", "echo oops >&2; exit 3", key=alice_key)
    assert (done.returncode, done.stdout, done.stderr.strip()) == (3, "", "oops"), done
    # a terminal: a login shell in her home, as her
    done = client.run(
        "alice", "tty >/dev/null && echo tty=yes; id -g; exit", key=alice_key, tty=True
    )
    assert done.returncode == 0, done
    assert "tty=yes" in done.stdout and str(GID) in done.stdout, done
    hub.wait_log(r"SSH session ended: user=alice server=\(default\) .* exit=0", after=0)

    # sftp: put and get, in her home, as her (the image's sftp-server in her container)
    opts = client.options(alice_key)
    # a command reading its input to the end: EOF reaches it through the TLS engine too
    piped = subprocess.run(
        ["ssh", *opts, "-p", str(port), "-T", "alice@127.0.0.1",
         "cat > piped.txt; wc -c < piped.txt"],
        input="x" * 100_000, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"},
    )  # fmt: skip
    assert (piped.returncode, piped.stdout.strip()) == (0, "100000"), piped
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(300_000))
    batch = tmp_path / "batch"
    batch.write_text(f"put {data} up.bin\nget up.bin {tmp_path / 'back.bin'}\n")
    done = client.tool("sftp", *opts, "-P", str(port), "-b", str(batch), "alice@127.0.0.1")
    assert done.returncode == 0, (done, hub.log_tail())
    assert (tmp_path / "back.bin").read_bytes() == data.read_bytes()
    up = homes / "alice" / "up.bin"
    assert up.read_bytes() == data.read_bytes() and up.stat().st_uid == UID
    # scp (over SFTP), both ways
    note = tmp_path / "note.txt"
    note.write_text("hello from scp\n")
    done = client.tool("scp", *opts, "-P", str(port), str(note), "alice@127.0.0.1:note.txt")
    assert done.returncode == 0, done
    assert (homes / "alice" / "note.txt").read_text() == "hello from scp\n"
    done = client.tool(
        "scp", *opts, "-P", str(port), "alice@127.0.0.1:up.bin", str(tmp_path / "b2")
    )
    assert done.returncode == 0 and (tmp_path / "b2").read_bytes() == data.read_bytes(), done
    # legacy scp (-O runs `scp -t` in her container: the test image has scp)
    done = client.tool("scp", "-O", *opts, "-P", str(port), str(note), "alice@127.0.0.1:old.txt")
    assert done.returncode == 0, done
    assert (homes / "alice" / "old.txt").read_text() == "hello from scp\n"

    # -L to her own server's port, from inside her container: JupyterLab answers; to the
    # node's engine (its TLS port and the plain one), the agent's port and carol's server:
    # refused from her container, as from her notebook (the node firewall decides, not
    # the gateway)
    local = free_port()
    # carol's server, published on the node's address: the hub (here) reaches it
    carol_port = int(hub.api("GET", "/users/carol").json()["servers"][""]["state"]["host_port"])
    got = httpx.get(f"http://{engine.address}:{carol_port}/user/carol/api", timeout=20)
    assert got.status_code == 200, got.text
    blocked = {free_port(): p for p in (2376, 2375, 9450, carol_port)}
    forwards = [f"127.0.0.1:{local}:127.0.0.1:8888"]
    forwards += [f"127.0.0.1:{lp}:{engine.address}:{p}" for lp, p in blocked.items()]
    tunnel = subprocess.Popen(
        ["ssh", "-o", "LogLevel=INFO", *opts, "-p", str(port), "-N",
         "-o", "ExitOnForwardFailure=yes",
         *(a for f in forwards for a in ("-L", f)), "alice@127.0.0.1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"},
    )  # fmt: skip
    try:
        wait_until(lambda: listening(local) or tunnel.poll() is not None, 30, "the -L tunnel")
        got = httpx.get(f"http://127.0.0.1:{local}/user/alice/api", timeout=20)
        assert got.status_code == 200 and "version" in got.json(), got.text
        # all at once (each waits out the relay's 10 s connect timeout: dropped)
        conns = [socket.create_connection(("127.0.0.1", lp), timeout=30) for lp in blocked]
        for conn in conns:
            with conn:
                conn.settimeout(30)
                assert conn.recv(1) == b"", "a forward to the node's engine or agent opened"
    finally:
        tunnel.terminate()
        _, stderr = tunnel.communicate(timeout=10)
    hub.wait_log(r"SSH forward opened: user=alice server=\(default\) to=127\.0\.0\.1:8888", after=0)
    for p in blocked.values():
        hub.wait_log(rf"SSH forward failed: user=alice .* to={engine.address}:{p}: ", after=0)
    # and from her notebook's side (the same container), the same fail alike
    probe = homes / "alice" / "probe.py"
    probe.write_text(PROBE)
    os.chown(probe, UID, GID)
    ports = " ".join(map(str, blocked.values()))
    inside = client.run("alice", f"python3 probe.py {engine.address} {ports}", key=alice_key)
    assert inside.returncode == 0, inside
    assert inside.stdout.split() == [f"{p}:refused" for p in blocked.values()], inside
    assert stderr.count("open failed: connect failed") == len(blocked), stderr
    # -R is refused with one sentence
    done = client.tool(
        "ssh", *opts, "-p", str(port), "-R", "127.0.0.1:9999:127.0.0.1:22",
        "alice@127.0.0.1", "true",
    )  # fmt: skip
    assert "Remote forwarding (ssh -R) is not available" in done.stderr, done

    # bob's key does not open alice's server
    done = client.run("alice", "id -u", key=bob_key)
    assert done.returncode == 255 and "Permission denied" in done.stderr, done
    assert done.stdout == "", done
    # bob's own server is not running: one sentence says how to start it
    done = client.run("bob", "id -u", key=bob_key)
    assert done.returncode == 1, done
    assert done.stderr.strip() == (
        f"Your server is not running: start it at {hub.url}/hub/spawn, then ssh again."
    ), done
    done = client.run("alice.exp", "id -u", key=alice_key)
    assert done.returncode == 1 and "You have no server named 'exp'" in done.stderr, done

    # a hub token of alice as the password; a wrong one is refused
    token = hub.user_token("alice")
    done = client.run("alice", "id -u", password=token, work=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, str(UID)), done
    done = client.run("alice", "id -u", password=token[:-4] + "0000", work=tmp_path)
    assert done.returncode == 255 and "Permission denied" in done.stderr, done
    assert done.stdout == "", done

    # a group-writable authorized_keys is not trusted (sshd's StrictModes)
    alice_keys.chmod(0o620)
    done = client.run("alice", "id -u", key=alice_key)
    assert done.returncode == 255 and "Permission denied" in done.stderr, done
    hub.wait_log(r"SSH login refused: login='alice' .*writable by its group", after=0)
    log = hub.log_path.read_text()
    assert token not in log, "a token reached the hub's log"


def culler_config(work: Path) -> str:
    """The real culler as a hub service (its minimal role), timeout 12 s, a round every 2 s,
    no warning ahead of a cull (``warn_before`` 0: the cull comes at the timeout)."""
    work.mkdir(parents=True, exist_ok=True)
    settings = work / "culler_config.py"
    settings.write_text(
        f"""
c.GPUIdleCuller.timeout = {CULL_TIMEOUT}
c.GPUIdleCuller.gpu_timeout = {CULL_TIMEOUT}
c.GPUIdleCuller.interval = {CULL_INTERVAL}
c.GPUIdleCuller.warn_before = 0
c.GPUIdleCuller.notes_file = ""
c.GPUIdleCuller.state_file = {str(work / "state.json")!r}
"""
    )
    return f"""
import sys
c.Spawner.http_timeout = 180
c.Spawner.start_timeout = 180
c.JupyterHub.services.append({{
    "name": "gpu-culler",
    "command": [sys.executable, "-m", "jupyterhub_gpu.services.culler", "--config={settings}",
                "--log-level=DEBUG", "--GPUIdleCuller.proxy_url=" + c.JupyterHub.bind_url],
}})
c.JupyterHub.load_roles.append(
    {{"name": "gpu-culler", "scopes": {CULLER_SCOPES!r}, "services": ["gpu-culler"]}}
)
"""


def culler_lines(hub: Hub, pattern: str) -> list[tuple[datetime, str]]:
    """(when, line) of the culler's log lines matching ``pattern`` (local time)."""
    found = []
    for line in hub.log_path.read_text(errors="replace").splitlines():
        m = re.match(r"^\[[DIWEC] ([\d-]+ [\d:.]+) GPUIdleCuller\] (.*)$", line)
        if m and re.search(pattern, m[2]):
            found.append((datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S.%f"), m[2]))
    return found


def test_the_culler_sees_ssh_and_a_stopped_server_ends_the_session(
    make_hub, engines: list[Engine], tmp_path: Path
) -> None:
    """alice's server is used only over SSH: while she types, the real culler keeps it
    (past the time it would have culled it idle); once she stops typing, with her session
    still open, it is culled, and her session ends with the sentence."""
    engine = engines[0]
    hub, client, port, _ = gateway_hub(
        make_hub, engine, tmp_path, culler_config(tmp_path / "culler"), ", start_servers=True"
    )
    hub.create_user("alice")
    alice_key = keygen(tmp_path / "alice")
    authorize(tmp_path / "homes" / "alice", tmp_path / "alice.pub")
    r = hub.spawn("alice", {"image": "demo-cpu", "gpu_count": 0, "mem_gib": 1, "cpu": 0.5})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice", timeout=240)

    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    session = subprocess.Popen(
        ["ssh", *client.options(alice_key), "-p", str(port), "-T", "alice@127.0.0.1",
         'while read -r line; do echo "got $line"; done'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, bufsize=1,
    )  # fmt: skip
    assert session.stdin is not None and session.stdout is not None
    typed = 0

    def type_a_line() -> None:
        nonlocal typed
        typed += 1
        session.stdin.write(f"line {typed}\n")  # type: ignore[union-attr]
        session.stdin.flush()  # type: ignore[union-attr]
        line = session.stdout.readline()  # type: ignore[union-attr]
        assert line == f"got line {typed}\n", (line, hub.log_tail(80))

    # typing every 2 s: the culler keeps her server for its hub activity, past the
    # moment it would have culled it idle (the first typing + timeout + a round)
    type_a_line()
    first = datetime.now()
    would_cull = first.timestamp() + CULL_TIMEOUT + 2 * CULL_INTERVAL

    def kept_past_its_timeout() -> bool:
        type_a_line()
        kept = culler_lines(hub, r"^Keeping alice: hub activity \d+ s ago")
        return any(at.timestamp() > would_cull for at, _ in kept)

    wait_until(kept_past_its_timeout, 90, "the culler keeping alice for her SSH typing",
               interval=2.0, details=lambda: hub.log_tail(40))  # fmt: skip
    assert not culler_lines(hub, r"^Culling alice"), hub.log_tail(60)
    model = hub.server("alice")
    assert model is not None and model["ready"]
    last = datetime.fromisoformat(model["last_activity"].replace("Z", "+00:00"))
    assert last.timestamp() > first.timestamp() + CULL_TIMEOUT, model  # SSH input, reported

    # she stops typing, her session still open: culled as idle, the session ends
    stopped_typing = time.time()
    wait_until(lambda: culler_lines(hub, r"^Culling alice: idle"), CULL_TIMEOUT + 60,
               "the culler culling alice once idle", details=lambda: hub.log_tail(40))  # fmt: skip
    culled_at = culler_lines(hub, r"^Culling alice: idle")[0][0].timestamp()
    assert culled_at >= stopped_typing + CULL_TIMEOUT - 3, (culled_at, stopped_typing)
    out, err = session.communicate(timeout=90)
    assert session.returncode == 255, (out, err)
    assert err.strip() == (
        f"Your server stopped, so this session ended: start it again at {hub.url}/hub/spawn."
    ), err

    # this site lets ssh start a stopped default server: with its last options (the CPU
    # image), its progress on stderr, then the command, as her
    wait_until(lambda: hub.server("alice") is None, 60, "alice's server gone")
    started = time.monotonic()
    done = client.run("alice", "id -u", key=alice_key)
    took = time.monotonic() - started
    assert done.returncode == 0, (done, hub.log_tail(40))
    assert done.stdout.split()[0] == str(UID), done
    assert done.stderr.startswith(
        "Your server is not running: starting it with the options of its last start"
    ), done
    print(f"\nssh alice@gateway 'id -u' starting her server answered in {took:.1f} s")
    print(done.stderr)
    hub.wait_log(r"SSH started the server of alice", after=0)
    model = hub.api("GET", "/users/alice").json()["servers"][""]
    assert model["user_options"]["image"] == "demo-cpu", model


#: what VS Code Remote-SSH's first connection does (``ssh -T host bash``, a script on
#: stdin): start its server listening on a port inside the container, say which, and
#: keep the connection (bash waits for more input) while the client forwards to it
REMOTE_SSH_SCRIPT = """
cd ~ && mkdir -p vscode-like && echo "served from $(id -u)" > vscode-like/index.txt
nohup python3 -m http.server {port} --bind 127.0.0.1 --directory vscode-like >/dev/null 2>&1 &
SERVER=$!
for i in $(seq 200); do
  python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' \\
    {port} 2>/dev/null && break
  sleep 0.1
done
echo "listeningOn=={port}=="
"""


def observer_config(token: str) -> str:
    """The cluster API the dashboard reads (without the dashboard's own process) and a
    service that may read it and /hub/metrics."""
    return f"""
from jupyterhub_gpu.hub.api.cluster import CUSTOM_SCOPES, READ_SCOPE, ClusterAPIHandler
from jupyterhub_gpu.hub.api.cluster import SnapshotCache
from jupyterhub_gpu.hub.extensions import register
register(c, [(r"/api/gpu/cluster", ClusterAPIHandler, {{"cache": SnapshotCache()}})],
         custom_scopes=CUSTOM_SCOPES)
c.JupyterHub.services = c.JupyterHub.services + [{{"name": "observer", "api_token": {token!r}}}]
c.JupyterHub.load_roles = c.JupyterHub.load_roles + [
    {{"name": "observer", "scopes": [READ_SCOPE, "read:metrics"], "services": ["observer"]}}
]
"""


def test_ldap_keys_a_named_server_and_open_sessions_seen(
    make_hub, engines: list[Engine], tmp_path: Path, ldap_server
) -> None:
    """alice's key only in LDAP (sshPublicKey) opens her named server ``exp`` (a bad value
    beside it is logged and skipped); a VS Code Remote-SSH-like connection (``ssh -T host
    bash`` starting a server in her container, ``-L`` to it) works end to end, while the
    hub's cluster API (what the dashboard shows) and its metrics count the open session
    and forward, and see them go; her key removed from LDAP no longer opens anything."""
    directory = ldap_server
    observer = os.urandom(16).hex()
    search_pw = directory.admin_password_file.read_text()
    ldap = f"""
c.JupyterHub.authenticator_class = "jupyterhub_gpu.hub.auth.ldap.GPULDAPAuthenticator"
c.GPULDAPAuthenticator.enable_auth_state = False
c.GPULDAPAuthenticator.server_address = {directory.host!r}
c.GPULDAPAuthenticator.server_port = {directory.port}
c.GPULDAPAuthenticator.tls_strategy = "insecure"
c.GPULDAPAuthenticator.bind_dn_template = ["uid={{username}},ou=people,{directory.suffix}"]
c.GPULDAPAuthenticator.lookup_dn_search_user = {directory.admin_dn!r}
c.GPULDAPAuthenticator.lookup_dn_search_password = {search_pw!r}
c.GPULDAPAuthenticator.ssh_public_key_attribute = "sshPublicKey"
c.JupyterHub.allow_named_servers = True
{observer_config(observer)}
"""
    hub, client, port, _ = gateway_hub(make_hub, engines[0], tmp_path, ldap)
    hub.create_user("alice")
    r = hub.spawn("alice", {"image": "demo-cpu", "gpu_count": 0, "mem_gib": 1, "cpu": 0.5}, "exp")
    assert r.status_code in (201, 202), r.text
    alice_key = keygen(tmp_path / "alice")
    public = (tmp_path / "alice.pub").read_text().strip()
    dn = directory.user_dn("alice")
    directory.modify(
        f"dn: {dn}\nchangetype: modify\nadd: objectClass\nobjectClass: ldapPublicKey\n-\n"
        f"add: sshPublicKey\nsshPublicKey: not a key at all\nsshPublicKey: {public}\n"
    )
    hub.wait_ready("alice", "exp", timeout=240)

    # her key from LDAP (no authorized_keys anywhere) opens her named server
    done = client.run("alice.exp", "echo $JUPYTERHUB_SERVER_NAME; id -u", key=alice_key)
    assert done.returncode == 0, (done, hub.log_tail(40))
    assert done.stdout.split() == ["exp", str(UID)], done
    hub.wait_log(r"SSH key from LDAP skipped: user=alice value \d: not a public key", after=0)
    done = client.run("alice.nope", "true", key=alice_key)
    assert done.returncode == 1, done
    assert done.stderr.strip() == (
        f"You have no server named 'nope': create it at {hub.url}/hub/spawn/alice/nope, "
        "then ssh again."
    ), done

    headers = {"Authorization": f"token {observer}"}

    def ssh_seen() -> tuple[dict | None, dict[str, float]]:
        """alice/exp's ``ssh`` in the cluster API, and the metrics' (series -> value)."""
        cluster = httpx.get(f"{hub.url}/hub/api/gpu/cluster", headers=headers, timeout=20)
        cluster.raise_for_status()
        mine = [s for s in cluster.json()["servers"] if s["key"] == "alice/exp"]
        assert len(mine) == 1, cluster.json()["servers"]
        text = httpx.get(f"{hub.url}/hub/metrics", headers=headers, timeout=20).text
        series = dict(re.findall(r"^(jupyterhub_gpu_ssh_\w+\{[^}]*\}) (\S+)$", text, re.M))
        return mine[0].get("ssh"), {k: float(v) for k, v in series.items()}

    # VS Code Remote-SSH's sequence: `ssh -T host bash` with its script on stdin, which
    # starts a server in her container, then -L to the port it listens on
    inner, local = 8765, free_port()
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    remote = subprocess.Popen(
        ["ssh", *client.options(alice_key), "-p", str(port), "-T",
         "-o", "ExitOnForwardFailure=yes", "-L", f"127.0.0.1:{local}:127.0.0.1:{inner}",
         "alice.exp@127.0.0.1", "bash"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, bufsize=1,
    )  # fmt: skip
    assert remote.stdin is not None and remote.stdout is not None
    held: socket.socket | None = None
    try:
        remote.stdin.write(REMOTE_SSH_SCRIPT.format(port=inner))
        remote.stdin.flush()
        assert remote.stdout.readline().strip() == f"listeningOn=={inner}==", hub.log_tail(30)
        # a forwarded connection held open (the server waits for its request)
        held = socket.create_connection(("127.0.0.1", local), timeout=30)

        def open_seen() -> tuple[dict, dict[str, float]] | None:
            ssh, series = ssh_seen()
            return (ssh, series) if ssh and ssh["forwards"] == 1 else None

        ssh, series = wait_until(open_seen, 30, "the hub to see the open SSH session",
                                 details=lambda: hub.log_tail(30))  # fmt: skip
        assert (ssh["sessions"], ssh["forwards"]) == (1, 1), ssh
        assert ssh["from"] and all(a.startswith("127.0.0.1:") for a in ssh["from"]), ssh
        since = datetime.fromisoformat(ssh["since"].replace("Z", "+00:00"))
        assert abs(since.timestamp() - time.time()) < 120, ssh
        sessions = {k: v for k, v in series.items() if k.startswith("jupyterhub_gpu_ssh_sessions")}
        forwards = {k: v for k, v in series.items() if k.startswith("jupyterhub_gpu_ssh_forwards")}
        assert sum(sessions.values()) == 1 and sum(forwards.values()) == 1, series
        assert not any("alice" in k for k in series), series  # groups, never user names
        # the server in her container answers through the forward, as her
        held.sendall(b"GET /index.txt HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = b""
        while chunk := held.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.0 200"), answer[:200]
        assert answer.endswith(f"served from {UID}\n".encode()), answer[-200:]
        # the server closed that connection: the forward goes, the session stays
        wait_until(lambda: (s := ssh_seen()[0]) and s["forwards"] == 0 and s["sessions"] == 1,
                   30, "the forward to go")  # fmt: skip
        remote.stdin.write("kill $SERVER; exit 0\n")
        remote.stdin.flush()
        remote.stdin.close()
        assert remote.wait(timeout=30) == 0, remote.stderr.read() if remote.stderr else ""
    finally:
        if held is not None:
            held.close()
        if remote.poll() is None:
            remote.kill()
            remote.wait(timeout=10)
        for pipe in (remote.stdin, remote.stdout, remote.stderr):
            if pipe is not None:
                pipe.close()

    def all_gone() -> bool:
        ssh, series = ssh_seen()
        return ssh is None and sum(series.values()) == 0

    wait_until(all_gone, 30, "the hub to see the SSH session end",
               details=lambda: repr(ssh_seen()))  # fmt: skip

    # her key removed from LDAP: it no longer opens anything, at the next login
    directory.modify(f"dn: {dn}\nchangetype: modify\ndelete: sshPublicKey\n")
    done = client.run("alice.exp", "id -u", key=alice_key)
    assert done.returncode == 255 and "Permission denied" in done.stderr, done
    assert done.stdout == "", done
    assert search_pw not in hub.log_path.read_text(), "the search account's password was logged"
