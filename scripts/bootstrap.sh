#!/usr/bin/env bash
# Create .venv and install the package with its test extras (idempotent).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(cat setup.cfg pyproject.toml | sha256sum | cut -c1-16)
if [[ ! -f $stamp ]]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[hub,test]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
