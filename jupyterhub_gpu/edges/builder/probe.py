"""What Python a base image has, asked of the image itself (an edge, and its pure parser).

Wheels are fetched on the hub's side for the image's Python, not the hub's: version,
machine, glibc, the virtual environment's prefix and the distributions it already has
(so a saved image doesn't re-install them). :func:`probe_target` runs the base image once,
as nobody, with no network, no capabilities, a read-only root and small limits, and
reads one JSON line; :func:`parse_probe` checks it. :func:`base_user` reads only the
image's configured ``User`` (never its environment or labels).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from docker.errors import APIError, ImageNotFound

from jupyterhub_gpu.core.saving.data import BuildFailed, InvalidPackage, Target
from jupyterhub_gpu.core.saving.stream import clean
from jupyterhub_gpu.core.saving.validate import pip_name, pip_version

PROBE = (
    "import importlib.metadata as m, json, platform, sys\n"
    "libc, ver = platform.libc_ver()\n"
    "print(json.dumps({'python': list(sys.version_info[:2]), 'machine': platform.machine(),\n"
    "  'libc': libc, 'libc_version': ver, 'prefix': sys.prefix, 'base_prefix': sys.base_prefix,\n"
    "  'implementation': sys.implementation.name,\n"
    "  'installed': [[d.metadata['Name'] or '', d.version or ''] for d in m.distributions()]}))\n"
)
PROBE_USER = "65534:65534"
OUTPUT_MAX = 4 * 1024 * 1024


def _fail(base: str, why: str) -> BuildFailed:
    return BuildFailed(
        f"The base image {base} could not be examined ({why}); ask your admin to check "
        "its catalog entry."
    )


def _installed(raw: Any) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for item in raw if isinstance(raw, list) else []:
        if not (
            isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)
        ):
            continue
        try:
            found.setdefault(pip_name(item[0]), pip_version(item[1]))
        except InvalidPackage:
            continue
    return tuple(sorted(found.items()))


def parse_probe(output: str, base: str, python_path: str) -> Target:
    """The :class:`Target` from the probe's last output line; :class:`BuildFailed`
    when it is not one, or the image's Python is not a virtual environment."""
    lines = [x for x in output.strip().splitlines() if x.startswith("{")]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise _fail(base, "its Python printed no answer")
    python, machine, prefix = doc.get("python"), doc.get("machine"), doc.get("prefix")
    if not (
        isinstance(python, list) and len(python) == 2 and all(isinstance(x, int) for x in python)
    ) or not (isinstance(machine, str) and isinstance(prefix, str)):
        raise _fail(base, "its Python gave an answer in an unknown form")
    if prefix == doc.get("base_prefix"):
        raise _fail(base, f"{python_path} is not in a virtual environment")
    glibc = None
    version = str(doc.get("libc_version", ""))
    if (
        doc.get("libc") == "glibc"
        and version.count(".") == 1
        and version.replace(".", "").isdigit()
    ):
        major, minor = version.split(".")
        glibc = (int(major), int(minor))
    impl = {"cpython": "cp", "pypy": "pp"}.get(str(doc.get("implementation")), "cp")
    return Target(
        python=(python[0], python[1]),
        machine=machine,
        glibc=glibc,
        implementation=impl,
        python_path=python_path,
        prefix=prefix,
        installed=_installed(doc.get("installed")),
    )


def probe_target(
    client: Any, base: str, python_path: str = "/opt/venv/bin/python", timeout: float = 60
) -> Target:
    """Run ``python_path`` of ``base`` once (blocking) and return its :class:`Target`."""
    host = client.create_host_config(
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        mem_limit="512m",
        pids_limit=64,
        tmpfs={"/tmp": "size=16m"},
    )
    try:
        container = client.create_container(
            base,
            command=["-c", PROBE],
            entrypoint=[python_path],
            user=PROBE_USER,
            network_disabled=True,
            host_config=host,
            labels={"io.jupyterhub-gpu.probe": "1"},
        )
    except ImageNotFound:
        raise _fail(base, "it is not on the node") from None
    except APIError as e:  # the engine's answer (an unreachable node raises requests' errors)
        raise _fail(base, f"the node's engine refused it: {clean(str(e.explanation))}") from None
    cid = container["Id"]
    try:
        try:
            client.start(cid)
        except APIError:  # the runtime could not exec it: no such file, not executable
            raise _fail(base, f"{python_path} could not be started in it") from None
        status = client.wait(cid, timeout=timeout)
        output = client.logs(cid, stdout=True, stderr=False)[:OUTPUT_MAX]
    except BuildFailed:
        raise
    except Exception as e:  # requests' ReadTimeout or the engine's APIError
        raise _fail(base, type(e).__name__) from None
    finally:
        with contextlib.suppress(Exception):  # best effort: a labelled probe is harmless
            client.remove_container(cid, force=True)
    if status.get("StatusCode") != 0:
        raise _fail(base, f"{python_path} exited with {status.get('StatusCode')}")
    return parse_probe(output.decode("utf-8", "replace"), base, python_path)


def base_user(client: Any, base: str) -> str:
    """The ``User`` the base image is configured with (``""`` when none)."""
    config = client.inspect_image(base).get("Config") or {}
    user = config.get("User")
    return user if isinstance(user, str) else ""
