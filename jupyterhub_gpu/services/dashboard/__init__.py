"""The GPU cluster dashboard service (``python -m jupyterhub_gpu.services.dashboard``;
docs/dashboard.md): who uses which GPU since when, what is free, the queue and the usage,
in the browser. :mod:`.app` is the ``GPUDashboard`` application, :mod:`.handlers` its
pages, :mod:`.client` and :mod:`.notes` its hub calls and notes to owners, :mod:`.usage`
and :mod:`.render` the usage charts and the HTML. It reads the hub's
``/hub/api/gpu/cluster`` (:mod:`jupyterhub_gpu.wire.cluster`); what a person sees is
:mod:`jupyterhub_gpu.core.dashboard`."""
