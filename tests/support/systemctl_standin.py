"""TEST-ONLY ``systemctl`` of a bare test node (tests/support/bare_node.py), for commands
that call ``systemctl`` themselves (``jupyterhub-gpu node join``, ``node leave``).

:func:`install` writes an executable ``systemctl`` into a folder the test puts first on
the command's PATH. It does what the node's unit files say, as tests/support/units.py
reads them: ``restart docker.service`` starts the node's dockerd from the drop-in and
daemon.json under the node's root (BareNode.start_engine), ``start``/``restart`` of the
agent runs its ``ExecStart`` inside the node's namespace (detached; its pid kept in the
node's folder), of the firewall (oneshot) runs it to the end; ``stop`` and ``disable
--now`` stop them; ``daemon-reload`` and ``enable`` do nothing. Every call is logged to
``systemctl.log`` in the node's folder, so a test can see what was (not) done. The
processes it starts live in the node's namespace: BareNode.destroy ends them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path

from tests.support import units
from tests.support.bare_node import REPO, BareNode

HUB = "jupyterhub-gpu-hub.service"
AGENT = "jupyterhub-gpu-agent.service"
FIREWALL = "jupyterhub-gpu-firewall.service"


def install(folder: Path, node: BareNode | None, root: Path) -> Path:
    """The ``systemctl`` stand-in for ``node`` whose ``/`` is ``root`` (None: the hub's
    machine, this host's namespace: ``enable --now`` of the hub's unit runs its
    ``ExecStartPre`` then its ``ExecStart``, detached, its pid in ``ROOT/run``, and so
    does another unit written there, the site's registry's); its folder."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "systemctl"
    script.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH={REPO} exec {sys.executable} -m tests.support.systemctl_standin "
        f'{node.index if node else 0} {root} "$@"\n'
    )
    script.chmod(0o755)
    return folder


def _pidfile(node: BareNode, unit: str) -> Path:
    return node.folder / f"{unit}.pid"


def _stop(node: BareNode, unit: str) -> None:
    pidfile = _pidfile(node, unit)
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.1)
    pidfile.unlink()


def _alive(pid: int) -> bool:
    """Running (a zombie, whose parent has not reaped it yet, is not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def _stop_engine(node: BareNode) -> None:
    pidfile = node.folder / "pid"
    if not pidfile.exists():
        return
    with contextlib.suppress(ProcessLookupError, ValueError):
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
        for _ in range(300):
            if not _alive(pid):
                break
            time.sleep(0.1)


def start_docker(node: BareNode, root: Path) -> None:
    _stop_engine(node)
    drop_in = root / "etc/systemd/system/docker.service.d/jupyterhub-gpu-tls.conf"
    node.start_engine(drop_in, root / "etc/docker/daemon.json", root / "etc/docker")


def _service_env() -> dict[str, str]:
    env = units.without_venv(os.environ)
    return env


def start(node: BareNode, root: Path, unit_name: str) -> int:
    unit = units.Unit(root / "etc/systemd/system" / unit_name)
    if unit_name == FIREWALL:
        done = node.run(unit.start, env=_service_env())
        sys.stderr.write(done.stdout + done.stderr)
        return done.returncode
    _stop(node, unit_name)
    proc = unit.popen(_service_env(), node.folder / f"{unit_name}.log", node.wrap)
    _pidfile(node, unit_name).write_text(str(proc.pid))
    return 0


def hub_pidfile(root: Path) -> Path:
    return root / "run" / f"{HUB}.pid"


def start_hub(root: Path) -> int:
    unit = units.Unit(root / "etc/systemd/system" / HUB)
    unit.run_pre(_service_env())
    hub_pidfile(root).parent.mkdir(parents=True, exist_ok=True)
    proc = unit.popen(_service_env(), root / "run" / "hub.log")
    hub_pidfile(root).write_text(str(proc.pid))
    return 0


def start_hub_service(root: Path, unit_name: str) -> int:
    """Another unit of the hub's machine (the site's registry): its ``ExecStart``,
    detached, its pid in ``ROOT/run``."""
    unit = units.Unit(root / "etc/systemd/system" / unit_name)
    stop_hub(root, unit_name)
    pidfile = root / "run" / f"{unit_name}.pid"
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    proc = unit.popen(_service_env(), root / "run" / f"{unit_name}.log")
    pidfile.write_text(str(proc.pid))
    return 0


def stop_all(root: Path) -> None:
    """Every unit the stand-in started on the hub's machine, and what the hub started in
    sessions of its own (its services), should the hub have gone before it stopped them."""
    for pidfile in sorted((root / "run").glob("*.service.pid")):
        stop_hub(root, pidfile.name.removesuffix(".pid"))
    units.stop_leftovers(root)


def stop_hub(root: Path, unit_name: str = HUB) -> None:
    """The hub (or another unit of its machine) and what it started (its process group)."""
    pidfile = root / "run" / f"{unit_name}.pid"
    if pidfile.exists():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pidfile.read_text()), signal.SIGTERM)
        pid = int(pidfile.read_text())
        for _ in range(200):
            if not _alive(pid):
                break
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        pidfile.unlink()
    if unit_name == HUB:
        _stop_proxy(root)


def _stop_proxy(root: Path) -> None:
    """The proxy the hub started: JupyterHub starts it in a session of its own (so that it
    outlives a hub restart), out of the hub's process group; systemd's stop reaches it
    through the unit's cgroup. Found by the site's pid file in the unit's working folder."""
    try:
        unit = (root / "etc/systemd/system" / HUB).read_text()
    except OSError:
        return
    found = re.search(r"^WorkingDirectory=(.+)$", unit, re.M)
    if found is None:
        return
    state = Path(found.group(1).strip())
    if state.is_relative_to(root):
        units.stop_proxy(state)


def main(argv: list[str]) -> int:
    if argv[0] == "0":
        root, args = Path(argv[1]), [a for a in argv[2:] if not a.startswith("--")]
        if args[0] == "daemon-reload":
            return 0
        if args[0] in ("enable", "start", "restart") and args[1:]:
            if args[0] == "enable" and "--now" not in argv:
                return 0
            for name in args[1:]:
                if name == HUB:
                    stop_hub(root)
                    start_hub(root)
                elif (root / "etc/systemd/system" / name).is_file():
                    start_hub_service(root, name)
                else:
                    print(f"systemctl stand-in: no unit {name} on the hub", file=sys.stderr)
                    return 1
            return 0
        print(f"systemctl stand-in: {' '.join(argv[2:])} is not known on the hub", file=sys.stderr)
        return 1
    node, root = BareNode(int(argv[0])), Path(argv[1])
    args = [a for a in argv[2:] if not a.startswith("--")]
    with open(node.folder / "systemctl.log", "a") as log:
        log.write(" ".join(argv[2:]) + "\n")
    verb, names = args[0], args[1:]
    if verb in ("daemon-reload", "enable"):
        return 0
    for name in names:
        name = name if name.endswith(".service") else f"{name}.service"
        if verb in ("restart", "start") and name == "docker.service":
            start_docker(node, root)
        elif verb in ("restart", "start"):
            if start(node, root, name):
                return 1
        elif verb in ("stop", "disable") and name == AGENT:
            _stop(node, name)
        elif verb in ("stop", "disable") and name == FIREWALL:
            pass  # a stop removes no rule (the unit's comment): `firewall --remove` does
        else:
            print(f"systemctl stand-in: {verb} {name} is not known here", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
