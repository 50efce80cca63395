"""Pure parts of the skeleton: home paths, GPU options, the ledger, node specs."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from jupyterhub_gpu.core.homes import home_host_path, safe_path_component, template_root
from jupyterhub_gpu.errors import ConfigError, UnsafePath
from jupyterhub_gpu.hub.ledger import GPULedger
from jupyterhub_gpu.wire.nodes_file import parse_nodes

pytestmark = pytest.mark.unit

TEMPLATE = "/mnt/cephfs/home/{username}"
ROOT = PurePosixPath("/mnt/cephfs/home")


@pytest.mark.parametrize(
    "name",
    [
        "..",
        "../../etc",
        "/etc/passwd",
        ".ssh",
        "a/../b",
        "nul\x00byte",
        "..\\..",
        "ALICE",
        "zoë",
        " ",
    ],
)
def test_hostile_usernames_map_inside_root(name: str) -> None:
    path = home_host_path(TEMPLATE, name)
    assert path.parent == ROOT
    assert ".." not in path.parts and not path.name.startswith(".")
    assert set(path.name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


def test_mapping_is_injective_for_look_alikes() -> None:
    names = ["a.b", "a-b", "a_b", "a/b", "A.b", "a-2eb"]
    paths = {home_host_path(TEMPLATE, n) for n in names}
    # escapism is injective over case-folded input; only 'a.b'/'A.b' may collide by design
    assert len(paths) >= len(names) - 1


def test_plain_username_is_kept_readable() -> None:
    assert home_host_path(TEMPLATE, "alice") == PurePosixPath("/mnt/cephfs/home/alice")
    assert safe_path_component("bob42") == "bob42"


@pytest.mark.parametrize(
    "template", ["relative/{username}", "/{username}", "/home/alice", "/a/../{username}"]
)
def test_bad_templates_are_config_errors(template: str) -> None:
    with pytest.raises(ConfigError):
        template_root(template) if "{username}" in template else home_host_path(template, "x")


def test_empty_username_refused() -> None:
    with pytest.raises(UnsafePath):
        home_host_path(TEMPLATE, "")


def test_ledger_never_gives_a_gpu_twice_and_releases_only_own() -> None:
    ledger = GPULedger()
    ledger.reserve("alice/", "n1", ["GPU-1", "GPU-2"])
    with pytest.raises(KeyError):
        ledger.reserve("bob/", "n1", ["GPU-3", "GPU-2"])
    assert ledger.hold_of("GPU-3") is None  # all or nothing
    assert ledger.release("bob/", ["GPU-1"]) == []
    assert ledger.allocations() == {"GPU-1": "alice/", "GPU-2": "alice/"}
    assert ledger.adopt("bob/", "n1", ["GPU-2", "GPU-4"]) == ["GPU-2"]
    assert sorted(ledger.release("alice/")) == ["GPU-1", "GPU-2"]
    assert ledger.allocations() == {"GPU-4": "bob/"}


def test_ledger_counts_servers_per_node_and_orphans_them() -> None:
    ledger = GPULedger()
    ledger.place_server("a/", "n1", "alloc-a")
    ledger.place_server("b/", "n1")
    ledger.place_server("c/", "n2")
    assert (ledger.servers_on("n1"), ledger.servers_on("n2")) == (2, 1)
    ledger.orphan("a/")
    # a's container still runs: it still counts on n1, but is no live server
    assert ledger.servers_on("n1") == 2 and ledger.holders_on("n1") == {"b/"}
    assert set(ledger.orphans_on("n1")) == {"alloc-a"}
    ledger.release_server("b/")
    ledger.release_server("b/")  # twice: nothing to free, no error
    assert (ledger.servers_on("n1"), ledger.holders_on("n1")) == (1, set())
    assert ledger.release_orphan("alloc-a") == [] and ledger.servers_on("n1") == 0


def test_an_orphan_is_nobodys_and_keeps_its_gpus_from_everyone() -> None:
    """A stop that could not reach the node: alice's GPUs stay taken (placement sees them),
    are charged to nobody (quotas), and her next server of the same name gets others."""
    ledger = GPULedger()
    ledger.reserve("alice/", "n1", ["GPU-1", "GPU-2"], "old")
    ledger.place_server("alice/", "n1", "old")
    ledger.orphan("alice/")
    assert ledger.allocations() == {"GPU-1": "alice/", "GPU-2": "alice/"}
    assert ledger.charged() == {} and ledger.held_by("alice/") == []
    assert ledger.live_allocations() == set()
    with pytest.raises(KeyError, match="GPU-1"):
        ledger.reserve("alice/", "n1", ["GPU-1"], "new")  # her own orphan is another holder
    ledger.reserve("alice/", "n1", ["GPU-3"], "new")
    ledger.place_server("alice/", "n1", "new")
    assert ledger.release("alice/", ["GPU-1"]) == []  # a live release never frees an orphan
    assert ledger.charged() == {"GPU-3": "alice/"}
    assert ledger.release_orphan("old") == ["GPU-1", "GPU-2"]
    assert ledger.allocations() == {"GPU-3": "alice/"} and ledger.live_allocations() == {"new"}
    assert ledger.adopt("alice/", "n1", ["GPU-3"], "x", orphaned=True) == ["GPU-3"]


@pytest.mark.parametrize(
    "nodes, fragment",
    [
        ([], "at least one"),
        ([{"name": "a", "docker_url": "http://x", "address": "1.2.3.4"}], "docker_url"),
        ([{"name": "a/b", "docker_url": "unix:///s", "address": "x"}], "name"),
        ([{"name": "a", "docker_url": "tcp://10.0.0.5:2375", "address": "10.0.0.5"}], "tls"),
        # plain tcp:// is refused on loopback too (any local process or container with
        # the host's network would be root), whatever the spelling of the address
        ([{"name": "a", "docker_url": "tcp://127.0.0.2:2375", "address": "x"}], "tls"),
        ([{"name": "a", "docker_url": "tcp://localhost:2375", "address": "x"}], "tls"),
        ([{"name": "a", "docker_url": "tcp://[::1]:2375", "address": "x"}], "tls"),
        ([{"name": "a", "docker_url": "tcp://127.1:2375", "address": "x"}], "tls"),
        ([{"name": "a", "docker_url": "tcp://:2375", "address": "x"}], "host"),
        (
            [{"name": "a", "docker_url": "unix:///s", "address": "x", "tls": {"ca_cert": "c"}}],
            "tls",
        ),
        (
            [
                {
                    "name": "a",
                    "docker_url": "unix:///s",
                    "address": "x",
                    "insecure_plaintext_docker_api": "yes",
                }
            ],
            "insecure_plaintext_docker_api",
        ),
        ([{"name": "a", "docker_url": "unix:///s", "address": "x", "sudo": True}], "unknown"),
        ([{"name": "a", "docker_url": "unix:///s", "address": "x"}] * 2, "unique"),
    ],
)
def test_bad_node_specs_named(nodes, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_nodes(nodes)
