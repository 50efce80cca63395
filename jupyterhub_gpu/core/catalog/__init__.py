"""The image catalog: the allow-list of images, and which nodes can run them.

Pure: :mod:`jupyterhub_gpu.wire.catalog_file` reads the admin's YAML into a
:class:`Catalog`; :mod:`.compat` matches entries against
node inventories (driver version, compute capability).
"""

from jupyterhub_gpu.core.catalog.compat import (
    ImageAvailability,
    RequestConstraints,
    catalog_availability,
    compatible_gpus,
    custom_entry,
    entry_availability,
    entry_to_request_constraints,
    image_allowed_by_patterns,
    image_runs_on,
)
from jupyterhub_gpu.core.catalog.entries import (
    CUDA_MIN_COMPUTE_CAPABILITY,
    CUDA_MIN_DRIVER,
    BuildSpec,
    Catalog,
    CatalogEntry,
    min_driver_for_cuda,
)

__all__ = [
    "CUDA_MIN_COMPUTE_CAPABILITY",
    "CUDA_MIN_DRIVER",
    "BuildSpec",
    "Catalog",
    "CatalogEntry",
    "ImageAvailability",
    "RequestConstraints",
    "catalog_availability",
    "compatible_gpus",
    "custom_entry",
    "entry_availability",
    "entry_to_request_constraints",
    "image_allowed_by_patterns",
    "image_runs_on",
    "min_driver_for_cuda",
]
