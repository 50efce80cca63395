"""Save benchmark (issue 14): time to save an environment, and what the image adds.

A SKELETON: it calls the real save (``jupyterhub_gpu.builder.save.save_environment``)
but has not been run yet (no engine or registry was available where it was written).
It needs a Docker engine that has the base image and can push to the registry::

    .venv/bin/python benchmarks/save_image.py --docker-host unix:///path/node-a.sock \\
        --base jupyterhub-gpu/singleuser-test:6.1.1 --registry 10.250.0.1:5000 --json

Each round makes a fresh fake home whose ``~/.local`` holds pip's records (dist-info:
METADATA, INSTALLER) of ``--packages`` (default: three small packages), then saves it
under a new name: probe of the base, plan, ``pip download`` from the site's index (the
hub's pip configuration, or ``--find-links`` for an offline folder), build on the engine
with no network, push. The images are removed from the engine afterwards, not from the
registry.

Output (``--json``): ``save_p50_s`` (median wall time of a save), ``save_s`` (every
round), ``added_bytes`` (what the image adds to its base, engine sizes, uncompressed),
``packages_bytes`` (the same packages installed by pip into a folder on this machine,
byte code included: what they take in a user's home), ``added_over_packages`` (target:
at most 1.10).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker

from jupyterhub_gpu.builder.build import BuildSettings
from jupyterhub_gpu.builder.model import PipRequirement, Progress
from jupyterhub_gpu.builder.probe import probe_target
from jupyterhub_gpu.builder.save import SaveRequest, SaveSettings, save_environment
from jupyterhub_gpu.builder.validate import pip_requirement
from jupyterhub_gpu.builder.wheelhouse import IndexSettings, fetch_wheels

DEFAULT_PACKAGES = ("six==1.17.0", "idna==3.10", "einops==0.8.0")


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
        return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def packages_bytes(
    client: Any, base: str, reqs: Sequence[PipRequirement], index: IndexSettings
) -> int:
    target = probe_target(client, base)
    with tempfile.TemporaryDirectory() as folder:
        return installed_bytes(fetch_wheels(reqs, Path(folder), target, index))


def one_save(
    client: Any,
    args: argparse.Namespace,
    reqs: Sequence[PipRequirement],
    settings: SaveSettings,
    n: int,
) -> tuple[float, int, str]:
    python = probe_target(client, args.base).python
    with tempfile.TemporaryDirectory() as home:
        request = SaveRequest(
            owner="bench",
            name=f"bench-{n}",
            base_slug="bench",
            base_image=args.base,
            home=fake_home(Path(home), python, reqs),
        )
        events: list[Progress] = []
        start = time.perf_counter()
        saved = save_environment(client, request, settings, [], events.append)
        return time.perf_counter() - start, saved.size_bytes, saved.reference


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docker-host", required=True, help="the node's engine, e.g. unix:///x.sock")
    ap.add_argument("--base", required=True, help="base image on that engine (a catalog image)")
    ap.add_argument("--registry", required=True, help="host[:port] the engine can push to")
    ap.add_argument("--packages", nargs="+", default=list(DEFAULT_PACKAGES))
    ap.add_argument("--find-links", action="append", default=[], help="offline wheel folder")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reqs = [pip_requirement(*spec.split("==", 1)) for spec in args.packages]
    index = IndexSettings(find_links=tuple(args.find_links), no_index=bool(args.find_links))
    settings = SaveSettings(
        registry=args.registry, namespace="jupyterhub-gpu/bench", index=index, build=BuildSettings()
    )
    client = docker.APIClient(base_url=args.docker_host, timeout=900, version="auto")
    times, sizes = [], []
    for n in range(args.rounds):
        seconds, added, reference = one_save(client, args, reqs, settings, n)
        times.append(seconds)
        sizes.append(added)
        client.remove_image(reference, force=True)
    packages = packages_bytes(client, args.base, reqs, index)
    result = {
        "save_p50_s": round(statistics.median(times), 2),
        "save_s": [round(t, 2) for t in times],
        "added_bytes": max(sizes),
        "packages_bytes": packages,
        "added_over_packages": round(max(sizes) / packages, 3) if packages else None,
        "packages": [r.spec for r in reqs],
        "base": args.base,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:20} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
