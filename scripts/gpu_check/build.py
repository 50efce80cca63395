"""gpu-check ``build-void``: a saved image's build containers see no GPU.

Builds two tiny Dockerfiles through the builder's own request
(:func:`jupyterhub_gpu.edges.builder.build.build_query` / ``post_build``: the product's
``buildargs`` with ``NVIDIA_VISIBLE_DEVICES=void``, no network, no pull) whose ``RUN``
stanzas are the recipe's own GPU fencing lines
(:func:`jupyterhub_gpu.core.saving.recipe._without_gpus`): one on a base that sets no
``NVIDIA_VISIBLE_DEVICES`` (the ``ARG`` form), one on a base that sets ``all`` as CUDA
images do (the ``ENV ...=void`` form). Each ``RUN`` reports what a GPU would leave in a
container (``/dev/nvidia*``, ``/proc/driver/nvidia/gpus``, ``nvidia-smi``). A control
build with ``NVIDIA_VISIBLE_DEVICES=all`` says whether this engine's build containers
would get a GPU at all (only where ``nvidia`` is the default runtime): if not, the
result holds but the void was not what hid the GPU, and the line says so.

    python scripts/gpu_check/build.py --image IMAGE
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import secrets
import sys
import tarfile

from common import RUN_LABEL, client, emit, run_id

from jupyterhub_gpu.core.saving import recipe
from jupyterhub_gpu.edges.builder.build import BuildSettings, build_query, post_build

NAME = "build-void"
PROBE = (
    "echo GPUCHECK visible=${NVIDIA_VISIBLE_DEVICES:-unset}; "
    'for d in /dev/nvidia*; do [ -e "$d" ] && echo GPUCHECK seen $d; done; '
    "[ -e /proc/driver/nvidia/gpus ] && echo GPUCHECK seen /proc/driver/nvidia/gpus; "
    "command -v nvidia-smi >/dev/null && echo GPUCHECK seen nvidia-smi; true"
)


def dockerfile(image: str, base_gpus: str | None) -> str:
    lines = [f"FROM {image} AS base"]
    if base_gpus is not None:
        lines.append(f"ENV {recipe.GPUS}={base_gpus}")
    lines.append("FROM base")
    lines += recipe._without_gpus(base_gpus, ["/bin/sh", "-c", PROBE])
    return "\n".join(lines) + "\n"


def build(api: object, image: str, base_gpus: str | None, gpus_arg: str | None) -> list[str]:
    """The GPUCHECK lines of one build's ``RUN`` (raises RuntimeError on a failed build)."""
    data = dockerfile(image, base_gpus).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    build_id = secrets.token_hex(8)
    reference = f"jhgpu-check/build-void:{run_id()}-{build_id}"
    query = build_query(reference, {RUN_LABEL: run_id()}, build_id, BuildSettings())
    if gpus_arg is not None:  # the control build only
        query["buildargs"] = json.dumps({**json.loads(query["buildargs"]), recipe.GPUS: gpus_arg})
    seen: list[str] = []
    errors: list[str] = []
    try:
        for message in post_build(api, buf, query, 120):
            if not isinstance(message, dict):
                continue
            if message.get("error"):
                errors.append(str(message["error"]))
            for line in str(message.get("stream", "")).splitlines():
                if line.startswith("GPUCHECK "):
                    seen.append(line[len("GPUCHECK ") :])
    finally:
        with contextlib.suppress(Exception):  # not built, or already gone
            api.remove_image(reference, force=True)  # type: ignore[attr-defined]
    if errors:
        raise RuntimeError("; ".join(errors)[:400])
    return seen


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--image", required=True)
    args = p.parse_args()
    api = client()
    runtime = api.info().get("DefaultRuntime", "?")
    try:
        plain = build(api, args.image, None, None)
        cuda_like = build(api, args.image, "all", None)
        control = build(api, args.image, None, "all")
    except Exception as e:  # the engine's answer, shown
        emit("FAIL", NAME, f"a build failed: {e}")
        return 1
    leaks = [
        f"{what}: {s}"
        for what, got in (("ARG form", plain), ("ENV form", cuda_like))
        for s in got
        if s.startswith("seen ")
    ]
    if leaks or not plain or not cuda_like:
        emit(
            "FAIL",
            NAME,
            f"a build's RUN saw a GPU: {leaks or 'no probe output'} (default runtime {runtime})",
        )
        return 1
    gpu_seen = [s for s in control if s.startswith("seen ")]
    if gpu_seen:
        how = f"the control build with {recipe.GPUS}=all saw {', '.join(gpu_seen)}: the void hid it"
    else:
        how = (
            f"NOTE the control build with {recipe.GPUS}=all saw no GPU either (default "
            f"runtime {runtime}): builds get no GPU on this engine anyway, the void was "
            "not exercised"
        )
    emit("PASS", NAME, f"RUN saw {plain[0]} / {cuda_like[0]} and no GPU device; {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
