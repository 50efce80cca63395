"""What Python a base image has, asked of the image itself (an edge, and its pure parser).

Wheels are fetched on the hub's side for the image's Python, not the hub's: version,
machine, glibc, the virtual environment's prefix and the distributions it already has
(so a saved image doesn't re-install them). :func:`probe_target` runs the base image once,
as nobody, with no network, no capabilities, no GPU (``NVIDIA_VISIBLE_DEVICES=void``
whatever the image or the node's default runtime says, no device requests), a read-only
root and small limits (memory, processes, one CPU), and
reads at most :data:`OUTPUT_MAX` bytes of its output (:func:`.output.read_output`);
:func:`parse_probe` checks its last JSON line, an untrusted answer, against bounds.
:func:`base_user` reads only the image's configured ``User`` (never its environment or
labels); :func:`base_gpus` its own ``NVIDIA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from typing import Any

from docker.errors import APIError, ImageNotFound

from jupyterhub_gpu.core.saving.data import (
    GLIBC_MINORS,
    PYTHON_MINORS,
    BuildFailed,
    InvalidPackage,
    Target,
)
from jupyterhub_gpu.core.saving.recipe import GPUS, NO_GPU
from jupyterhub_gpu.core.saving.stream import clean
from jupyterhub_gpu.core.saving.validate import pip_name, pip_version
from jupyterhub_gpu.edges.builder.output import read_output

PROBE = (
    "import importlib.metadata as m, json, platform, sys\n"
    "libc, ver = platform.libc_ver()\n"
    "print(json.dumps({'python': list(sys.version_info[:2]), 'machine': platform.machine(),\n"
    "  'libc': libc, 'libc_version': ver, 'prefix': sys.prefix, 'base_prefix': sys.base_prefix,\n"
    "  'implementation': sys.implementation.name,\n"
    "  'installed': [[d.metadata['Name'] or '', d.version or ''] for d in m.distributions()]}))\n"
)
PROBE_USER = "65534:65534"
PROBE_CPUS = 1  #: CPUs the probe may use
OUTPUT_MAX = 4 * 1024 * 1024  #: bytes of the probe's stdout the hub reads at most
INSTALLED_MAX = 10_000  #: distributions (a large conda environment has about 1,000)
PATH_MAX = 255  #: characters of the environment's prefix
_WORD = re.compile(r"[A-Za-z0-9_]{1,32}")  # machine, implementation, libc name
_LIBC_VERSION = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){0,3}")
_GLIBC = re.compile(r"2\.([0-9]{1,2})")
_MUSL = re.compile(r"1\.[0-9]{1,2}(?:\.[0-9]{1,2})?")


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


def _impossible(base: str, what: str, value: object) -> BuildFailed:
    shown = clean(value if isinstance(value, str) else repr(value))[:40]
    return _fail(base, f"the image reported an impossible {what} {shown!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _glibc(doc: dict[str, Any], base: str) -> tuple[int, int] | None:
    """``(2, minor)`` for a glibc within :data:`GLIBC_MINORS`; ``None`` for musl or another
    libc (pure-Python wheels only); :class:`BuildFailed` for anything out of range."""
    libc, version = doc.get("libc", ""), doc.get("libc_version", "")
    if not (isinstance(libc, str) and isinstance(version, str)):
        raise _fail(base, "its Python gave an answer in an unknown form")
    if libc and not _WORD.fullmatch(libc):
        raise _impossible(base, "C library", libc)
    if version and not _LIBC_VERSION.fullmatch(version):
        raise _impossible(base, "C library version", f"{libc} {version}")
    if libc == "glibc":
        match = _GLIBC.fullmatch(version)
        if not match or int(match.group(1)) not in GLIBC_MINORS:
            raise _impossible(base, "C library version", f"glibc {version}")
        return (2, int(match.group(1)))
    if libc == "musl" and not _MUSL.fullmatch(version):
        raise _impossible(base, "C library version", f"musl {version}")
    return None


def parse_probe(output: str, base: str, python_path: str) -> Target:
    """The :class:`Target` from the probe's last output line; :class:`BuildFailed`
    when it is not one, or the image's Python is not a virtual environment.

    The answer is the image's own (a ``.pth`` file runs before the probe and can print
    anything after it), so every field is bounded: glibc ``2.``:data:`GLIBC_MINORS`,
    musl ``1.x``, Python ``3.``:data:`PYTHON_MINORS`, short plain names, a plain absolute
    prefix and at most :data:`INSTALLED_MAX` distributions."""
    lines = [x for x in output.strip().splitlines() if x.startswith("{")]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        doc = None
    if not isinstance(doc, dict):
        raise _fail(base, "its Python printed no answer")
    python, machine, prefix = doc.get("python"), doc.get("machine"), doc.get("prefix")
    implementation = doc.get("implementation", "cpython")
    if not (isinstance(python, list) and len(python) == 2 and all(map(_is_int, python))) or not (
        isinstance(machine, str) and isinstance(prefix, str) and isinstance(implementation, str)
    ):
        raise _fail(base, "its Python gave an answer in an unknown form")
    if python[0] != 3 or python[1] not in PYTHON_MINORS:
        raise _impossible(base, "Python version", ".".join(str(x)[:8] for x in python))
    if not _WORD.fullmatch(machine):
        raise _impossible(base, "machine", machine)
    if not _WORD.fullmatch(implementation):
        raise _impossible(base, "Python implementation", implementation)
    if not (
        prefix.startswith("/")
        and len(prefix) <= PATH_MAX
        and prefix.isascii()
        and prefix.isprintable()
    ):
        raise _impossible(base, "environment folder", prefix)
    installed = doc.get("installed")
    if isinstance(installed, list) and len(installed) > INSTALLED_MAX:
        raise _impossible(base, "number of installed distributions", len(installed))
    glibc = _glibc(doc, base)
    if prefix == doc.get("base_prefix"):
        raise _fail(base, f"{python_path} is not in a virtual environment")
    impl = {"cpython": "cp", "pypy": "pp"}.get(implementation, "cp")
    return Target(
        python=(python[0], python[1]),
        machine=machine,
        glibc=glibc,
        implementation=impl,
        python_path=python_path,
        prefix=prefix,
        installed=_installed(installed),
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
        nano_cpus=PROBE_CPUS * 10**9,
        tmpfs={"/tmp": "size=16m"},
    )
    try:
        container = client.create_container(
            base,
            command=["-c", PROBE],
            entrypoint=[python_path],
            user=PROBE_USER,
            environment={GPUS: NO_GPU},  # over the image's own (a CUDA base says "all")
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
        deadline = time.monotonic() + timeout
        output = read_output(client, cid, OUTPUT_MAX, timeout)
        if output.cut:
            raise _fail(base, f"{python_path} printed more than {OUTPUT_MAX // 2**20} MiB")
        if output.timed_out:
            raise _fail(base, f"{python_path} did not finish within {timeout:.0f} s")
        status = client.wait(cid, timeout=max(1.0, deadline - time.monotonic()))
    except BuildFailed:
        raise
    except Exception as e:  # requests' ReadTimeout or the engine's APIError
        raise _fail(base, type(e).__name__) from None
    finally:
        with contextlib.suppress(Exception):  # best effort: a labelled probe is harmless
            client.remove_container(cid, force=True)
    if status.get("StatusCode") != 0:
        raise _fail(base, f"{python_path} exited with {status.get('StatusCode')}")
    return parse_probe(output.data.decode("utf-8", "replace"), base, python_path)


def base_user(client: Any, base: str) -> str:
    """The ``User`` the base image is configured with (``""`` when none)."""
    config = client.inspect_image(base).get("Config") or {}
    user = config.get("User")
    return user if isinstance(user, str) else ""


def base_gpus(client: Any, base: str) -> str | None:
    """The base image's own ``NVIDIA_VISIBLE_DEVICES`` (``None`` when it sets none)."""
    config = client.inspect_image(base).get("Config") or {}
    for item in config.get("Env") or ():
        if isinstance(item, str) and item.startswith(GPUS + "="):
            return item.partition("=")[2]
    return None
