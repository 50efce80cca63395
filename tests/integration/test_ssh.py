"""SSH into one's own server (issue 33, first slice): a real OpenSSH client against a real
hub running the SSH gateway service (docs/ssh.md), into alice's real server on a node.

Alice's key in her ``~/.ssh/authorized_keys`` runs a command in her running server, as
her uid, with her GPU, in her home, and its exit status comes back; a terminal session
runs too; bob's key does not open alice's server; bob, whose server is not running, reads
the sentence saying how to start it; a hub token of alice as the password works, a wrong
one does not; a group-writable authorized_keys is not trusted. The host key the client
checks is the one ``jupyterhub-gpu ssh fingerprint`` prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import gpu_inventory
from tests.support.cluster import Engine
from tests.support.hub import TOKEN_ROLE_CONFIG, Hub, free_port

pytestmark = pytest.mark.integration

UID, GID = 10001, 5000
RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")


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


def test_ssh_gateway_with_a_real_client(make_hub, engine: Engine, tmp_path: Path) -> None:
    port = free_port()
    host_key = tmp_path / "state" / "ssh_host_ed25519_key"
    printed = cli("ssh", "fingerprint", "--key", str(host_key), "--make")
    extra = f"""
c.GPUDockerSpawner.default_uid = {UID}
c.GPUDockerSpawner.default_gid = {GID}
{TOKEN_ROLE_CONFIG}
from jupyterhub_gpu.hub.extensions import configure_ssh
configure_ssh(c, port={port}, host_key_file={str(host_key)!r})
"""
    hub: Hub = make_hub([engine], [gpu_inventory(engine.name, "dddddddd", [RTX])], extra)
    hub.wait_log(rf"SSH gateway on 127\.0\.0\.1:{port}, host key SHA256:", after=0)
    # the client trusts exactly the key whose fingerprint the command printed
    public = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(host_key)], capture_output=True, text=True, check=True
    ).stdout.split()
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
    listed = subprocess.run(
        ["ssh-keygen", "-lf", str(known_hosts)], capture_output=True, text=True, check=True
    ).stdout
    assert printed.split()[1] in listed, (printed, listed)
    client = Client(port, known_hosts)

    for user in ("alice", "bob"):
        hub.create_user(user)
    r = hub.spawn("alice", {"gpu_count": 1})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("alice")
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
