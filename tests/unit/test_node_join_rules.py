"""The join's rules (core/join.py) and the hub's side of it (cli/join_service.py) on a
site laid out in a temporary folder: tokens single-use, short-lived, bound to a name and
stored hashed; the node's certificate names what the hub chose, whatever the request
asked; a refused join changes nothing; the node's prerequisites named with their fix."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jupyterhub_gpu.cli import certs, site
from jupyterhub_gpu.cli.join_service import (
    JoinSettings,
    ca_fingerprint,
    check_token,
    handle_join,
    handle_node,
    new_token,
    sign_csr,
    tokens_file,
)
from jupyterhub_gpu.cli.layout import Site
from jupyterhub_gpu.cli.node import key_and_csr, missing
from jupyterhub_gpu.core import join as rules
from jupyterhub_gpu.core.tokens import node_token

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0


@pytest.fixture
def hub(tmp_path: Path) -> Site:
    s = Site(etc=tmp_path / "etc", state=tmp_path / "state")
    home = tmp_path / "home"
    home.mkdir()
    argv = ["init", "--etc", str(s.etc), "--state", str(s.state), "--hub-ip", "10.0.0.1",
            "--home-template", f"{home}/{{username}}"]  # fmt: skip
    assert site.main(argv) == 0
    assert certs.main(["--etc", str(s.etc), "ca"]) == 0
    assert certs.main(["--etc", str(s.etc), "hub"]) == 0
    return s


def test_a_token_is_single_use_short_lived_and_for_one_name(hub: Site) -> None:
    token = new_token(hub, "gpu-03", 3600, now=NOW)
    stored = tokens_file(hub).read_text()
    assert token not in stored and rules.token_digest(token) in stored  # hashed only
    assert (tokens_file(hub).stat().st_mode & 0o777) == 0o600
    assert "for the node gpu-03, not gpu-04" in check_token(hub, token, "gpu-04", use=True, now=NOW)
    assert "expired" in check_token(hub, token, "gpu-03", use=True, now=NOW + 3600)
    assert check_token(hub, token, "gpu-03", use=False, now=NOW) == ""  # a check uses nothing
    assert check_token(hub, token, "gpu-03", use=True, now=NOW) == ""
    assert "already used (by gpu-03)" in check_token(hub, token, "gpu-03", use=True, now=NOW)
    assert "does not know" in check_token(hub, "jhgpu-" + "x" * 32, "gpu-03", use=True, now=NOW)
    assert "not a join token" in check_token(hub, "hello", "gpu-03", use=True, now=NOW)
    # an unbound token goes to the first name that uses it
    anyone = new_token(hub, "", 3600, now=NOW)
    assert check_token(hub, anyone, "gpu-09", use=True, now=NOW) == ""


def test_ttl_and_fingerprint_and_the_closing_line() -> None:
    assert rules.parse_ttl("1h") == 3600 and rules.parse_ttl("30m") == 1800
    for bad in ("1", "0m", "8d", "1y", "-1h"):
        with pytest.raises(ValueError):
            rules.parse_ttl(bad)
    hexd = "ab" * 32
    assert rules.normalize_fingerprint(f"sha256:{hexd.upper()}") == hexd
    assert rules.normalize_fingerprint(":".join(hexd[i : i + 2] for i in range(0, 64, 2))) == hexd
    assert rules.normalize_fingerprint("sha256:abc") is None
    models = ["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"]
    assert (
        rules.joined_line("gpu-03", models, []) == "gpu-03 joined: 2 x RTX 3090, all checks passed"
    )
    assert rules.gpu_summary(["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 3090"]) == (
        "1 x A100-SXM4-80GB, 1 x RTX 3090"
    )
    assert "1 check(s) failed: the agent" in rules.joined_line("n", [], ["the agent"])


def test_the_certificate_names_what_the_hub_chose(hub: Site) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    sneaky = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jupyterhub-gpu hub")]))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("gpu-01")]), False)
        .sign(key, hashes.SHA256())
    )
    from cryptography.hazmat.primitives import serialization

    pem = sign_csr(hub, sneaky.public_bytes(serialization.Encoding.PEM), "gpu-03", "10.0.0.13")
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "gpu-03"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["gpu-03"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.13"]
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    ca = x509.load_pem_x509_certificate(hub.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert [u._name for u in eku] == ["serverAuth"]


def test_a_join_adds_the_node_drained_then_ready_then_gone(hub: Site) -> None:
    settings = JoinSettings(hub, "10.0.0.1", home_root="/mnt/home")
    token = new_token(hub, "gpu-03", 600)
    _, csr = key_and_csr("gpu-03")
    body = {"token": token, "name": "gpu-03", "address": "10.0.0.13"}
    status, answer = handle_join(settings, {**body, "check": True})
    assert status == 200 and answer["home_root"] == "/mnt/home"
    assert answer["allow"] == ["10.0.0.1:8081"]
    assert "cert" not in answer and not yaml.safe_load(hub.nodes_file.read_text())["nodes"]
    status, answer = handle_join(settings, {**body, "csr": csr.decode()})
    assert status == 200, answer
    secret = hub.site_secret.read_text()
    assert answer["agent_token"] == node_token(secret, "gpu-03")
    nodes = yaml.safe_load(hub.nodes_file.read_text())["nodes"]
    assert [(n["name"], n["address"], n["drain"]) for n in nodes] == [("gpu-03", "10.0.0.13", True)]
    assert nodes[0]["docker_url"] == "tcp://10.0.0.13:2376"
    # used: refused, nothing changed
    listed = hub.nodes_file.read_bytes()
    status, answer = handle_join(settings, {**body, "csr": csr.decode()})
    assert status == 403 and "already used" in answer["error"]
    assert hub.nodes_file.read_bytes() == listed
    # ready with the node's own token only
    assert handle_node(settings, {"name": "gpu-03"}, "ready", "token nope")[0] == 403
    auth = f"token {node_token(secret, 'gpu-03')}"
    assert handle_node(settings, {"name": "gpu-03"}, "ready", auth)[0] == 200
    assert yaml.safe_load(hub.nodes_file.read_text())["nodes"][0]["drain"] is False
    assert handle_node(settings, {"name": "gpu-03"}, "leave", auth)[0] == 200
    assert yaml.safe_load(hub.nodes_file.read_text())["nodes"] == []


def test_a_refused_join_changes_nothing(hub: Site) -> None:
    settings = JoinSettings(hub, "10.0.0.1")
    token = new_token(hub, "", 600)
    _, csr = key_and_csr("x")
    before = (hub.nodes_file.read_bytes(), tokens_file(hub).read_bytes())
    for body, words in (
        ({"name": "../etc", "address": "10.0.0.13"}, "name"),
        ({"name": "gpu-03", "address": "10.0.0.13", "csr": "junk"}, "not a PEM CSR"),
        ({"name": "gpu-03", "address": "not an address!"}, "address"),
    ):
        status, answer = handle_join(settings, {"token": token, "csr": csr.decode(), **body})
        assert status == 400 and words in answer["error"], answer
    assert (hub.nodes_file.read_bytes(), tokens_file(hub).read_bytes()) == before
    fp = ca_fingerprint(hub.ca_cert.read_bytes())
    assert rules.normalize_fingerprint(rules.show_fingerprint(fp)) == fp


def test_missing_prerequisites_are_named_with_their_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine with none of them
    args = argparse.Namespace(inventory="")
    found = missing(args, str(tmp_path / "no-home"))
    assert len(found) == 4, found
    assert found[0].startswith("Docker is not installed: install Docker CE")
    assert "nvidia-smi -L" in found[1] and "install the driver" in found[1]
    assert "Container Toolkit is missing: install nvidia-container-toolkit" in found[2]
    assert f"the shared home {tmp_path / 'no-home'} is not mounted here" in found[3]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(json.dumps({"nodes": []}))
    assert len(missing(argparse.Namespace(inventory=str(inventory)), str(tmp_path))) == 2


def _issue_after(site_dirs: tuple[str, str], start_at: float) -> bytes:
    import time

    from jupyterhub_gpu.cli.join_service import ensure_join_cert

    time.sleep(max(0.0, start_at - time.time()))  # both processes go at the same moment
    return ensure_join_cert(Site(etc=Path(site_dirs[0]), state=Path(site_dirs[1])), "10.0.0.1")


def test_node_token_and_the_join_service_agree_on_the_certificate_they_race_for(
    hub: Site,
) -> None:
    """`node token` pins the join service's key while the hub may be starting that service:
    whichever comes first issues the certificate, the other reads it (a fresh-clone CI run
    had them issue one each: the install line's pin did not match what was served)."""
    import multiprocessing
    import time

    dirs = (str(hub.etc), str(hub.state))
    for _ in range(5):
        for path in (hub.tls / "join-cert.pem", hub.tls / "join-key.pem"):
            path.unlink(missing_ok=True)
        at = time.time() + 0.5
        with multiprocessing.get_context("fork").Pool(4) as pool:
            pems = pool.starmap(_issue_after, [(dirs, at)] * 4)
        assert len(set(pems)) == 1, "two certificates were issued"


def test_a_network_that_appears_after_the_inspect_is_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Docker just restarted by the join may say "no such network", then refuse the
    create as a conflict, then list it (a CI run's join): the join goes on. A conflict that
    stays, or another failure, stops it with the engine's words."""
    import subprocess

    from jupyterhub_gpu.cli import node
    from jupyterhub_gpu.cli.node import JoinRefused

    def answers(create_err: str, listed_after: int) -> list[list[str]]:
        calls: list[list[str]] = []

        def run(argv: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
            calls.append(argv)
            inspects = sum(c[:3] == ["docker", "network", "inspect"] for c in calls)
            if argv[:3] == ["docker", "network", "inspect"]:
                ok = listed_after and inspects > listed_after
                return subprocess.CompletedProcess(argv, 0 if ok else 1, "", "no such network")
            return subprocess.CompletedProcess(argv, 1, "", create_err)

        monkeypatch.setattr(node, "run", run)
        return calls

    same_bridge = (
        "Error response from daemon: cannot create network 1ab2 (jhgpu-users): conflicts "
        "with network 215c (jhgpu-users): networks have same bridge name"
    )
    calls = answers(same_bridge, listed_after=1)
    node.ensure_network("users", "jhgpu-users")
    assert [c[2] for c in calls] == ["inspect", "create", "inspect"]
    answers("Error response from daemon: network with name users already exists", 0)
    with pytest.raises(JoinRefused, match="already exists"):
        node.ensure_network("users", "jhgpu-users", wait=1.0)
    answers("Error response from daemon: pool overlaps", 0)
    with pytest.raises(JoinRefused, match=r"cannot make the users' network users: .*overlaps"):
        node.ensure_network("users", "jhgpu-users")
