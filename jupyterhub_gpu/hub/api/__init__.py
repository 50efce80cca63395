"""The hub API extensions (``/hub/api/gpu/...``) and their pages, registered through
:mod:`jupyterhub_gpu.hub.extensions`. Handlers reach the hub's GPU parts through
``self.settings`` (:func:`jupyterhub_gpu.hub.runtime.runtime_of`), never the spawner class."""
