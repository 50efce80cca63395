#!/usr/bin/env bash
# The test command: installs what is missing (packages, engines, images, proxy), then
# runs lint, type checks and the whole test suite against the package's wheel.
# Usage: scripts/test.sh [pytest args]
#
# Without arguments the suite runs in two phases: every test but those marked ``alone``
# in $JHGPU_TEST_WORKERS (default 3: most of a test's time is waiting for containers and
# hubs, so three keep two cores busier than two do) pytest-xdist workers, each test file whole on one
# worker (``--dist loadfile``: a module's shared agents, hubs and clusters stay in one
# process; every hub has its own id, ports and containers); then the ``alone`` tests
# (they stop an engine, remove a node's firewall, or check what a node holds as a whole)
# one at a time. With arguments, one
# plain pytest run with them (add ``-n 2 --dist loadfile`` to parallelise it).
# Repetition loops run a fixed small number of rounds here: JHGPU_CRASH_ROUNDS (default
# 5, each kill point of tests/integration/test_hub_crash.py once; 100 by hand before a
# release).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
scripts/bootstrap.sh
scripts/cluster.sh up 3
.venv/bin/ruff check jupyterhub_gpu services benchmarks tests
mkdir -p artifacts
# mypy (about 30 s of one core on a cold cache) runs while the wheel is built and installed
.venv/bin/mypy >artifacts/mypy.log 2>&1 &
mypy_pid=$!
# The tests run against the package as its wheel installs it, not against the working
# tree: a file missing from the wheel fails them. The wheel is built from the tree and
# installed apart (.venv/under-test), first on every Python path of the tests and of
# what they start; tests/conftest.py checks that this copy is the one imported.
UNDER_TEST=$REPO/.venv/under-test
rm -rf "$UNDER_TEST"
.venv/bin/python -m build -q --wheel --outdir "$UNDER_TEST/wheel" . >/dev/null
.venv/bin/pip install -q --no-deps --no-compile --target "$UNDER_TEST/lib" "$UNDER_TEST"/wheel/*.whl
mypy_rc=0
wait "$mypy_pid" || mypy_rc=$?
cat artifacts/mypy.log
if [[ $mypy_rc -ne 0 ]]; then
  exit "$mypy_rc"
fi
export JHGPU_UNDER_TEST=$UNDER_TEST/lib
export PYTHONPATH=$JHGPU_UNDER_TEST${PYTHONPATH:+:$PYTHONPATH}
export JHGPU_CRASH_ROUNDS=${JHGPU_CRASH_ROUNDS:-5}
if [[ $# -gt 0 ]]; then
  exec .venv/bin/pytest "$@"
fi
rc=0
.venv/bin/pytest -n "${JHGPU_TEST_WORKERS:-3}" --dist loadfile -m "not alone" || rc=$?
# exit status 5 is "no tests collected": not a failure of this phase
alone_rc=0
.venv/bin/pytest -m alone || alone_rc=$?
[[ $alone_rc -eq 5 ]] && alone_rc=0
[[ $rc -ne 0 ]] && exit "$rc"
exit "$alone_rc"
