"""The site's registry (issue 34, docs/images.md): ``registry install``'s files and units,
``images publish``'s references and its catalog rewrite (comments kept), the trust ``node
join`` writes, and the site's configuration turning the pre-puller on for the registry.
The registry itself, the push and the nodes' pulls run for real in
tests/integration/test_install_quick.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from jupyterhub_gpu import cli
from jupyterhub_gpu.cli import check, images, registry
from jupyterhub_gpu.cli.layout import Site
from jupyterhub_gpu.core.join import registry_address, registry_trust
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.wire.adminfiles import with_catalog_images
from jupyterhub_gpu.wire.catalog_file import default_catalog_path

pytestmark = pytest.mark.unit
HUB_IP = "10.0.0.1"


@pytest.fixture
def site(tmp_path: Path) -> Site:
    s = Site(etc=tmp_path / "etc", state=tmp_path / "state")
    argv = ["site", "init", "--etc", str(s.etc), "--state", str(s.state), "--hub-ip", HUB_IP,
            "--node", "gpu-a=127.0.0.1", "--ldap-server", "ldap.cs.uni.edu"]  # fmt: skip
    assert cli.main(argv) == 0
    for argv in (["ca"], ["hub"], ["public", "--address", HUB_IP],
                 ["node", "gpu-a", "--address", "127.0.0.1"]):  # fmt: skip
        assert cli.main(["certs", "--etc", str(s.etc), *argv]) == 0
    return s


def test_registry_install_writes_a_read_only_tls_side_and_a_loopback_push_side(
    site: Site, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    argv = ["registry", "install", "--etc", str(site.etc), "--state", str(site.state),
            "--root", str(root), "--no-start"]  # fmt: skip
    assert cli.main(argv) == 0  # the hub's address from the configuration
    pull = yaml.safe_load((site.registry_dir / "pull.yml").read_text())
    push = yaml.safe_load((site.registry_dir / "push.yml").read_text())
    assert pull["http"]["addr"] == f"{HUB_IP}:5443" == registry_address(HUB_IP)
    assert pull["http"]["tls"] == {"certificate": str(site.registry_cert),
                                   "key": str(site.registry_key)}  # fmt: skip
    assert pull["storage"]["maintenance"]["readonly"] == {"enabled": True}
    assert push["http"]["addr"] == "127.0.0.1:5444" and "tls" not in push["http"]
    assert "readonly" not in push["storage"]["maintenance"]
    both = {pull["storage"]["filesystem"]["rootdirectory"],
            push["storage"]["filesystem"]["rootdirectory"]}  # fmt: skip
    assert both == {str(site.registry_storage)}
    for path in (site.registry_dir / "pull.yml", site.registry_dir / "push.yml",
                 site.registry_key):  # fmt: skip
        assert path.stat().st_mode & 0o777 == 0o600, path  # the upload secret, the key
    assert site.registry_storage.stat().st_mode & 0o777 == 0o700
    cert = x509.load_pem_x509_certificate(site.registry_cert.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(site.ca_cert.read_bytes()))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(n.value) for n in san] == [HUB_IP]
    units = root / "etc/systemd/system"
    pulls = (units / registry.PULL_UNIT).read_text()
    pushes = (units / registry.PUSH_UNIT).read_text()
    assert f"serve {site.registry_dir / 'pull.yml'}\n" in pulls
    assert f"serve {site.registry_dir / 'push.yml'}\n" in pushes
    assert "ReadWritePaths" not in pulls.replace("# ", "")  # it writes nowhere
    assert f"ReadWritePaths={site.registry_storage}\n" in pushes
    assert "@" not in pulls + pushes  # every placeholder filled
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:  # unknown keys, bad values: warnings on stderr
        files = [str(units / registry.PULL_UNIT), str(units / registry.PUSH_UNIT)]
        r = subprocess.run([analyze, "verify", *files], capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "", r.stderr
    kept = site.registry_cert.read_bytes()
    assert cli.main(argv) == 0 and site.registry_cert.read_bytes() == kept  # kept: same name


def test_registry_install_without_the_server_says_what_to_install_and_writes_nothing(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    empty = tmp_path / "no-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    argv = ["registry", "install", "--etc", str(site.etc), "--state", str(site.state),
            "--root", str(tmp_path / "root"), "--no-start"]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("the site's registry needs Distribution's server") and (
        "apt-get install docker-registry" in err
    ), err
    assert not site.registry_dir.exists() and not site.registry_cert.exists()
    assert not (tmp_path / "root").exists()
    hub = ["hub", "install", "--no-start", "--registry", "--etc", str(tmp_path / "new"),
           "--state", str(tmp_path / "new-state"), "--root", str(tmp_path / "root")]  # fmt: skip
    assert cli.main(hub) == 1 and not (tmp_path / "new").exists()  # checked before anything


def test_the_site_configuration_turns_the_pre_puller_on_with_the_registry(site: Site) -> None:
    config, said = check._load_config(site.config, set())
    assert said == [] and not config.PrePuller.get("enabled")
    assert registry.main(["install", "--etc", str(site.etc), "--state", str(site.state),
                          "--root", str(site.state / "root"), "--no-start"]) == 0  # fmt: skip
    config, said = check._load_config(site.config, set())
    assert said == [] and config.PrePuller.enabled is True
    assert config.PrePuller.registry == f"{HUB_IP}:5443"
    assert check.check(site, site.config) == []


@pytest.mark.parametrize(
    ("image", "source"),
    [
        ("jupyterhub-gpu/python-cpu:3.11-bookworm", "jupyterhub-gpu/python-cpu:3.11-bookworm"),
        (f"{HUB_IP}:5443/jupyterhub-gpu/python-cpu:3.11@sha256:{'a' * 64}",
         "jupyterhub-gpu/python-cpu:3.11"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
        ("lab/cpu", "lab/cpu:latest"),
        ("localhost/lab/cpu:2", "localhost/lab/cpu:2"),
    ],
)  # fmt: skip
def test_the_source_of_a_catalog_image_on_the_hubs_docker(image: str, source: str) -> None:
    assert images.source_reference(image, f"{HUB_IP}:5443") == source


def test_the_catalog_rewrite_changes_the_image_values_and_nothing_else() -> None:
    text = default_catalog_path().read_text()
    new = f"{HUB_IP}:5443/jupyterhub-gpu/python-cpu:3.11-bookworm@sha256:{'b' * 64}"
    out = with_catalog_images(text, {"python-cpu": new}, "catalog.yaml")
    before, after = text.splitlines(), out.splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [
        ("    image: jupyterhub-gpu/python-cpu:3.11-bookworm", f"    image: {new}")
    ]  # comments, order, quoting: as they were
    old = "image: jupyterhub-gpu/python-cpu:3.11-bookworm"
    quoted = text.replace(old, 'image: "jupyterhub-gpu/python-cpu:3.11-bookworm"  # the CPU one')
    assert f"    image: {new}  # the CPU one" in with_catalog_images(
        quoted, {"python-cpu": new}, "catalog.yaml"
    )
    with pytest.raises(ConfigError, match="'nope' was not found"):
        with_catalog_images(text, {"nope": new}, "catalog.yaml")
    with pytest.raises(ConfigError, match="is not an image reference"):
        with_catalog_images(text, {"python-cpu": "x: y\nimages: []"}, "catalog.yaml")


def test_node_join_makes_its_docker_trust_the_site_registry(site: Site, tmp_path: Path) -> None:
    """What node join writes: the site's CA where Docker looks for the registry's CA."""
    from jupyterhub_gpu.cli.node import trust_registry

    root = tmp_path / "node-root"
    assert trust_registry(site, root, HUB_IP) == f"{HUB_IP}:5443"
    trust = root / f"etc/docker/certs.d/{HUB_IP}:5443/ca.crt"
    assert trust.read_bytes() == site.ca_cert.read_bytes()
    assert trust.stat().st_mode & 0o777 == 0o644
    assert registry_trust("fd00::1") == "etc/docker/certs.d/[fd00::1]:5443/ca.crt"
