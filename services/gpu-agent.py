#!/usr/bin/env python3
"""The jupyterhub-gpu node agent: run one on every GPU host (see docs/agent.md).

Example (``agent.token`` holds this node's own token, printed on the hub by
``services/gpu-agent.py --print-token --node NAME --site-secret-file FILE``)::

    JUPYTERHUB_GPU_AGENT_TOKEN=$(cat /etc/jupyterhub-gpu/agent.token) \
        services/gpu-agent.py --ip 10.0.0.12 --port 9450 --probe nvml
"""

from jupyterhub_gpu.services.agent.app import main

if __name__ == "__main__":
    main()
