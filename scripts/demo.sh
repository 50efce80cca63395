#!/usr/bin/env bash
# The main job: a hub on http://127.0.0.1:8000 with the local engine as a GPU node
# (declared 2-GPU demo inventory) and a working demo login. Installs what is missing.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
scripts/bootstrap.sh
scripts/cluster.sh up 1
mkdir -p .demo/homes
echo "[demo] open http://127.0.0.1:8000 and log in as any name (e.g. alice) with password:" \
     "${JHGPU_DEMO_PASSWORD:-gpu-demo}"
exec .venv/bin/jupyterhub -f scripts/demo/jupyterhub_config.py
