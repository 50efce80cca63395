"""The image catalog: the allow-list of images, and which nodes can run them.

Pure: :mod:`.loader` validates the admin's YAML, :mod:`.compat` matches entries against
node inventories (driver version, compute capability).
"""

from .compat import (
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
from .loader import default_catalog_path, load_catalog, parse_catalog
from .model import (
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
    "default_catalog_path",
    "entry_availability",
    "entry_to_request_constraints",
    "image_allowed_by_patterns",
    "image_runs_on",
    "load_catalog",
    "min_driver_for_cuda",
    "parse_catalog",
]
