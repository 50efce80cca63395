"""The YAML of the files an admin edits (catalog, inventory, nodes file), decoded.

One place for the YAML parser and its message: the error names the file and says what is
wrong, and is raised as the caller's error class (``ConfigError`` or a subclass of it).
Reading the files is :mod:`jupyterhub_gpu.edges.adminfiles`'s.
"""

from __future__ import annotations

from typing import Any

import yaml

from jupyterhub_gpu.errors import ConfigError


def decode_yaml(text: str, where: str, error: type[ConfigError] = ConfigError) -> Any:
    """The YAML document in ``text``; ``where`` (the file's path) names it in the error."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise error(f"{where}: not valid YAML ({e})") from None
