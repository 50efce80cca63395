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


# A stand-in for iptables on PATH: it logs every call and answers `-S FORWARD` with the
# FORWARD rules the test gives ($FORWARD_RULES, one a line): Docker's jump to DOCKER-USER,
# or none. `-C` finds no rule; `-N` says the chain exists.
FAKE_IPTABLES = """#!/usr/bin/env bash
echo "$*" >> "$IPT_LOG"
case " $* " in
  *" -S FORWARD "*) echo "-P FORWARD DROP"; printf '%s\\n' "$FORWARD_RULES"; exit 0 ;;
  *" -C "*|*" -N "*) exit 1 ;;
esac
exit 0
"""
DOCKER_FORWARD = "-A FORWARD -j DOCKER-USER\n-A FORWARD -j DOCKER-FORWARD"


def apply(tmp_path: Path, forward: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The script in apply mode against the stand-in; its result and the iptables calls."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    fake = bin_ / "iptables"
    fake.write_text(FAKE_IPTABLES)
    fake.chmod(0o755)
    log = tmp_path / "iptables.log"
    log.write_text("")
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "IPT_LOG": str(log), "FORWARD_RULES": forward}
    argv = ["bash", str(SCRIPT), "--allow", "10.250.0.1:8081"]
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    return r, log.read_text().splitlines()


def changes(calls: list[str]) -> list[str]:
    """The calls that would change the rules (not -S/-C lookups)."""
    return [c for c in calls if not c.startswith(("-w -S", "-w -C"))]


def test_without_dockers_jump_to_docker_user_nothing_is_applied(tmp_path: Path) -> None:
    """With nftables or Docker's "iptables": false nothing jumps to DOCKER-USER: rules
    there would filter nothing, so the script must fail, not say "applied"."""
    r, calls = apply(tmp_path, "-A FORWARD -i docker0 -j ACCEPT")
    assert r.returncode != 0
    assert "applied" not in r.stdout
    assert "DOCKER-USER" in r.stderr and "FORWARD" in r.stderr
    assert changes(calls) == []  # no chain made or flushed, no rule written
    assert not any("-N DOCKER-USER" in c for c in calls)


def test_with_dockers_jump_the_rules_are_applied(tmp_path: Path) -> None:
    r, calls = apply(tmp_path, DOCKER_FORWARD)
    assert r.returncode == 0, r.stderr
    assert "applied" in r.stdout
    assert "-w -I DOCKER-USER 1 -i jhgpu-users -j JHGPU-FORWARD" in calls
    assert "-w -I INPUT 1 -i jhgpu-users -j JHGPU-INPUT" in calls
    assert not any("-N DOCKER-USER" in c for c in calls)  # Docker's chain, never ours


@pytest.mark.parametrize(
    ("etc", "systemd", "daemon", "expected"),
    [
        ("nameserver 10.0.0.2\nnameserver 1.1.1.1\n", "", "", ["10.0.0.2", "1.1.1.1"]),
        # systemd-resolved's stub: Docker reads the real resolvers, so do we
        (
            "nameserver 127.0.0.53\noptions edns0\n",
            "nameserver 192.168.1.53\n",
            "",
            ["192.168.1.53"],
        ),
        # daemon.json's dns replaces the host's; loopback and IPv6 resolvers are left out
        ("nameserver 10.0.0.2\n", "", '{"dns": ["10.9.9.9", "::1", "127.0.0.1"]}', ["10.9.9.9"]),
        ("# none\n", "", "not json", []),
        ("nameserver fe80::1%eth0\nnameserver 10.0.0.2 # lab\n", "", "", ["10.0.0.2"]),
    ],
)
def test_the_resolvers_docker_gives_containers(
    etc: str, systemd: str, daemon: str, expected: list[str]
) -> None:
    from jupyterhub_gpu.wire.resolvers import container_resolvers

    assert container_resolvers(etc, systemd, daemon) == expected


def test_the_firewall_command_allows_the_nodes_resolvers(tmp_path: Path) -> None:
    """`jupyterhub-gpu firewall` adds the node's resolvers (its resolv.conf here): port 53
    to them passes before the drop of private addresses, for the bridge's forwarded and
    node-bound traffic; --no-host-dns leaves them out."""
    from jupyterhub_gpu.cli.units import firewall_argv

    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.0.0.2\n")
    missing = tmp_path / "missing"
    argv = firewall_argv(["--allow", "10.0.0.1:8081"], resolv, missing, missing)
    assert argv == ["--allow", "10.0.0.1:8081", "--dns", "10.0.0.2"]
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", *argv], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rules = r.stdout.splitlines()
    for chain in ("JHGPU-INPUT", "JHGPU-FORWARD"):
        for proto in ("udp", "tcp"):
            allow = f"iptables -A {chain} -d 10.0.0.2 -p {proto} --dport 53 -j RETURN"
            assert allow in rules
            drop = "-j DROP" if chain == "JHGPU-INPUT" else "-d 10.0.0.0/8 -j DROP"
            assert rules.index(allow) < rules.index(f"iptables -A {chain} {drop}")
    assert firewall_argv(["--no-host-dns"], resolv, missing, missing) == []
    bad = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--dns", "10.0.0.x"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--dns wants a numeric IPv4 address" in bad.stderr
