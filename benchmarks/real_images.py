"""Real framework images from PyPI wheels: build (or reuse), push, check the versions.

Hand-run (multi-GB builds, minutes each; NOT part of CI), from the repository root, as
root, with the test cluster up (``scripts/cluster.sh up 3``); the build and the push use
only the builder engine, the check uses a node (take the cluster lock for it)::

    .venv/bin/python benchmarks/real_images.py --json            # build or reuse, push, check
    .venv/bin/python benchmarks/real_images.py --rebuild --json  # build again (no cache)
    .venv/bin/python benchmarks/real_images.py --only pytorch-2.8-cuda12.8-pypi
    .venv/bin/python benchmarks/real_images.py --no-check --json      # build and push only
    flock /tmp/jhgpu-cluster.lock .venv/bin/python benchmarks/real_images.py --json

For each catalog entry (default: the ``-pypi`` entries of images/catalog.yaml):

1. **build** with ``images/build.py`` on the test cluster's builder engine (this machine's
   namespace, which reaches PyPI; ``--base jupyterhub-gpu/base:bookworm``, the Debian 12
   base that scripts/cluster.sh makes, ``--pip-cert`` and ``--network host``), timed; an
   image already there is reused (its build time is the one recorded when it was built,
   in ``$JHGPU_STATE/real-images/builds.json``), unless ``--rebuild``;
2. **push** with ``images/build.py --registry 127.0.0.1:PORT --push`` semantics (a tag and
   ``docker push`` from the builder) to the real registry of tests/support/real_registry.py,
   which serves the nodes the same repository at ``10.250.0.1:PORT``; timed; skipped when
   the registry already holds this very image (same manifest digest as the local push tag);
3. **check** on a test node (``--node``, default node-a): the image is pulled there from
   the registry (timed; a node that already holds it pulls nothing), a container is started
   from it (entrypoint ``python``, no network, as uid 65534) and prints the framework's
   version and its CUDA version (``torch.__version__`` / ``torch.version.cuda``;
   ``tf.__version__`` / ``tf.sysconfig.get_build_info()["cuda_version"]``); both must
   match the catalog's ``framework_version`` and ``cuda_version`` (CUDA by major.minor:
   TensorFlow says e.g. 12.5.1). There is no GPU here: CUDA being unavailable is fine,
   the versions are what is checked.

Sizes are ``docker image inspect --format '{{.Size}}'`` on the builder (bytes, and GB =
1e9 bytes). The exit status is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from jupyterhub_gpu.core.catalog import CatalogEntry  # noqa: E402
from jupyterhub_gpu.edges.adminfiles import load_catalog  # noqa: E402
from tests.support.cluster import STATE, engines  # noqa: E402
from tests.support.real_registry import ROOT, real_registry  # noqa: E402

BUILDER = f"unix://{STATE / 'engines' / 'builder' / 'docker.sock'}"
BASE = "jupyterhub-gpu/base:bookworm"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BUILDS = ROOT / "builds.json"
SMOKE_SLUG = "pytorch-2.8-cuda12.8-pypi"  # --smoke: this one entry, reused, never built
CHECKS = {
    "pytorch": (
        "import json, torch; "
        "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
        "'cuda_available': torch.cuda.is_available()}))"
    ),
    "tensorflow": (
        "import json, tensorflow as tf; info = tf.sysconfig.get_build_info(); "
        "print(json.dumps({'version': tf.__version__, 'cuda': info.get('cuda_version'), "
        "'cudnn': info.get('cudnn_version'), "
        "'cuda_available': bool(tf.config.list_physical_devices('GPU'))}))"
    ),
}


def log(msg: str) -> None:
    print(f"[real-images] {msg}", file=sys.stderr, flush=True)


def docker(host: str, *args: str, capture: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "-H", host, *args], check=False, text=True, capture_output=capture
    )


def image_id(host: str, image: str) -> str | None:
    r = docker(host, "image", "inspect", "--format", "{{.Id}}", image)
    return r.stdout.strip() if r.returncode == 0 else None


def image_size(host: str, image: str) -> int:
    r = docker(host, "image", "inspect", "--format", "{{.Size}}", image)
    if r.returncode:
        raise RuntimeError(f"no image {image} on {host}: {r.stderr.strip()}")
    return int(r.stdout.strip())


def read_builds() -> dict[str, Any]:
    try:
        data = json.loads(BUILDS.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def build(entry: CatalogEntry, rebuild: bool, python: str) -> dict[str, Any]:
    """Build ``entry`` on the builder with images/build.py (or reuse it); its record."""
    builds = read_builds()
    have = image_id(BUILDER, entry.image)
    if have and not rebuild:
        record = builds.get(entry.slug, {})
        if record.get("image_id") == have:
            log(f"{entry.slug}: reusing {entry.image} (built in {record.get('build_s')} s)")
            return {**record, "reused": True}
        log(f"{entry.slug}: reusing {entry.image} (no build record: build time unknown)")
        return {"image_id": have, "build_s": None, "reused": True}
    cmd = [
        python,
        str(REPO / "images" / "build.py"),
        "--only",
        entry.slug,
        "--base",
        BASE,
        "--pip-cert",
        CA_BUNDLE,
        "--network",
        "host",
        "--docker-host",
        BUILDER,
    ]
    if rebuild:
        cmd.append("--no-cache")
    log(f"{entry.slug}: building ({' '.join(cmd[1:])})")
    t0 = time.monotonic()
    out = ROOT / f"build-{entry.slug}.log"
    ROOT.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    seconds = round(time.monotonic() - t0, 1)
    if rc:
        tail = "\n".join(out.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"building {entry.slug} failed (exit {rc}), log {out}:\n{tail}")
    record = {
        "image_id": image_id(BUILDER, entry.image),
        "build_s": seconds,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(cmd[1:]),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    builds[entry.slug] = record
    BUILDS.write_text(json.dumps(builds, indent=2))
    return {**record, "reused": False}


def push(
    entry: CatalogEntry, push_ref: str, pull_ref: str, digest_now: str | None
) -> dict[str, Any]:
    """Tag and push from the builder (build.py --registry/--push does the same); timed.
    Skipped when the registry already serves this image (its digest is the one the
    builder recorded for the push tag)."""
    r = docker(BUILDER, "image", "inspect", "--format", "{{json .RepoDigests}}", entry.image)
    known = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
    pushed_id = image_id(BUILDER, push_ref)
    if (
        digest_now
        and pushed_id == image_id(BUILDER, entry.image)
        and any(d.endswith(digest_now) for d in known or [])
    ):
        log(f"{entry.slug}: the registry already holds it ({digest_now})")
        return {"push_s": None, "pushed": False, "digest": digest_now}
    docker(BUILDER, "tag", entry.image, push_ref)
    log(f"{entry.slug}: pushing {push_ref}")
    t0 = time.monotonic()
    p = docker(BUILDER, "push", push_ref)
    seconds = round(time.monotonic() - t0, 1)
    if p.returncode:
        raise RuntimeError(f"push of {push_ref} failed: {p.stderr.strip() or p.stdout[-2000:]}")
    digest = next((w for w in p.stdout.split() if w.startswith("sha256:") and len(w) == 71), None)
    log(f"{entry.slug}: pushed in {seconds} s ({digest}); nodes pull {pull_ref}")
    return {"push_s": seconds, "pushed": True, "digest": digest}


def check(entry: CatalogEntry, node_host: str, pull_ref: str) -> dict[str, Any]:
    """Pull ``pull_ref`` on the node (timed) and print the versions inside a container."""
    held = image_id(node_host, pull_ref) is not None
    t0 = time.monotonic()
    p = docker(node_host, "pull", "-q", pull_ref)
    pull_s = round(time.monotonic() - t0, 1)
    if p.returncode:
        raise RuntimeError(f"pull of {pull_ref} failed: {p.stderr.strip()}")
    code = CHECKS[entry.framework]
    t0 = time.monotonic()
    r = docker(
        node_host,
        "run",
        "--rm",
        "--network",
        "none",
        "--user",
        "65534:65534",
        "-e",
        "HOME=/tmp",
        "--entrypoint",
        "python",
        pull_ref,
        "-c",
        code,
    )
    run_s = round(time.monotonic() - t0, 1)
    if r.returncode:
        raise RuntimeError(f"{entry.slug}: the check failed in the container:\n{r.stderr[-3000:]}")
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    cuda = str(seen.get("cuda") or "")
    want_cuda = entry.cuda_version or ""
    ok = seen.get("version", "").split("+")[0] == entry.framework_version and (
        cuda == want_cuda or cuda.startswith(want_cuda + ".")
    )
    return {
        "pull_s": None if held else pull_s,
        "node_held_it": held,
        "container_check_s": run_s,
        "seen": seen,
        "catalog": {"framework_version": entry.framework_version, "cuda_version": want_cuda},
        "ok": ok,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", metavar="SLUG", help="catalog slug (repeatable)")
    p.add_argument("--catalog", type=Path, default=REPO / "images" / "catalog.yaml")
    p.add_argument("--rebuild", action="store_true", help="build again with --no-cache")
    p.add_argument("--no-push", action="store_true", help="build and size only")
    p.add_argument(
        "--no-check", action="store_true", help="build and push, no pull or check on a node"
    )
    p.add_argument("--node", default="node-a", help="test node that runs the checks")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"smallest run (the same keys): --only {SMOKE_SLUG}, and never build: the "
        "image must already be on the builder (one real image is the smallest scale; its "
        "build from PyPI is multi-GB), so it reuses it, pushes it if the registry lacks "
        "it, and checks it on --node",
    )
    args = p.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        p.set_defaults(only=[SMOKE_SLUG])
        args = p.parse_args(argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    catalog = load_catalog(args.catalog)
    slugs = args.only or [e.slug for e in catalog if e.slug.endswith("-pypi")]
    by_name = {e.name: e for e in engines(3)}
    node = by_name[args.node]
    results: dict[str, Any] = {}
    python = sys.executable
    failed = False
    with real_registry() as registry:
        for slug in slugs:
            entry = catalog.get(slug)
            if entry is None or entry.framework not in CHECKS:
                raise SystemExit(f"real_images.py: no checkable catalog entry {slug!r}")
            if args.smoke and image_id(BUILDER, entry.image) is None:
                raise SystemExit(
                    f"real_images.py --smoke: {entry.image} is not on the builder and a smoke "
                    "run never builds it (a multi-GB build from PyPI): run real_images.py "
                    f"--only {slug} --no-check first"
                )
            res: dict[str, Any] = {"image": entry.image}
            res["build"] = build(entry, args.rebuild, python)
            size = image_size(BUILDER, entry.image)
            res["size_bytes"] = size
            res["size_gb"] = round(size / 1e9, 2)
            pull_ref = registry.pull_reference(entry.image)
            if not args.no_push:
                push_ref = registry.push_reference(entry.image)
                res["registry_reference"] = pull_ref
                res["push"] = push(entry, push_ref, pull_ref, registry.manifest_digest(entry.image))
            if not args.no_push and not args.no_check:
                res["check"] = check(entry, node.url, pull_ref)
                res["check"]["node"] = node.name
                failed = failed or not res["check"]["ok"]
                verdict = "OK" if res["check"]["ok"] else "MISMATCH"
                log(f"{slug}: {res['check']['seen']} -> {verdict}")
            results[slug] = res
    out = {"images": results, "builder": BUILDER, "base": BASE, "nproc": os.cpu_count()}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for slug, res in results.items():
            b = res["build"]
            print(
                f"{slug}: {res['size_gb']} GB, build {b.get('build_s')} s"
                + (" (reused)" if b.get("reused") else "")
                + (
                    f", push {res['push']['push_s']} s, versions {res['check']['seen']} "
                    f"{'OK' if res['check']['ok'] else 'MISMATCH'}"
                    if "check" in res
                    else ""
                )
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
