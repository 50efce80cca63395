"""Edges: the code that does I/O on the product's behalf, and nothing else of its own.
NVML (:mod:`.nvml`) and the probe that picks it or a declared inventory (:mod:`.probe`),
the node agents' HTTP client (:mod:`.agents`), the accounting database (:mod:`.accounting`:
SQLAlchemy, Alembic), the image builder's I/O (:mod:`.builder`: the home's records, pip
download, the build context, the engine's build and push, the registry), the package's one
atomic writer and the small state files in :mod:`jupyterhub_gpu.wire`'s formats
(:mod:`.files`), the admin's YAML files read (:mod:`.adminfiles`).

Imports: ``core``, ``wire``, ``edges`` and ``errors``; never the hub, a service or the CLI.
"""
