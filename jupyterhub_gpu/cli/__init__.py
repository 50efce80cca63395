"""The ``jupyterhub-gpu`` command: admin tools beside the hub.

Imports: ``core``, ``wire``, ``edges``, ``errors`` and ``cli``; never the hub or a service
(a command talks to a running hub over its API).

    jupyterhub-gpu report ...   GPU usage from the accounting database (docs/accounting.md)
    jupyterhub-gpu reserve ...  GPU reservations through the hub (docs/scheduling.md)
    jupyterhub-gpu check-node   is each GPU node set up right, and the fix (docs/nodes.md)
    jupyterhub-gpu site ...     lay out a site: configuration, catalog, nodes, secrets
    jupyterhub-gpu certs ...    the site's CA, the hub's and each node's certificates
    jupyterhub-gpu units ...    the systemd units of the hub, the agent, the firewall
    jupyterhub-gpu firewall ... the node firewall (shipped in the package)
    jupyterhub-gpu check-config a site's configuration and its files, without a hub
                                (docs/install.md)
    jupyterhub-gpu check-ldap USER  bind as the hub does and look the user up (docs/auth.md)
    jupyterhub-gpu ssh ...      the SSH gateway's host key fingerprint (docs/ssh.md)
    jupyterhub-gpu job ...      a user's batch jobs: submit, list, show, logs, cancel
                                (docs/jobs.md; works with the base install)
    jupyterhub-gpu node ...     a node joins with one command (token, join, leave, remove)
    jupyterhub-gpu hub install  a hub set up and started in one command (Quick install)
    jupyterhub-gpu registry install  the site's registry on the hub (docs/images.md)
    jupyterhub-gpu images publish    the catalog's images into it; the nodes pull them
    jupyterhub-gpu db current|upgrade  the accounting database's migrations (docs/upgrade.md)
    jupyterhub-gpu login        remember the hub's address and a token for job

A GPU node's install (the package without the ``hub`` extra) runs ``firewall``,
``units``, ``certs``, ``site``, ``node``, ``job``, ``login`` and ``check-node --local``; the
others need the hub's dependencies and say so.
"""

from __future__ import annotations

import sys
from typing import Any

COMMANDS = {
    "report": "GPU-hours allocated and used, from the accounting database",
    "reserve": "reserve GPUs for a group and a window (add, list, delete)",
    "check-node": "check GPU nodes: engine, firewall, GPU isolation, agent, home, images",
    "site": "lay out a site: configuration, catalog, nodes file, secrets (init, add-node)",
    "certs": "the site's CA, the hub's client and each node's server certificate",
    "units": "install the systemd units of the hub, or of a node's agent and firewall",
    "firewall": "apply (or --dry-run, --remove) the node firewall for the user bridge",
    "check-config": "check a site's configuration and every file it names, without a hub",
    "check-ldap": "bind as the hub does and look a user up in LDAP (check-ldap USER)",
    "ssh": "the SSH gateway: its host key's fingerprint (fingerprint)",
    "job": "your GPU batch jobs: submit, list, show, logs, cancel",
    "node": "a GPU node joins or leaves with one command (token, join, leave, remove)",
    "hub": "set up and start a hub in one command (install): docs/install.md, Quick install",
    "registry": "the site's registry on the hub, where the nodes pull images (install)",
    "images": "push the catalog's images into the site's registry (publish)",
    "db": "the accounting database's migrations: db current, db upgrade",
    "login": "remember the hub's address and a token of its token page (for job)",
}
#: command -> its module in this package (each has ``main(argv) -> int``)
MODULES = {
    "site": "site",
    "certs": "certs",
    "units": "units",
    "check-config": "check",
    "check-ldap": "check_ldap",
    "ssh": "ssh_gateway",
    "hub": "hub_install",
}
HUB_INSTALL = "pip install 'jupyterhub-gpu[hub]'"


def _run(command: str, argv: list[str]) -> int:
    """A command's ``main``, imported only now: a GPU node's install has no hub
    dependencies, and a command that needs them says how to get them."""
    import importlib

    try:
        if command == "firewall":
            from jupyterhub_gpu.cli.units import firewall

            return firewall(argv)
        name = MODULES.get(command, command.replace("-", "_"))
        module = importlib.import_module(f"jupyterhub_gpu.cli.{name}")
        main: Any = module.main
        return int(main(argv))
    except ModuleNotFoundError as e:
        if e.name and not e.name.startswith("jupyterhub_gpu"):
            print(
                f"jupyterhub-gpu {command} needs {e.name!r}, part of the hub's install: "
                f"{HUB_INSTALL}",
                file=sys.stderr,
            )
            return 2
        raise


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["--version"], ["-V"]):
        from jupyterhub_gpu import __version__

        print(f"jupyterhub-gpu {__version__}")
        return 0
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        known = "\n".join(f"  {name:12s} {what}" for name, what in COMMANDS.items())
        print(
            f"usage: jupyterhub-gpu COMMAND [options] | --version\n\ncommands:\n{known}",
            file=sys.stderr,
        )
        return 0 if args and args[0] in ("-h", "--help") else 2
    return _run(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
