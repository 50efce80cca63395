"""The demo's GPU idle culler, started by the demo hub as a service (scripts/demo/
jupyterhub_config.py passes the settings below in its environment).

Default timeouts (30 min for a server holding an idle GPU, 1 h for a CPU-only one); for a
quicker look, start the demo with ``JHGPU_DEMO_CULL_TIMEOUT=120 scripts/demo.sh`` and a
server left alone is stopped after about two minutes, its owner told why in the spawn form.
"""

import os
from pathlib import Path

c = get_config()  # type: ignore[name-defined]  # noqa: F821

DEMO = Path(os.environ["JHGPU_DEMO_DIR"])
c.GPUIdleCuller.agent_urls = {"node-a": os.environ["JHGPU_DEMO_AGENT_URL"]}
c.GPUIdleCuller.notes_file = str(DEMO / "cull-notes.json")
c.GPUIdleCuller.deadlines_file = str(DEMO / "cull-deadlines.json")
c.GPUIdleCuller.policy_file = str(DEMO / "cull-policy.json")  # the spawn form says it
c.GPUIdleCuller.state_file = str(DEMO / "culler-state.json")
if os.environ.get("JHGPU_DEMO_CULL_TIMEOUT"):
    seconds = float(os.environ["JHGPU_DEMO_CULL_TIMEOUT"])
    c.GPUIdleCuller.timeout = c.GPUIdleCuller.gpu_timeout = seconds
    c.GPUIdleCuller.interval = min(60.0, seconds / 4)
