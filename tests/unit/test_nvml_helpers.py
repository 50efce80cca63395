"""The NVML probe's pure helpers: cgroup -> container, versions, Xids, health, topology."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.edges.nvml import (
    APPLICATION_XIDS,
    container_id_from_cgroup,
    containers_of_pids,
    format_cuda_version,
    is_critical_xid,
    judge_health,
    topology_groups,
)

pytestmark = pytest.mark.unit

CID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
CID2 = "a" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v2, systemd driver (Debian 12, Ubuntu 22.04+)
        (f"0::/system.slice/docker-{CID}.scope\n", CID),
        # cgroup v2, systemd driver, a process in a sub-cgroup of the scope
        (f"0::/system.slice/docker-{CID}.scope/init\n", CID),
        # cgroup v2, cgroupfs driver
        (f"0::/docker/{CID}\n", CID),
        # cgroup v1, systemd driver: many hierarchies, the id on every line
        (
            f"12:pids:/system.slice/docker-{CID}.scope\n"
            f"11:memory:/system.slice/docker-{CID}.scope\n"
            "1:name=systemd:/system.slice/docker.service\n",
            CID,
        ),
        # cgroup v1, cgroupfs driver
        (f"12:devices:/docker/{CID}\n4:cpu,cpuacct:/docker/{CID}\n", CID),
        # rootless Docker (systemd user instance)
        (f"0::/user.slice/user-1000.slice/user@1000.service/docker-{CID}.scope\n", CID),
        # nested: the outermost container is the one the host's engine knows
        (f"0::/docker/{CID}/docker/{CID2}\n", CID),
        # host processes
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/system.slice/docker.service\n", None),
        ("0::/\n", None),
        ("", None),
        # not Docker, or not a full id
        (f"0::/kubepods.slice/cri-containerd-{CID}.scope\n", None),
        ("0::/system.slice/docker-3f4e5d6c.scope\n", None),
        (f"0::/docker/{CID}x\n", None),
        (f"0::/docker/{CID.upper()}\n", None),
        ("garbage without colons\n", None),
    ],
)
def test_container_id_from_cgroup(text: str, expected: str | None) -> None:
    assert container_id_from_cgroup(text) == expected


def test_containers_of_pids_maps_dedupes_and_flags_host_processes() -> None:
    cgroups = {
        10: f"0::/system.slice/docker-{CID}.scope\n",
        11: f"0::/system.slice/docker-{CID}.scope\n",  # same container, two processes
        12: f"0::/docker/{CID2}\n",
        13: "0::/user.slice/user-1000.slice/session-1.scope\n",  # someone on the host
    }
    assert containers_of_pids([10, 11, 12, 13], cgroups.get) == ("", CID, CID2)


def test_unreadable_cgroup_counts_as_foreign() -> None:
    # a pid whose owner can't be told must never make a busy GPU look free
    assert containers_of_pids([99], lambda pid: None) == ("",)
    assert containers_of_pids([], lambda pid: None) == ()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(12040, "12.4"), (11080, "11.8"), (12090, "12.9"), (13000, "13.0"), (10010, "10.1")],
)
def test_format_cuda_version(value: int, expected: str) -> None:
    assert format_cuda_version(value) == expected


@pytest.mark.parametrize("value", [0, -1, 999, True, "12040", 12.4])
def test_format_cuda_version_rejects_nonsense(value: object) -> None:
    with pytest.raises(ValueError, match="CUDA version"):
        format_cuda_version(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_application_xids_are_not_critical(xid: int) -> None:
    assert not is_critical_xid(xid)


@pytest.mark.parametrize("xid", [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 1])
def test_other_xids_are_critical(xid: int) -> None:
    assert is_critical_xid(xid)


def test_application_xid_list_is_the_device_plugins() -> None:
    assert frozenset({13, 31, 43, 45, 68, 109}) == APPLICATION_XIDS


@pytest.mark.parametrize(
    ("checks", "expected"),
    [
        ([True, True, True, True], True),
        ([None, None, None, True], True),  # GeForce: only Xid events tell
        ([None, None, None, None], None),  # nothing supported: unknown, not broken
        ([], None),
        ([True, False, None, True], False),
        ([None, None, None, False], False),  # a critical Xid
        ([False, None], False),
    ],
)
def test_judge_health(checks: list[bool | None], expected: bool | None) -> None:
    assert judge_health(checks) is expected


def test_topology_groups() -> None:
    # 0-1 on a PCIe switch; 2-3-4 on NVLink (2-3 direct, 3-4 via PCIe, joins the group);
    # 5 alone
    links = {(0, 1): "pcie", (2, 3): "nvlink", (3, 4): "pcie"}
    assert topology_groups(6, links) == ["pcie0", "pcie0", "nvlink0", "nvlink0", "nvlink0", None]


def test_topology_groups_without_links_or_gpus() -> None:
    assert topology_groups(3, {}) == [None, None, None]
    assert topology_groups(0, {}) == []


def test_topology_groups_are_named_in_index_order() -> None:
    links = {(2, 3): "pcie", (0, 1): "pcie", (4, 5): "nvlink", (6, 7): "nvlink"}
    assert topology_groups(8, links) == [
        "pcie0",
        "pcie0",
        "pcie1",
        "pcie1",
        "nvlink0",
        "nvlink0",
        "nvlink1",
        "nvlink1",
    ]
