"""The GPU-aware idle culler, a hub-managed service (``python -m
jupyterhub_gpu.services.culler``; docs/culler.md): :mod:`.app` is the ``GPUIdleCuller``
application, :mod:`.client` its HTTP calls to the hub API, single-user servers and node
agents, :mod:`.state` its state file kept across restarts, :mod:`.mail` its warning
mails, :mod:`.reclaim` how a cull ends (a suspend or a stop). The judgement it applies is
:mod:`jupyterhub_gpu.core.culling`; the files it writes for the hub (deadlines, notes,
share notices, warnings) are written by :mod:`jupyterhub_gpu.edges.files` in the formats
of :mod:`jupyterhub_gpu.wire.deadlines`, :mod:`jupyterhub_gpu.wire.cull_notes`,
:mod:`jupyterhub_gpu.wire.share_notices` and :mod:`jupyterhub_gpu.wire.cull_warnings`."""
