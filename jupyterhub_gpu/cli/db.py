"""``jupyterhub-gpu db current|upgrade``: the accounting database's migrations (Alembic).

    jupyterhub-gpu db current [--db URL] [--etc ETC]   its revision, and the newest
    jupyterhub-gpu db upgrade [--db URL] [--etc ETC]   migrate it to the newest

The database is ``--db``, else ``$JUPYTERHUB_GPU_ACCOUNTING_URL``, else the site's
``GPUCluster.accounting_url`` (``ETC/jupyterhub_config.py``, loaded as the hub
loads it), else the hub's default. The hub upgrades it at its start too; after an upgrade
of the package, ``db upgrade`` before the hub's restart says what changed, and ``db
current`` checks it (exit status 1 when it is not at the newest revision). The version
table is ``jhgpu_alembic_version``, not JupyterHub's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from jupyterhub_gpu.cli.layout import DEFAULT_ETC
from jupyterhub_gpu.edges.accounting.store import (
    DEFAULT_URL,
    AccountingStore,
    AccountingUnavailable,
    safe_url,
)


def site_url(etc: Path) -> str:
    """The site's accounting URL, from its configuration ('' when there is none)."""
    config_path = etc / "jupyterhub_config.py"
    if not config_path.is_file():
        return ""
    from traitlets.config.loader import PyFileConfigLoader

    loader = PyFileConfigLoader(config_path.name, str(config_path.parent))
    try:
        loader.load_config()
    except Exception:
        # what the file set before it raised (its check_config(c) runs last) is enough,
        # when it set the URL; else the error is the answer
        if not _accounting_url(loader.config):
            raise
    return _accounting_url(loader.config)


def _accounting_url(config: Any) -> str:
    for section in ("GPUCluster", "GPUDockerSpawner", "DockerSpawner", "Spawner"):
        if section in config and config[section].get("accounting_url"):
            return str(config[section]["accounting_url"])
    return ""


def run(action: str, url: str) -> tuple[int, str]:
    """(exit status, the one line to print)."""
    store = AccountingStore(url)
    try:
        before, head = store.revisions()
        where = safe_url(url)
        if action == "upgrade":
            if before == head:
                return 0, f"{where}: already at revision {head}, the newest."
            store.upgrade()
            after, _ = store.revisions()
            was = f"from revision {before}" if before else "from nothing (tables created)"
            return 0, f"{where}: upgraded {was} to {after}."
        if before is None:
            return 1, (
                f"{where}: no accounting tables (no revision): the hub creates them at its "
                "start, or run jupyterhub-gpu db upgrade; a mistyped --db names another "
                "database."
            )
        if before != head:
            return 1, (
                f"{where}: revision {before}, the newest is {head}: run jupyterhub-gpu db "
                "upgrade (the hub also does at its start)."
            )
        return 0, f"{where}: revision {head}, the newest."
    finally:
        store.engine.dispose()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="jupyterhub-gpu db",
        description="The accounting database's migrations: its revision, or migrate it.",
    )
    p.add_argument("action", choices=["current", "upgrade"])
    p.add_argument("--db", help="the accounting database URL (default: the site's)")
    p.add_argument("--etc", type=Path, default=DEFAULT_ETC, help=f"default {DEFAULT_ETC}")
    args = p.parse_args(argv)
    url = args.db or os.environ.get("JUPYTERHUB_GPU_ACCOUNTING_URL") or ""
    try:
        url = url or site_url(args.etc)
    except Exception as e:  # the admin's file raised: one line, not a traceback
        print(
            f"jupyterhub-gpu db: {args.etc}/jupyterhub_config.py: {e}; run jupyterhub-gpu "
            "check-config, or give --db URL.",
            file=sys.stderr,
        )
        return 2
    try:
        status, line = run(args.action, url or DEFAULT_URL)
    except AccountingUnavailable as e:
        status, line = 2, f"jupyterhub-gpu db: {e}"
    print(line, file=sys.stdout if status == 0 else sys.stderr)
    return status
