"""``python -m jupyterhub_gpu.cli``: the ``jupyterhub-gpu`` command (the hub runs its join
service this way, with its own Python)."""

import sys

from jupyterhub_gpu.cli import main

sys.exit(main())
