"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.services.agent`."""

from jupyterhub_gpu.services.agent.app import main

main()
