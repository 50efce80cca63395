"""The usage API service (``python -m jupyterhub_gpu.services.usage``): GPU-hours from
the accounting database over HTTP, admins for everyone, users their own."""
