"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.services.dashboard`."""

from jupyterhub_gpu.services.dashboard.app import main

main()
