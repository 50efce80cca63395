"""Batch jobs (issue 32), the pure parts: a job request and its checks (spec.py), its
states, time limits and array gate (states.py), and its container (container.py), which
is :func:`~jupyterhub_gpu.core.workload.make_container`'s description with another command,
no published port and no JupyterLab. A job waits in the same GPU queue and passes the same
:func:`~jupyterhub_gpu.core.scheduling.admission.admit` as a server of the same size."""
