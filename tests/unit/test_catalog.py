"""The image catalog: loading, validation messages, CUDA/driver/architecture rules,
the shipped catalog and Dockerfiles, and images/build.py's dry run."""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from jupyterhub_gpu.core.catalog import (
    Catalog,
    CatalogEntry,
    catalog_availability,
    custom_entry,
    entry_to_request_constraints,
    image_allowed_by_patterns,
    image_runs_on,
    min_driver_for_cuda,
)
from jupyterhub_gpu.core.inventory import GPU, NodeInventory, NodeState
from jupyterhub_gpu.core.placement.request import PlacementRequest
from jupyterhub_gpu.edges.adminfiles import load_catalog, load_inventory_file
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.catalog_file import default_catalog_path, parse_catalog

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
CLUSTER = ROOT / "tests" / "data" / "cluster-hetero.yaml"


def entry_dict(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "slug": "pytorch-2.3-cuda12.1",
        "display_name": "PyTorch 2.3 (CUDA 12.1)",
        "framework": "pytorch",
        "framework_version": "2.3.1",
        "cuda_version": "12.1",
        "compute_capabilities": {"min": "5.0", "max": "9.0"},
        "image": "jupyterhub-gpu/pytorch:2.3.1-cuda12.1",
        "description": "PyTorch",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not _DROP}


_DROP = object()


def one(**overrides: Any) -> CatalogEntry:
    return parse_catalog({"images": [entry_dict(**overrides)]}, "test.yaml").entries[0]


def node(name: str, driver: str, *ccs: tuple[int, int], model: str = "GPU") -> NodeInventory:
    gpus = tuple(
        GPU(
            uuid=f"GPU-{name}-{i:04d}",
            index=i,
            model=model,
            memory_mib=12288,
            compute_capability=cc,
        )
        for i, cc in enumerate(ccs)
    )
    return NodeInventory(name=name, driver_version=driver, gpus=gpus)


@pytest.fixture(scope="module")
def cluster() -> list[NodeInventory]:
    return load_inventory_file(CLUSTER)


# ---------------------------------------------------------------- loading


def test_minimal_entry_derives_driver_and_cc_floor() -> None:
    e = one(compute_capabilities=_DROP, description=_DROP)
    assert e.min_driver == "525.60.13"
    assert e.min_compute_capability == (5, 0)
    assert e.max_compute_capability is None
    assert e.groups == frozenset()
    assert e.description == ""
    assert not e.cpu_only
    assert e.cuda_label == "CUDA 12.1"


@pytest.mark.parametrize(
    ("cuda", "driver"),
    [("11.8", "450.80.02"), ("12.1", "525.60.13"), ("12.8", "525.60.13"), ("13.0", "580")],
)
def test_min_driver_rules(cuda: str, driver: str) -> None:
    assert min_driver_for_cuda(cuda) == driver
    assert one(cuda_version=cuda, compute_capabilities=_DROP).min_driver == driver


def test_explicit_min_driver_may_be_stricter() -> None:
    assert one(min_driver="550.54.15").min_driver == "550.54.15"


def test_cpu_only_entry() -> None:
    e = one(slug="python-cpu", cuda_version=None, compute_capabilities=_DROP)
    assert e.cpu_only and e.min_driver is None and e.min_compute_capability is None
    assert e.cuda_label == "CPU only"


def test_groups_and_patterns() -> None:
    cat = parse_catalog(
        {
            "allowed_image_patterns": ["registry.example.org/lab/*"],
            "images": [entry_dict(groups=["ml", "staff"]), entry_dict(slug="b")],
        },
        "c.yaml",
    )
    assert cat.allowed_image_patterns == ("registry.example.org/lab/*",)
    assert [e.slug for e in cat.for_groups(["other"])] == ["b"]
    assert [e.slug for e in cat.for_groups(["ml"])] == ["pytorch-2.3-cuda12.1", "b"]
    assert cat.get("b") is not None and cat.get("nope") is None
    assert len(cat) == 2 and cat.slugs == ("pytorch-2.3-cuda12.1", "b")


BAD_ENTRIES = [
    ({"slug": _DROP}, "images[0].slug", "lowercase letters"),
    ({"slug": "Bad Slug"}, "images[0].slug", "lowercase letters"),
    ({"display_name": _DROP}, "(pytorch-2.3-cuda12.1).display_name", "is required"),
    ({"display_name": ""}, ").display_name", "non-empty string"),
    ({"framework_version": 2.1}, ").framework_version", "quoted string"),
    ({"cuda_version": _DROP}, ").cuda_version", "null for CPU-only"),
    ({"cuda_version": 12.1}, ").cuda_version", "quoted string"),
    ({"cuda_version": "twelve"}, ").cuda_version", "dotted version"),
    ({"cuda_version": "10.2"}, ").min_driver", "no built-in rule for CUDA 10.x"),
    (
        {"min_driver": "470.57.02"},
        ").min_driver",
        "may only be stricter than CUDA 12.1's minimum 525.60.13",
    ),
    ({"min_driver": 535}, ").min_driver", "quoted version"),
    (
        {"cuda_version": None, "compute_capabilities": _DROP, "min_driver": "525.60.13"},
        ").min_driver",
        "must be absent",
    ),
    ({"cuda_version": None}, ").compute_capabilities", "must be absent"),
    ({"cuda_version": "13.0", "compute_capabilities": {"min": "6.1"}}, ".min", "below 7.5"),
    ({"compute_capabilities": {"min": "9.0", "max": "8.0"}}, ").compute_capabilities", "above max"),
    ({"compute_capabilities": {"min": "sm_86"}}, ".compute_capabilities.min", "such as '8.6'"),
    ({"compute_capabilities": {"low": "5.0"}}, ").compute_capabilities", "'min' and/or 'max'"),
    ({"image": "NOT A REF"}, ").image", "Docker image reference"),
    ({"image": "jupyterhub-gpu/pytorch"}, ").image", "tag or digest"),
    ({"image": "jupyterhub-gpu/pytorch:latest"}, ").image", "not 'latest'"),
    ({"imagee": "x:1"}, "images[0] (pytorch-2.3-cuda12.1)", "unknown field(s) ['imagee']"),
    ({"groups": "ml"}, ").groups", "list of group names"),
    ({"groups": ["ml", ""]}, ").groups", "non-empty group names"),
    ({"description": 42}, ").description", "must be a string"),
    ({"build": {"dockerfile": "../evil/Dockerfile"}}, ").build.dockerfile", "relative path"),
    ({"build": {"dockerfile": "pytorch/Dockerfile", "args": {"A": 1}}}, ".build.args.A", "quoted"),
]


@pytest.mark.parametrize(("overrides", "where", "expected"), BAD_ENTRIES)
def test_bad_entry_names_file_entry_and_field(
    overrides: dict[str, Any], where: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_catalog({"images": [entry_dict(**overrides)]}, "site/catalog.yaml")
    message = str(info.value)
    assert message.startswith("site/catalog.yaml: images[0]")
    assert where in message
    assert expected in message


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (None, "must be a mapping with an 'images' list"),
        ({"images": []}, "non-empty list"),
        ({"images": "pytorch"}, "non-empty list"),
        ({"images": [entry_dict()], "extra": 1}, "unknown top-level field(s) ['extra']"),
        ({"images": [entry_dict()], "allowed_image_patterns": "x/*"}, "allowed_image_patterns"),
        (
            {"images": [entry_dict(), entry_dict()]},
            "images[1] (pytorch-2.3-cuda12.1).slug: must be unique",
        ),
        ({"images": [entry_dict(), "oops"]}, "images[1]: must be a mapping"),
    ],
)
def test_bad_document(document: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        parse_catalog(document, "catalog.yaml")


def test_load_catalog_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the image catalog"):
        load_catalog(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("images: [\n")
    with pytest.raises(ConfigError, match=re.escape(f"{bad}: not valid YAML")):
        load_catalog(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({"images": [entry_dict(cuda_version="x")]}))
    with pytest.raises(
        ConfigError, match=re.escape(f"{wrong}: images[0] (pytorch-2.3-cuda12.1).cuda_version")
    ):
        load_catalog(wrong)


# ---------------------------------------------------------------- compatibility


def test_titan_x_cannot_run_pytorch_cuda_12_8_limited_to_volta_and_newer() -> None:
    pytorch_128 = one(
        slug="pytorch-2.8-cuda12.8",
        cuda_version="12.8",
        compute_capabilities={"min": "7.0", "max": "12.0"},
    )
    titan = node("titan", "550.54.15", (6, 1), (6, 1), model="NVIDIA TITAN X (Pascal)")
    ok, reason = image_runs_on(pytorch_128, titan)
    assert not ok
    assert (
        reason == "titan: its GPUs are compute capability 6.1; the image is built for 7.0 to 12.0"
    )
    mixed = node("mixed", "550.54.15", (6, 1), (8, 6))
    assert image_runs_on(pytorch_128, mixed) == (True, "mixed: 1 of 2 GPUs fit")


def test_cuda_12_image_cannot_run_on_a_470_driver(cluster: list[NodeInventory]) -> None:
    gpu_b = next(n for n in cluster if n.name == "gpu-b")
    ok, reason = image_runs_on(one(), gpu_b)
    assert not ok
    assert "driver 470.223.02 is older than 525.60.13, the minimum for CUDA 12.1" in reason
    ok, _ = image_runs_on(one(cuda_version="11.8", compute_capabilities=_DROP), gpu_b)
    assert ok  # CUDA 11.x runs on >= 450.80.02


def test_cpu_only_runs_anywhere_and_gpuless_node_runs_no_cuda_image() -> None:
    bare = node("bare", "550.54.15")
    assert image_runs_on(one(cuda_version=None, compute_capabilities=_DROP), bare)[0]
    assert image_runs_on(one(), bare) == (False, "bare: no usable GPU")


def test_broken_gpus_do_not_count() -> None:
    broken = GPU("GPU-x-0000", 0, "A100", 81920, (8, 0), healthy=False)
    unknown = GPU("GPU-x-0001", 1, "A100", 81920, (8, 0), healthy=None)
    only_broken = NodeInventory("x", "550.54.15", (broken,))
    assert image_runs_on(one(), only_broken) == (False, "x: no usable GPU")
    assert image_runs_on(one(), NodeInventory("y", "550.54.15", (broken, unknown)))[0]


def test_catalog_availability_on_the_hetero_cluster(cluster: list[NodeInventory]) -> None:
    cat = parse_catalog(
        {
            "images": [
                entry_dict(slug="pt-121"),
                entry_dict(slug="pt-128", cuda_version="12.8", compute_capabilities={"min": "7.5"}),
                entry_dict(slug="cuda13", cuda_version="13.0", compute_capabilities=_DROP),
                entry_dict(
                    slug="chainer", cuda_version="11.8", compute_capabilities={"min": "3.5"}
                ),
                entry_dict(slug="cpu", cuda_version=None, compute_capabilities=_DROP),
            ]
        }
    )
    av = catalog_availability(cat, cluster)
    assert list(av) == ["pt-121", "pt-128", "cuda13", "chainer", "cpu"]
    assert av["pt-121"].runnable and av["pt-121"].nodes == ("gpu-a", "gpu-c")
    assert av["pt-128"].models == {"NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-80GB"}
    assert av["chainer"].nodes == ("gpu-a", "gpu-b", "gpu-c")
    assert "NVIDIA TITAN X (Pascal)" in av["chainer"].models
    assert av["cpu"].runnable
    c13 = av["cuda13"]
    assert not c13.runnable and c13.nodes == ()
    assert c13.reason == (
        "No node can run it: it needs NVIDIA driver >= 580 for CUDA 13.0 (gpu-a has "
        "550.54.15, gpu-b has 470.223.02, gpu-c has 535.183.01)."
    )
    titan_only = [n for n in cluster if n.name == "gpu-b"]
    pt128 = catalog_availability(Catalog((cat.entries[1],)), titan_only)["pt-128"]
    assert pt128.reason == (
        "No node can run it: it needs NVIDIA driver >= 525.60.13 for CUDA 12.8 (gpu-b has "
        "470.223.02)."
    )
    pascal = NodeInventory("p", "550.54.15", (GPU("GPU-p-0000", 0, "TITAN X", 12288, (6, 1)),))
    bare = NodeInventory("bare", "550.54.15")
    reason = catalog_availability(Catalog((cat.entries[1],)), [pascal, bare])["pt-128"].reason
    assert reason == (
        "No node can run it: it is built for compute capability >= 7.5 (p has 6.1); "
        "no usable GPU on bare."
    )


def test_offline_nodes_do_not_count(cluster: list[NodeInventory]) -> None:
    states = [NodeState(n, reachable=n.name == "gpu-b") for n in cluster]
    cat = Catalog((one(),))
    av = catalog_availability(cat, states)["pytorch-2.3-cuda12.1"]
    assert not av.runnable
    assert av.reason == (
        "No node can run it: it needs NVIDIA driver >= 525.60.13 for CUDA 12.1 "
        "(gpu-b has 470.223.02); gpu-a, gpu-c offline."
    )
    down = [NodeState(n, schedulable=False) for n in cluster]
    assert catalog_availability(cat, down)["pytorch-2.3-cuda12.1"].reason == (
        "No node is available (gpu-a, gpu-b, gpu-c offline)."
    )
    assert catalog_availability(cat, [])["pytorch-2.3-cuda12.1"].reason == "No node is available."


def test_request_constraints_feed_placement_request() -> None:
    e = one(cuda_version="12.8", compute_capabilities={"min": "7.5", "max": "12.0"})
    constraints = entry_to_request_constraints(e)
    request = PlacementRequest(gpu_count=1, **constraints)
    assert request.min_driver_version == "525.60.13"
    assert request.min_compute_capability == (7, 5)
    assert request.max_compute_capability == (12, 0)
    cpu = entry_to_request_constraints(one(cuda_version=None, compute_capabilities=_DROP))
    assert cpu == {
        "min_driver_version": None,
        "min_compute_capability": None,
        "max_compute_capability": None,
    }


def test_patterns_and_custom_entries() -> None:
    assert image_allowed_by_patterns("registry.example.org/lab/x:1", ["registry.example.org/lab/*"])
    assert not image_allowed_by_patterns("docker.io/evil/x:1", ["registry.example.org/lab/*"])
    assert not image_allowed_by_patterns("anything:1", [])
    custom = custom_entry("registry.example.org/lab/x:1")
    assert custom.custom and not custom.cpu_only and custom.image == "registry.example.org/lab/x:1"


# ---------------------------------------------------------------- shipped catalog and images


@pytest.fixture(scope="module")
def shipped() -> Catalog:
    return load_catalog(IMAGES / "catalog.yaml")


def test_default_catalog_path_is_the_shipped_one() -> None:
    """The package's own copy (a wheel has no images/ folder), the same file."""
    import jupyterhub_gpu

    path = default_catalog_path()
    assert path.is_relative_to(Path(jupyterhub_gpu.__file__).resolve().parent)
    assert path.read_bytes() == (IMAGES / "catalog.yaml").read_bytes()


def test_shipped_catalog_has_real_combinations(shipped: Catalog) -> None:
    cudas: dict[str, set[str]] = {}
    for e in shipped:
        cudas.setdefault(e.framework, set()).add(e.cuda_version or "cpu")
    for framework in ("pytorch", "tensorflow", "chainer"):
        assert len(cudas[framework]) >= 2, framework
    assert all(v.startswith("11.") for v in cudas["chainer"])  # Chainer 7.8.1: CUDA 11.x only
    assert [e.slug for e in shipped if e.cpu_only] == ["python-cpu"]
    pt128 = shipped.get("pytorch-2.8-cuda12.8")
    # the same 2.8.0 build as the PyPI wheel: sm_70 (Volta) and up, no Pascal (TITAN X)
    assert pt128 is not None and pt128.min_compute_capability == (7, 0)
    # the PyPI variants (images that build without a CUDA base image) say the same versions
    pypi = {e.slug: e for e in shipped if e.slug.endswith("-pypi")}
    assert {e.framework for e in pypi.values()} == {"pytorch", "tensorflow"}
    pt_pypi = pypi["pytorch-2.8-cuda12.8-pypi"]
    assert (pt_pypi.framework_version, pt_pypi.cuda_version) == ("2.8.0", "12.8")
    assert pt_pypi.min_compute_capability == (7, 0)  # its wheel's arch list starts at sm_70


def test_shipped_entries_build_from_existing_dockerfiles(shipped: Catalog) -> None:
    hub = importlib.metadata.version("jupyterhub")
    for e in shipped:
        assert e.build is not None, e.slug
        text = (IMAGES / e.build.dockerfile).read_text()
        assert re.search(r"^ARG BASE_IMAGE=\S+", text, re.M), e.slug
        assert "FROM ${BASE_IMAGE}" in text
        assert f"ARG JUPYTERHUB_VERSION={hub}" in text
        assert 'CMD ["jupyterhub-singleuser"]' in text
        assert 'ENTRYPOINT ["/opt/jupyterhub-gpu/start-singleuser.sh"]' in text
        if e.framework in ("pytorch", "tensorflow", "chainer"):  # VS Code in the browser
            assert "RUN sh /opt/jupyterhub-gpu/vscode/install-code-server.sh" in text, e.slug
            assert "JUPYTER_VSCODE_PROXY_USE_SOCKET=yes" in text, e.slug  # no TCP port
        base = e.build.args["BASE_IMAGE"]
        if e.cuda_version and base.startswith("nvidia/cuda:"):
            assert base.startswith(f"nvidia/cuda:{e.cuda_version}.") and "cudnn" in base, e.slug
            assert "runtime" in base, e.slug
        elif e.cuda_version:
            # a PyPI variant: plain Debian, the framework pinned to the catalog's version
            # from PyPI itself (its wheels bring the CUDA runtime as nvidia-*-cu12 wheels)
            assert e.slug.endswith("-pypi") and base == "debian:bookworm-slim", e.slug
            assert not e.build.args.get("FRAMEWORK_INDEX_URL"), e.slug
            pins = e.build.args["FRAMEWORK_PIP"].split()
            assert any(p.endswith(f"=={e.framework_version}") for p in pins), e.slug
    assert (IMAGES / "common" / "start-singleuser.sh").stat().st_mode & 0o111


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("jhgpu_images_build", IMAGES / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_dry_run_prints_commands(capsys: pytest.CaptureFixture[str]) -> None:
    build = _build_module()
    assert build.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("docker build -f ") == 11
    argv = [
        "--dry-run",
        "--only",
        "python-cpu",
        "--base",
        "jupyterhub-gpu/base:bookworm",
        "--minimal",
        "--docker-host",
        "tcp://127.0.0.2:2375",
        "--network",
        "host",
        "--tag",
        "jupyterhub-gpu/test:ci",
        "--jupyterhub-version",
        "6.1.1",
        "--label",
        "jupyterhub-gpu.build=abc",
        "--quiet",
    ]
    assert build.main(argv) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("docker -H tcp://127.0.0.2:2375 build -f ")
    for part in (
        "-t jupyterhub-gpu/test:ci",
        "--network host",
        "--build-arg BASE_IMAGE=jupyterhub-gpu/base:bookworm",
        "--build-arg FRAMEWORK_PIP= ",
        "--build-arg APT_PACKAGES= ",
        "--build-arg VSCODE_IN_BROWSER=no ",
        "--build-arg JUPYTERHUB_VERSION=6.1.1",
        " -q --label jupyterhub-gpu.build=abc ",
    ):
        assert part in line


def test_build_pip_cert_context(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build = _build_module()
    cert = tmp_path / "ca.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    assert build.main(["--dry-run", "--only", "python-cpu", "--pip-cert", str(cert)]) == 0
    assert "PIP_CA_BUNDLE=/opt/jupyterhub-gpu/pip-ca.crt" in capsys.readouterr().out
    entry = load_catalog(IMAGES / "catalog.yaml").get("python-cpu")
    dockerfile = build.make_context(entry, cert, tmp_path / "ctx")
    assert dockerfile == tmp_path / "ctx" / "cpu" / "Dockerfile"
    assert (tmp_path / "ctx" / "pip-ca.crt").read_text() == cert.read_text()
    assert (tmp_path / "ctx" / "common" / "start-singleuser.sh").is_file()
    assert (tmp_path / "ctx" / "vscode" / "install-code-server.sh").is_file()


def test_build_registry_prefix_and_push(capsys: pytest.CaptureFixture[str]) -> None:
    build = _build_module()
    argv = ["--dry-run", "--only", "pytorch-2.8-cuda12.8-pypi", "--registry", "10.250.0.1:5000/"]
    assert build.main([*argv, "--push", "--docker-host", "unix:///x.sock"]) == 0
    lines = capsys.readouterr().out.splitlines()
    tag = "10.250.0.1:5000/jupyterhub-gpu/pytorch:2.8.0-cuda12.8-pypi"
    assert lines[0] == f"# pytorch-2.8-cuda12.8-pypi -> {tag}"
    assert f" -t {tag} " in lines[1] and "--build-arg FRAMEWORK_INDEX_URL= " in lines[1]
    assert lines[2] == f"docker -H unix:///x.sock push {tag}"
    # without --push: no push line; --list shows the prefixed tags
    assert build.main(argv) == 0
    assert "push" not in capsys.readouterr().out
    assert build.main(["--list", "--only", "python-cpu", "--registry", "reg.example.org/lab"]) == 0
    assert capsys.readouterr().out.split() == [
        "python-cpu",
        "reg.example.org/lab/jupyterhub-gpu/python-cpu:3.11-bookworm",
    ]
    # a tag that names a registry already is not prefixed again
    argv = ["--dry-run", "--only", "python-cpu", "--tag", "localhost:5000/x:1", "--registry"]
    assert build.main([*argv, "10.250.0.1:5000"]) == 0
    assert " -t localhost:5000/x:1 " in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["http://10.250.0.1:5000", "noport", "", "a b:1"])
def test_build_rejects_a_bad_registry(bad: str) -> None:
    build = _build_module()
    with pytest.raises(SystemExit, match="--registry must be HOST"):
        build.main(["--dry-run", "--registry", bad])


def test_build_rejects_unknown_slug() -> None:
    build = _build_module()
    with pytest.raises(SystemExit, match="not buildable catalog entries: nope"):
        build.main(["--dry-run", "--only", "nope"])


def test_catalog_is_not_mutated_by_parsing() -> None:
    doc = {"images": [entry_dict(groups=["a"])]}
    before = copy.deepcopy(doc)
    parse_catalog(doc)
    assert doc == before
