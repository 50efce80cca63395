#!/usr/bin/env python3
"""The jupyterhub-gpu cluster dashboard, run by the hub as a managed service (see
docs/dashboard.md). ``jupyterhub_gpu.hub.api.cluster.configure(c)`` sets it up with
``python -m jupyterhub_gpu.services.dashboard``; this script is the same entry point for sites
that start services from a path::

    c.JupyterHub.services = [{
        "name": "gpu-dashboard",
        "url": "http://127.0.0.1:10103",
        "command": [sys.executable, "services/gpu-dashboard.py"],
        "oauth_no_confirm": True,
    }]
"""

from jupyterhub_gpu.services.dashboard.app import main

if __name__ == "__main__":
    main()
