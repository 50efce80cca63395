"""Share-over-memory notices (issue #26): the culler's file, bounded reads, the hub's text."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jupyterhub_gpu.edges.files import load_share_notices, save_share_notices
from jupyterhub_gpu.hub.api.notices import share_notices
from jupyterhub_gpu.wire.share_notices import MAX_FILE, MAX_MESSAGE, ShareNotice

pytestmark = pytest.mark.unit

AT = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
OVER = "it holds 8000 MiB of GPU memory, more than its share's 6144 MiB: free memory"


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    notices = {"alice/": ShareNotice(AT, "GPU-3b1a9f6e-0c7d", OVER)}
    save_share_notices(path, notices)
    assert load_share_notices(path) == notices


def test_missing_stale_huge_or_bad_files_say_nothing(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    assert load_share_notices(path) == {}
    save_share_notices(path, {"alice/": ShareNotice(AT, "GPU-1", OVER)})
    late = datetime.now(timezone.utc) + timedelta(minutes=11)
    assert load_share_notices(path, now=late) == {}  # the culler stopped writing
    good = "2026-01-05T12:00:00+00:00"
    entries = {
        "alice/": {"at": "yesterday", "gpu": "GPU-1", "message": "x"},
        "bob/": {"at": "2026-01-05T12:00:00", "gpu": "G", "message": "no time zone"},
        "carol/": {"at": good, "gpu": 1, "message": "x"},
        "dave/": {"at": good, "gpu": "G", "message": "ok"},
    }
    path.write_text(json.dumps(entries))
    assert list(load_share_notices(path)) == ["dave/"]
    path.write_text("[1, 2]")
    assert load_share_notices(path) == {}
    path.write_bytes(b" " * (MAX_FILE + 1))
    assert load_share_notices(path) == {}


def test_long_messages_are_cut(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    save_share_notices(path, {"alice/": ShareNotice(AT, "GPU-1", "x" * 5000)})
    assert len(load_share_notices(path)["alice/"].message) == MAX_MESSAGE


def _spawner(active: bool, path: Path | str) -> Any:
    site = SimpleNamespace(share_notices_file=str(path))  # its c.GPUCluster
    return SimpleNamespace(active=active, site=site)


def test_a_user_reads_only_her_active_servers_notices(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    save_share_notices(path, {
        "alice/": ShareNotice(AT, "GPU-3b1a9f6e-0c7d", OVER),
        "alice/old": ShareNotice(AT, "GPU-2", OVER),
        "alice/small": ShareNotice(AT, "GPU-2", OVER),
        "bob/": ShareNotice(AT, "GPU-3", OVER),
    })  # fmt: skip
    os.utime(path)
    user = SimpleNamespace(name="alice", spawners={
        "": _spawner(True, path), "old": _spawner(False, path), "small": _spawner(True, path),
        "other": _spawner(True, ""),
    })  # fmt: skip
    got = share_notices(user, datetime.now(timezone.utc))
    assert [n["server"] for n in got] == ["", "small"]
    assert got[0]["message"] == f"Your default server (GPU-3b1a9f6e): {OVER}"
    assert got[1]["message"].startswith("Your server 'small' (GPU-2): it holds 8000 MiB")
    assert got[0]["at"] == AT.isoformat()


def test_configure_culler_sets_the_share_notices_file_on_both_sides() -> None:
    from traitlets.config import Config

    from jupyterhub_gpu.hub.extensions import configure_culler

    c = Config()
    c.GPUCluster.share_notices_file = "/var/lib/jupyterhub-gpu/share-notices.json"
    configure_culler(c, site_secret="s" * 32)
    (command,) = [s["command"] for s in c.JupyterHub.services]
    assert (
        "--GPUIdleCuller.share_notices_file=/var/lib/jupyterhub-gpu/share-notices.json" in command
    )
    bare = Config()
    configure_culler(bare, site_secret="s" * 32)
    (command,) = [s["command"] for s in bare.JupyterHub.services]
    assert not [a for a in command if "share_notices_file" in a]
