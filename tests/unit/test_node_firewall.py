"""The node firewall's --allow checks (dry run: it prints the iptables commands it would
run). A bad --allow is refused before any chain is touched: a run that stopped half way
would leave the user bridge's chain flushed, that is open. The script ships in the
package (``jupyterhub_gpu/cli/files``, run by ``jupyterhub-gpu firewall``);
scripts/node-firewall.sh, which the test cluster runs, links to it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "jupyterhub_gpu" / "cli" / "files" / "node-firewall.sh"


def test_the_checkout_script_is_the_packaged_one() -> None:
    assert (REPO / "scripts" / "node-firewall.sh").resolve() == SCRIPT.resolve()


def dry_run(*allow: str) -> subprocess.CompletedProcess[str]:
    argv = ["bash", str(SCRIPT), "--dry-run"] + [x for a in allow for x in ("--allow", a)]
    return subprocess.run(argv, capture_output=True, text=True)


def test_allowed_destinations_become_return_rules_before_the_drops() -> None:
    r = dry_run("10.250.0.1:8081", "10.250.0.1:20000-20999", "10.1.2.0/24", "10.9.9.9:0-65535")
    assert r.returncode == 0, r.stderr
    forward = [line for line in r.stdout.splitlines() if "JHGPU-FORWARD" in line and "-A" in line]
    assert forward[1:5] == [
        "iptables -A JHGPU-FORWARD -d 10.250.0.1 -p tcp --dport 8081 -j RETURN",
        "iptables -A JHGPU-FORWARD -d 10.250.0.1 -p tcp --dport 20000:20999 -j RETURN",
        "iptables -A JHGPU-FORWARD -d 10.1.2.0/24 -j RETURN",
        "iptables -A JHGPU-FORWARD -d 10.9.9.9 -p tcp --dport 0:65535 -j RETURN",
    ]
    assert all("DROP" in line for line in forward[5:]) and len(forward) > 5


@pytest.mark.parametrize(
    "bad",
    [
        "10.0.0.1:8000-70000",  # beyond 65535
        "10.0.0.1:70000",
        "10.0.0.1:08",  # leading zero (bash would read it as octal)
        "10.0.0.1:30-20",  # inverted
        "10.0.0.1:1-2-3",
        "10.0.0.1:",
        "hub.example.org:8081",  # names are not resolved: the rule must say what it allows
        "10.0.0.1;iptables -F",
        "10.0.0.1:80 -j ACCEPT",
    ],
)
def test_a_bad_allow_changes_nothing(bad: str) -> None:
    r = dry_run("10.250.0.1:8081", bad)
    assert r.returncode == 2 and "nothing was changed" in r.stderr and bad in r.stderr
    assert "iptables" not in r.stdout  # no chain was flushed, no rule written
