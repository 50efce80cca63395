"""GPUDockerSpawner end to end: a real hub, a real engine, real containers."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import CATALOG, gpu_inventory
from tests.support.cluster import TEST_IMAGE, USER_NETWORK, Engine, container_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RTX = ("NVIDIA GeForce RTX 3090", 24576, "8.6")
# the dashboard's cluster API (without its service), read with the tester's token
CLUSTER_API = """
from jupyterhub_gpu.hub.api.cluster import CUSTOM_SCOPES, READ_SCOPE, ClusterAPIHandler
from jupyterhub_gpu.hub.api.cluster import SnapshotCache
from jupyterhub_gpu.hub.extensions import register
register(c, [(r"/api/gpu/cluster", ClusterAPIHandler, {"cache": SnapshotCache()})],
         custom_scopes=CUSTOM_SCOPES)
c.JupyterHub.load_roles[0]["scopes"] += [READ_SCOPE, "read:metrics"]
"""
FAST_POLL = "c.Spawner.poll_interval = 1\n"


def two_gpu_hub(make_hub, engine: Engine, extra: str = ""):
    return make_hub([engine], [gpu_inventory(engine.name, "aaaaaaaa", [RTX, RTX])], extra)


def containers_of(engine: Engine, hub, owner: str) -> list:
    with engine.client() as client:
        return client.containers.list(
            ignore_removed=True,
            all=True,
            filters={
                "label": [f"jupyterhub-gpu.hub={hub.hub_id}", f"jupyterhub-gpu.owner={owner}"]
            },
        )


def spawn_ready(hub, name: str, options: dict | None = None) -> dict:
    hub.create_user(name)
    r = hub.spawn(name, options)
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(name)
    return hub.server(name)["state"]


def test_each_user_gets_own_gpu_seen_inside_container(make_hub, engine, tmp_path: Path) -> None:
    hub = two_gpu_hub(make_hub, engine)
    states = {u: spawn_ready(hub, u, {"gpu_count": 1}) for u in ("alice", "bob")}

    held = [s["gpu_uuids"] for s in states.values()]
    assert all(len(h) == 1 for h in held)
    assert held[0] != held[1], "two users were given the same GPU"
    for user, state in states.items():
        (container,) = containers_of(engine, hub, user)
        env = container_env(engine, container.name)
        assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(state["gpu_uuids"])
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/nonexistent/jupyterhub-gpu-no-mps"
        labels = container.labels
        assert labels["jupyterhub-gpu.gpus"] == ",".join(state["gpu_uuids"])
        assert labels["jupyterhub-gpu.node"] == engine.name
        assert labels["jupyterhub-gpu.image"] and labels["jupyterhub-gpu.started"]
        assert container.attrs["Config"]["User"] == "1000:100"
        host = container.attrs["HostConfig"]
        assert host["CpuQuota"] == host["CpuPeriod"] and host["Memory"] == 1024**3
        assert host["ShmSize"] == 512 * 1024**2 and host["PidsLimit"] == 4096
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        assert not any("docker.sock" in b for b in host["Binds"])
        # its own network namespace on the user bridge, its port published on the node only
        assert host["NetworkMode"] == USER_NETWORK and host["Privileged"] is False
        assert host["PortBindings"] == {"8888/tcp": [{"HostIp": engine.address, "HostPort": ""}]}
        requests = container.attrs["HostConfig"]["DeviceRequests"]
        assert requests[0]["DeviceIDs"] == state["gpu_uuids"] and requests[0]["Count"] == 0
        # the home is mounted, owned by the user, and the server can write there
        out = container.exec_run(["sh", "-c", 'id -u; echo "$HOME"; echo hi > "$HOME/probe.txt"'])
        assert out.exit_code == 0, out.output
        uid, home = out.output.decode().split()[:2]
        assert uid == "1000" and home == f"/home/{user}"
        host_file = tmp_path / "homes" / user / "probe.txt"
        assert host_file.read_text() == "hi\n"
        st = os.stat(host_file.parent)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1000, 100, 0o700)


def test_no_free_gpu_fails_clearly_and_leaves_nothing(make_hub, engine) -> None:
    """With the GPU queue off (max_queue_wait = 0), a full cluster refuses at once; with
    it on, the spawn waits in line (tests/integration/test_queue.py)."""
    hub = two_gpu_hub(make_hub, engine, "c.GPUDockerSpawner.max_queue_wait = 0\n")
    first = spawn_ready(hub, "alice", {"gpu_count": 2})
    assert len(first["gpu_uuids"]) == 2

    hub.create_user("carol")
    r = hub.spawn("carol", {"gpu_count": 1})
    assert r.status_code >= 400, r.text
    assert "free" in r.json()["message"].lower(), r.text
    assert hub.server("carol") is None
    assert containers_of(engine, hub, "carol") == []

    # stopping frees the GPUs for the next user
    hub.stop_server("alice")
    wait_until(lambda: containers_of(engine, hub, "alice") == [], 30, "alice's container to go")
    carol = spawn_ready(hub, "carol", {"gpu_count": 1})
    assert carol["gpu_uuids"][0] in first["gpu_uuids"]


def test_cpu_only_server_gets_no_gpu(make_hub, engine) -> None:
    hub = two_gpu_hub(make_hub, engine)
    state = spawn_ready(hub, "dave", {"gpu_count": 0})
    assert state["gpu_uuids"] == []
    (container,) = containers_of(engine, hub, "dave")
    assert container_env(engine, container.name)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not container.attrs["HostConfig"]["DeviceRequests"]


def test_an_images_own_env_never_widens_its_gpus(make_hub, engine, tmp_path: Path) -> None:
    """An image whose ENV says NVIDIA_VISIBLE_DEVICES=all (as CUDA base images do) gets
    exactly its assigned GPU, and a CPU-only server from it gets none ('void')."""
    greedy = "jupyterhub-gpu/greedy-env:test"
    with engine.client() as client:
        base = client.containers.create(TEST_IMAGE)  # never started: its CMD is kept
        try:
            base.commit(repository=greedy, changes=["ENV NVIDIA_VISIBLE_DEVICES=all"])
        finally:
            base.remove()
        assert "NVIDIA_VISIBLE_DEVICES=all" in client.images.get(greedy).attrs["Config"]["Env"]
    catalog = yaml.safe_load(CATALOG.read_text())
    for entry in catalog["images"]:
        entry["image"] = greedy
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    hub = two_gpu_hub(make_hub, engine, f"c.GPUCluster.catalog_file = {str(path)!r}\n")
    gpu = spawn_ready(hub, "alice", {"image": "demo-cuda11", "gpu_count": 1})
    cpu = spawn_ready(hub, "bob", {"image": "demo-cpu", "gpu_count": 0})
    for user, visible in (("alice", gpu["gpu_uuids"][0]), ("bob", "void")):
        (container,) = containers_of(engine, hub, user)
        assert container.attrs["Config"]["Image"] == greedy
        assert container_env(engine, container.name)["NVIDIA_VISIBLE_DEVICES"] == visible
    assert cpu["gpu_uuids"] == []


def test_dead_container_releases_its_gpu(make_hub, engine) -> None:
    hub = two_gpu_hub(make_hub, engine, FAST_POLL)
    spawn_ready(hub, "erin", {"gpu_count": 2})
    (container,) = containers_of(engine, hub, "erin")
    container.kill()  # the server dies: the hub never calls stop()
    wait_until(lambda: hub.server("erin") is None, 30, "the hub to notice the dead server")
    state = spawn_ready(hub, "frank", {"gpu_count": 2})
    assert len(state["gpu_uuids"]) == 2


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"gpu_count": -1}, "gpu"),
        ({"gpu_count": "abc"}, "gpu"),
        ({"gpu_count": 999}, "gpu"),
        ({"image": "evil/image:1"}, "catalog"),
        ({"gpu_count": 1, "environment": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "environment"),
        ({"gpu_count": 1, "volumes": {"/": "/host"}}, "volume"),
        ({"mem_gib": 512}, "memory"),
    ],
)
def test_bad_options_are_refused_and_nothing_starts(make_hub, engine, options, fragment) -> None:
    hub = two_gpu_hub(make_hub, engine)
    hub.create_user("mallory")
    r = hub.spawn("mallory", options)
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert fragment in message.lower(), message
    assert "Traceback" not in message
    assert hub.server("mallory") is None
    assert containers_of(engine, hub, "mallory") == []
    # and nothing is held: both GPUs are still there for someone else
    assert len(spawn_ready(hub, "grace", {"gpu_count": 2})["gpu_uuids"]) == 2


HOSTILE = ["..", ".hidden", "..%2F..%2Fetc", "a..b", "x y", "zoë"]


def test_hostile_usernames_stay_inside_home_root(make_hub, engine, tmp_path: Path) -> None:
    hub = two_gpu_hub(make_hub, engine)
    root = tmp_path / "homes"
    before_outside = set(tmp_path.iterdir())
    spawned = 0
    for name in HOSTILE:
        if hub.create_user(name).status_code >= 400:
            continue  # the hub itself refused the name: nothing to check
        r = hub.spawn(name, {"gpu_count": 0})
        assert r.status_code in (201, 202), r.text
        hub.wait_ready(name)
        spawned += 1
        (container,) = containers_of(engine, hub, name)
        binds = container.attrs["HostConfig"]["Binds"]
        host = Path(binds[0].split(":", 1)[0])
        assert host.parent == root and host.name.replace("-", "").isalnum(), host
        hub.stop_server(name)
    assert spawned >= 3, "too few hostile names reached the spawner to test anything"
    assert set(tmp_path.iterdir()) == before_outside
    for p in root.iterdir():
        assert p.is_dir() and not p.is_symlink() and not p.name.startswith(".")


def test_hub_refuses_to_start_on_a_bad_catalog(tmp_path: Path) -> None:
    from tests.conftest import CATALOG
    from tests.support.hub import Hub

    bad = tmp_path / "catalog.yaml"
    bad.write_text(CATALOG.read_text().replace('cuda_version: "11.8"', 'cuda_version: "eleven"'))
    hub = Hub(tmp_path / "hub")
    hub.extra_config = f"""
c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.catalog_file = {str(bad)!r}
from jupyterhub_gpu.hub.config import check_config
check_config(c)
"""
    with pytest.raises(RuntimeError) as e:
        hub.start(timeout=30)
    hub.stop()
    assert "images[1] (demo-cuda11).cuda_version" in str(e.value)


def test_catalog_image_built_by_ci_spawns(make_hub, engine) -> None:
    """images/build.py built the catalog's python-cpu image on the local base (cluster.sh)."""
    hub = two_gpu_hub(make_hub, engine)
    state = spawn_ready(hub, "ivan", {"image": "python-cpu", "gpu_count": 0})
    assert state["gpu_uuids"] == []
    (container,) = containers_of(engine, hub, "ivan")
    assert container.attrs["Config"]["Image"] == "jupyterhub-gpu/python-cpu:3.11-bookworm"
    assert container.labels["jupyterhub-gpu.image"] == "jupyterhub-gpu/python-cpu:3.11-bookworm"


def test_named_servers_each_get_their_own_image_gpus_and_datasets(
    make_hub, engine, tmp_path: Path
) -> None:
    data = tmp_path / "datasets" / "imagenet"
    data.mkdir(parents=True)
    (data / "README").write_text("read me\n")
    mounts = {"vision": [{"source": str(data), "target": "/data/imagenet"}]}
    extra = f"""
c.JupyterHub.allow_named_servers = True
c.JupyterHub.load_groups = {{"vision": {{"users": ["judy"]}}}}
c.GPUDockerSpawner.group_mounts = {mounts!r}
"""
    hub = two_gpu_hub(make_hub, engine, extra)
    hub.create_user("judy")
    states = {}
    for server, options in (
        ("one", {"image": "demo-cuda12", "gpu_count": 1}),
        ("two", {"image": "demo-cpu", "gpu_count": 0}),
    ):
        r = hub.spawn("judy", options, server=server)
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("judy", server)
        states[server] = hub.server("judy", server)["state"]
    assert len(states["one"]["gpu_uuids"]) == 1 and states["two"]["gpu_uuids"] == []
    containers = {c.labels["jupyterhub-gpu.server"]: c for c in containers_of(engine, hub, "judy")}
    assert set(containers) == {"one", "two"}
    env_one = container_env(engine, containers["one"].name)
    assert env_one["NVIDIA_VISIBLE_DEVICES"] == states["one"]["gpu_uuids"][0]
    assert container_env(engine, containers["two"].name)["NVIDIA_VISIBLE_DEVICES"] == "void"
    # Two calls: one exec's stdout and stderr arrive interleaved in no fixed order.
    read = containers["one"].exec_run(["cat", "/data/imagenet/README"])
    assert read.exit_code == 0 and read.output.decode().startswith("read me")
    write = containers["one"].exec_run(["touch", "/data/imagenet/x"])
    assert write.exit_code != 0 and "Read-only file system" in write.output.decode()


def test_an_engine_error_is_told_as_such_and_holds_nothing(
    make_hub, engine, tmp_path: Path
) -> None:
    """An admin lists an image without ``jupyterhub-singleuser`` (the bare base image): the
    engine refuses to start the container. The user is told what the node said (not that
    it stopped answering), the container is removed and the GPU freed."""
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        yaml.safe_dump(
            {
                "images": [
                    {
                        "slug": "bare",
                        "display_name": "Base image without Jupyter",
                        "framework": "python",
                        "framework_version": "3.11",
                        "cuda_version": "12.4",
                        "image": "jupyterhub-gpu/base:bookworm",
                    },
                    {
                        "slug": "good",
                        "display_name": "The test image",
                        "framework": "python",
                        "framework_version": "3.11",
                        "cuda_version": "12.4",
                        "image": "jupyterhub-gpu/singleuser-test:6.1.1",
                    },
                ]
            }
        )
    )
    extra = f"c.GPUCluster.catalog_file = {str(catalog)!r}\n"
    hub = make_hub([engine], [gpu_inventory(engine.name, "dddddddd", [RTX])], extra)
    hub.create_user("oscar")
    r = hub.spawn("oscar", {"image": "bare", "gpu_count": 1})
    text = r.text
    if r.status_code == 202:  # failed after the request returned: the hub has the reason
        wait_until(lambda: hub.server("oscar") is None, 30, "the failed spawn to end")
        text = hub.log_tail(200)
    assert f"Node {engine.name} could not start your server:" in text, text
    assert "jupyterhub-singleuser" in text and "stopped answering" not in text, text
    assert hub.server("oscar") is None and containers_of(engine, hub, "oscar") == []
    spawn_ready(hub, "peggy", {"image": "good", "gpu_count": 1})  # the one GPU is free


def test_two_users_share_one_gpu(make_hub, engine) -> None:
    """Issue 26: on a hub with one RTX 3090 shared in 4 (MPS), alice takes a quarter and
    bob three quarters of the same GPU; each container sees that GPU only, carries its
    share in its labels and its MPS limits in its environment; a whole GPU is refused
    while they share it, and so is a share beyond the four. The dashboard's cluster API and
    the hub's metrics say who shares the GPU."""
    sharing = (
        # a server may hold up to 3 of the 4 (in mps mode the default is 1: docs/sharing.md)
        'c.GPUSharing.models = {"NVIDIA GeForce RTX 3090": '
        '{"shares": 4, "mode": "mps", "max_held": 3}}\n'
        "c.GPUDockerSpawner.max_queue_wait = 0\n" + CLUSTER_API
    )
    hub = make_hub([engine], [gpu_inventory(engine.name, "aaaaaaaa", [RTX])], sharing)
    share = {"gpu_count": 1, "gpu_model": RTX[0]}
    states = {
        "alice": spawn_ready(hub, "alice", {**share, "gpu_share": "1/4"}),
        "bob": spawn_ready(hub, "bob", {**share, "gpu_share": "3/4"}),
    }
    assert states["alice"]["gpu_uuids"] == states["bob"]["gpu_uuids"]
    (uuid,) = states["alice"]["gpu_uuids"]
    for user, (part, mib) in {"alice": ("1/4", 6144), "bob": ("3/4", 18432)}.items():
        (container,) = containers_of(engine, hub, user)
        assert container.labels["jupyterhub-gpu.share"] == part
        assert container.labels["jupyterhub-gpu.share_memory_mib"] == str(mib)
        assert container.labels["jupyterhub-gpu.gpus"] == uuid
        env = container_env(engine, container.name)
        assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={mib}M"
    # the dashboard's payload names both holders with their shares; the metrics count them
    r = hub.api("GET", "/gpu/cluster")
    assert r.status_code == 200, r.text
    (gpu,) = [g for n in r.json()["nodes"] for g in n["gpus"] if g["uuid"] == uuid]
    assert (gpu["share_of"], gpu["shares_held"], gpu["holder"]) == (4, 4, None)
    assert [(s["user"], s["count"], s["fraction"], s["memory_mib"]) for s in gpu["shares"]] == [
        ("alice", 1, 0.25, 6144),
        ("bob", 3, 0.75, 18432),
    ]
    metrics = httpx.get(
        f"{hub.url}/hub/metrics", headers={"Authorization": f"token {hub.token}"}, timeout=30
    )
    assert metrics.status_code == 200, metrics.text
    shares = {
        s.labels["state"]: s.value
        for family in text_string_to_metric_families(metrics.text)
        for s in family.samples
        if s.name == "jupyterhub_gpu_shares" and s.labels["uuid"] == uuid
    }
    assert shares == {"held": 4.0, "free": 0.0}
    for user, options in (("carol", {"gpu_count": 1}), ("dave", {**share, "gpu_share": "1/4"})):
        hub.create_user(user)
        r = hub.spawn(user, options)
        assert r.status_code >= 400, r.text
        assert containers_of(engine, hub, user) == []


def test_an_images_labels_neither_stop_the_hub_nor_reach_its_containers(
    make_hub, engine, tmp_path: Path
) -> None:
    """Issue 30, findings 1 and 2, on a real engine. An image labelled
    ``jupyterhub-gpu.share="1/4"`` and ``jupyterhub-gpu.share_memory_mib="²"``: an old
    container of it (as a release that did not write every key made it) holds its GPU
    whole without breaking reconciliation, the form or the next spawn; a new spawn of the
    image is refused with a sentence, and nothing of it is left."""
    hostile = "jupyterhub-gpu/hostile-labels:test"
    with engine.client() as client:
        base = client.containers.create(TEST_IMAGE)  # never started: its CMD is kept
        try:
            base.commit(
                repository=hostile,
                changes=[
                    'LABEL jupyterhub-gpu.share="1/4"',
                    'LABEL jupyterhub-gpu.share_memory_mib="\u00b2"',
                ],
            )
        finally:
            base.remove()
    catalog = yaml.safe_load(CATALOG.read_text())
    entry = dict(catalog["images"][1], slug="hostile", display_name="Hostile labels")
    catalog["images"].append({**entry, "image": hostile})
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    extra = f"c.GPUCluster.catalog_file = {str(path)!r}\n"
    extra += "c.GPUDockerSpawner.max_queue_wait = 0\n"
    hub = two_gpu_hub(make_hub, engine, extra)
    taken = "GPU-aaaaaaaa0000-0000-4000-8000-000000000000"
    with engine.client() as client:  # mallory's old server, its image's labels under ours
        client.containers.run(
            hostile,
            ["sleep", "600"],
            detach=True,
            user="1000:100",
            labels={
                "jupyterhub-gpu.hub": hub.hub_id,
                "jupyterhub-gpu.owner": "mallory",
                "jupyterhub-gpu.server": "",
                "jupyterhub-gpu.gpus": taken,
                "jupyterhub-gpu.allocation": "m" * 32,
            },
        )
    offset = hub.log_offset()
    hub.create_user("alice")
    form = hub.api("GET", "/users/alice")  # the hub answers
    assert form.status_code == 200, form.text
    state = spawn_ready(hub, "alice", {"image": "demo-cuda11", "gpu_count": 1})
    assert state["gpu_uuids"] != [taken], "alice was given the GPU mallory's container holds"
    # the GPU is held whole: no second server fits, not even on a share
    hub.create_user("bob")
    r = hub.spawn("bob", {"image": "demo-cuda11", "gpu_count": 1})
    assert r.status_code >= 400 and "free" in r.json()["message"].lower(), r.text
    wait_until(
        lambda: "its labels do not parse" in hub.log_since(offset), 30, "the label problem logged"
    )
    assert hub.log_since(offset).count("its labels do not parse") == 1
    # a new server from that image is refused, with the sentence, and leaves nothing
    hub.stop_server("alice")
    wait_until(lambda: containers_of(engine, hub, "alice") == [], 30, "alice's container to go")
    r = hub.spawn("alice", {"image": "hostile", "gpu_count": 1})
    if r.status_code in (201, 202):
        with pytest.raises(RuntimeError):
            hub.wait_ready("alice")
    message = hub.log_since(offset)
    assert "carries the label jupyterhub-gpu.share" in message, message[-3000:]
    assert containers_of(engine, hub, "alice") == []
