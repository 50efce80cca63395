"""Reading the YAML files an admin edits (catalog, inventory, nodes file).

One place for the I/O and its messages: the error names the file and says what is wrong,
and is raised as the caller's error class (``ConfigError`` or a subclass of it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from jupyterhub_gpu.errors import ConfigError


def read_yaml(path: str | Path, what: str, error: type[ConfigError] = ConfigError) -> Any:
    """The parsed YAML document at ``path``; ``what`` names the file in messages."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise error(f"{p}: cannot read the {what} ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise error(f"{p}: not valid YAML ({e})") from None
