#!/usr/bin/env bash
# The test command: installs what is missing (packages, engines, images, proxy), then
# runs lint, type checks and the whole test suite. Usage: scripts/test.sh [pytest args]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
scripts/bootstrap.sh
scripts/cluster.sh up 3
.venv/bin/ruff check jupyterhub_gpu services benchmarks tests
.venv/bin/mypy
mkdir -p artifacts
exec .venv/bin/pytest "$@"
