"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.services.culler`."""

from jupyterhub_gpu.services.culler.app import main

main()
