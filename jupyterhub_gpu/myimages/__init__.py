"""Saved images in the hub ("My images", issue 14; docs/my-images.md).

:mod:`.entries` (pure) turns saved images into spawn-form choices; :mod:`.settings` holds
the admin's ``c.SavedImages.*``; :mod:`.service` runs saves and keeps the records;
:mod:`.registry` deletes from the registry; :mod:`.handlers` is the REST API and the page.
The builder itself is :mod:`jupyterhub_gpu.builder`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traitlets.config import Config

from .settings import SavedImages

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _value(section: Any, key: str, default: Any) -> Any:
    return section.get(key, default)


def configure(c: Config) -> None:
    """Add saved images to a hub's configuration (``jupyterhub_config.py``): the API, the
    "My images" page and its link in the navigation bar. Saving itself is on once
    ``c.SavedImages.registry`` is set."""
    from ..dashboard.hub import HUB_TEMPLATES
    from .handlers import HANDLERS

    hub = c.JupyterHub
    hub.extra_handlers = [*_value(hub, "extra_handlers", []), *HANDLERS]
    paths = [str(p) for p in _value(hub, "template_paths", [])]
    hub.template_paths = [
        *paths,
        *(str(p) for p in (HUB_TEMPLATES, TEMPLATES) if str(p) not in paths),
    ]
    hub.template_vars = {**_value(hub, "template_vars", {}), "jhgpu_my_images": True}


__all__ = ["SavedImages", "configure"]
