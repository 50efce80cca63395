"""The YAML of the files an admin edits (catalog, inventory, nodes file), decoded.

One place for the YAML parser and its message: the error names the file and says what is
wrong, and is raised as the caller's error class (``ConfigError`` or a subclass of it).
Reading the files is :mod:`jupyterhub_gpu.edges.adminfiles`'s. :func:`with_catalog_images`
sets entries' image references in a catalog's text, comments and all (``images publish``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from jupyterhub_gpu.errors import ConfigError


def decode_yaml(text: str, where: str, error: type[ConfigError] = ConfigError) -> Any:
    """The YAML document in ``text``; ``where`` (the file's path) names it in the error."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise error(f"{where}: not valid YAML ({e})") from None


def with_catalog_images(text: str, images: Mapping[str, str], where: str) -> str:
    """The catalog file ``text`` with the ``image:`` of each entry whose slug ``images``
    names set to its new reference, and nothing else changed (comments, order, quoting of
    the other values): each value is replaced where the YAML parser found it. The result
    is parsed again and must hold exactly those references (ConfigError otherwise)."""
    from jupyterhub_gpu.wire.catalog_file import parse_catalog

    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML ({e})") from None
    spans: list[tuple[int, int, str]] = []
    for entry in _mapping_value(root, "images") or []:
        fields = {k.value: v for k, v in getattr(entry, "value", []) if hasattr(k, "value")}
        slug, image = fields.get("slug"), fields.get("image")
        if slug is None or image is None or slug.value not in images:
            continue
        new = images[slug.value]
        if not IMAGE_LINE_RE.fullmatch(new):
            raise ConfigError(f"{where}: {new!r} is not an image reference")
        spans.append((image.start_mark.index, image.end_mark.index, new))
    out = text
    for start, end, new in sorted(spans, reverse=True):
        out = out[:start] + new + out[end:]
    catalog = parse_catalog(decode_yaml(out, where), where)
    for slug, new in images.items():
        entry = catalog.get(slug)
        if entry is None or entry.image != new:
            raise ConfigError(f"{where}: the entry {slug!r} was not found to set its image")
    return out


#: what may stand unquoted as a YAML value: an image reference's characters
IMAGE_LINE_RE = re.compile(r"[a-z0-9][A-Za-z0-9._/:@\-\[\]]{0,510}")


def _mapping_value(node: Any, key: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) == key:
                return v.value if isinstance(v, yaml.SequenceNode) else None
    return None
