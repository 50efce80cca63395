#!/usr/bin/env python3
"""The jupyterhub-gpu idle culler, run by the hub as a managed service (see docs/culler.md).

Example (``jupyterhub_config.py``)::

    c.JupyterHub.services = [{
        "name": "gpu-culler",
        "command": [sys.executable, "services/culler.py",
                    "--config=/etc/jupyterhub/culler_config.py"],
    }]
"""

from jupyterhub_gpu.services.culler.app import main

if __name__ == "__main__":
    main()
