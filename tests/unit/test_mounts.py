"""Dataset mounts per group: read-only, validated, only for members."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.core.mounts import dataset_binds, parse_group_mounts
from jupyterhub_gpu.errors import ConfigError

pytestmark = pytest.mark.unit

TABLE = {
    "vision": [{"source": "/mnt/datasets/imagenet", "target": "/data/imagenet"}],
    "nlp": [{"source": "/mnt/datasets/c4", "target": "/data/c4"}],
}


def test_members_get_their_groups_mounts_read_only() -> None:
    table = parse_group_mounts(TABLE)
    assert dataset_binds(table, ["vision"]) == {
        "/mnt/datasets/imagenet": {"bind": "/data/imagenet", "mode": "ro"}
    }
    assert set(dataset_binds(table, ["vision", "nlp", "other"])) == {
        "/mnt/datasets/imagenet",
        "/mnt/datasets/c4",
    }
    assert dataset_binds(table, ["other"]) == {}


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"g": [{"source": "/var/run/docker.sock", "target": "/d"}]}, "system path"),
        ({"g": [{"source": "relative", "target": "/d"}]}, "absolute"),
        ({"g": [{"source": "/a/../etc", "target": "/d"}]}, "absolute"),
        ({"g": [{"source": "/a", "target": "/d", "mode": "rw"}]}, "exactly"),
        ({"g": {"source": "/a"}}, "list"),
        ({"g": [{"source": "/", "target": "/host"}]}, "other than '/'"),
    ],
)
def test_bad_mount_tables_are_refused(raw, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_group_mounts(raw)
