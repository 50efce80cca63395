"""Run a benchmark of benchmarks/ as a user does (``python benchmarks/<name>.py``), in a
subprocess, and read its ``--json`` object: the smoke tests of every benchmark use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.cluster import REPO

BENCHMARKS = REPO / "benchmarks"
#: the shared traces the replay benchmarks read (their --traces default)
TRACES = REPO.parent / "shared" / "traces"


@dataclass(frozen=True)
class BenchmarkRun:
    name: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def result(self) -> dict[str, Any]:
        """The JSON object it printed; fails with its stderr's tail when it did not exit 0."""
        tail = "\n".join(self.stderr.splitlines()[-60:])
        assert self.returncode == 0, f"{self.name} exited {self.returncode}:\n{tail}"
        try:
            out = json.loads(self.stdout)
        except ValueError as e:
            raise AssertionError(
                f"{self.name} printed no JSON object ({e}):\n{self.stdout[-2000:]}"
            ) from None
        assert isinstance(out, dict), f"{self.name} printed {type(out).__name__}, not an object"
        return out


def run_benchmark(name: str, *args: str, timeout: float = 120) -> BenchmarkRun:
    """``python benchmarks/<name>.py --smoke --json ARGS`` from the repository root, with
    this tree on ``PYTHONPATH`` (the benchmarks import ``tests.support``), after the
    package under test (``$JHGPU_UNDER_TEST``, scripts/test.sh: the wheel, which
    tests/conftest.py insists on when a benchmark imports it)."""
    env = dict(os.environ)
    first = [env.get("JHGPU_UNDER_TEST"), str(REPO), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, first))
    command = [sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke", "--json", *args]
    start = time.monotonic()
    proc = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    seconds = time.monotonic() - start
    print(f"{name} --smoke: exit {proc.returncode} in {seconds:.1f} s")
    return BenchmarkRun(name, proc.returncode, proc.stdout, proc.stderr, seconds)


def missing(keys: Iterable[str], obj: Mapping[str, Any]) -> list[str]:
    """Those of ``keys`` that ``obj`` lacks."""
    return [k for k in keys if k not in obj]
