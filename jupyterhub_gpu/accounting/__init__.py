"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.services.usage`."""
