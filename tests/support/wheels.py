"""Small pure-Python wheels made by hand (zipfile), for saving environments offline.

A wheel here is a module of ``size`` bytes of Python source (string constants of random
hex, so that neither its byte code nor a compressed layer is much smaller than it), with
``METADATA``, ``WHEEL`` and a correct ``RECORD``: what pip checks and installs, and what
``pip download --find-links`` fetches. No network, no build back-end.
"""

from __future__ import annotations

import base64
import hashlib
import random
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name


def module_name(name: str) -> str:
    """``my-pkg`` -> ``my_pkg``: the import name of a test package."""
    return canonicalize_name(name).replace("-", "_")


def filler_source(module: str, size: int, seed: int = 0) -> str:
    """About ``size`` bytes of Python: ``VALUE`` and lines of random hex constants."""
    rng = random.Random(f"{module}:{seed}")
    lines = [f'"""Test package {module}."""', f"NAME = {module!r}"]
    n = 0
    while sum(len(x) + 1 for x in lines) < size:
        lines.append(f"C{n} = '{rng.randbytes(32).hex()}'")
        n += 1
    return "\n".join(lines) + "\n"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    files: Mapping[str, str | bytes] | None = None,
    scripts: Mapping[str, str] | None = None,
) -> Path:
    """A valid pure-Python wheel ``<name>-<version>-py3-none-any.whl`` in ``folder``.

    ``files`` (path in the wheel -> content) default to one module, ``<module>.py``,
    that sets ``VERSION``; ``scripts``: console scripts (command -> ``module:function``)
    that pip makes into executables in the environment's ``bin``."""
    module = module_name(name)
    dist = f"{module}-{version}"
    if files is None:
        files = {f"{module}.py": f"VERSION = {version!r}\n"}
    contents: dict[str, bytes] = {
        path: data.encode() if isinstance(data, str) else data for path, data in files.items()
    }
    contents[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: test package\n"
    ).encode()
    contents[f"{dist}.dist-info/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: jupyterhub-gpu-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    if scripts:
        lines = "".join(f"{command} = {entry}\n" for command, entry in scripts.items())
        contents[f"{dist}.dist-info/entry_points.txt"] = f"[console_scripts]\n{lines}".encode()
    record = [_record_line(path, data) for path, data in contents.items()]
    record.append(f"{dist}.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in contents.items():
            z.writestr(member, data)
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def package_wheel(folder: Path, name: str, version: str, size: int) -> Path:
    """A wheel of package ``name`` (import name :func:`module_name`): a package folder
    with ``__init__.py`` (``VERSION``, and ``main`` that prints ``<name> <version>``),
    ``data.py`` of about ``size`` bytes, and the console script ``<module>-hello``
    that runs ``main``."""
    module = module_name(name)
    init = (
        f"VERSION = {version!r}\nfrom .data import NAME\n\n\n"
        "def main() -> None:\n    print(NAME, VERSION)\n"
    )
    return make_wheel(
        folder,
        name,
        version,
        {f"{module}/__init__.py": init, f"{module}/data.py": filler_source(module, size)},
        scripts={f"{module}-hello": f"{module}:main"},
    )
