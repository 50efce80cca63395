#!/usr/bin/env bash
# The test command: installs what is missing (packages, engines, images, proxy), then
# runs lint, type checks and the whole test suite against the package's wheel.
# Usage: scripts/test.sh [pytest args]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
scripts/bootstrap.sh
scripts/cluster.sh up 3
.venv/bin/ruff check jupyterhub_gpu services benchmarks tests
.venv/bin/mypy
mkdir -p artifacts
# The tests run against the package as its wheel installs it, not against the working
# tree: a file missing from the wheel fails them. The wheel is built from the tree and
# installed apart (.venv/under-test), first on every Python path of the tests and of
# what they start; tests/conftest.py checks that this copy is the one imported.
UNDER_TEST=$REPO/.venv/under-test
rm -rf "$UNDER_TEST"
.venv/bin/python -m build -q --wheel --outdir "$UNDER_TEST/wheel" . >/dev/null
.venv/bin/pip install -q --no-deps --no-compile --target "$UNDER_TEST/lib" "$UNDER_TEST"/wheel/*.whl
export JHGPU_UNDER_TEST=$UNDER_TEST/lib
export PYTHONPATH=$JHGPU_UNDER_TEST${PYTHONPATH:+:$PYTHONPATH}
exec .venv/bin/pytest "$@"
