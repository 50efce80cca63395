"""The GPU cluster dashboard: who uses which GPU since when, what is free, the queue and
the usage, in the browser (docs/dashboard.md).

- :mod:`.payload`: the cluster as JSON, from the hub's live objects (pure)
- :mod:`.hub`: inside the hub: the JSON API (``/hub/api/gpu/...``) and :func:`configure`
- :mod:`.view`, :mod:`.charts`, :mod:`.usage`, :mod:`.render`: what one person sees (pure)
- :mod:`.history`: each GPU's recent utilisation (the sparklines)
- :mod:`.client`, :mod:`.notes`: the service's hub calls and its notes to owners
- :mod:`.service`, :mod:`.handlers`: the hub-managed service (``python -m
  jupyterhub_gpu.dashboard``)

Importing this package imports neither the hub side nor the service.
"""
