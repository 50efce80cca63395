"""The engine's stream, the build and push edge, the probe and the context, against an
injected fake ``APIClient`` that replays the engine's wire format (no Docker)."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError, ImageNotFound
from requests.exceptions import ReadTimeout

from jupyterhub_gpu.core.saving.data import (
    BuildFailed,
    FetchFailed,
    LimitReached,
    PipRequirement,
    Progress,
    Target,
)
from jupyterhub_gpu.core.saving.limits import Limits, check_added_size
from jupyterhub_gpu.core.saving.stream import BuildLog, PushLog, clean, parse_message
from jupyterhub_gpu.edges.builder import build as build_mod
from jupyterhub_gpu.edges.builder.build import (
    BuildSettings,
    build_and_push,
    build_query,
    discard,
)
from jupyterhub_gpu.edges.builder.context import build_context
from jupyterhub_gpu.edges.builder.output import Output, read_output
from jupyterhub_gpu.edges.builder.probe import (
    OUTPUT_MAX,
    PROBE,
    base_user,
    parse_probe,
    probe_target,
)
from jupyterhub_gpu.edges.builder.watch import BuildWatch

pytestmark = pytest.mark.unit
REF = "reg.example:5000/saved/u-alice/my-env:20261124-153000-012345"
BASE = "reg.example:5000/lab/python-cpu:3.11-1"
BID = "0123456789abcdef"
REQS = [
    PipRequirement("einops", "0.8.0"),
    PipRequirement("torch", "2.3.1+cu121"),
    PipRequirement("torchvision", "0.18.1"),
]
DIGEST = "sha256:" + "d" * 64
PIP_STEP = 'Step 5/9 : RUN ["/opt/venv/bin/python", "-m", "pip", "install", "--no-index"]'


def steps() -> list[dict[str, Any]]:
    return [
        {"stream": "Step 1/9 : FROM " + BASE + " AS install"},
        {"stream": "\n"},
        {"stream": " ---> 0a1b2c3d\n"},
        {"stream": PIP_STEP},
        {"stream": "\n ---> Running in 5e6f\n"},
        {"stream": "Processing /tmp/jupyterhub-gpu-wheelhouse/einops-0.8.0-py3-none-any.whl\n"},
    ]


BUILD_OK = [
    *steps(),
    {
        "stream": "Processing /tmp/jupyterhub-gpu-wheelhouse/"
        "torch-2.3.1+cu121-cp311-cp311-linux_x86_64.whl\n"
    },
    {"stream": "Step 9/9 : USER 65534:65534\n"},
    {"aux": {"ID": "sha256:" + "e" * 64}},
    {"stream": "Successfully built eeeeeeeeeeee\n"},
    {"stream": f"Successfully tagged {REF}\n"},
]
PUSH_OK = [
    {"status": "The push refers to repository [reg.example:5000/saved/u-alice/my-env]"},
    {"status": "Preparing", "progressDetail": {}, "id": "a1"},
    {"status": "Preparing", "progressDetail": {}, "id": "b2"},
    {"status": "Waiting", "progressDetail": {}, "id": "a1"},
    {"status": "Pushing", "progressDetail": {"current": 512, "total": 2048}, "id": "a1"},
    {"status": "Layer already exists", "progressDetail": {}, "id": "b2"},
    {"status": "Pushing", "progressDetail": {"current": 2048, "total": 2048}, "id": "a1"},
    {"status": "Pushed", "progressDetail": {}, "id": "a1"},
    {"status": f"20261124-153000-012345: digest: {DIGEST} size: 1234"},
    {
        "progressDetail": {},
        "aux": {"Tag": "20261124-153000-012345", "Digest": DIGEST, "Size": 1234},
    },
]


class FakeResponse:
    """A streamed HTTP answer of the engine (requests' ``Response``, as used here)."""

    def __init__(self, events: Iterator[Any], status: int = 200) -> None:
        self.events, self.status_code, self.closed = events, status, False

    def raise_for_status(self) -> None:
        pass

    def iter_content(self, chunk_size: Any = None) -> Iterator[bytes]:
        for event in self.events:
            yield json.dumps(event).encode() + b"\r\n"

    def close(self) -> None:
        self.closed = True


class FakeEngine:
    """An ``APIClient`` stand-in: replays streams, records calls, raises when told.

    A build leaves its install stage as the real engine does: a chain of untagged images
    labelled with the build id (``stage``: id -> parent id); removing one removes its
    untagged parents that have no other child. ``left_containers`` are containers of the
    stage that a build cut off would leave."""

    def __init__(self, build: Any = BUILD_OK, push: Any = PUSH_OK) -> None:
        self.build_events, self.push_events = build, push
        self.calls: list[tuple[str, Any]] = []
        self.tagged = {BASE: 1000}
        self.stage: dict[str, str] = {}
        self.left_containers: list[str] = []
        # the build's watch: running containers (id -> environment, processes)
        self.running: dict[str, tuple[list[str], int]] = {}
        self.watch_calls: list[tuple[str, Any]] = []
        self.killed = threading.Event()

    base_url = "http+docker://localhost"
    api_version = "1.41"

    def _replay(self, events: Any) -> Iterator[dict[str, Any]]:
        if isinstance(events, Exception):
            raise events
        for event in events:
            if isinstance(event, Exception):
                raise event
            if isinstance(event, threading.Event):  # the engine waits (a RUN step runs)
                assert event.wait(10)
                continue
            yield event

    def build(self, **kw: Any) -> Iterator[dict[str, Any]]:
        """What ``POST /build`` does: ``kw`` has the context (``fileobj``), the query
        (``params``), its tag and labels, and the idle ``timeout``."""
        self.calls.append(("build", kw))
        if isinstance(self.build_events, Exception):
            raise self.build_events
        self.stage = {"stage-1": "base-id", "stage-2": "stage-1", "stage-3": "stage-2"}
        if any("aux" in e for e in self.build_events if isinstance(e, dict)):
            self.tagged[kw["tag"]] = 1000 + 5000
        return self._replay(self.build_events)

    def post(
        self, url: str, params: Any = None, data: Any = None, timeout: Any = None, **kw: Any
    ) -> FakeResponse:
        """The engine's HTTP API, as the build and the build's watch call it."""
        assert url.startswith(f"{self.base_url}/v{self.api_version}/")
        if url.endswith("/build"):
            labels = json.loads(params["labels"])
            tag = params["t"]
            return FakeResponse(
                self.build(fileobj=data, params=params, tag=tag, labels=labels, timeout=timeout)
            )
        self.watch_calls.append(("post", (url.rsplit("/", 2)[-2], kw.get("json"))))
        return FakeResponse(iter(()))

    def push(self, repository: str, **kw: Any) -> Iterator[dict[str, Any]]:
        self.calls.append(("push", (repository, kw)))
        return self._replay(self.push_events)

    def inspect_image(self, image: str) -> dict[str, Any]:
        return {"Size": self.tagged[image], "Config": {"User": "1000:100", "Env": ["TOKEN=x"]}}

    def images(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[Any]:
        self.calls.append(("images", filters))
        assert all and filters == {"label": f"io.jupyterhub-gpu.build-id={BID}"}
        return [{"Id": i, "ParentId": parent} for i, parent in self.stage.items()]

    def containers(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[Any]:
        if filters == {"status": "running"}:  # the build's watch
            return [{"Id": c, "Created": int(time.time())} for c in self.running]
        self.calls.append(("containers", filters))
        assert all and filters == {"label": f"io.jupyterhub-gpu.build-id={BID}"}
        return [{"Id": c} for c in self.left_containers]

    def remove_container(self, container: str, force: bool = False) -> None:
        self.calls.append(("remove_container", container))
        self.left_containers.remove(container)

    def remove_image(self, image: str, force: bool = False) -> None:
        self.calls.append(("remove_image", image))
        if image in self.stage:
            if image in self.stage.values():
                raise APIError("409", explanation="image has dependent child images")
            while image in self.stage and image not in self.stage.values():
                image = self.stage.pop(image)
        else:
            self.tagged.pop(image, None)

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"Config": {"Env": self.running[container][0]}}

    def stats(self, container: str, stream: bool, one_shot: bool) -> dict[str, Any]:
        assert stream is False and one_shot is True
        return {"pids_stats": {"current": self.running[container][1]}}

    def kill(self, container: str) -> None:
        self.watch_calls.append(("kill", container))
        self.running.pop(container)
        self.killed.set()

    def prune_images(self, filters: dict[str, Any]) -> None:
        raise APIError("409", explanation="a prune operation is already running")

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def save(
    engine: FakeEngine, check_size: Any = lambda added: None
) -> tuple[tuple[str, int], list[Progress]]:
    events: list[Progress] = []
    result = build_and_push(
        engine,
        io.BytesIO(b"tar"),
        REF,
        BASE,
        {"io.jupyterhub-gpu.saved.owner": "alice"},
        REQS,
        BID,
        events.append,
        BuildSettings(idle_timeout_s=33),
        check_size,
    )
    return result, events


# ------------------------------------------------------------------ the stream


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"stream": "hello\n"}, {"text": "hello\n"}),
        (
            {"status": "Pushing", "id": "a", "progressDetail": {"current": 1, "total": 2}},
            {"text": "Pushing", "layer": "a", "current": 1, "total": 2},
        ),
        ({"error": "boom", "errorDetail": {"message": "boom"}}, {"error": "boom"}),
        ({"errorDetail": {"message": "inner"}}, {"error": "inner"}),
        ({"aux": {"ID": "sha256:1"}}, {"aux": {"ID": "sha256:1"}}),
        ({"status": 3, "id": ["x"], "progressDetail": {"current": -1, "total": True}}, {}),
        ({"progressDetail": "nope", "aux": "nope"}, {}),
        ("not a dict", {}),
        (None, {}),
    ],
)
def test_one_parser_reads_every_message(raw: Any, expected: dict[str, Any]) -> None:
    message = parse_message(raw)
    defaults: dict[str, Any] = {
        "text": "",
        "layer": "",
        "current": None,
        "total": None,
        "error": None,
        "aux": {},
    }
    assert {k: getattr(message, k) for k in defaults} == {**defaults, **expected}


def test_clean_lines_lose_control_characters_and_length() -> None:
    assert clean("\x1b[31mred\x1b[0m\ttab\r") == "red tab"
    assert len(clean("x" * 1000)) == 300


def test_build_progress_counts_steps_and_packages() -> None:
    log = BuildLog(REQS)
    shown = [log.add(parse_message(e)) for e in steps()]
    # the user's sentences, never the engine's lines (those stay in the tail)
    assert [(p.message, p.percent) for p in shown if p] == [
        ("Installing 3 packages into the image", int(100 * 4 / 9)),
        ("Installing einops 0.8.0 (1 of 3)", int(100 * (4 + 1 / 3) / 9)),
    ]
    assert PIP_STEP in log.tail
    assert log.step == (5, 9)
    assert log.percent == int(100 * (4 + 1 / 3) / 9)
    assert BuildLog().percent is None


@pytest.mark.parametrize(
    ("lines", "error", "expected"),
    [
        (
            [
                "ERROR: torch-2.3.1+cu121-cp310-cp310-linux_x86_64.whl is not a supported "
                "wheel on this platform."
            ],
            "The command '/opt/venv/bin/python -m pip install' returned a non-zero code: 1",
            "Package 'torch==2.3.1+cu121' failed: ERROR: torch-2.3.1+cu121-cp310",
        ),
        (
            ["ERROR: Package 'torchvision' requires a different Python: 3.10.12 not in '>=3.11'"],
            "returned a non-zero code: 1",
            "Package 'torchvision==0.18.1' failed: ERROR: Package 'torchvision'",
        ),
        (
            ["importlib.metadata.PackageNotFoundError: No package metadata was found for einops"],
            "returned a non-zero code: 1",
            "Package 'einops==0.8.0' failed",
        ),
        (
            [
                "ERROR: Could not install packages due to an OSError: "
                "[Errno 28] No space left on device"
            ],
            "returned a non-zero code: 1",
            "The image could not be built at step 5/9: ERROR: Could not install",
        ),
        (
            [],
            "pull access denied for reg.example:5000/lab/python-cpu",
            "The image could not be built at step 5/9: pull access denied",
        ),
    ],
)
def test_a_failing_step_names_the_package(lines: list[str], error: str, expected: str) -> None:
    log = BuildLog(REQS)
    for e in [*steps(), *({"stream": x + "\n"} for x in lines), {"error": error}]:
        log.add(parse_message(e))
    message = log.failure(error)
    assert message.startswith(expected), message
    assert message.endswith(("save again.", "Nothing was saved."))


def test_push_progress_by_bytes_and_the_digest() -> None:
    log = PushLog()
    shown = [log.add(parse_message(e)) for e in PUSH_OK]
    assert [p.percent for p in shown if p] == [25, 100]  # each percent once
    assert (log.digest, log.size) == (DIGEST, 1234)
    text_only = PushLog()
    text_only.add(parse_message(PUSH_OK[-2]))
    assert text_only.digest == DIGEST


# ------------------------------------------------------------------- the edge


def test_a_save_builds_without_network_then_pushes() -> None:
    engine = FakeEngine()
    (digest, added), events = save(engine)
    assert (digest, added) == (DIGEST, 5000)
    (_, kw) = engine.calls[0]
    assert kw["timeout"] == 33
    assert kw["params"] == {
        "t": REF,
        "rm": "1",
        "forcerm": "1",
        "nocache": "1",
        "pull": "0",
        "networkmode": "none",
        "labels": json.dumps({"io.jupyterhub-gpu.saved.owner": "alice"}),
        # no GPU in any RUN step, and the build's id for its watch; no proxy settings
        "buildargs": json.dumps({"NVIDIA_VISIBLE_DEVICES": "void", "JUPYTERHUB_GPU_BUILD": BID}),
        "cpuperiod": 100_000,
        "cpuquota": 200_000,  # two CPUs
    }
    repo, push_kw = engine.calls[1][1]
    assert repo == REF.rsplit(":", 1)[0] and push_kw["tag"] == "20261124-153000-012345"
    # the pushed image leaves the node (it is in the registry: issue 24), then the
    # install stage, by its last image (which takes its parents along)
    names = ["build", "push", "remove_image", "containers", "images", "remove_image"]
    assert engine.names() == names
    assert engine.calls[2] == ("remove_image", REF)
    assert engine.calls[-1] == ("remove_image", "stage-3")
    assert engine.stage == {}
    assert events[0] == Progress("build", "Building the image", 0)
    assert events[-1] == Progress("done", "Saved", 100)
    assert REF not in engine.tagged


@pytest.mark.parametrize(
    ("build", "push", "match"),
    [
        (
            [
                *steps(),
                {"stream": "ERROR: No matching distribution found for torch==2.3.1+cu121\n"},
                {"error": "returned a non-zero code: 1", "errorDetail": {"code": 1}},
            ],
            PUSH_OK,
            "Package 'torch==2.3.1\\+cu121' failed",
        ),
        (APIError("500", explanation="no such image: " + BASE), PUSH_OK, "no such image"),
        ([*steps(), ReadTimeout()], PUSH_OK, "said nothing for 33 s"),
        (steps(), PUSH_OK, "ended without an image"),
        (
            BUILD_OK,
            [PUSH_OK[1], {"error": "unauthorized: authentication required"}],
            "the registry refused it: unauthorized",
        ),
        (
            BUILD_OK,
            APIError("denied", explanation="denied: requested access is denied"),
            "registry refused it: denied",
        ),
        (BUILD_OK, PUSH_OK[:8], "did not confirm the image"),
    ],
)
def test_a_failed_save_says_why_and_leaves_nothing(build: Any, push: Any, match: str) -> None:
    engine = FakeEngine(build, push)
    with pytest.raises(BuildFailed, match=match):
        save(engine)
    assert REF not in engine.tagged
    # removed whatever the build said: a build cut off after its tag still made it
    assert ("remove_image", REF) in engine.calls
    assert engine.stage == {}


def test_a_size_over_the_limit_is_refused_before_the_push() -> None:
    engine = FakeEngine()
    limits = Limits(max_image_bytes=4000)
    with pytest.raises(
        LimitReached, match=r"adds 4\.9 KiB to its base image, more than the 3\.9 KiB"
    ):
        save(engine, lambda added: check_added_size([], "alice", added, limits))
    assert "push" not in engine.names()
    assert REF not in engine.tagged
    assert engine.stage == {}


def test_a_build_that_runs_too_long_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 1000))
    monkeypatch.setattr(build_mod.time, "monotonic", lambda: next(clock))
    with pytest.raises(BuildFailed, match="build took too long"):
        save(FakeEngine())


def test_the_query_bounds_memory_swap_cpu_and_may_name_a_cgroup_parent() -> None:
    settings = BuildSettings(memory_bytes=2**30, cpus=0.5, cgroup_parent="builds.slice")
    query = build_query(REF, {}, BID, settings)
    assert query["memory"] == query["memswap"] == 2**30  # no swap beyond the memory
    assert (query["cpuquota"], query["cpuperiod"]) == (50_000, 100_000)
    assert query["cgroupparent"] == "builds.slice"
    unbounded = build_query(REF, {}, BID, BuildSettings(cpus=None))
    assert not {"memory", "memswap", "cpuquota", "cpuperiod", "cgroupparent"} & set(unbounded)


MARK = f"JUPYTERHUB_GPU_BUILD={BID}"


def test_the_watch_limits_the_builds_containers_and_kills_one_at_the_limit() -> None:
    engine = FakeEngine()
    engine.running = {
        "server": (["NVIDIA_VISIBLE_DEVICES=GPU-1"], 900),  # a user's: not the build's
        "other-build": (["JUPYTERHUB_GPU_BUILD=fedcba9876543210"], 900),
        "pip": ([MARK, "NVIDIA_VISIBLE_DEVICES=void"], 3),
        "bomb": ([MARK], 256),
    }
    watch = BuildWatch(engine, BID, 256)
    watch.look()
    assert ("post", ("pip", {"PidsLimit": 256})) in engine.watch_calls
    assert ("post", ("bomb", {"PidsLimit": 256})) in engine.watch_calls
    assert [c for c in engine.watch_calls if c[0] == "kill"] == [("kill", "bomb")]
    assert {c[1][0] for c in engine.watch_calls if c[0] == "post"} == {"pip", "bomb"}
    assert watch.reason is not None and "more than 256 processes" in watch.reason
    watch.look()  # each container is limited once
    assert len([c for c in engine.watch_calls if c[0] == "post"]) == 2


def test_a_build_its_watch_stopped_says_why_and_leaves_nothing() -> None:
    engine = FakeEngine()
    engine.running = {"bomb": ([MARK], 999)}
    engine.build_events = [
        *steps(),
        engine.killed,  # the RUN step runs until the watch kills it
        {"error": "The command returned a non-zero code: 137", "errorDetail": {"code": 137}},
    ]
    with pytest.raises(BuildFailed, match=r"^A package started more than 256 processes"):
        save(engine)
    assert REF not in engine.tagged and engine.stage == {}


def test_discard_removes_a_stage_cut_off_with_its_containers() -> None:
    engine = FakeEngine()
    engine.stage = {"stage-1": "base-id", "stage-2": "stage-1"}
    engine.left_containers = ["run-1"]
    discard(engine, None, BID)
    assert engine.stage == {} and engine.left_containers == []
    assert ("remove_image", "stage-1") not in engine.calls  # a parent goes with its child


def test_discard_is_best_effort() -> None:
    class Broken(FakeEngine):
        def remove_image(self, image: str, force: bool = False) -> None:
            raise APIError("conflict", explanation="image is being used")

        def containers(self, all: bool = False, filters: dict[str, Any] | None = None) -> Any:
            raise ConnectionError("node gone")

    discard(Broken(), REF, BID)  # logs, never raises


# ------------------------------------------------------------------ the probe


def probe_output(**change: Any) -> str:
    doc = {
        "python": [3, 10],
        "machine": "x86_64",
        "libc": "glibc",
        "libc_version": "2.35",
        "prefix": "/opt/venv",
        "base_prefix": "/usr",
        "implementation": "cpython",
        "installed": [
            ["NumPy", "1.26.4"],
            ["jupyterhub", "6.1.1"],
            ["bad name", "1"],
            ["x", "not a version"],
            [3, "1"],
            ["numpy", "2.0"],
            "junk",
        ],
    }
    return "start-singleuser: a warning\n" + json.dumps({**doc, **change}) + "\n"


def test_the_probe_answer_becomes_a_target() -> None:
    target = parse_probe(probe_output(), BASE, "/opt/venv/bin/python")
    assert target == Target(
        python=(3, 10),
        machine="x86_64",
        glibc=(2, 35),
        implementation="cp",
        python_path="/opt/venv/bin/python",
        prefix="/opt/venv",
        installed=(("jupyterhub", "6.1.1"), ("numpy", "1.26.4")),
    )
    assert parse_probe(probe_output(libc="", libc_version=""), BASE, "p").glibc is None


@pytest.mark.parametrize(
    ("output", "match"),
    [
        ("", "printed no answer"),
        ("{not json", "printed no answer"),
        (probe_output(python="3.10"), "unknown form"),
        (probe_output(machine=None), "unknown form"),
        (probe_output(base_prefix="/opt/venv"), "not in a virtual environment"),
    ],
)
def test_odd_probe_answers_are_refused(output: str, match: str) -> None:
    with pytest.raises(BuildFailed, match=match):
        parse_probe(output, BASE, "/opt/venv/bin/python")


class ProbeEngine:
    def __init__(self, status: int = 0, output: str = "") -> None:
        self.status, self.output = status, output or probe_output()
        self.created: dict[str, Any] = {}
        self.host: dict[str, Any] = {}
        self.removed = self.killed = False

    def create_host_config(self, **kw: Any) -> dict[str, Any]:
        self.host = kw
        return kw

    def create_container(self, image: str, **kw: Any) -> dict[str, str]:
        self.created = {"image": image, **kw}
        return {"Id": "c1"}

    def start(self, cid: str) -> None:
        pass

    def wait(self, cid: str, timeout: float) -> dict[str, int]:
        return {"StatusCode": self.status}

    def logs(self, cid: str, stdout: bool, stderr: bool, stream: bool, follow: bool) -> Any:
        assert stream and follow and stdout and not stderr  # never the whole body at once
        data = self.output.encode()
        return iter([data[i : i + 1000] for i in range(0, len(data), 1000)])

    def kill(self, cid: str) -> None:
        self.killed = True

    def remove_container(self, cid: str, force: bool) -> None:
        self.removed = True


def test_the_probe_runs_the_base_locked_down_and_removes_it() -> None:
    engine = ProbeEngine()
    target = probe_target(engine, BASE)
    assert target.python == (3, 10) and engine.removed
    assert engine.created["user"] == "65534:65534" and engine.created["network_disabled"] is True
    assert engine.created["entrypoint"] == ["/opt/venv/bin/python"]
    assert engine.created["command"] == ["-c", PROBE]
    # no GPU, whatever the image's own ENV or the node's default runtime says
    assert engine.created["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert "device_requests" not in engine.host and "runtime" not in engine.host
    assert engine.host["nano_cpus"] == 10**9 and engine.host["pids_limit"] == 64
    assert engine.host["mem_limit"] == "512m"
    assert engine.host["network_mode"] == "none" and engine.host["cap_drop"] == ["ALL"]
    assert engine.host["read_only"] is True and engine.host["security_opt"] == ["no-new-privileges"]
    failed = ProbeEngine(status=127)
    with pytest.raises(BuildFailed, match="exited with 127"):
        probe_target(failed, BASE)
    assert failed.removed


def test_an_engine_refusing_the_probe_is_a_save_error() -> None:
    class Missing(ProbeEngine):
        def create_container(self, image: str, **kw: Any) -> dict[str, str]:
            raise ImageNotFound("404", explanation=f"No such image: {image}")

    with pytest.raises(BuildFailed, match=r"could not be examined \(it is not on the node\)"):
        probe_target(Missing(), BASE)

    class NoPython(ProbeEngine):
        def start(self, cid: str) -> None:
            raise APIError("400", explanation='exec: "/opt/venv/bin/python": no such file')

    engine = NoPython()
    with pytest.raises(BuildFailed, match="/opt/venv/bin/python could not be started in it"):
        probe_target(engine, BASE)
    assert engine.removed


# what a .pth file in a saved image can print after the probe's own answer (issue 24)
FORGED = probe_output(libc_version="2.1000000000")
IMPOSSIBLE = "the image reported an impossible"


@pytest.mark.parametrize(
    ("output", "match"),
    [
        (FORGED, r"impossible C library version 'glibc 2\.1000000000'"),
        (probe_output(libc_version="2." + "9" * 4000), "impossible C library version"),
        (probe_output(libc_version="2.100"), "impossible C library version 'glibc 2.100'"),
        (probe_output(libc_version="2.4"), "impossible C library version"),
        (probe_output(libc_version="2.-1"), "impossible C library version"),
        (probe_output(libc_version="3.1"), "impossible C library version"),
        (probe_output(libc_version="2.35.1"), "impossible C library version"),
        (probe_output(libc_version="2.x"), "impossible C library version"),
        (probe_output(libc_version="\uff12.\uff13\uff15"), "impossible C library version"),
        (probe_output(libc_version=""), "impossible C library version"),
        (probe_output(libc="musl", libc_version="1.1000000000"), "impossible C library version"),
        (probe_output(libc="glibc" * 100), "impossible C library"),
        (probe_output(python=[3, 10**300]), "impossible Python version"),
        (probe_output(python=[3, -1]), "impossible Python version"),
        (probe_output(python=[2, 7]), "impossible Python version"),
        (probe_output(python=[3, 7]), "impossible Python version"),
        (probe_output(python=[True, 10]), "unknown form"),
        (probe_output(python=[3, 10.0]), "unknown form"),
        (probe_output(libc_version=2.35), "unknown form"),
        (probe_output(machine="x" * 10_000), "impossible machine"),
        (probe_output(machine="x86_64\n{}"), "impossible machine"),
        (probe_output(machine=""), "impossible machine"),
        (probe_output(implementation="c" * 100), "impossible Python implementation"),
        (probe_output(prefix="/" + "a" * 300), "impossible environment folder"),
        (probe_output(prefix="opt/venv"), "impossible environment folder"),
        (probe_output(prefix="/opt/\u202evenv"), "impossible environment folder"),
        (probe_output(installed=[["a", "1"]] * 10_001), "impossible number of installed"),
        # the real answer first, then a decoy as the last JSON line
        (probe_output() + FORGED, "impossible C library version"),
        (probe_output() + "{" + "[" * 100_000 + "\n", "printed no answer"),
    ],
)
def test_hostile_probe_answers_are_refused_with_a_sentence(output: str, match: str) -> None:
    with pytest.raises(BuildFailed, match=match) as caught:
        parse_probe(output, BASE, "/opt/venv/bin/python")
    text = str(caught.value)
    assert text.startswith(f"The base image {BASE} could not be examined (")
    assert len(text) < 300  # the image's value is shown cut short


def test_real_libc_answers_are_kept() -> None:
    for version, glibc in (("2.17", (2, 17)), ("2.5", (2, 5)), ("2.99", (2, 99))):
        assert parse_probe(probe_output(libc_version=version), BASE, "p").glibc == glibc
    musl = probe_output(libc="musl", libc_version="1.2.5")
    assert parse_probe(musl, BASE, "p").glibc is None
    assert parse_probe(probe_output(libc="libc", libc_version="6"), BASE, "p").glibc is None
    assert parse_probe(probe_output(python=[3, 13]), BASE, "p").python == (3, 13)


class EndlessEngine(ProbeEngine):
    """A probe that prints forever, in 64 KiB chunks, until it is killed."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks = 0

    def logs(self, cid: str, stdout: bool, stderr: bool, stream: bool, follow: bool) -> Any:
        assert stream and follow

        def forever() -> Iterator[bytes]:
            while not self.killed:
                self.chunks += 1
                yield b"x" * 65536

        return forever()


def test_a_probe_flooding_its_output_is_cut_at_the_limit_and_killed() -> None:
    engine = EndlessEngine()
    with pytest.raises(BuildFailed, match="printed more than 4 MiB"):
        probe_target(engine, BASE)
    assert engine.killed and engine.removed
    # the hub read OUTPUT_MAX and one chunk more, never the whole stream
    assert engine.chunks * 65536 <= OUTPUT_MAX + 65536


def test_the_bounded_read_keeps_at_most_the_limit() -> None:
    engine = EndlessEngine()
    out = read_output(engine, "c1", limit=100_000, timeout=60)
    assert out.cut and not out.timed_out and out.data == b"x" * 100_000 and engine.killed
    small = read_output(ProbeEngine(output="hello\n"), "c1", limit=100, timeout=60)
    assert small == Output(b"hello\n")


def test_the_bounded_read_kills_a_container_still_running_at_the_deadline() -> None:
    class Slow(ProbeEngine):
        def logs(self, cid: str, stdout: bool, stderr: bool, stream: bool, follow: bool) -> Any:
            def drip() -> Iterator[bytes]:
                while not self.killed:
                    time.sleep(0.01)
                    yield b"."

            return drip()

    engine = Slow()
    out = read_output(engine, "c1", limit=OUTPUT_MAX, timeout=0.2)
    assert out.timed_out and not out.cut and engine.killed
    with pytest.raises(BuildFailed, match="did not finish within 0 s"):
        probe_target(Slow(), BASE, timeout=0.2)


def test_base_user_reads_only_the_user() -> None:
    assert base_user(FakeEngine(), BASE) == "1000:100"


# ---------------------------------------------------------------- the context


def test_the_context_holds_the_dockerfile_and_wheels_only(tmp_path: Path) -> None:
    wheel = tmp_path / "einops-0.8.0-py3-none-any.whl"
    wheel.write_bytes(b"PK wheel")
    context = build_context("FROM x\n", [wheel])
    with tarfile.open(fileobj=context) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert list(members) == [
            "Dockerfile",
            "wheelhouse",
            "wheelhouse/einops-0.8.0-py3-none-any.whl",
        ]
        assert tar.extractfile("Dockerfile").read() == b"FROM x\n"  # type: ignore[union-attr]
        for m in members.values():
            assert (m.uid, m.gid, m.mtime) == (0, 0, 946684800)
            assert m.mode in (0o644, 0o755)


def test_the_context_refuses_non_wheels_and_too_much(tmp_path: Path) -> None:
    odd = tmp_path / "setup.py"
    odd.write_text("import os; os.system('id')")
    with pytest.raises(FetchFailed, match=r"'setup\.py', which is not a wheel"):
        build_context("FROM x\n", [odd])
    big = tmp_path / "big-1.0-py3-none-any.whl"
    big.write_bytes(b"x" * 3 * 2**20)
    with pytest.raises(FetchFailed, match=r"more than 2\.0 MiB as wheels"):
        build_context("FROM x\n", [big], limit=2 * 2**20)
    with pytest.raises(FetchFailed, match=r"more than 100 KiB as wheels.* Nothing was saved\.$"):
        build_context("FROM x\n", [big], limit=100 * 2**10)  # not "more than 0 MiB"
