"""What the admin's review found in the guides stays fixed: upgrades from the wheel file
(there is no package index), with a rollback, the paths to back up and the accounting
migrations' commands; uninstalling; prepared servers (no docker.io over Docker CE; where
Ubuntu differs); NFS root_squash where the hub makes homes. Every ``jupyterhub-gpu``
command the upgrade guide names exists, with the options it gives."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from jupyterhub_gpu.cli import COMMANDS

pytestmark = pytest.mark.unit
DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_upgrades_install_the_wheel_file_and_can_roll_back() -> None:
    text = (DOCS / "upgrade.md").read_text()
    assert "pip install --upgrade 'jupyterhub-gpu" not in text  # no such package on an index
    assert "pip install --upgrade jupyterhub-gpu" not in text
    for phrase in (
        '"$VENV/bin/pip" install "$NEW[hub]"',
        "keep the running release's wheel",
        "**Rolling back**",
        '--force-reinstall --no-deps "$OLD[hub]"',
        "**Paths to back up**",
        "db upgrade --etc",
        "`db current`",
        "## Uninstalling",
        "jupyterhub-gpu firewall --remove",
    ):
        assert phrase in text, phrase


def test_every_command_the_upgrade_guide_names_exists_with_its_options() -> None:
    text = (DOCS / "upgrade.md").read_text()
    named = set(re.findall(r"(?:`|/bin/|\n)jupyterhub-gpu\"? ([a-z][a-z-]+)", text, re.M))
    assert {"check-config", "db", "firewall", "check-node"} <= named
    assert named <= set(COMMANDS), named - set(COMMANDS)
    for line in re.findall(r'jupyterhub-gpu" (db [^`]+)`', text):
        argv = shlex.split(line.replace('"$ETC"', "/etc/jupyterhub-gpu"))
        assert argv[1] in ("upgrade", "current") and argv[2:] == ["--etc", "/etc/jupyterhub-gpu"]


def test_prepared_servers_ubuntu_and_root_squash_are_said() -> None:
    text = (DOCS / "install.md").read_text()
    for phrase in (
        "**Prepared servers**",
        "Never install `docker.io`",
        "Where Ubuntu differs",
        "ubuntu-drivers install",
        "`no_root_squash`",
    ):
        assert phrase in text, phrase
