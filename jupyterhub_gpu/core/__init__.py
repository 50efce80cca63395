"""The pure core: every decision the product makes, over plain data, with no I/O.

Placement, the queue's order, quotas and reservations, the image catalog and its CUDA
rules, form validation, the container spec, idleness, usage and reports, the saved-image
plan and recipe, the dashboard's views. Plain dataclasses in, plain results out; the
benchmarks call exactly these functions.

Imports: ``core`` and ``errors`` only, and no library that does I/O (no Docker client,
database, HTTP, tornado or JupyterHub). ``tests/unit/test_layers.py`` checks it.
"""
