"""``jupyterhub-gpu registry install``: the site's registry, on the hub.

The catalog's images are built (or pulled) once, on the hub, and pushed there by
``jupyterhub-gpu images publish`` (:mod:`.images`); every node pulls them from it (the
pre-puller: docs/prepull.md). The server is Distribution (Debian's and Ubuntu's
``docker-registry`` package), run as two processes on one storage folder
(``STATE/registry``), each a unit of its own:

- ``jupyterhub-gpu-registry.service``: the nodes' pulls, on the hub's address, port
  5443, over TLS with a certificate of the site's CA (``tls/registry-cert.pem``); it is
  read-only (Distribution's ``maintenance.readonly``): nothing on the network can push.
  ``node join`` makes each node's Docker trust it
  (``/etc/docker/certs.d/HUB_IP:5443/ca.crt``).
- ``jupyterhub-gpu-registry-push.service``: the pushes, on the hub's loopback only
  (127.0.0.1:5444, which Docker trusts without TLS), for ``images publish``.

No password is involved anywhere: writing needs a shell on the hub, reading a machine
that reaches the hub's address (the nodes; the node firewall keeps user containers away
from it). The site's configuration turns the pre-puller on when ``ETC/registry`` exists
(the configuration files written here), for that registry's images only.
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from jupyterhub_gpu.cli.layout import (
    SECRET_MODE,
    Site,
    add_site_args,
    package_file,
    private_dir,
    render,
    site_from_args,
    write_all,
    write_atomic,
)
from jupyterhub_gpu.cli.site import configured_hub_ip
from jupyterhub_gpu.core.join import REGISTRY_PORT, REGISTRY_PUSH_PORT, registry_address
from jupyterhub_gpu.errors import ConfigError

#: Distribution's server: Debian's and Ubuntu's name, then upstream's
BINARIES = ("docker-registry", "registry")
PULL_UNIT = "jupyterhub-gpu-registry.service"
PUSH_UNIT = "jupyterhub-gpu-registry-push.service"
UNITS = [PULL_UNIT, PUSH_UNIT]
PUSH_HOST = "127.0.0.1"
UNIT_DIR = Path("etc/systemd/system")


def push_address() -> str:
    return f"{PUSH_HOST}:{REGISTRY_PUSH_PORT}"


def server() -> str | None:
    """The registry server's path on this machine, or None."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


def server_problem() -> str:
    """'' when this machine has the registry server; else what to install."""
    if server() is not None:
        return ""
    return (
        "the site's registry needs Distribution's server, which is not installed here: "
        "apt-get install docker-registry (Debian, Ubuntu), then systemctl disable --now "
        "docker-registry (the package's own registry serves port 5000 on every address, "
        "without TLS); nothing was written."
    )


def config(site: Site, address: str, *, push: bool) -> dict[str, Any]:
    """Distribution's configuration: the pull side (TLS on ``address``, read-only) or the
    push side (loopback, no TLS, writes), both on the site's registry storage."""
    # the push side clears abandoned uploads (Distribution's default), the read-only one has none
    purge = {"enabled": True, "age": "168h", "interval": "24h", "dryrun": False}
    maintenance: dict[str, Any] = {"uploadpurging": purge if push else {"enabled": False}}
    if not push:
        maintenance["readonly"] = {"enabled": True}
    http: dict[str, Any] = {
        "addr": address,
        "secret": secrets.token_hex(24),
        "headers": {"X-Content-Type-Options": ["nosniff"]},
    }
    if not push:
        http["tls"] = {"certificate": str(site.registry_cert), "key": str(site.registry_key)}
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": not push}},
        "storage": {
            "filesystem": {"rootdirectory": str(site.registry_storage)},
            "delete": {"enabled": push},
            "maintenance": maintenance,
        },
        "http": http,
    }


def pull_config(site: Site) -> Path:
    return site.registry_dir / "pull.yml"


def push_config(site: Site) -> Path:
    return site.registry_dir / "push.yml"


def unit(site: Site, binary: str, *, push: bool) -> str:
    what = (
        f"the hub's pushes on {push_address()}"
        if push
        else f"the nodes' pulls on port {REGISTRY_PORT} (TLS, read-only)"
    )
    return render(
        package_file("units", f"{PULL_UNIT}.in").read_text(),
        {
            "WHAT": what,
            "ETC": str(site.etc),
            "BINARY": binary,
            "CONFIG": str(push_config(site) if push else pull_config(site)),
            "STORAGE": str(site.registry_storage),
            "READ_WRITE": f"ReadWritePaths={site.registry_storage}" if push else "# read-only",
        },
    )


def _registry_cert(site: Site, hub_ip: str) -> list[Path]:
    """The pull side's certificate for the hub's address (kept when it names it)."""
    from cryptography import x509

    from jupyterhub_gpu.cli.certs import issue, read_ca

    if site.registry_cert.exists() and site.registry_key.exists():
        cert = x509.load_pem_x509_certificate(site.registry_cert.read_bytes())
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            if hub_ip in [str(n.value) for n in san]:
                return []
        except x509.ExtensionNotFound:
            pass
    cert_pem, key_pem = issue(*read_ca(site), "jupyterhub-gpu site registry",
                              server_names=[hub_ip])  # fmt: skip
    private_dir(site.tls)
    write_all({site.registry_cert: (cert_pem, 0o644), site.registry_key: (key_pem, SECRET_MODE)})
    return [site.registry_cert, site.registry_key]


def install(site: Site, hub_ip: str, root: Path = Path("/")) -> list[str]:
    """The registry's certificate, configuration, storage and units (nothing started);
    what was written, a line each. ConfigError: one sentence, nothing written."""
    problem = server_problem()
    if problem:
        raise ConfigError(problem)
    binary = server()
    assert binary is not None
    written = _registry_cert(site, hub_ip)
    private_dir(site.registry_dir)
    private_dir(site.registry_storage)
    for path, push in ((pull_config(site), False), (push_config(site), True)):
        address = push_address() if push else registry_address(hub_ip)
        text = yaml.safe_dump(config(site, address, push=push), sort_keys=False)
        write_atomic(path, "# written by jupyterhub-gpu registry install\n" + text, SECRET_MODE)
        written.append(path)
    for name, push in ((PULL_UNIT, False), (PUSH_UNIT, True)):
        path = root / UNIT_DIR / name
        write_atomic(path, unit(site, binary, push=push), 0o644)
        written.append(path)
    said = [f"wrote {p}" for p in written] + [
        f"the site's registry: the nodes pull from {registry_address(hub_ip)}, "
        f"jupyterhub-gpu images publish pushes to {push_address()}"
    ]
    if _package_service_runs():
        said.append(
            "warning: the docker-registry package's own registry runs on this machine (port "
            "5000 on every address, no TLS, anyone on the network may push): systemctl "
            "disable --now docker-registry"
        )
    return said


def _package_service_runs() -> bool:
    """Whether Debian's (or Ubuntu's) own docker-registry service is active here."""
    try:
        done = subprocess.run(["systemctl", "is-active", "--quiet", "docker-registry.service"],
                              capture_output=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu registry",
        description="The site's registry on the hub: the nodes pull the catalog's images there.",
    )
    sub = p.add_subparsers(dest="action", required=True)
    i = sub.add_parser("install", help="write and start the site's registry (docs/images.md)")
    add_site_args(i)
    i.add_argument("--hub-ip", default="", help="the hub's address for the nodes (default: the "
                   "configuration's hub_connect_ip)")  # fmt: skip
    i.add_argument("--root", type=Path, default=Path("/"), help="write the units under this root")
    i.add_argument("--no-start", action="store_true", help="write everything, start nothing")
    args = p.parse_args(argv)
    site = site_from_args(args)
    try:
        hub_ip = args.hub_ip or configured_hub_ip(site)
        for line in install(site, hub_ip, args.root):
            print(line)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    if args.no_start:
        return 0
    for command in (["daemon-reload"], ["enable", "--now", *UNITS]):
        done = subprocess.run(["systemctl", *command], check=False)
        if done.returncode != 0:
            print(f"`systemctl {' '.join(command)}` failed: see `journalctl -u {PULL_UNIT}`",
                  file=sys.stderr)  # fmt: skip
            return 1
    print(
        "the registry runs; restart the hub so that its pre-puller serves the registry's "
        "images to the nodes (systemctl restart jupyterhub-gpu-hub; users' servers keep "
        "running); then: jupyterhub-gpu images publish"
    )
    return 0
