"""A fresh GPU node for tests, with nothing of ours on it: a network namespace of its own
(its own loopback, iptables, a veth link to this machine, a default route through it),
and, once the install guide has written its Docker settings, its own ``dockerd`` started
as the guide's ``docker.service`` drop-in says.

Addresses: node ``k`` (1, 2, ...) is ``10.250.{20+k}.2``, this machine's end of its link
``10.250.{20+k}.1``; the hub's site address ``10.250.0.1`` (on this machine's loopback,
as scripts/cluster.sh sets it) is reached through the link. Namespaces are named
``jhgpu-bare-k`` and never clash with the test cluster's (``jhgpu-node-X``).

What stands in for the real node's system (each a line of the test's report):
- ``systemctl restart docker``: :meth:`BareNode.start_engine` runs the drop-in's
  ``ExecStart`` inside the namespace with the guide's ``daemon.json``; the copy it is
  given moves only this machine's shared paths (the unix socket, data-root, exec-root,
  pidfile) into the node's own folder, the TCP+TLS listener stays as written. Without a
  ``containerd`` service here, ``--containerd=`` is left out (dockerd starts its own).
- the node's ``/etc/docker`` (``certs.d``: which registries its Docker trusts, read at
  each pull): when :meth:`BareNode.start_engine` is given the node's ``etc/docker``
  folder, dockerd runs in a mount namespace of its own where that folder is bind-mounted
  on ``/etc/docker`` (this machine's stays as it is; another node does not see it).
- ``nvidia-ctk runtime configure``: the TEST-ONLY hook stand-in
  (tests/cluster/fake-nvidia) on dockerd's PATH, so the engine accepts GPU requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import units

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("JHGPU_STATE", "/var/lib/jupyterhub-gpu-test"))
HOOK_DIR = STATE / "hook"  # scripts/cluster.sh installs the fake hook here
SITE_ADDRESS = "10.250.0.1"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@dataclass
class BareNode:
    index: int  # 1, 2, ...
    folder: Path = field(init=False)
    engine: subprocess.Popen[bytes] | None = field(default=None, init=False)
    services: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.folder = STATE / "bare" / str(self.index)

    @property
    def netns(self) -> str:
        return f"jhgpu-bare-{self.index}"

    @property
    def address(self) -> str:
        return f"10.250.{20 + self.index}.2"

    @property
    def link(self) -> str:
        return f"vhb-{self.index}"

    @property
    def socket(self) -> Path:
        return self.folder / "docker.sock"

    @property
    def wrap(self) -> list[str]:
        """Run a command inside the node's network namespace (nsenter, not ``ip netns
        exec``, which remounts /sys: dockerd would lose the devices cgroup)."""
        return ["nsenter", f"--net=/var/run/netns/{self.netns}"]

    # -- the machine -------------------------------------------------------------------
    def create(self) -> None:
        self.destroy()
        _ip("netns", "add", self.netns)
        _ip("link", "add", self.link, "type", "veth", "peer", "name", f"vnb-{self.index}")
        _ip("link", "set", f"vnb-{self.index}", "netns", self.netns)
        _ip("addr", "add", f"10.250.{20 + self.index}.1/30", "dev", self.link)
        _ip("link", "set", self.link, "up")
        _ip("-n", self.netns, "addr", "add", f"{self.address}/30", "dev", f"vnb-{self.index}")
        _ip("-n", self.netns, "link", "set", f"vnb-{self.index}", "up")
        _ip("-n", self.netns, "link", "set", "lo", "up")
        _ip("-n", self.netns, "route", "add", "default", "via", f"10.250.{20 + self.index}.1")
        if SITE_ADDRESS not in _ip("-br", "addr", "show", "dev", "lo").stdout:
            _ip("addr", "add", f"{SITE_ADDRESS}/32", "dev", "lo")
        self.folder.mkdir(parents=True, exist_ok=True)

    def destroy(self) -> None:
        """Stop everything the node runs, remove its namespace, link and folder."""
        for proc in reversed(self.services):
            units.stop(proc)
        self.services.clear()
        if self.engine is not None:
            units.stop(self.engine, timeout=30)
            self.engine = None
        pids = _ip("netns", "pids", self.netns, check=False).stdout.split()
        for pid in pids:  # containers' processes left by a killed engine
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("link", "del", self.link, check=False)
        _ip("netns", "del", self.netns, check=False)
        exec_root = self.folder / "exec"
        if exec_root.exists():  # the engine's mounts (netns files, overlay) go first
            subprocess.run(
                ["sh", "-c", f"grep -o ' {self.folder}[^ ]*' /proc/mounts | sort -r "
                 "| xargs -r -n1 umount -l"],
                check=False,
            )  # fmt: skip
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(self, argv: Sequence[str], env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return subprocess.run(
            [*self.wrap, *argv], env=env, capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip

    # -- docker.service ----------------------------------------------------------------
    def start_engine(
        self, drop_in: Path, daemon_json: Path, etc_docker: Path | None = None
    ) -> None:
        """``systemctl restart docker`` with the guide's drop-in and daemon.json;
        ``etc_docker``: the node's ``/etc/docker`` (its ``certs.d``), seen by dockerd
        alone."""
        settings = json.loads(daemon_json.read_text())
        settings["hosts"] = [
            f"unix://{self.socket}" if h.startswith("unix://") else h for h in settings["hosts"]
        ]
        own = self.folder / "daemon.json"
        own.write_text(json.dumps(settings))
        argv = units.exec_start(drop_in.read_text())
        argv = [a for a in argv if not a.startswith("--containerd")]
        argv += ["--config-file", str(own), "--data-root", str(self.folder / "data")]
        argv += ["--exec-root", str(self.folder / "exec"), "--pidfile", str(self.folder / "pid")]
        env = {**os.environ, "PATH": f"{HOOK_DIR}:{os.environ['PATH']}"}
        if etc_docker is not None:  # its own mount namespace: the node's /etc/docker
            Path("/etc/docker").mkdir(exist_ok=True)
            bind = 'mount --bind "$0" /etc/docker && exec "$@"'
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind,
                    str(etc_docker), *argv]  # fmt: skip
        with open(self.folder / "dockerd.log", "ab") as log:
            self.engine = subprocess.Popen(
                [*self.wrap, *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while self.docker("info", check=False).returncode != 0:
            if self.engine.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"dockerd of bare node {self.index} did not start: "
                    + (self.folder / "dockerd.log").read_text()[-3000:]
                )
            time.sleep(0.2)

    def docker_env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}"}

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["docker", *args], env=self.docker_env(), capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {done.stderr}")
        return done

    def load(self, image: str, from_socket: Path) -> None:
        """The image from another engine (``docker save | docker load``)."""
        save = subprocess.Popen(
            ["docker", "-H", f"unix://{from_socket}", "save", image], stdout=subprocess.PIPE
        )
        load = subprocess.run(
            ["docker", "load", "-q"], stdin=save.stdout, env=self.docker_env(),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        save.wait()
        if save.returncode != 0 or load.returncode != 0:
            raise AssertionError(f"loading {image} into bare node {self.index}: {load.stderr}")

    def start_service(self, unit: units.Unit, base: dict[str, str], extra: Sequence[str] = ()
                      ) -> subprocess.Popen[bytes]:  # fmt: skip
        """``systemctl start`` of one of the node's units, inside its namespace."""
        proc = unit.popen(base, self.folder / f"{unit.path.stem}.log", self.wrap, extra)
        self.services.append(proc)
        return proc
