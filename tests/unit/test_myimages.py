"""Saved images in the hub: the spawn-form entries (pure), their records in the store,
the settings, and the save service's bookkeeping with the build replaced (the build
itself meets real engines and a real registry in tests/integration/test_save_engine.py
and tests/integration/test_my_images.py)."""

from __future__ import annotations

import asyncio
import itertools
from concurrent.futures import Future
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.catalog.entries import Catalog
from jupyterhub_gpu.core.form import resolve_bounds
from jupyterhub_gpu.core.form.render import spawn_form_html
from jupyterhub_gpu.core.form.resources import policy_from_config
from jupyterhub_gpu.core.form.validation import validate_options
from jupyterhub_gpu.core.saving import entries
from jupyterhub_gpu.core.saving.data import InvalidPackage, LimitReached, Progress, SavedImage
from jupyterhub_gpu.core.saving.limits import Limits, check_new_save
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.accounting.store import AccountingStore, AccountingUnavailable
from jupyterhub_gpu.hub import saves as service
from jupyterhub_gpu.hub.saved_images import SavedImages
from jupyterhub_gpu.hub.saves import MyImages, SaveBusy, SavingOff, ServerFacts
from jupyterhub_gpu.wire.catalog_file import parse_catalog
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 24, 9, 30, tzinfo=timezone.utc)


def _catalog() -> Catalog:
    def image(slug: str, cuda: str | None, **extra: Any) -> dict[str, Any]:
        return {"slug": slug, "display_name": slug.upper(), "framework": "pytorch",
                "framework_version": "2.3.1", "cuda_version": cuda,
                "image": f"jupyterhub-gpu/{slug}:1", **extra}  # fmt: skip

    return parse_catalog(
        {"images": [image("torch-cu121", "12.1", compute_capabilities={"min": "7.0"}),
                    image("secret-cu124", "12.4", groups=["secret-lab"]),
                    image("python-cpu", None)]},
        "test.yaml",
    )  # fmt: skip


def _saved(owner: str, name: str, base: str = "torch-cu121", shared: str | None = None,
           size: int = 3 * 2**20) -> SavedImage:  # fmt: skip
    return SavedImage(
        owner=owner, name=name, base_slug=base, base_image=f"jupyterhub-gpu/{base}:1",
        reference=f"10.250.0.1:5000/jhgpu/u-{owner}/{name}:20261124-093000-ab",
        packages=("pip:einops==0.8.0", "pip:six==1.17.0"), size_bytes=size, created=T0,
        digest="sha256:" + "a" * 64, shared_with=shared,
    )  # fmt: skip


# ------------------------------------------------------------------ entries (pure)
def test_a_saved_image_keeps_every_rule_of_its_base() -> None:
    catalog = _catalog()
    made, unlisted = entries.saved_entries(catalog, [_saved("alice", "env1")], "alice", ["lab"])
    assert unlisted == ()
    (entry,) = made
    base = catalog.get("torch-cu121")
    assert base is not None
    assert entry.slug == "saved:alice/env1"
    assert entry.image == "10.250.0.1:5000/jhgpu/u-alice/env1@sha256:" + "a" * 64  # no tag
    assert (entry.cuda_version, entry.min_driver, entry.min_compute_capability) == (
        base.cuda_version, base.min_driver, base.min_compute_capability)  # fmt: skip
    assert entry.groups == base.groups and entry.saved_from == "torch-cu121"
    assert "einops" in entry.description and "3.0 MiB" in entry.description


@pytest.mark.parametrize(
    "user, groups, expected",
    [
        ("alice", [], ["saved:alice/env1", "saved:alice/private"]),  # the owner sees all hers
        ("bob", ["lab"], ["saved:alice/env1"]),  # shared with lab: bob is in lab
        ("bob", ["other"], []),  # not in lab: nothing
        ("carol", [], []),
    ],
)
def test_who_sees_which_saved_image(user: str, groups: list[str], expected: list[str]) -> None:
    images = [_saved("alice", "env1", shared="lab"), _saved("alice", "private")]
    made, _ = entries.saved_entries(_catalog(), images, user, groups)
    assert [e.slug for e in made] == expected


def test_an_image_whose_base_left_the_catalog_is_listed_with_the_reason() -> None:
    made, unlisted = entries.saved_entries(
        _catalog(), [_saved("alice", "old", base="tf-cu110")], "alice", []
    )
    assert made == ()
    (u,) = unlisted
    assert u.slug == "saved:alice/old"
    assert "'tf-cu110' is no longer in the catalog" in u.reason and "delete" in u.reason


def test_an_image_on_a_group_only_base_is_not_startable_by_others() -> None:
    shared = _saved("alice", "s", base="secret-cu124", shared="lab")
    made, unlisted = entries.saved_entries(_catalog(), [shared], "bob", ["lab"])
    assert made == () and "not available to your groups" in unlisted[0].reason


def test_validation_accepts_a_visible_saved_image_and_refuses_another_users() -> None:
    catalog = _catalog()
    policy = policy_from_config({"max_gpus": 2}, {})
    images = [_saved("alice", "env1"), _saved("bob", "bobs")]
    made, _ = entries.saved_entries(catalog, images, "alice", [])
    mine = entries.with_saved(catalog, made)
    bounds = resolve_bounds(policy, [])
    options = validate_options(
        {"image": "saved:alice/env1", "gpu_count": 0}, catalog=mine, bounds=bounds, models=()
    )
    assert options.image == "saved:alice/env1"
    with pytest.raises(Exception, match="not in the image catalog"):
        validate_options({"image": "saved:bob/bobs"}, catalog=mine, bounds=bounds, models=())


def test_allowed_images_patterns_apply_to_a_saved_images_base() -> None:
    catalog = _catalog()
    made, _ = entries.saved_entries(catalog, [_saved("alice", "env1")], "alice", [])
    policy = policy_from_config({"max_gpus": 2, "allowed_images": ["python-*"]}, {})
    with pytest.raises(Exception, match="not available to your groups"):
        validate_options(
            {"image": "saved:alice/env1"},
            catalog=entries.with_saved(catalog, made),
            bounds=resolve_bounds(policy, []),
            models=(),
        )


def test_the_form_lists_my_images_apart_with_unstartable_ones_disabled() -> None:
    catalog = _catalog()
    made, unlisted = entries.saved_entries(
        catalog, [_saved("alice", "env1"), _saved("alice", "old", base="gone")], "alice", []
    )
    html = spawn_form_html(
        entries.with_saved(catalog, made),
        ClusterSnapshot(()),
        resolve_bounds(policy_from_config({"max_gpus": 2}, {}), []),
        unlisted=unlisted,
    )
    group = html[html.index('<optgroup label="My images"') :]
    group = group[: group.index("</optgroup>")]
    assert 'value="saved:alice/env1"' in group
    assert 'value="saved:alice/old" disabled' in group and "no longer in the catalog" in group
    assert 'value="torch-cu121"' not in group
    # when it was saved: the description's UTC time, and the moment for the reader's zone
    option = group[group.index('value="saved:alice/env1"') :]
    option = option[: option.index(">")]
    said = T0.strftime("%Y-%m-%d %H:%M UTC")
    assert f'data-description="Saved {said}, adds 3.0 MiB: einops==0.8.0, six==1.17.0."' in option
    assert f'data-said="{said}" data-at="{T0.isoformat()}"' in option, option
    assert "data-said" not in html[html.index('value="torch-cu121"') :].split(">", 1)[0]


def test_base_of_a_saved_image_is_its_catalog_entry() -> None:
    catalog = _catalog()
    made, _ = entries.saved_entries(catalog, [_saved("alice", "env1")], "alice", [])
    full = entries.with_saved(catalog, made)
    base = entries.base_of(full, "saved:alice/env1")
    assert base is not None and base.slug == "torch-cu121"
    assert entries.base_of(full, "nope") is None


# ------------------------------------------------------------------ store
def test_saved_images_are_stored_shared_and_deleted(tmp_path: Path) -> None:
    store = AccountingStore(f"sqlite:///{tmp_path / 'a.sqlite'}")
    store.upgrade()
    image = _saved("alice", "env1")
    store.add_saved_image(image, "id1")
    limits = Limits(max_images=5)
    with pytest.raises(LimitReached, match="already have a saved image named 'env1'"):
        store.add_saved_image(
            _saved("alice", "env1", size=1),
            "id2",
            check=lambda mine: check_new_save(mine, "alice", "env1", limits),
        )
    with pytest.raises(AccountingUnavailable):  # unchecked: the unique constraint says no
        store.add_saved_image(_saved("alice", "env1", size=1), "id3")
    assert store.saved_images() == [image]
    shared = store.share_saved_image("alice", "env1", "lab")
    assert shared is not None and shared.shared_with == "lab"
    assert store.saved_images()[0].shared_with == "lab"
    assert store.share_saved_image("alice", "nope", "lab") is None
    assert store.delete_saved_image("bob", "env1") is None  # another owner's name
    gone = store.delete_saved_image("alice", "env1")
    assert gone is not None and gone.digest == image.digest
    assert store.saved_images() == []


# ------------------------------------------------------------------ settings
def test_settings_turn_into_the_builders_data() -> None:
    s = SavedImages(registry="10.250.0.1:5000/", max_images=0, max_image_gib=1.5,
                    no_index=True, find_links=["/srv/wheels"])  # fmt: skip
    assert s.registry == "10.250.0.1:5000" and s.registry_url == "https://10.250.0.1:5000"
    built = s.save_settings()
    assert built.limits.max_images is None and built.limits.max_image_bytes == int(1.5 * 2**30)
    assert built.index.no_index and built.index.find_links == ("/srv/wheels",)
    with pytest.raises(Exception, match="host\\[:port\\]"):
        SavedImages(registry="http://x y")
    assert not SavedImages().enabled
    # the build's bounds: two CPUs and 256 processes unless the admin says otherwise
    build = built.build
    assert (build.cpus, build.max_processes, build.cgroup_parent) == (2.0, 256, "")
    assert build.memory_bytes == 4 * 2**30
    s = SavedImages(build_cpus=0, build_max_processes=0, build_cgroup_parent="builds.slice")
    build = s.save_settings().build
    assert (build.cpus, build.max_processes, build.cgroup_parent) == (None, None, "builds.slice")


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("build_cpus", -1.0, "build_cpus must be 0"),
        ("build_cpus", 0.001, "build_cpus must be 0"),
        ("build_max_processes", 5, "build_max_processes must be 0"),
        ("build_max_processes", -1, "build_max_processes must be 0"),
    ],
)
def test_build_bounds_that_would_not_work_stop_the_hub(option: str, value: Any, match: str) -> None:
    with pytest.raises(Exception, match=match):
        SavedImages(**{option: value})


# ------------------------------------------------------------------ the service
class _Recorder:
    def __init__(self, store: AccountingStore) -> None:
        self.store = store

    def call(self, fn: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(self.store))
        except Exception as e:
            f.set_exception(e)
        return f


class _Client:
    closed = False

    def close(self) -> None:
        self.closed = True


class _Cluster:
    def __init__(self, store: AccountingStore) -> None:
        self.recorder = _Recorder(store)
        self.clients: list[_Client] = []

    def new_client(self, node: str, timeout: float) -> _Client:
        self.clients.append(_Client())
        return self.clients[-1]

    def specs(self) -> list[Any]:  # no nodes: a delete's sweep has nothing to visit
        return []


FACTS = ServerFacts("alice", "", "node-a", "jupyterhub-gpu/torch-cu121:1", "torch-cu121",
                    Path("/homes/alice"))  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> AccountingStore:
    s = AccountingStore(f"sqlite:///{tmp_path / 'a.sqlite'}")
    s.upgrade()
    return s


def _service(store: AccountingStore, **settings: Any) -> MyImages:
    import logging

    config = {"registry": "10.250.0.1:5000", "registry_url": "http://10.250.0.1:5000", **settings}
    return MyImages(_Cluster(store), SavedImages(**config), logging.getLogger("test"))


async def _finish(svc: MyImages) -> None:
    while svc._tasks:
        await asyncio.gather(*list(svc._tasks))


async def test_a_save_reports_progress_and_is_recorded(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def fake_save(client: Any, request: Any, settings: Any, existing: Any, report: Any) -> Any:
        seen.append(request)
        report(Progress("build", "Installing 1 package into the image", 40))
        report(Progress("done", "Saved", 100))  # as the builder ends
        return _saved(request.owner, request.name)

    monkeypatch.setattr(service, "save_environment", fake_save)
    svc = _service(store)
    from dataclasses import replace

    job = await svc.start(replace(FACTS, conda_envs=("miniconda3/envs/torch",)), "env1")
    assert job.state == "running"
    await _finish(svc)
    assert job.state == "saved", job.message
    assert seen[0].conda_envs == ("miniconda3/envs/torch",)  # the environments chosen
    assert any(e.get("percent") == 40 for e in job.events)
    # one last line: the hub's sentence replaces the builder's "Saved"
    assert job.events[0]["message"] == "Saving your server as 'env1'"  # her words
    assert [e["message"] for e in job.events][-2:] == [
        "Installing 1 package into the image",
        "Saved as 'env1': start it under My images in the form.",
    ]
    assert seen[0].base_slug == "torch-cu121" and seen[0].home == Path("/homes/alice")
    assert [i.name for i in store.saved_images()] == ["env1"]
    assert all(c.closed for c in svc.cluster.clients)  # the node client is closed


async def test_a_failed_save_says_why_and_records_nothing(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_save(*args: Any) -> Any:
        raise InvalidPackage("Package 'nosuch==1.0' was not found as a wheel.")

    monkeypatch.setattr(service, "save_environment", fake_save)
    svc = _service(store)
    job = await svc.start(FACTS, "env1")
    await _finish(svc)
    assert job.state == "failed" and "nosuch==1.0" in job.message
    assert store.saved_images() == []


async def test_an_unexpected_failure_is_told_without_its_details(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_save(*args: Any) -> Any:
        raise RuntimeError("token=SECRET in a traceback")

    monkeypatch.setattr(service, "save_environment", fake_save)
    svc = _service(store)
    job = await svc.start(FACTS, "env1")
    await _finish(svc)
    assert job.state == "failed" and "SECRET" not in job.message and "node-a" in job.message


async def test_refusals_come_at_once_with_the_number(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow_save(client: Any, request: Any, *args: Any) -> Any:
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(10)
        return _saved(request.owner, request.name)

    monkeypatch.setattr(service, "save_environment", slow_save)
    store.add_saved_image(_saved("alice", "old"), "x")
    svc = _service(store, max_images=2)
    with pytest.raises(InvalidPackage, match="image name"):
        await svc.start(FACTS, "!!!")  # nothing to make a name of ("Bad Name" is bad-name)
    with pytest.raises(LimitReached, match="already have a saved image named 'old'"):
        await svc.start(FACTS, "old")
    await svc.start(FACTS, "env1")
    with pytest.raises(SaveBusy, match="still running"):
        await svc.start(FACTS, "env2")
    release.set()
    await _finish(svc)
    most = "You have 2 saved images, the most this hub allows is 2"
    with pytest.raises(LimitReached, match=most):
        await svc.start(FACTS, "env3")
    with pytest.raises(SavingOff, match="not set up"):
        await _service(store, registry="").start(FACTS, "env4")


async def test_parallel_saves_of_one_user_start_one(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_save(client: Any, request: Any, *args: Any) -> Any:
        return _saved(request.owner, request.name)

    monkeypatch.setattr(service, "save_environment", fake_save)
    svc = _service(store, max_images=2)
    results = await asyncio.gather(
        *(svc.start(FACTS, f"env{i}") for i in range(10)), return_exceptions=True
    )
    started = [r for r in results if not isinstance(r, BaseException)]
    assert len(started) == 1
    assert all(isinstance(r, SaveBusy) for r in results if isinstance(r, BaseException))
    await _finish(svc)
    assert len(store.saved_images()) == 1


async def test_the_limits_are_checked_again_when_the_image_is_recorded(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[str] = []

    def fake_save(client: Any, request: Any, *args: Any) -> Any:
        store.add_saved_image(_saved("alice", "other"), "x")  # another hub, meanwhile
        return _saved(request.owner, request.name)

    monkeypatch.setattr(service, "save_environment", fake_save)
    monkeypatch.setattr(service, "delete_image",
                        lambda url, image, **kw: deleted.append(image.name))  # fmt: skip
    svc = _service(store, max_images=1)
    job = await svc.start(FACTS, "env1")
    await _finish(svc)
    assert job.state == "failed" and "the most this hub allows is 1" in job.message
    assert deleted == ["env1"] and [i.name for i in store.saved_images()] == ["other"]


async def test_an_image_built_on_a_saved_image_counts_its_parent(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    def fake_save(client: Any, request: Any, *args: Any) -> Any:
        return _saved(request.owner, request.name, size=5)

    monkeypatch.setattr(service, "save_environment", fake_save)
    svc = _service(store)
    job = await svc.start(replace(FACTS, parent_bytes=1000), "env1")
    await _finish(svc)
    assert job.state == "saved" and store.saved_images()[0].size_bytes == 1005


async def test_a_pushed_image_the_database_refuses_is_deleted_again(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[str] = []

    def fake_save(client: Any, request: Any, *args: Any) -> Any:
        store.add_saved_image(_saved("alice", request.name), "raced")  # another hub, meanwhile
        return _saved(request.owner, request.name, size=7)

    monkeypatch.setattr(service, "save_environment", fake_save)
    monkeypatch.setattr(service, "delete_image",
                        lambda url, image, **kw: deleted.append(image.reference))  # fmt: skip
    svc = _service(store)
    job = await svc.start(FACTS, "env1")
    await _finish(svc)
    assert job.state == "failed" and "already have a saved image" in job.message
    assert len(deleted) == 1


async def test_share_only_with_ones_own_groups_and_delete_registry_first(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add_saved_image(_saved("alice", "env1"), "x")
    svc = _service(store)
    with pytest.raises(Exception, match="only with one of your groups \\(lab\\), not 'admins'"):
        await svc.share("alice", "env1", "admins", ["lab"])
    assert (await svc.share("alice", "env1", "lab", ["lab"])).shared_with == "lab"

    def registry_down(url: str, image: Any, **kw: Any) -> None:
        from jupyterhub_gpu.edges.builder.registry import RegistryError

        raise RegistryError("The registry did not answer; nothing was deleted.")

    monkeypatch.setattr(service, "delete_image", registry_down)
    with pytest.raises(Exception, match="nothing was deleted"):
        await svc.delete("alice", "env1")
    assert [i.name for i in store.saved_images()] == ["env1"]  # kept: try again
    monkeypatch.setattr(service, "delete_image", lambda url, image, **kw: None)
    with pytest.raises(Exception, match="no saved image named 'env1'"):
        await svc.delete("bob", "env1")
    await svc.delete("alice", "env1")
    assert store.saved_images() == []


def test_the_dashboard_never_shows_a_saved_images_name_or_owner() -> None:
    from types import SimpleNamespace

    from jupyterhub_gpu.hub.api.cluster import _Images, server_info

    spawner = SimpleNamespace(
        user_options={"image": "saved:alice/secret-project"}, node_name="node-a",
        gpu_uuids=["GPU-1"], orm_spawner=None, ready=True, pending=None, catalog=_catalog(),
    )  # fmt: skip
    info = server_info("alice", "", spawner, _Images())
    assert "secret-project" not in f"{info.image} {info.image_name}"
    assert info.image_name == "a saved image (My images)"


def test_registry_credentials_go_to_saved_images_only() -> None:
    s = SavedImages(registry="10.250.0.1:5000", registry_username="hub", registry_password="pw")
    saved = s.prefix + "u-alice/env:1"
    assert s.auth_config(saved) == {"username": "hub", "password": "pw",
                                    "serveraddress": "10.250.0.1:5000"}  # fmt: skip
    assert s.auth_config("docker.io/library/python:3.11") is None  # never to another registry
    assert s.save_settings().build.auth_config == s.auth_config(saved)
    assert s.credentials == ("hub", "pw")
    assert SavedImages(registry="r:5000").auth_config(saved) is None
    with pytest.raises(Exception, match=r"needs SavedImages\.registry_username"):
        SavedImages(registry_password="pw")


async def test_saves_run_in_daemon_threads_at_most_concurrent_saves_at_once(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    from dataclasses import replace

    running, most, daemon = 0, 0, []
    lock = threading.Lock()
    loop = asyncio.get_running_loop()
    release = asyncio.Event()

    def fake_save(client: Any, request: Any, *args: Any) -> Any:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        daemon.append(threading.current_thread().daemon)  # a stopping hub won't wait
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(10)
        with lock:
            running -= 1
        return _saved(request.owner, request.name)

    monkeypatch.setattr(service, "save_environment", fake_save)
    svc = _service(store, concurrent_saves=1)
    for user in ("alice", "bob", "carol"):
        await svc.start(replace(FACTS, owner=user), "env")
    # the event: one save runs, and the two others wait for its slot, in order ...
    await wait_until_async(lambda: daemon, 10, "the first save to run")
    assert svc._slots.running == {"alice"} and list(svc._slots.waiting) == ["bob", "carol"]
    # ... so no second save thread was started
    assert len(daemon) == 1
    release.set()
    await _finish(svc)
    assert most == 1 and daemon == [True, True, True]
    assert sorted(i.owner for i in store.saved_images()) == ["alice", "bob", "carol"]


# ------------------------------------------------------------------ fair slots, the listing
class _Blocking:
    """A save function whose every save waits until the test lets that owner's save end
    (or fail); it records when each save's thread starts and ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.order: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.fail: set[str] = set()

    def gate(self, owner: str) -> asyncio.Event:
        return self.gates.setdefault(owner, asyncio.Event())

    def __call__(self, client: Any, request: Any, *args: Any) -> Any:
        owner = request.owner
        self.order.append(f"{owner}-start")
        gate = asyncio.run_coroutine_threadsafe(self._gate(owner), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(gate.wait(), self.loop).result(20)
        self.order.append(f"{owner}-end")
        if owner in self.fail:
            raise InvalidPackage(f"{owner}'s package was not found.")
        return _saved(request.owner, request.name)

    async def _gate(self, owner: str) -> asyncio.Event:
        return self.gate(owner)


async def test_waiting_saves_start_in_the_order_asked_each_once(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    saves = _Blocking(asyncio.get_running_loop())
    monkeypatch.setattr(service, "save_environment", saves)
    svc = _service(store, concurrent_saves=1)
    await svc.start(replace(FACTS, owner="carol"), "env")
    await wait_until_async(lambda: saves.order == ["carol-start"], 10, "carol's save to run")
    alice = await svc.start(replace(FACTS, owner="alice"), "env")
    bob = await svc.start(replace(FACTS, owner="bob"), "env")
    # each is told it waits, and behind how many
    assert "1 save ahead of yours" in alice.events[-1]["message"]
    assert "2 saves ahead of yours" in bob.events[-1]["message"]
    with pytest.raises(SaveBusy, match="still running"):  # one slot or place per user
        await svc.start(replace(FACTS, owner="alice"), "env2")
    saves.gate("carol").set()
    await wait_until_async(lambda: "alice-start" in saves.order, 10, "alice's save to run")
    assert svc._slots.running == {"alice"} and list(svc._slots.waiting) == ["bob"]
    saves.gate("alice").set()
    saves.gate("bob").set()
    await _finish(svc)
    assert saves.order == ["carol-start", "carol-end", "alice-start", "alice-end",
                           "bob-start", "bob-end"]  # fmt: skip
    assert alice.state == bob.state == "saved"
    assert sorted(i.owner for i in store.saved_images()) == ["alice", "bob", "carol"]


async def test_a_failed_save_gives_its_slot_to_the_next(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    saves = _Blocking(asyncio.get_running_loop())
    saves.fail.add("carol")
    monkeypatch.setattr(service, "save_environment", saves)
    svc = _service(store, concurrent_saves=1)
    carol = await svc.start(replace(FACTS, owner="carol"), "env")
    alice = await svc.start(replace(FACTS, owner="alice"), "env")
    saves.gate("carol").set()
    saves.gate("alice").set()
    await _finish(svc)
    assert carol.state == "failed" and alice.state == "saved"
    assert saves.order == ["carol-start", "carol-end", "alice-start", "alice-end"]
    assert not svc._slots.running and not svc._slots.waiting


async def test_a_cancelled_save_keeps_its_slot_until_its_build_stops(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    saves = _Blocking(asyncio.get_running_loop())
    monkeypatch.setattr(service, "save_environment", saves)
    svc = _service(store, concurrent_saves=1)
    await svc.start(replace(FACTS, owner="carol"), "env")
    (carol,) = svc._tasks
    await wait_until_async(lambda: saves.order == ["carol-start"], 10, "carol's save to run")
    await svc.start(replace(FACTS, owner="alice"), "env")
    carol.cancel()  # the hub stops waiting for carol's save; her build thread runs on
    with pytest.raises(asyncio.CancelledError):
        await carol
    # the event: alice's save either started (the slot was given back too early) or is
    # still waiting in the queue (it is, for as long as carol's build runs)
    await wait_until_async(
        lambda: "alice-start" in saves.order or "alice" in getattr(svc._slots, "waiting", ()),
        10, "alice's save to start or wait",
    )  # fmt: skip
    assert saves.order == ["carol-start"], "a second build ran beside carol's"
    saves.gate("carol").set()
    saves.gate("alice").set()
    await _finish(svc)
    assert saves.order == ["carol-start", "carol-end", "alice-start", "alice-end"]


async def test_the_conda_listing_is_cached_per_user_for_a_while(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    walks: list[Path] = []

    def listing(home: Path) -> tuple[str, ...]:
        walks.append(home)
        return ("miniconda3",)

    monkeypatch.setattr(service, "list_conda_envs", listing)
    svc = _service(store)
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    found = await asyncio.gather(*(svc.conda_envs("alice", alice) for _ in range(5)))
    assert found == [("miniconda3",)] * 5 and walks == [alice]  # one walk for them all
    assert await svc.conda_envs("alice", alice) == ("miniconda3",) and walks == [alice]
    await svc.conda_envs("bob", bob)
    assert walks == [alice, bob]
    monkeypatch.setattr(service, "CONDA_LIST_SECONDS", 0)  # the cache's time has passed
    await svc.conda_envs("alice", alice)
    assert walks == [alice, bob, alice]


async def while_ticking(work: Any) -> tuple[Any, float]:
    """``work``'s result, and the longest gap between two ticks of a ticker on the loop."""
    import time

    ticks = [time.monotonic()]

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.01)
            ticks.append(time.monotonic())

    ticker = asyncio.ensure_future(tick())
    try:
        result = await work
    finally:
        ticks.append(time.monotonic())
        ticker.cancel()
    return result, max(b - a for a, b in itertools.pairwise(ticks))


async def test_a_hostile_home_does_not_stall_the_hub_when_listed(
    store: AccountingStore, tmp_path: Path
) -> None:
    home = tmp_path / "mallory"
    for n in range(3000):  # fake environments: folders the listing must look into
        (home / f"miniconda3/envs/e{n:04}").mkdir(parents=True)
    for n in range(150):
        (home / f".conda/envs/r{n:03}/conda-meta").mkdir(parents=True)
    svc = _service(store)
    found, gap = await while_ticking(svc.conda_envs("mallory", home))
    assert len(found) == 100  # the cap: the form offers no more
    assert gap < 1.0, f"the hub's loop stood still for {gap:.2f} s"


async def test_a_listing_that_hangs_answers_empty_at_its_deadline(
    store: AccountingStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import threading

    stuck = threading.Event()

    def hung(home: Path) -> tuple[str, ...]:  # a home on a file server that hangs
        stuck.wait(30)
        return ("late",)

    monkeypatch.setattr(service, "list_conda_envs", hung)
    monkeypatch.setattr(service, "CONDA_LIST_WAIT", 0.3, raising=False)
    svc = _service(store)
    try:
        found, gap = await asyncio.wait_for(while_ticking(svc.conda_envs("mallory", tmp_path)), 10)
        assert found == () and gap < 1.0
    finally:
        stuck.set()
