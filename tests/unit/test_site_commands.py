"""The administrator's commands: ``site init``/``add-node``, ``certs``, ``units install``,
``check-config`` and ``firewall``, on temporary site folders."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu import cli
from jupyterhub_gpu.cli import certs, check, layout, site, units
from jupyterhub_gpu.cli.layout import Site

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def paths(tmp_path: Path) -> Site:
    return Site(etc=tmp_path / "etc" / "jupyterhub-gpu", state=tmp_path / "var" / "jhgpu")


def init(s: Site, *extra: str) -> int:
    return cli.main(
        [
            "site",
            "init",
            "--etc",
            str(s.etc),
            "--state",
            str(s.state),
            "--hub-ip",
            "10.0.0.1",
            *extra,
        ]
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def ready(paths: Site) -> Site:
    """A site with one node and every certificate: check-config finds nothing."""
    assert init(paths, "--node", "gpu-a=127.0.0.1", "--ldap-server", "ldap.cs.uni.edu") == 0
    for argv in (
        ["ca"],
        ["hub"],
        ["public", "--address", "10.0.0.1"],
        ["node", "gpu-a", "--address", "127.0.0.1"],
    ):
        assert cli.main(["certs", "--etc", str(paths.etc), *argv]) == 0
    return paths


# ------------------------------------------------------------------------- site init
def test_site_init_lays_out_a_coherent_site(paths: Site) -> None:
    assert init(paths, "--node", "gpu-a=10.0.0.12") == 0
    assert sorted(p.name for p in paths.etc.iterdir()) == [
        "catalog.yaml",
        "jupyterhub_config.py",
        "nodes.yaml",
        "secrets",
        "tls",
    ]
    assert mode(paths.secrets) == 0o700 and mode(paths.state) == 0o700
    assert mode(paths.tls) == 0o700 and list(paths.tls.iterdir()) == []
    for secret in (paths.site_secret, paths.cookie_secret, paths.hub_env):
        assert mode(secret) == 0o600, secret
    assert len(bytes.fromhex(paths.cookie_secret.read_text().strip())) == 32  # JupyterHub's form
    assert "JUPYTERHUB_CRYPT_KEY=" in paths.hub_env.read_text()
    text = paths.config.read_text()
    # every path absolute, state under --state: nothing relative to the working directory
    assert f"STATE = Path('{paths.state}')".replace("'", '"') in text
    assert "c.JupyterHub.db_url = f\"sqlite:///{STATE / 'jupyterhub.sqlite'}\"" in text
    assert "c.GPUCluster.accounting_url = f\"sqlite:///{STATE / 'accounting.sqlite'}\"" in text
    assert 'c.JupyterHub.cookie_secret_file = str(ETC / "secrets" / "cookie-secret")' in text
    assert "@" not in text.replace("@ETC@", "")  # no placeholder left
    nodes = yaml.safe_load(paths.nodes_file.read_text())["nodes"]
    assert nodes == [
        {
            "name": "gpu-a",
            "docker_url": "tcp://10.0.0.12:2376",
            "address": "10.0.0.12",
            "tls": {
                "ca_cert": str(paths.ca_cert),
                "client_cert": str(paths.hub_cert),
                "client_key": str(paths.hub_key),
            },
            "agent_url": "https://10.0.0.12:9450",
        }
    ]
    assert paths.catalog.read_bytes() == (REPO / "images" / "catalog.yaml").read_bytes()


@pytest.fixture
def umask_0() -> Iterator[None]:
    """The caller's umask at its most open: every mode must be set, none inherited."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_site_folders_and_keys_have_their_modes_whatever_the_umask(
    paths: Site, umask_0: None
) -> None:
    assert init(paths, "--node", "gpu-a=127.0.0.1") == 0
    for argv in (["ca"], ["hub"], ["node", "gpu-a", "--address", "127.0.0.1"]):
        assert cli.main(["certs", "--etc", str(paths.etc), *argv]) == 0
    folders = [paths.tls, paths.tls / "nodes", paths.node_dir("gpu-a"), paths.secrets]
    for folder in [*folders, paths.state]:
        assert mode(folder) == 0o700, folder
    node = paths.node_dir("gpu-a")
    for key in (paths.ca_key, paths.hub_key, node / "key.pem", paths.site_secret):
        assert mode(key) == 0o600, key
    for cert in (paths.ca_cert, paths.hub_cert, node / "cert.pem", node / "ca.pem"):
        assert mode(cert) == 0o644, cert
    assert mode(paths.etc) == 0o755 and mode(paths.nodes_file) == 0o644


def test_certs_close_an_open_tls_folder(paths: Site) -> None:
    """A site made before ``site init`` made tls/ (or one an admin made by hand, open)."""
    assert init(paths) == 0
    paths.tls.mkdir(exist_ok=True)
    paths.tls.chmod(0o777)
    assert cli.main(["certs", "--etc", str(paths.etc), "ca"]) == 0
    assert mode(paths.tls) == 0o700


def test_site_init_refuses_an_existing_site_and_force_keeps_the_secrets(
    paths: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    assert init(paths) == 0
    secret, cookie = paths.site_secret.read_bytes(), paths.cookie_secret.read_bytes()
    paths.config.write_text("# the admin's edits\n")
    capsys.readouterr()
    assert init(paths) == 1
    err = capsys.readouterr().err
    assert f"{paths.etc} already holds a site" in err and "--force" in err
    assert paths.config.read_text() == "# the admin's edits\n"  # nothing changed
    paths.hub_env.unlink()
    assert init(paths, "--force", "--node", "gpu-b=10.0.0.13") == 0
    assert "check_config(c)" in paths.config.read_text()
    assert paths.site_secret.read_bytes() == secret and paths.cookie_secret.read_bytes() == cookie
    assert mode(paths.hub_env) == 0o600  # the missing one made again
    assert [n["name"] for n in yaml.safe_load(paths.nodes_file.read_text())["nodes"]] == ["gpu-b"]


def test_site_init_that_fails_half_way_leaves_nothing(
    paths: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = layout.write_atomic
    calls: list[Path] = []

    def failing(path: Path, data: bytes | str, mode: int = 0o644) -> None:
        calls.append(path)
        if len(calls) == 4:
            raise OSError(28, "No space left on device", str(path))
        real(path, data, mode)

    monkeypatch.setattr(site, "write_atomic", failing)
    assert init(paths) == 1
    assert len(calls) == 4
    assert not paths.etc.exists()
    assert list(paths.etc.parent.iterdir()) == []  # no temporary folder left either


def test_site_add_node_appends_to_the_one_list(paths: Site) -> None:
    assert init(paths, "--node", "gpu-a=10.0.0.12") == 0
    argv = ["site", "add-node", "--etc", str(paths.etc), "gpu-b", "--address", "gpu-b.lab"]
    assert cli.main(argv) == 0
    nodes = yaml.safe_load(paths.nodes_file.read_text())["nodes"]
    assert [(n["name"], n["docker_url"]) for n in nodes] == [
        ("gpu-a", "tcp://10.0.0.12:2376"),
        ("gpu-b", "tcp://gpu-b.lab:2376"),
    ]
    assert cli.main(argv) == 1  # the same name twice
    bad = ["site", "add-node", "--etc", str(paths.etc), "gpu c", "--address", "10.0.0.9"]
    assert cli.main(bad) == 1


# --------------------------------------------------------------------------- certs
def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str) -> str:
    """A real TLS handshake over 127.0.0.1; returns the client certificate's CN the
    server saw."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: dict[str, object] = {}

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server.wrap_socket(conn, server_side=True) as tls:
                seen["peer"] = tls.getpeercert()
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as e:
            seen["error"] = e

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client.wrap_socket(raw, server_hostname=server_hostname) as tls,
        ):
            assert tls.recv(2) == b"ok"
    finally:
        thread.join(10)
        listener.close()
    peer = seen["peer"]
    assert isinstance(peer, dict)
    return dict(x[0] for x in peer["subject"])["commonName"]


def _contexts(s: Site, node: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    folder = s.node_dir(node)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(folder / "ca.pem"))
    server.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    server.verify_mode = ssl.CERT_REQUIRED  # Docker's --tlsverify: a client certificate
    client = ssl.create_default_context(cafile=str(s.ca_cert))
    client.load_cert_chain(s.hub_cert, s.hub_key)
    return server, client


def test_certificates_make_a_real_tls_handshake(ready: Site) -> None:
    server, client = _contexts(ready, "gpu-a")
    assert _handshake(server, client, "127.0.0.1") == "jupyterhub-gpu hub"  # SAN: address
    server, client = _contexts(ready, "gpu-a")
    assert _handshake(server, client, "gpu-a") == "jupyterhub-gpu hub"  # SAN: node name
    for key in (ready.ca_key, ready.hub_key, ready.node_dir("gpu-a") / "key.pem"):
        assert mode(key) == 0o600, key


def test_a_node_added_later_is_signed_by_the_same_ca_and_a_wrong_name_is_refused(
    ready: Site,
) -> None:
    ca = ready.ca_cert.read_bytes()
    argv = ["certs", "--etc", str(ready.etc), "node", "gpu-b", "--address", "127.0.0.1"]
    assert cli.main([*argv, "--dns", "gpu-b.lab"]) == 0
    assert ready.ca_cert.read_bytes() == ca
    server, client = _contexts(ready, "gpu-b")
    assert _handshake(server, client, "gpu-b.lab") == "jupyterhub-gpu hub"
    server, client = _contexts(ready, "gpu-b")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, client, "gpu-a")  # not one of gpu-b's names


def test_a_client_of_another_ca_is_refused(ready: Site, tmp_path: Path) -> None:
    other = Site(etc=tmp_path / "other")
    certs.make_site_ca(other)
    certs.make_hub_cert(other)
    server, _ = _contexts(ready, "gpu-a")
    client = ssl.create_default_context(cafile=str(ready.ca_cert))
    client.load_cert_chain(other.hub_cert, other.hub_key)
    with pytest.raises((ssl.SSLError, OSError, AssertionError, KeyError)):
        _handshake(server, client, "127.0.0.1")


def test_certs_refuse_to_replace_and_need_the_ca(
    paths: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    etc = ["certs", "--etc", str(paths.etc)]
    assert cli.main([*etc, "hub"]) == 1
    assert f"{paths.ca_cert} does not exist" in capsys.readouterr().err
    assert cli.main([*etc, "ca"]) == 0
    ca = paths.ca_cert.read_bytes()
    assert cli.main([*etc, "ca"]) == 1
    err = capsys.readouterr().err
    assert f"{paths.ca_cert} already exists; nothing was changed" in err
    assert paths.ca_cert.read_bytes() == ca
    assert cli.main([*etc, "ca", "--force"]) == 0 and paths.ca_cert.read_bytes() != ca


def test_certs_node_prints_the_docker_settings(
    ready: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["certs", "--etc", str(ready.etc), "node", "gpu-c", "--address", "10.0.0.14"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert '"tcp://10.0.0.14:2376"' in out and '"tlsverify": true' in out
    # the stock unit passes -H fd://: the drop-in clears ExecStart before setting it
    assert "ExecStart=\nExecStart=/usr/sbin/dockerd --containerd" in out  # Debian's path
    assert " -H " not in out


# ---------------------------------------------------------------------------- units
def install(tmp_path: Path, *argv: str) -> int:
    return cli.main(
        [
            "units",
            "install",
            "--root",
            str(tmp_path / "root"),
            "--etc",
            "/etc/jupyterhub-gpu",
            "--state",
            "/var/lib/jupyterhub-gpu",
            "--venv",
            sys.prefix,
            *argv,
        ]
    )


def unit(tmp_path: Path, name: str) -> str:
    return (tmp_path / "root" / "etc/systemd/system" / name).read_text()


def test_units_install_renders_the_hub_agent_and_firewall(tmp_path: Path) -> None:
    assert install(tmp_path, "--hub") == 0
    hub = unit(tmp_path, "jupyterhub-gpu-hub.service")
    bin_ = f"{sys.prefix}/bin"
    assert f"ExecStart={bin_}/jupyterhub -f /etc/jupyterhub-gpu/jupyterhub_config.py" in hub
    assert f"ExecStartPre={bin_}/jupyterhub-gpu check-config --etc /etc/jupyterhub-gpu" in hub
    assert "EnvironmentFile=/etc/jupyterhub-gpu/secrets/hub.env" in hub
    assert "WorkingDirectory=/var/lib/jupyterhub-gpu" in hub
    # root (it makes homes with the users' uid/gid), but sandboxed as far as that allows
    for line in ("NoNewPrivileges=yes", "ProtectSystem=full", "PrivateTmp=yes"):
        assert f"\n{line}\n" in hub, line
    argv = ["--node", "gpu-a", "--address", "10.0.0.12", "--allow", "10.0.0.1:8081"]
    assert install(tmp_path, *argv) == 0
    agent = unit(tmp_path, "jupyterhub-gpu-agent.service")
    assert (
        f"ExecStart={bin_}/jupyterhub-gpu-agent --node gpu-a --ip 10.0.0.12 --port 9450 "
        "--token-file %d/agent-token --certfile %d/agent-cert --keyfile %d/agent-key\n"
    ) in agent
    assert "LoadCredential=agent-token:/etc/jupyterhub-gpu/agent.token" in agent
    assert "LoadCredential=agent-key:/etc/jupyterhub-gpu/tls/key.pem" in agent
    fw = unit(tmp_path, "jupyterhub-gpu-firewall.service")
    assert (
        f"ExecStart={bin_}/jupyterhub-gpu firewall --bridge jhgpu-users --allow 10.0.0.1:8081\n"
    ) in fw
    assert "BindsTo=docker.service" in fw and "WantedBy=docker.service" in fw
    # stopping the unit (or docker.service) must not open the bridge: no ExecStop=--remove
    service = [line for line in fw.splitlines() if not line.startswith("#")]
    assert not [line for line in service if line.startswith("ExecStop") or "--remove" in line]
    for text in (hub, agent, fw):
        assert "@" not in text
        sections = [line for line in text.splitlines() if line.startswith("[")]
        assert sections == ["[Unit]", "[Service]", "[Install]"]
        for line in text.splitlines():
            assert not line or line.startswith(("#", "[")) or "=" in line, line
    assert not (tmp_path / "root" / "etc/docker").exists()  # only with --docker-tls


def test_units_verify_with_systemd_analyze(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    argv = ["--hub", "--node", "gpu-a", "--address", "10.0.0.12", "--allow", "10.0.0.1:8081"]
    assert install(tmp_path, *argv) == 0
    folder = tmp_path / "root" / "etc/systemd/system"
    files = sorted(str(p) for p in folder.glob("*.service"))
    assert len(files) == 3
    r = subprocess.run([analyze, "verify", *files], capture_output=True, text=True)
    # unknown keys and bad values are warnings on stderr; executables are checked too
    lines = [line for line in r.stderr.splitlines() if "not found" not in line]
    assert r.returncode == 0 and lines == [], r.stderr


def node_tls(tmp_path: Path, name: str, address: str) -> Path:
    """A node's etc with its TLS folder as the hub made it (certs node), copied in."""
    hub = Site(etc=tmp_path / "hub-etc")
    for argv in (["ca"], ["node", name, "--address", address]):
        assert cli.main(["certs", "--etc", str(hub.etc), *argv]) == 0
    etc = tmp_path / "node-etc"
    shutil.copytree(hub.node_dir(name), etc / "tls")
    return etc


def test_units_install_refuses_tls_files_that_would_not_serve_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """daemon.json names the node's CA, certificate and key: a missing one, a certificate
    for another node or address, of another CA, or a key of another certificate is one
    sentence, and nothing is written."""
    etc = node_tls(tmp_path, "gpu-a", "10.0.0.12")
    tls = etc / "tls"
    good = {p.name: p.read_bytes() for p in tls.iterdir()}

    def refused(node: str, address: str) -> str:
        argv = ["--node", node, "--address", address, "--allow", "10.0.0.1:8081"]
        assert install(tmp_path, *argv, "--etc", str(etc), "--docker-tls") == 1
        assert not (tmp_path / "root").exists()  # nothing written
        (err,) = capsys.readouterr().err.strip().splitlines()
        for name, data in good.items():
            (tls / name).write_bytes(data)
        return err

    (tls / "key.pem").unlink()
    assert refused("gpu-a", "10.0.0.12").startswith(f"{tls}/key.pem does not exist: copy the")
    assert refused("gpu-b", "10.0.0.12").startswith(
        f"{tls}/cert.pem is for gpu-a, 10.0.0.12, not node gpu-b at 10.0.0.12:"
    )
    assert "not node gpu-a at 10.0.0.13" in refused("gpu-a", "10.0.0.13")
    other = node_tls(tmp_path / "other", "gpu-a", "10.0.0.12") / "tls"
    (tls / "key.pem").write_bytes((other / "key.pem").read_bytes())
    assert refused("gpu-a", "10.0.0.12") == (
        f"{tls}/key.pem is not the key of {tls}/cert.pem: copy the node's folder from the hub "
        f"({etc}/tls/nodes/gpu-a/ made by jupyterhub-gpu certs node gpu-a --address 10.0.0.12)"
        f" to {tls}/; nothing was written."
    )
    (tls / "ca.pem").write_bytes((other / "ca.pem").read_bytes())
    assert "is not signed by the site's CA" in refused("gpu-a", "10.0.0.12")
    argv = ["--node", "gpu-a", "--address", "10.0.0.12", "--allow", "10.0.0.1:8081"]
    assert install(tmp_path, *argv, "--etc", str(etc), "--docker-tls") == 0


def test_units_install_keeps_the_site_values_where_the_units_read_them(tmp_path: Path) -> None:
    """The guide's variables block outlives the shell: units install writes ETC/site.env
    (under --root), every unit reads it, and a root shell after a reboot sources it; the
    hub's install on the same machine keeps the node's values."""
    argv = ["--node", "gpu-a", "--address", "10.0.0.12", "--allow", "10.0.0.1:8081"]
    assert install(tmp_path, *argv, "--allow", "10.0.0.1:9090") == 0
    assert install(tmp_path, "--hub") == 0
    env = tmp_path / "root/etc/jupyterhub-gpu/site.env"
    for name in ("jupyterhub-gpu-hub", "jupyterhub-gpu-agent", "jupyterhub-gpu-firewall"):
        assert "\nEnvironmentFile=-/etc/jupyterhub-gpu/site.env\n" in unit(
            tmp_path, f"{name}.service"
        )
    shell = subprocess.run(
        ["bash", "-c", f'set -a; . {env}; set +a; echo "$NODE|$NODE_IP|$ALLOW|$ETC|$STATE|$VENV"'],
        capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert shell.stdout.strip() == (
        f"gpu-a|10.0.0.12|10.0.0.1:8081 10.0.0.1:9090|/etc/jupyterhub-gpu|"
        f"/var/lib/jupyterhub-gpu|{sys.prefix}"
    )


def test_units_install_docker_tls_and_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    etc = node_tls(tmp_path, "gpu-a", "10.0.0.12")
    node = ["--node", "gpu-a", "--address", "10.0.0.12", "--etc", str(etc)]
    assert install(tmp_path, *node) == 1
    assert "--allow HUB_IP:PORT" in capsys.readouterr().err
    assert install(tmp_path) == 1
    root = tmp_path / "root"
    (root / "etc/docker").mkdir(parents=True)
    # a daemon.json with settings of its own (the NVIDIA runtime of nvidia-ctk): merged
    nvidia = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}
    (root / "etc/docker/daemon.json").write_text(json.dumps(nvidia))
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/dockerd").write_text("")  # Docker's own packages put it there
    assert install(tmp_path, *node, "--allow", "10.0.0.1:8081", "--docker-tls") == 0
    merged = json.loads((root / "etc/docker/daemon.json").read_text())
    assert merged["runtimes"] == nvidia["runtimes"] and merged["tlsverify"] is True
    drop_in = (root / "etc/systemd/system/docker.service.d/jupyterhub-gpu-tls.conf").read_text()
    assert "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd" in drop_in
    # one that sets our keys otherwise is refused, with what to merge by hand
    (root / "etc/docker/daemon.json").write_text('{"hosts": ["fd://"], "log-driver": "journald"}')
    assert install(tmp_path, *node, "--allow", "10.0.0.1:8081", "--docker-tls") == 1
    err = capsys.readouterr().err
    assert f"{root}/etc/docker/daemon.json already sets hosts otherwise" in err
    assert '"tlsverify"' in err
    (root / "etc/docker/daemon.json").unlink()
    assert install(tmp_path, *node, "--allow", "10.0.0.1:8081", "--docker-tls") == 0
    daemon = yaml.safe_load((root / "etc/docker/daemon.json").read_text())
    assert daemon["hosts"] == ["unix:///var/run/docker.sock", "tcp://10.0.0.12:2376"]
    assert daemon["tlscert"] == f"{etc}/tls/cert.pem" and daemon["tlsverify"]


def test_firewall_command_runs_the_packaged_script() -> None:
    code = "import sys; from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run(
        [sys.executable, "-c", code, "firewall", "--dry-run", "--allow", "10.0.0.1:8081"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "iptables -A JHGPU-FORWARD -d 10.0.0.1 -p tcp --dport 8081 -j RETURN" in r.stdout
    assert units.firewall_script().is_file()


# --------------------------------------------------------------------- check-config
def problems(s: Site) -> list[str]:
    return check.check(s, s.config)


def test_check_config_passes_a_fresh_site(ready: Site, capsys: pytest.CaptureFixture[str]) -> None:
    assert problems(ready) == []
    argv = ["check-config", "--etc", str(ready.etc), "--state", str(ready.state)]
    assert cli.main(argv) == 0
    assert "no problem found" in capsys.readouterr().out


def test_check_config_names_a_missing_certificate(
    ready: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    ready.hub_key.unlink()
    argv = ["check-config", "--etc", str(ready.etc), "--state", str(ready.state)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert (
        f"{ready.hub_key} ({ready.nodes_file}, node 'gpu-a', tls.client_key) does not exist: "
        f"make it: jupyterhub-gpu certs hub --etc {ready.etc}."
    ) in err
    ready.ca_cert.unlink()
    assert any(
        p.startswith(f"{ready.ca_cert} (AgentClient.ca_cert") and "certs ca" in p
        for p in problems(ready)
    )


def test_check_config_names_a_secret_readable_by_others_or_unreadable(ready: Site) -> None:
    ready.site_secret.chmod(0o644)
    assert problems(ready) == [
        f"{ready.site_secret} (the node agents' site secret) can be read by other users "
        f"(mode 0644): chmod 600 {ready.site_secret}."
    ]
    ready.site_secret.chmod(0o600)
    ready.cookie_secret.unlink()
    ready.cookie_secret.mkdir()  # unreadable as a file, for root too
    (found,) = problems(ready)
    assert found.startswith(f"{ready.cookie_secret} (the hub's cookie secret) is not a file")
    ready.cookie_secret.rmdir()
    found_missing = problems(ready)
    assert found_missing == [
        f"{ready.cookie_secret} (the hub's cookie secret) does not exist: restore it from the "
        "site's backup (a new one logs everyone out), or make a new one with jupyterhub-gpu "
        f"site init --force --etc {ready.etc}."
    ]
    if os.geteuid() != 0:
        ready.cookie_secret.write_text("00" * 32)
        ready.cookie_secret.chmod(0)
        assert "cannot be read (Permission denied)" in problems(ready)[0]


def test_check_config_names_a_mistyped_key(ready: Site) -> None:
    text = ready.config.read_text()
    ready.config.write_text(text.replace("c.GPUCluster.nodes_file", "c.GPUCluster.nodesfile"))
    (found,) = problems(ready)
    assert found.startswith(f"{ready.config}: c.GPUCluster.nodesfile is not a setting")
    assert "did you mean GPUCluster.nodes_file?" in found
    ready.config.write_text(
        text.replace("c.JupyterHub.hub_connect_ip", "c.JupyterHub.hub_conect_ip")
    )
    line = 1 + text.splitlines().index('c.JupyterHub.hub_connect_ip = "10.0.0.1"')
    assert problems(ready) == [
        f"{ready.config}, line {line}: c.JupyterHub.hub_conect_ip is not a setting of "
        "JupyterHub: did you "
        "mean c.JupyterHub.hub_connect_ip? fix the key, or remove the line."
    ]


def test_check_config_names_unknown_classes_and_keys_of_parent_classes(ready: Site) -> None:
    """A section no class reads, and a key of a parent class's section that no class
    extending it has, are each one line with its line number; a key a subclass reads in
    its parent's section (c.Spawner.image is DockerSpawner's) passes."""
    text = ready.config.read_text()
    n = len(text.splitlines())
    ready.config.write_text(
        text
        + "c.Spawner.cpu_limitt = 3\nc.GPUDockerSpawnr.x = 1\n"
        + "c.LocalAuthenticator.create_system_userz = True\nc.Spawner.image = 'x'\n"
    )
    assert problems(ready) == [
        f"{ready.config}, line {n + 2}: c.GPUDockerSpawnr is not a class the hub runs, so "
        "none of its settings is read: did you mean c.GPUDockerSpawner? fix the name, or "
        "remove its lines.",
        f"{ready.config}, line {n + 3}: c.LocalAuthenticator.create_system_userz is not a "
        "setting of LocalAuthenticator: did you mean c.LocalAuthenticator.create_system_users?"
        " fix the key, or remove the line.",
        f"{ready.config}, line {n + 1}: c.Spawner.cpu_limitt is not a setting of Spawner: did "
        "you mean c.Spawner.cpu_limit? fix the key, or remove the line.",
    ]


def test_check_config_says_a_syntax_error_in_one_sentence(
    ready: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    text = ready.config.read_text()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "cleanup_servers" in line)
    lines[at] += ")"
    ready.config.write_text("\n".join(lines) + "\n")
    argv = ["check-config", "--etc", str(ready.etc), "--state", str(ready.state)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"{ready.config}, line {at + 1}: unmatched ')': fix that line.",
        f"1 problem(s) with {ready.config}: fix them before starting the hub",
    ]


@pytest.mark.parametrize(
    ("before", "after", "said"),
    [
        (
            "name: gpu-a",
            "name: gpu_a!",
            "nodes[0].name: must be letters, digits, '.', '_' or '-', got 'gpu_a!'",
        ),
        (
            "agent_url: https://127.0.0.1:9450",
            "agent_url: 127.0.0.1:9450",
            "nodes[0] (gpu-a).agent_url: the node agent's URL, https://HOST:9450, got "
            "'127.0.0.1:9450'",
        ),
        (
            "agent_url: https://127.0.0.1:9450",
            "agent_url: https://127.0.0.1:9450\n  labels: x",
            "nodes[0] (gpu-a).labels: a mapping of names to values (e.g. rack: b2), got 'x'",
        ),
        (
            "    client_cert:",
            "    client_certt:",
            "nodes[0] (gpu-a).tls: a mapping with all of ['ca_cert', 'client_cert', 'client_key']",
        ),
        ("  address: 127.0.0.1", " address: 127.0.0.1", "not valid YAML"),
    ],
)
def test_check_config_says_one_bad_nodes_file_field_in_one_line(
    ready: Site, before: str, after: str, said: str
) -> None:
    """One bad field of the nodes file is one line naming the file and the field: not the
    hub's error again, nor the empty list, missing certificates or files that follow."""
    nodes = ready.nodes_file.read_text()
    assert before in nodes
    ready.nodes_file.write_text(nodes.replace(before, after))
    (found,) = problems(ready)
    assert found.startswith(f"{ready.nodes_file}: {said}"), found
    assert found.endswith("; fix that entry (fields: docs/nodes.md).") and "\n" not in found


@pytest.mark.parametrize(
    ("init_args", "said"),
    [
        (
            ["--hub-ip", "127.0.0.1", "--node", "gpu-b=10.0.0.12"],
            "c.JupyterHub.hub_connect_ip is 127.0.0.1, which the GPU nodes (gpu-b) cannot "
            "reach: set c.JupyterHub.hub_connect_ip to the hub's address on the nodes' network",
        ),
        (
            [
                "--hub-ip",
                "10.0.0.1",
                "--node",
                "gpu-b=10.0.0.12",
                "--ldap-server",
                "ldap.example.org:636",
            ],
            "c.GPULDAPAuthenticator.server_address is 'ldap.example.org', an example name: set "
            "your LDAP server's host name",
        ),
        (
            ["--hub-ip", "10.0.0.1", "--node", "gpu-b=gpu-b.lab.example"],
            "node 'gpu-b' has the example address 'gpu-b.lab.example': put the IP or host "
            "name the hub reaches that node at.",
        ),
    ],
)
def test_check_config_flags_placeholder_and_loopback_values(
    paths: Site, init_args: list[str], said: str
) -> None:
    """Values left as the examples' (or site init's defaults) are named, with what to put
    instead; a hub on loopback is fine while every node is local (the ready site)."""
    argv = ["site", "init", "--etc", str(paths.etc), "--state", str(paths.state)]
    assert cli.main([*argv, "--ldap-server", "ldap.cs.uni.edu", *init_args]) == 0
    name, _, address = init_args[init_args.index("--node") + 1].partition("=")
    for certs_argv in (
        ["ca"],
        ["hub"],
        ["public", "--address", "127.0.0.1"],
        ["node", name, "--address", address],
    ):
        assert cli.main(["certs", "--etc", str(paths.etc), *certs_argv]) == 0
    (found,) = problems(paths)
    assert said in found, found


def test_check_config_names_a_missing_nodes_file_an_empty_one_and_relative_paths(
    ready: Site,
) -> None:
    nodes = ready.nodes_file.read_text()
    ready.nodes_file.unlink()
    found = problems(ready)
    assert any(
        p.startswith(f"{ready.nodes_file} (GPUCluster.nodes_file) does not exist") for p in found
    ), found
    ready.nodes_file.write_text("nodes: []\n")
    # the site's join service adds them (`node join`): no node yet is a site to come
    assert not any("lists no node" in p for p in problems(ready))
    text = ready.config.read_text()
    ready.config.write_text(text.replace("configure_join(c, etc=ETC, state=STATE)", ""))
    assert any("lists no node" in p and "site add-node" in p for p in problems(ready))
    ready.config.write_text(text)
    ready.nodes_file.write_text(nodes)
    text = ready.config.read_text()
    ready.config.write_text(
        text.replace(
            "c.GPUCluster.accounting_url = f\"sqlite:///{STATE / 'accounting.sqlite'}\"",
            'c.GPUCluster.accounting_url = "sqlite:///accounting.sqlite"',
        )
    )
    assert problems(ready) == [
        f"{ready.config}: GPUCluster.accounting_url 'sqlite:///accounting.sqlite' is "
        "relative to the hub's working directory: name an absolute path (e.g. "
        f"sqlite:///{ready.state}/accounting.sqlite)."
    ]


def test_check_config_names_state_left_in_the_working_directory(ready: Site) -> None:
    text = ready.config.read_text()
    ready.config.write_text(
        "\n".join(
            line
            for line in text.splitlines()
            if not line.startswith(("c.JupyterHub.db_url", "c.JupyterHub.cookie_secret_file"))
        )
    )
    assert problems(ready) == [
        f"{ready.config}: JupyterHub.db_url 'sqlite:///jupyterhub.sqlite' is relative to the "
        "hub's working directory: name an absolute path (e.g. "
        f"sqlite:///{ready.state}/jupyterhub.sqlite).",
        f"{ready.config}: JupyterHub.cookie_secret_file is not set, so the cookie secret (which "
        "also keys the containers' seals) lands in the hub's working directory: set it to "
        f"{ready.cookie_secret}.",
    ]


def test_check_config_names_a_node_named_differently_in_two_places(ready: Site) -> None:
    nodes = ready.nodes_file.read_text()
    ready.nodes_file.write_text(nodes.replace("name: gpu-a", "name: gpu-aa"))
    assert problems(ready) == [
        f"{ready.nodes_file} names node 'gpu-aa', but {ready.tls / 'nodes'} has no certificate "
        "for it (it has: gpu-a): a name mistyped in one place, or make it: jupyterhub-gpu "
        f"certs node gpu-aa --address 127.0.0.1 --etc {ready.etc}."
    ]
    ready.nodes_file.write_text(nodes.replace("address: 127.0.0.1", "address: 127.0.0.2"))
    (found,) = problems(ready)
    assert found.startswith(f"{ready.node_dir('gpu-a') / 'cert.pem'} is for gpu-a, 127.0.0.1")
    assert "not 127.0.0.2" in found and "--force" in found


def test_check_config_names_a_missing_state_folder_once(ready: Site) -> None:
    shutil.rmtree(ready.state)
    assert problems(ready) == [
        f"{ready.state} (the folder of JupyterHub.db_url, {ready.hub_db}) does not exist: "
        f"create it (mkdir -m 700 -p {ready.state}) or point the setting elsewhere."
    ]


def test_check_config_wants_check_config_called(ready: Site) -> None:
    text = ready.config.read_text()
    ready.config.write_text(text.replace("\ncheck_config(c)\n", "\n"))
    (found,) = problems(ready)
    assert found.startswith(f"{ready.config} does not call check_config(c)")


def test_check_config_names_an_import_path_we_do_not_have(ready: Site) -> None:
    """A configuration importing a module jupyterhub-gpu does not have (an old path that
    went, docs/upgrade.md) is told where the new paths are listed, not that jupyterhub-gpu
    is not installed."""
    text = ready.config.read_text()
    old = "from jupyterhub_gpu.hub.config import check_config"
    assert old in text
    wrong = "from jupyterhub_gpu.hub.configuration import check_config"
    ready.config.write_text(text.replace(old, wrong))
    (found,) = problems(ready)
    assert found == (
        f"{ready.config}: it imports 'jupyterhub_gpu.hub.configuration', which "
        "jupyterhub-gpu does not have: an old path? docs/upgrade.md ('Import paths that "
        "went') names the new one."
    )


def test_check_config_of_a_missing_config(paths: Site, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-config", "--etc", str(paths.etc), "--state", str(paths.state)]) == 1
    assert f"{paths.config} (the hub's configuration) does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------------ cli
def test_a_hub_command_without_the_hub_install_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(sys.modules):
        if name == "jupyterhub_gpu.cli.report" or name.startswith(
            "jupyterhub_gpu.edges.accounting"
        ):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    assert cli.main(["report", "--by", "user"]) == 2
    err = capsys.readouterr().err
    assert "jupyterhub-gpu report needs 'sqlalchemy'" in err
    assert "pip install 'jupyterhub-gpu[hub]'" in err


def test_package_data_is_declared(tmp_path: Path) -> None:
    """Every file the package reads at run time is named in setup.cfg's package_data or
    MANIFEST.in (the wheel test installs it for real)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    declared = cfg["options.package_data"]
    assert declared["jupyterhub_gpu.cli.files"].split(", ") == ["*.sh", "units/*.in", "site/*.in"]
    shipped = sorted(
        p.relative_to(REPO / "jupyterhub_gpu" / "cli" / "files").as_posix()
        for p in (REPO / "jupyterhub_gpu" / "cli" / "files").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert shipped == [
        "node-firewall.sh",
        "site/jupyterhub_config.py.in",
        "units/jupyterhub-gpu-agent.service.in",
        "units/jupyterhub-gpu-firewall.service.in",
        "units/jupyterhub-gpu-hub.service.in",
        "units/jupyterhub-gpu-registry.service.in",
    ]
    base = [
        r.split(">")[0].split("<")[0].strip()
        for r in cfg["options"]["install_requires"].split("\n")
        if r.strip()
    ]
    assert "jupyterhub" not in base and "sqlalchemy" not in base
    assert "docker" in base  # check-node --local on a node's install talks to its engine
    assert "jupyterhub" in cfg["options.extras_require"]["hub"]


def test_the_nodes_file_alone_lists_the_nodes(tmp_path: Path) -> None:
    """``nodes = []`` with a nodes file (the site's one list): the spawner accepts it and
    check_config reads the file's nodes only, not the local engine besides."""
    from traitlets.config import Config

    from jupyterhub_gpu.errors import ConfigError
    from jupyterhub_gpu.hub.cluster_settings import gpu_cluster
    from jupyterhub_gpu.hub.config import check_config

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("nodes: []\n")
    c = Config()
    c.GPUDockerSpawner.nodes = []
    c.GPUDockerSpawner.nodes_file = str(nodes)
    check_config(c)  # an empty nodes file: a site whose nodes join later (`node join`)
    bare = Config()
    bare.GPUDockerSpawner.nodes = []  # no node and no nodes file: nowhere to run
    with pytest.raises(ConfigError, match="declare at least one node"):
        check_config(bare)
    entry = {"name": "gpu-a", "docker_url": "unix:///run/a.sock", "address": "10.0.0.12"}
    nodes.write_text(yaml.safe_dump({"nodes": [entry, {**entry, "name": "local"}]}))
    check_config(c)  # no second "local" from the default
    assert gpu_cluster(c, logging.getLogger("test")).nodes == []  # as the hub reads it


def test_check_config_names_a_proxy_that_is_not_installed(ready: Site) -> None:
    """JupyterHub says the proxy is missing only when it starts; check-config says it first."""
    text = ready.config.read_text()
    ready.config.write_text(
        text + '\nc.ConfigurableHTTPProxy.command = ["/nowhere/configurable-http-proxy"]\n'
    )
    (found,) = problems(ready)
    assert "'/nowhere/configurable-http-proxy', is not installed here" in found
    assert "npm install -g configurable-http-proxy" in found
    ready.config.write_text(text + "\nc.ConfigurableHTTPProxy.should_start = False\n")
    assert problems(ready) == []  # a proxy run as its own service is not the hub's to check


def test_one_version_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    """``jupyterhub-gpu --version``, the agent and the services print the package's one
    version (setup.cfg reads it from ``jupyterhub_gpu.__version__``), never traitlets'
    ``0.0``."""
    import jupyterhub_gpu
    from jupyterhub_gpu.services.agent.app import GPUAgent
    from jupyterhub_gpu.services.base import HubService

    version = jupyterhub_gpu.__version__
    assert version and version != "0.0"
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"jupyterhub-gpu {version}"
    assert GPUAgent.version == HubService.version == version
    agent = subprocess.run(
        [
            sys.executable,
            "-c",
            "from jupyterhub_gpu.services.agent.app import main; main()",
            "--version",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert agent.stdout.strip() == version, agent.stdout + agent.stderr
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["metadata"]["version"] == "attr: jupyterhub_gpu.__version__"


# ------------------------------------------------------------------------- LDAP server
@pytest.mark.parametrize(
    ("value", "tls", "expected"),
    [
        ("ldaps://ldap.cs.uni.edu", None, ("ldap.cs.uni.edu", 636, "on_connect")),
        ("ldaps://ldap.cs.uni.edu:1636/", None, ("ldap.cs.uni.edu", 1636, "on_connect")),
        ("ldap://ldap.cs.uni.edu", None, ("ldap.cs.uni.edu", 389, "before_bind")),
        ("ldap://10.0.0.5:10389", "insecure", ("10.0.0.5", 10389, "insecure")),
        ("ldap.cs.uni.edu", None, ("ldap.cs.uni.edu", 636, "on_connect")),
        ("ldap.cs.uni.edu:389", None, ("ldap.cs.uni.edu", 389, "before_bind")),
        ("[2001:db8::5]:636", None, ("2001:db8::5", 636, "on_connect")),
    ],
)
def test_ldap_server_urls_are_parsed_in_one_place(
    value: str, tls: str | None, expected: tuple[str, int, str]
) -> None:
    from jupyterhub_gpu.wire.ldap_server import parse_ldap_server

    server = parse_ldap_server(value, tls)
    assert (server.host, server.port, server.tls) == expected


@pytest.mark.parametrize(
    ("value", "tls", "said"),
    [
        ("http://ldap.cs.uni.edu", None, "the scheme 'http' is not LDAP's"),
        ("ldaps://ldap.cs.uni.edu/dc=uni", None, "the base DN is --ldap-base"),
        ("ldaps://", None, "no valid host name"),
        ("ldap.cs.uni.edu:99999", None, "not a server address"),
        ("ldaps://ldap.cs.uni.edu", "before_bind", "is LDAPS, but --ldap-tls says before_bind"),
    ],
)
def test_site_init_refuses_a_bad_ldap_server_in_one_sentence(
    paths: Site, capsys: pytest.CaptureFixture[str], value: str, tls: str | None, said: str
) -> None:
    extra = ["--ldap-tls", tls] if tls else []
    assert init(paths, "--ldap-server", value, *extra) == 1
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not paths.etc.exists()  # nothing half-done


def test_site_init_takes_ldaps_urls_and_a_search_account(paths: Site) -> None:
    """``--ldap-server ldaps://...`` (a traceback before) and the search options give the
    authenticator's settings."""
    assert (
        init(
            paths,
            "--ldap-server",
            "ldaps://ldap.cs.uni.edu",
            "--ldap-search-base",
            "ou=people,dc=cs,dc=uni,dc=edu",
            "--ldap-search-dn",
            "cn=hub,ou=services,dc=cs,dc=uni,dc=edu",
        )
        == 0
    )
    text = paths.config.read_text()
    for line in (
        'ldap.server_address = "ldap.cs.uni.edu"',
        "ldap.server_port = 636",
        'ldap.tls_strategy = "on_connect"',
        "ldap.bind_dn_template = []",
        "ldap.lookup_dn = True",
        "ldap.user_search_base = 'ou=people,dc=cs,dc=uni,dc=edu'",
        "ldap.lookup_dn_search_user = 'cn=hub,ou=services,dc=cs,dc=uni,dc=edu'",
    ):
        assert line in text, line
    assert init(paths, "--force", "--ldap-search-dn", "cn=hub,dc=x") == 1  # needs the base


# ---------------------------------------------------------------- certificate renewal
def expiring(site: Site, cert_path: Path, key_path: Path, days: float) -> None:
    """Replace the certificate at ``cert_path`` by one for the same key and names, signed
    by the site's CA, that expires in ``days``."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    old = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    ca_key = serialization.load_pem_private_key(site.ca_key.read_bytes(), password=None)
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(old.issuer)
        .public_key(key.public_key())  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=800))
        .not_valid_after(now + dt.timedelta(days=days))
    )
    for ext in old.extensions:
        builder = builder.add_extension(ext.value, ext.critical)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def public_key(path: Path) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    return (
        x509.load_pem_x509_certificate(path.read_bytes())
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def test_check_node_warns_30_days_ahead_and_certs_renew_fixes_it(ready: Site) -> None:
    """A node certificate 12 days from expiry (and a hub certificate expired) fails
    check-node's certificates line with the renewal; `certs renew` keeps the key (or
    rotates it) and the names, and the line passes again."""
    import time

    from jupyterhub_gpu.cli.check_node import hub_certificates, local_certificates
    from jupyterhub_gpu.core.nodecheck import certificate_check
    from jupyterhub_gpu.wire.nodes_file import parse_nodes

    (spec,) = parse_nodes(yaml.safe_load(ready.nodes_file.read_text())["nodes"])
    node_dir = ready.node_dir("gpu-a")
    check = certificate_check("gpu-a", hub_certificates(spec), time.time())
    assert check.ok and check.detail.startswith("3 valid for 82"), check
    expiring(ready, node_dir / "cert.pem", node_dir / "key.pem", 12.3)
    expiring(ready, ready.hub_cert, ready.hub_key, -3.2)
    check = certificate_check("gpu-a", hub_certificates(spec), time.time())
    assert not check.ok
    assert check.detail == (
        f"the hub's client certificate {ready.hub_cert} expired 3 days 4 h ago; the node's "
        f"certificate {node_dir}/cert.pem expires in 12 days 7 h"
    ), check.detail
    assert check.fix == (
        f"jupyterhub-gpu certs renew hub --etc {ready.etc}; jupyterhub-gpu certs renew node "
        f"gpu-a --etc {ready.etc}, then copy {node_dir}/cert.pem to the node's {ready.etc}/tls/ "
        "and restart docker and jupyterhub-gpu-agent there"
    )
    # on the node itself (--local), its copy of the certificate
    local = certificate_check("gpu-a", local_certificates(ready.etc / "nodes-copy", "gpu-a"), 0)
    assert local.ok and local.detail == "no TLS certificate in use"
    shutil.copytree(node_dir, ready.etc / "node" / "tls")
    (found,) = local_certificates(ready.etc / "node", "gpu-a")
    assert not certificate_check("gpu-a", [found], time.time()).ok
    assert "on the hub: jupyterhub-gpu certs renew node gpu-a" in found.renew

    key_before, names_before = public_key(node_dir / "cert.pem"), (node_dir / "cert.pem")
    assert cli.main(["certs", "--etc", str(ready.etc), "renew", "all"]) == 0
    assert public_key(node_dir / "cert.pem") == key_before  # the same key
    check = certificate_check("gpu-a", hub_certificates(spec), time.time())
    assert check.ok, check
    assert check_san(names_before) == ["gpu-a", "127.0.0.1"]
    assert (
        cli.main(["certs", "--etc", str(ready.etc), "renew", "node", "gpu-a", "--rotate-key"]) == 0
    )
    assert public_key(node_dir / "cert.pem") != key_before
    assert check_san(node_dir / "cert.pem") == ["gpu-a", "127.0.0.1"]
    assert mode(node_dir / "key.pem") == 0o600
    # the renewed pair still serves the node: units install --docker-tls accepts it
    from jupyterhub_gpu.cli.units import node_tls_problem

    node_site = Site(etc=ready.etc / "node2")
    shutil.copytree(node_dir, node_site.tls)
    assert node_tls_problem(node_site, "gpu-a", "127.0.0.1") == ""


def check_san(path: Path) -> list[str]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in san]


# ---------------------------------------------------------- a node's install: no hub
#: the import names of the hub extra's distributions
IMPORT_NAMES = {"jupyterhub-ldapauthenticator": "ldapauthenticator", "psycopg[binary]": "psycopg"}
BLOCKER = """
import importlib.abc, sys
BLOCKED = set({blocked!r})
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
"""


def node_install_blocked() -> set[str]:
    """What a node's install (the base requirements, no ``hub`` extra) lacks: every
    distribution of the hub extra that the base does not require, by import name."""
    import configparser
    import re

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")

    def names(text: str) -> set[str]:
        found = {re.split(r"[<>=!~\\[ ]", line.strip())[0].lower() for line in text.splitlines()}
        return {IMPORT_NAMES.get(n, n) for n in found if n}

    return names(cfg["options.extras_require"]["hub"]) - names(cfg["options"]["install_requires"])


def test_check_node_local_runs_on_a_node_install_without_jupyterhub(
    ready: Site, tmp_path: Path
) -> None:
    """check-node --local on a node's install (JupyterHub and the rest of the hub extra
    unimportable): it runs its checks, here the node's certificate made to expire soon,
    instead of asking for the hub's install."""
    blocked = node_install_blocked()
    assert {"jupyterhub", "dockerspawner", "sqlalchemy", "jinja2"} <= blocked
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(blocked)))
    shutil.copytree(ready.node_dir("gpu-a"), ready.etc / "node" / "tls")
    expiring(ready, ready.etc / "node/tls/cert.pem", ready.etc / "node/tls/key.pem", 9.3)
    code = "import sys; from jupyterhub_gpu.cli import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run(
        [sys.executable, "-c", code, "check-node", "--local", "--only", "certificates", "--json",
         "--etc", str(ready.etc / "node"), "--node", "gpu-a"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": f"{tmp_path / 'block'}:{REPO}"},
    )  # fmt: skip
    assert "hub's install" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    checks = {c["check"]: c for c in json.loads(r.stdout)}
    assert r.returncode == 1  # the certificate (and, with no GPU here, NVML)
    cert = checks["certificates"]
    assert not cert["ok"] and "expires in 9 days 7 h" in cert["detail"], cert
    assert cert["fix"].startswith("on the hub: jupyterhub-gpu certs renew node gpu-a")
    probe = subprocess.run(
        [sys.executable, "-c", "import jupyterhub"], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": f"{tmp_path / 'block'}:{REPO}"}, check=False,
    )  # fmt: skip
    assert probe.returncode != 0  # the blocker did block it
