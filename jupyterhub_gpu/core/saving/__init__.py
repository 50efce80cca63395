"""Saving an environment as an image, the pure half (docs/my-images.md): the data and
errors (:mod:`.data`), name validation (:mod:`.validate`), what is captured
(:mod:`.plan`), the Dockerfile (:mod:`.recipe`), per-user limits (:mod:`.limits`), the
engine's JSON stream read as progress (:mod:`.stream`) and a saved image as a catalog
entry (:mod:`.entries`). The I/O half is :mod:`jupyterhub_gpu.edges.builder`."""
