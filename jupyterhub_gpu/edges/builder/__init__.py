"""Saving an environment as an image, the I/O half (docs/my-images.md): the home's pip
and conda records (:mod:`.home_records`), the base image's probe (:mod:`.probe`), a
container's output read with a bound (:mod:`.output`), the offline wheelhouse
(:mod:`.wheelhouse`), the build context (:mod:`.context`), the build and push on a node's
engine (:mod:`.build`), the registry's delete (:mod:`.registry`), and the whole save in
order (:mod:`.save`). The decisions are :mod:`jupyterhub_gpu.core.saving`."""
