#!/usr/bin/env python3
"""Build the images of the catalog (images/catalog.yaml) with the docker CLI.

Examples (from anywhere; the engine is DOCKER_HOST's, or --docker-host's):

    images/build.py --dry-run                       # print every docker build command
    images/build.py --only pytorch-2.3-cuda12.1     # build one entry
    DOCKER_HOST=tcp://gpu-b:2375 images/build.py    # build on another engine
    # CI: no registry, a local Debian base with python3-venv, pip through the host CA:
    images/build.py --only python-cpu --base jupyterhub-gpu/base:bookworm --minimal \\
        --pip-cert /etc/ssl/certs/ca-certificates.crt --network host --tag jupyterhub-gpu/test:ci
    # the real PyTorch image from PyPI wheels, tagged for and pushed to a site registry:
    images/build.py --only pytorch-2.8-cuda12.8-pypi --base jupyterhub-gpu/base:bookworm \\
        --pip-cert /etc/ssl/certs/ca-certificates.crt --network host \\
        --registry 10.250.0.1:5000 --push

Each entry's ``build`` section names its Dockerfile (under images/) and build args.
``--base`` replaces BASE_IMAGE; ``--minimal`` skips the framework, the apt packages and
VS Code in the browser (FRAMEWORK_PIP="", FRAMEWORK_PIP_PRE="", APT_PACKAGES="",
VSCODE_IN_BROWSER=no) for a quick test image;
JUPYTERHUB_VERSION defaults to the JupyterHub installed beside this script's Python
(so the image matches the hub). With ``--pip-cert`` the build context is a temporary
copy of images/common, images/vscode, images/lab, the Dockerfile and the CA bundle (as pip-ca.crt),
and pip (and npm) in the build trust it; otherwise the context is images/ itself.

``--registry HOST[:PORT][/PATH]`` prefixes every tag (``jupyterhub-gpu/pytorch:2.8.0-...``
becomes ``HOST:PORT/jupyterhub-gpu/pytorch:2.8.0-...``); ``--push`` pushes each image after
its build (``docker push``; an insecure registry must be allowed by the engine that pushes).
A catalog whose ``image`` already names a registry is not prefixed again.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
CERT_NAME = "pip-ca.crt"
CERT_IN_IMAGE = f"/opt/jupyterhub-gpu/{CERT_NAME}"
MINIMAL_ARGS = {
    "FRAMEWORK_PIP": "",
    "FRAMEWORK_PIP_PRE": "",
    "APT_PACKAGES": "",
    "VSCODE_IN_BROWSER": "no",  # no code-server (images/vscode): minutes saved
}
# the folders of images/ every Dockerfile may COPY (install and start scripts)
SHARED_FOLDERS = ("common", "vscode", "lab")

try:
    from jupyterhub_gpu.core.catalog import CatalogEntry
    from jupyterhub_gpu.edges.adminfiles import load_catalog
    from jupyterhub_gpu.errors import ConfigError
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(HERE.parent))
    from jupyterhub_gpu.core.catalog import CatalogEntry
    from jupyterhub_gpu.edges.adminfiles import load_catalog
    from jupyterhub_gpu.errors import ConfigError


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--catalog", type=Path, default=HERE / "catalog.yaml", help="catalog YAML")
    p.add_argument("--only", action="append", metavar="SLUG", help="build only SLUG (repeatable)")
    p.add_argument("--list", action="store_true", help="list buildable slugs and exit")
    p.add_argument("--base", metavar="IMAGE", help="override BASE_IMAGE for every build")
    p.add_argument("--tag", help="tag to build instead of the catalog's (one entry only)")
    p.add_argument(
        "--minimal",
        action="store_true",
        help="skip framework, apt packages and VS Code in the browser",
    )
    p.add_argument(
        "--build-arg", action="append", default=[], metavar="KEY=VALUE", help="extra build arg"
    )
    p.add_argument("--pip-cert", type=Path, metavar="PEM", help="CA bundle pip trusts in builds")
    p.add_argument("--network", metavar="MODE", help="docker build --network (e.g. host)")
    p.add_argument("--no-cache", action="store_true", help="docker build --no-cache")
    p.add_argument("--quiet", action="store_true", help="docker build -q")
    p.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="extra image label"
    )
    p.add_argument("--docker", default="docker", help="docker CLI (default: docker)")
    p.add_argument("--docker-host", metavar="HOST", help="docker -H HOST (default: DOCKER_HOST)")
    p.add_argument("--jupyterhub-version", help="JUPYTERHUB_VERSION (default: the installed one)")
    p.add_argument(
        "--registry",
        metavar="HOST[:PORT][/PATH]",
        help="prefix the tags with this registry (e.g. 10.250.0.1:5000)",
    )
    p.add_argument("--push", action="store_true", help="docker push each image after its build")
    p.add_argument("--dry-run", action="store_true", help="print the commands, build nothing")
    opts = p.parse_args(argv)
    if opts.registry is not None:
        opts.registry = check_registry(opts.registry)
    return opts


def check_registry(value: str) -> str:
    """``HOST[:PORT][/PATH]`` without a scheme or a trailing slash, or exit with a sentence."""
    registry = value.strip().rstrip("/")
    host = registry.split("/", 1)[0]
    if (
        not registry
        or "://" in registry
        or any(c.isspace() for c in registry)
        or not host
        or not ("." in host or ":" in host or host == "localhost")
    ):
        raise SystemExit(
            f"build.py: --registry must be HOST[:PORT][/PATH] with a host that has a dot or "
            f"a port (e.g. 10.250.0.1:5000 or registry.example.org/lab), got {value!r}"
        )
    return registry


def has_registry(image: str) -> bool:
    """Docker's rule: the first path component names a registry when it has '.' or ':'
    or is ``localhost``."""
    first, sep, _ = image.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def image_tag(entry: CatalogEntry, opts: argparse.Namespace) -> str:
    """The tag to build: --tag, else the catalog's image; prefixed by --registry."""
    tag: str = opts.tag or entry.image
    registry: str | None = getattr(opts, "registry", None)
    if registry and not has_registry(tag):
        tag = f"{registry}/{tag}"
    return tag


def hub_version(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    try:
        return importlib.metadata.version("jupyterhub")
    except importlib.metadata.PackageNotFoundError:
        return None  # the Dockerfile's default applies


def select(entries: Sequence[CatalogEntry], only: Sequence[str] | None) -> list[CatalogEntry]:
    buildable = {e.slug: e for e in entries if e.build is not None}
    if not only:
        return list(buildable.values())
    unknown = [s for s in only if s not in buildable]
    if unknown:
        raise SystemExit(
            f"build.py: not buildable catalog entries: {', '.join(unknown)} "
            f"(buildable: {', '.join(buildable) or 'none'})"
        )
    return [buildable[s] for s in only]


def build_args(entry: CatalogEntry, opts: argparse.Namespace) -> dict[str, str]:
    assert entry.build is not None
    args = {"CATALOG_SLUG": entry.slug, **entry.build.args}
    version = hub_version(opts.jupyterhub_version)
    if version:
        args["JUPYTERHUB_VERSION"] = version
    if opts.base:
        args["BASE_IMAGE"] = opts.base
    if opts.minimal:
        args.update(MINIMAL_ARGS)
    if opts.pip_cert:
        args["PIP_CA_BUNDLE"] = CERT_IN_IMAGE
    for item in opts.build_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"build.py: --build-arg must be KEY=VALUE, got {item!r}")
        args[key] = value
    return args


def docker_command(
    entry: CatalogEntry, opts: argparse.Namespace, dockerfile: str, context: str
) -> list[str]:
    cmd = [opts.docker]
    if opts.docker_host:
        cmd += ["-H", opts.docker_host]
    cmd += ["build", "-f", dockerfile, "-t", image_tag(entry, opts)]
    if opts.network:
        cmd += ["--network", opts.network]
    if opts.no_cache:
        cmd.append("--no-cache")
    if opts.quiet:
        cmd.append("-q")
    for label in opts.label:
        cmd += ["--label", label]
    for key, value in build_args(entry, opts).items():
        cmd += ["--build-arg", f"{key}={value}"]
    return [*cmd, context]


def make_context(entry: CatalogEntry, cert: Path, where: Path) -> Path:
    """A temporary context: images/common, images/vscode and images/lab, the entry's Dockerfile, the
    CA bundle."""
    assert entry.build is not None
    for folder in SHARED_FOLDERS:
        shutil.copytree(HERE / folder, where / folder)
    target = where / entry.build.dockerfile
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / entry.build.dockerfile, target)
    shutil.copy2(cert, where / CERT_NAME)
    return target


def push_command(entry: CatalogEntry, opts: argparse.Namespace) -> list[str]:
    cmd = [opts.docker]
    if opts.docker_host:
        cmd += ["-H", opts.docker_host]
    return [*cmd, "push", image_tag(entry, opts)]


def build_one(entry: CatalogEntry, opts: argparse.Namespace) -> int:
    rc = build_image(entry, opts)
    if rc or not opts.push:
        return rc
    cmd = push_command(entry, opts)
    print(shlex.join(cmd), flush=True)
    if opts.dry_run:
        return 0
    return subprocess.run(cmd, check=False).returncode


def build_image(entry: CatalogEntry, opts: argparse.Namespace) -> int:
    assert entry.build is not None
    print(f"# {entry.slug} -> {image_tag(entry, opts)}", flush=True)
    if not opts.pip_cert:
        cmd = docker_command(entry, opts, str(HERE / entry.build.dockerfile), str(HERE))
        print(shlex.join(cmd), flush=True)
        return 0 if opts.dry_run else subprocess.run(cmd, check=False).returncode
    if opts.dry_run:
        shared = ", ".join(f"images/{f}" for f in SHARED_FOLDERS)
        context = f"<temp context: {shared}, {entry.build.dockerfile}, {CERT_NAME}>"
        print(shlex.join(docker_command(entry, opts, f"{context}/Dockerfile", context)))
        return 0
    with tempfile.TemporaryDirectory(prefix="jhgpu-build-") as tmp:
        dockerfile = make_context(entry, opts.pip_cert, Path(tmp))
        cmd = docker_command(entry, opts, str(dockerfile), tmp)
        print(shlex.join(cmd), flush=True)
        return subprocess.run(cmd, check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    try:
        catalog = load_catalog(opts.catalog)
    except ConfigError as e:
        print(f"build.py: {e}", file=sys.stderr)
        return 2
    entries = select(catalog.entries, opts.only)
    if opts.list:
        for entry in entries:
            print(f"{entry.slug}\t{image_tag(entry, opts)}")
        return 0
    if opts.tag and len(entries) != 1:
        raise SystemExit("build.py: --tag needs exactly one entry (use --only SLUG)")
    if opts.push and not opts.registry and not has_registry(opts.tag or ""):
        print(
            "build.py: note: --push without --registry pushes to the tag's own registry "
            "(Docker Hub for a bare name)",
            file=sys.stderr,
        )
    if opts.pip_cert and not (opts.pip_cert.is_file() and opts.pip_cert.stat().st_size):
        raise SystemExit(f"build.py: --pip-cert {opts.pip_cert} is not a non-empty file")
    for entry in entries:
        rc = build_one(entry, opts)
        if rc:
            print(f"build.py: building or pushing {entry.slug} failed (exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
