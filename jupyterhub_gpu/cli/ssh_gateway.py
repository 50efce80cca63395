"""``jupyterhub-gpu ssh fingerprint``: the SSH gateway's host key fingerprint, for users
to check when ``ssh`` first meets the gateway (docs/ssh.md). ``--make`` makes the key now
(0600) when there is none yet, as the gateway would on its first start."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jupyterhub_gpu.cli.layout import DEFAULT_STATE, Site
from jupyterhub_gpu.edges.ssh_keys import fingerprint, load_or_make_host_key, read_host_key


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="jupyterhub-gpu ssh")
    sub = p.add_subparsers(dest="action", required=True)
    f = sub.add_parser("fingerprint", help="print the gateway's host key fingerprint")
    f.add_argument("--state", type=Path, default=DEFAULT_STATE, help="the site's state folder")
    f.add_argument("--key", type=Path, help="the host key file (default: in --state)")
    f.add_argument("--make", action="store_true", help="make the key if there is none")
    args = p.parse_args(argv)
    path = args.key or Site(state=args.state).ssh_host_key
    try:
        key = load_or_make_host_key(path) if args.make else read_host_key(path)
    except FileNotFoundError:
        print(
            f"No SSH host key at {path} yet: the gateway makes it on its first start "
            "(or run this with --make).",
            file=sys.stderr,
        )
        return 1
    except (OSError, ValueError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    print(f"{key.get_algorithm()} {fingerprint(key)} ({path})")
    return 0
