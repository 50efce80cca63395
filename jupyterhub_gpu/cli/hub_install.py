"""``jupyterhub-gpu hub install``: a hub set up and started in one command.

For a prepared server (docs/install.md, "Quick install"): ``site init`` with the options
given (every ``site init`` option passes through), the site's CA, the hub's client
certificate and its public HTTPS certificate for ``--hub-ip`` and each ``--public-name``
(each kept when it exists; none with ``--tls-cert`` or ``--no-tls``), the wheel the hub
was installed from kept for the nodes (the join service serves it, ``--wheel``), with
``--registry`` the site's registry (``registry install``: docs/images.md), the hub's
unit, and ``systemctl enable --now`` of them (``--no-start``: not). Each step is the
command of the long path (``site init``, ``certs ca``, ``certs hub``, ``certs public``,
``registry install``, ``units install --hub``), called in turn; an existing site is kept
as it is (its configuration is not rewritten).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from jupyterhub_gpu.cli import certs, site, units
from jupyterhub_gpu.cli.layout import DEFAULT_ETC, DEFAULT_STATE, Site
from jupyterhub_gpu.errors import ConfigError

#: the line of site init's configuration that serves logins with the site CA's certificate
SITE_CA_TLS = 'c.JupyterHub.ssl_cert = str(ETC / "tls" / "public-cert.pem")'


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu hub install",
        description="Set up and start a hub: site init (its options pass through), the "
        "certificates, the wheel for the nodes, the site's registry, the hub's unit.",
    )
    p.add_argument("action", choices=["install"])
    p.add_argument("--wheel", type=Path, help="the wheel this hub was installed from (served "
                   "to the nodes by the join service)")  # fmt: skip
    p.add_argument("--registry", action="store_true", help="run the site's registry on the "
                   "hub (docs/images.md; needs the docker-registry package)")  # fmt: skip
    p.add_argument("--etc", type=Path, default=DEFAULT_ETC)
    p.add_argument("--state", type=Path, default=DEFAULT_STATE)
    p.add_argument("--root", type=Path, default=Path("/"), help="write the unit under this root")
    p.add_argument("--venv", type=Path, default=Path(sys.prefix), help="the hub's environment")
    p.add_argument("--no-start", action="store_true", help="write everything, start nothing")
    args, rest = p.parse_known_args(argv)
    names = argparse.ArgumentParser(add_help=False)
    names.add_argument("--hub-ip", default="")
    names.add_argument("--public-name", dest="public_names", action="append", default=[])
    public, _ = names.parse_known_args(rest)
    s = Site(etc=args.etc.absolute(), state=args.state.absolute())
    where = ["--etc", str(s.etc)]
    start: list[str] = []
    try:
        if args.registry:
            from jupyterhub_gpu.cli.registry import server_problem

            problem = server_problem()
            if problem:  # before anything is written
                raise ConfigError(problem)
        if s.config.exists():
            print(f"{s.etc} already holds a site: kept as it is")
        elif site.main(["init", *where, "--state", str(s.state), *rest]) != 0:
            return 1
        if not s.ca_cert.exists() and certs.main([*where, "ca"]) != 0:
            return 1
        if not s.hub_cert.exists() and certs.main([*where, "hub"]) != 0:
            return 1
        hub_ip = public.hub_ip or site.configured_hub_ip(s)
        if SITE_CA_TLS in s.config.read_text() and not s.public_cert.exists():
            dns = [x for n in public.public_names if n != hub_ip for x in ("--dns", n)]
            if certs.main([*where, "public", "--address", hub_ip, *dns]) != 0:
                return 1
        if args.wheel is not None:
            from jupyterhub_gpu.cli.join_service import keep_wheel

            kept = keep_wheel(s, args.wheel)
            print(f"kept {kept.path} (sha256 {kept.sha256}) for the nodes")
        if args.registry:
            from jupyterhub_gpu.cli.registry import install as install_registry

            for line in install_registry(s, hub_ip, args.root):
                print(line)
            from jupyterhub_gpu.cli.registry import UNITS as REGISTRY_UNITS

            start += REGISTRY_UNITS
        unit_args = ["install", "--hub", *where, "--state", str(s.state),
                     "--root", str(args.root), "--venv", str(args.venv)]  # fmt: skip
        if units.main(unit_args) != 0:
            return 1
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    if args.no_start:
        return 0
    for command in (["daemon-reload"], ["enable", "--now", *start, units.HUB_UNIT]):
        done = subprocess.run(["systemctl", *command], check=False)
        if done.returncode != 0:
            print(f"`systemctl {' '.join(command)}` failed: see `journalctl -u {units.HUB_UNIT}`",
                  file=sys.stderr)  # fmt: skip
            return 1
    print(f"the hub runs; add a node: jupyterhub-gpu node token --etc {s.etc} --state {s.state}")
    return 0
