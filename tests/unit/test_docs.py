"""The generated configuration reference matches the traits' help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def test_config_reference_is_fresh() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_config_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
