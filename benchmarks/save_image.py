"""Save benchmark (issue 14): time to save an environment, and what the image adds.

It runs the real save (``jupyterhub_gpu.edges.builder.save.save_environment``) against a real
Docker engine that has the base image and a real registry that engine can push to. With
no arguments it uses the test cluster (``scripts/cluster.sh up``): node-a's engine, the
test image, and a registry it starts itself (Debian's ``docker-registry`` on the site
address 10.250.0.1, a free port, storage in a temporary folder, stopped at the end)::

    .venv/bin/python benchmarks/save_image.py --json
    .venv/bin/python benchmarks/save_image.py --docker-host unix:///path/node.sock \\
        --base jupyterhub-gpu/singleuser-test:6.1.1 --registry 10.250.0.1:5000 --json

**Offline.** ``--packages`` (default: three, ``name==version``) are fetched with
``pip download --no-index --find-links FOLDER``: without ``--find-links``, the benchmark
makes FOLDER itself, with one pure-Python wheel per package written by hand
(``tests/support/wheels.py``: a package folder with ``--package-bytes`` of Python source,
default 200,000, and a console script). Nothing needs a network. ``--find-links DIR``
uses wheels you put there instead (``pip download`` them where the internet is).

**A round.** A fresh fake home whose ``~/.local`` has pip's records (dist-info:
``METADATA``, ``INSTALLER``, ``REQUESTED``) of the packages (a save reads only the
records), saved under a new name: probe of the base, plan, ``pip download`` on this
side, build on the engine with no network, push. The time is the wall time of
``save_environment`` (``save_s``); ``phases_p50_s`` splits it at the first progress event
of each phase (``fetch``: probe, reading the home, ``pip download``; ``build``; ``push``,
with the size check before it). One untimed warm-up save first pushes the base's layers
(a site's registry already holds its catalog images; ``warmup_s`` is that first save).
Each image is removed from the engine after its round, not from the registry.

Output (``--json``): ``save_p50_s`` (median of ``--rounds``, default 5), ``save_s``,
``added_bytes`` (what the image adds to its base, engine sizes, uncompressed),
``packages_bytes`` (the same wheels installed by pip with ``--target`` into a folder on
this machine, byte code included: what they take in a user's home),
``added_over_packages`` (target: at most 1.10).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker

from jupyterhub_gpu.core.saving.data import PipRequirement, Progress, SavedImage
from jupyterhub_gpu.core.saving.validate import pip_requirement
from jupyterhub_gpu.edges.builder.build import BuildSettings
from jupyterhub_gpu.edges.builder.probe import probe_target
from jupyterhub_gpu.edges.builder.save import SaveRequest, SaveSettings, save_environment
from jupyterhub_gpu.edges.builder.wheelhouse import IndexSettings, fetch_wheels
from tests.support.cluster import TEST_IMAGE
from tests.support.cluster import engines as cluster_engines
from tests.support.distribution import Distribution
from tests.support.wheels import package_wheel

DEFAULT_PACKAGES = ("bench-alpha==1.0", "bench-beta==2.1", "bench-gamma==0.3")
PHASES = ("fetch", "build", "push")


def fake_home(root: Path, python: tuple[int, int], reqs: Sequence[PipRequirement]) -> Path:
    """A home whose ``~/.local`` has pip's records of ``reqs`` (the packages themselves
    are not needed: a save reads only the records)."""
    site = root / ".local" / "lib" / f"python{python[0]}.{python[1]}" / "site-packages"
    for req in reqs:
        info = site / f"{req.name.replace('-', '_')}-{req.version}.dist-info"
        info.mkdir(parents=True)
        meta = f"Metadata-Version: 2.1\nName: {req.name}\nVersion: {req.version}\n"
        (info / "METADATA").write_text(meta)
        (info / "INSTALLER").write_text("pip\n")
        (info / "REQUESTED").write_text("")
    return root


def installed_bytes(wheels: Sequence[Path]) -> int:
    """What pip installs from ``wheels`` into a folder (with byte code), in bytes."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--target",
                folder,
                "--disable-pip-version-check",
                "--quiet",
                *map(str, wheels),
            ],
            check=True,
        )
        return sum(
            p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink()
        )


def packages_bytes(
    client: Any, base: str, reqs: Sequence[PipRequirement], index: IndexSettings
) -> int:
    """The installed size of ``reqs``, fetched as a save fetches them."""
    target = probe_target(client, base)
    with tempfile.TemporaryDirectory() as folder:
        return installed_bytes(fetch_wheels(reqs, Path(folder), target, index))


def one_save(
    client: Any,
    args: argparse.Namespace,
    python: tuple[int, int],
    reqs: Sequence[PipRequirement],
    settings: SaveSettings,
    name: str,
) -> tuple[float, dict[str, float], SavedImage]:
    """One save: its wall time, the time of each phase, and the image."""
    with tempfile.TemporaryDirectory() as home:
        request = SaveRequest(
            owner="bench",
            name=name,
            base_slug="bench",
            base_image=args.base,
            home=fake_home(Path(home), python, reqs),
        )
        starts: dict[str, float] = {}

        def report(progress: Progress) -> None:
            starts.setdefault(progress.phase, time.perf_counter())

        start = time.perf_counter()
        saved = save_environment(client, request, settings, [], report)
        end = time.perf_counter()
    marks = [starts.get(p, start) for p in PHASES] + [starts.get("done", end)]
    phases = {p: marks[i + 1] - marks[i] for i, p in enumerate(PHASES)}
    return end - start, phases, saved


def remove_saved(client: Any, reference: str) -> None:
    """Remove a saved image from the engine, if the save left it there: the product
    removes its image from the node after a successful push (``build_and_push``), so
    it is normally gone already. Any other failure to remove it is raised."""
    with suppress(docker.errors.ImageNotFound):
        client.remove_image(reference, force=True)


@contextmanager
def registry_for(args: argparse.Namespace) -> Iterator[str]:
    """``--registry``, or a real registry started for the run (stopped at the end)."""
    if args.registry:
        yield args.registry
        return
    with (
        tempfile.TemporaryDirectory(prefix="bench-registry-") as folder,
        Distribution(Path(folder)) as registry,
    ):
        yield registry.address


@contextmanager
def wheels_for(args: argparse.Namespace, reqs: Sequence[PipRequirement]) -> Iterator[list[str]]:
    """``--find-links``, or a folder of hand-made wheels of ``reqs`` (removed at the end)."""
    if args.find_links:
        yield list(args.find_links)
        return
    with tempfile.TemporaryDirectory(prefix="bench-wheels-") as folder:
        for req in reqs:
            package_wheel(Path(folder), req.name, req.version, args.package_bytes)
        yield [folder]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--docker-host",
        default=cluster_engines(1)[0].url,
        help="the node's engine (default: the test cluster's node-a, %(default)s)",
    )
    ap.add_argument("--base", default=TEST_IMAGE, help="base image on that engine: %(default)s")
    ap.add_argument(
        "--registry", help="host:port the engine can push to (default: start a test registry)"
    )
    ap.add_argument("--packages", nargs="+", default=list(DEFAULT_PACKAGES), help="name==version")
    ap.add_argument(
        "--find-links",
        action="append",
        default=[],
        help="a folder of wheels of --packages (default: made by hand for the run)",
    )
    ap.add_argument(
        "--package-bytes",
        type=int,
        default=200_000,
        help="Python source in each hand-made wheel (default: %(default)s)",
    )
    ap.add_argument("--rounds", type=int, default=5, help="timed saves (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="smallest meaningful run (the warm-up save and one timed save of one small "
        "package; the same keys): --rounds 1 --packages bench-alpha==1.0 "
        "--package-bytes 20000",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # smaller defaults; options given explicitly still win
        ap.set_defaults(rounds=1, packages=[DEFAULT_PACKAGES[0]], package_bytes=20_000)
        args = ap.parse_args(argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reqs = [pip_requirement(*spec.split("==", 1)) for spec in args.packages]
    client = docker.APIClient(base_url=args.docker_host, timeout=900, version="auto")
    run_id = f"{int(time.time()) % 100000:05d}"
    with registry_for(args) as registry, wheels_for(args, reqs) as links:
        index = IndexSettings(find_links=tuple(links), no_index=True)
        settings = SaveSettings(
            registry=registry, namespace="jupyterhub-gpu/bench", index=index, build=BuildSettings()
        )
        python = probe_target(client, args.base).python
        times: list[float] = []
        phases: dict[str, list[float]] = {p: [] for p in PHASES}
        sizes: list[int] = []
        warmup = 0.0
        for n in range(args.rounds + 1):
            seconds, split, saved = one_save(
                client, args, python, reqs, settings, f"bench-{run_id}-{n}"
            )
            remove_saved(client, saved.reference)
            if n == 0:
                warmup = seconds
                continue
            times.append(seconds)
            sizes.append(saved.size_bytes)
            for phase, value in split.items():
                phases[phase].append(value)
        packages = packages_bytes(client, args.base, reqs, index)
    result = {
        "save_p50_s": round(statistics.median(times), 2),
        "save_s": [round(t, 2) for t in times],
        "phases_p50_s": {p: round(statistics.median(v), 2) for p, v in phases.items()},
        "warmup_s": round(warmup, 2),
        "added_bytes": max(sizes),
        "packages_bytes": packages,
        "added_over_packages": round(max(sizes) / packages, 3) if packages else None,
        "packages": [r.spec for r in reqs],
        "base": args.base,
        "rounds": args.rounds,
        "offline": True,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:20} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
