"""Per-node agent tokens (one site secret, one token per node), the agent's ``--print-token``
and TLS settings, and the hub's ``c.AgentClient.*`` settings reaching the client."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from pathlib import Path

import pytest
from traitlets.config import Config

from jupyterhub_gpu.core.tokens import MIN_SECRET_LENGTH, node_token
from jupyterhub_gpu.edges.agents import AgentClient, AgentEndpoint, Unreachable, agent_client
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.spawner import GPUDockerSpawner
from jupyterhub_gpu.services.agent.app import GPUAgent, make_ssl_context
from tests.support.runtime import use_cluster

pytestmark = pytest.mark.unit

SECRET = "sixteen-chars-secret-xyz"


@pytest.mark.parametrize(
    ("secret", "node", "expected"),
    [
        # printf %s gpu-b | openssl dgst -sha256 -hmac sixteen-chars-secret-xyz
        (SECRET, "gpu-b", "0bb8fb1f7c20d7c8de601b82603c1ea1fe466eec9ab664fc14a846daae4d8d68"),
        # a token file's newline and spaces are not part of the secret
        (
            f"  {SECRET}\n",
            "gpu-b",
            "0bb8fb1f7c20d7c8de601b82603c1ea1fe466eec9ab664fc14a846daae4d8d68",
        ),
    ],
)
def test_token_is_hmac_sha256_of_the_node_name(secret: str, node: str, expected: str) -> None:
    assert node_token(secret, node) == expected


def test_each_node_gets_its_own_token() -> None:
    nodes = ["gpu-a", "gpu-b", "gpu-b ", "GPU-B", "gpu-a.example.org", "node-1", "node-10"]
    tokens = [node_token(SECRET, n) for n in nodes]
    assert len(set(tokens)) == len(nodes)
    assert all(len(t) == 64 and int(t, 16) >= 0 for t in tokens)
    assert node_token(SECRET + "x", "gpu-a") != node_token(SECRET, "gpu-a")  # another site


@pytest.mark.parametrize(
    ("secret", "node", "message"),
    [
        ("", "gpu-a", "at least 16"),
        ("   \n", "gpu-a", "at least 16"),
        ("x" * (MIN_SECRET_LENGTH - 1), "gpu-a", "at least 16"),
        (SECRET, "", "a node name is needed"),
    ],
)
def test_weak_secrets_give_no_token(secret: str, node: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        node_token(secret, node)
    assert not secret.strip() or secret.strip() not in str(e.value)


def test_the_hubs_endpoint_carries_the_derived_token_only() -> None:
    endpoint = AgentEndpoint.for_node("gpu-b", "http://10.0.0.12:9450", SECRET)
    assert endpoint.token == node_token(SECRET, "gpu-b")
    assert SECRET not in repr(endpoint) and endpoint.token not in repr(endpoint)
    assert AgentEndpoint.for_node("gpu-b", "http://10.0.0.12:9450", "short").token == ""


def test_without_a_usable_secret_nothing_is_sent() -> None:
    client = AgentClient()
    endpoint = AgentEndpoint.for_node("gpu-b", "http://127.0.0.1:9", "")
    reading = asyncio.run(client.read(endpoint))
    assert isinstance(reading, Unreachable)
    assert "no agent token: set c.GPUCluster.agent_token" in reading.error


def test_print_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "site-secret"
    secret.write_text(SECRET + "\n")
    app = GPUAgent()
    app.initialize(["--print-token", "--node=gpu-b", f"--site-secret-file={secret}"])
    app.start()
    assert capsys.readouterr().out == node_token(SECRET, "gpu-b") + "\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--print-token", "--node=gpu-b"], "needs --node NAME and --site-secret-file"),
        (["--print-token", "--site-secret-file={secret}"], "needs --node NAME"),
        (["--print-token", "--node=n", "--site-secret-file={tmp}/none"], "cannot read"),
        (["--print-token", "--node=n", "--site-secret-file={short}"], "at least 16"),
    ],
)
def test_print_token_says_what_is_missing(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "short").write_text("short")
    paths = {"secret": tmp_path / "secret", "short": tmp_path / "short", "tmp": tmp_path}
    app = GPUAgent()
    app.initialize([a.format(**paths) for a in args])
    with pytest.raises(ConfigError, match=message) as e:
        app.start()
    assert SECRET not in str(e.value)


def test_tls_settings_are_checked_at_start(tmp_path: Path) -> None:
    assert make_ssl_context("", "") is None
    with pytest.raises(ConfigError, match="go together"):
        make_ssl_context(str(tmp_path / "cert.pem"), "")
    with pytest.raises(ConfigError, match="cannot load the TLS certificate"):
        make_ssl_context(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", key, "-out", cert, "-subj", "/CN=agent"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = make_ssl_context(str(cert), str(key))
    assert context is not None and context.minimum_version.name == "TLSv1_2"


# -- c.AgentClient.* -------------------------------------------------------------------


def test_agent_client_settings_in_the_hub_config_reach_the_clusters_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The documented ``c.AgentClient.*`` settings are read by the client the hub uses;
    what the config leaves unset keeps the cluster's defaults."""
    use_cluster(monkeypatch, None)
    c = Config()
    c.GPUDockerSpawner.nodes = [
        {"name": "n1", "docker_url": "unix:///nowhere.sock", "address": "127.0.0.1"}
    ]
    c.GPUDockerSpawner.accounting_url = ""  # records nothing (no database file here)
    c.AgentClient.timeout = 7.5
    c.AgentClient.max_body_size = 12345
    c.AgentClient.max_gpus = 9
    agents = GPUDockerSpawner(config=c).cluster.agents
    assert (agents.timeout, agents.max_body_size, agents.max_gpus) == (7.5, 12345, 9)
    assert agents.max_age == 2.5  # not configured: the cluster's default (health_ttl / 2)


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ({}, {"timeout": 2.0, "max_age": 1.0}),
        ({"timeout": 9.0}, {"timeout": 9.0, "max_age": 1.0}),
        ({"timeout": 9.0, "max_age": 0.0}, {"timeout": 9.0, "max_age": 0.0}),
    ],
)
def test_config_wins_over_the_callers_defaults(
    configured: dict[str, float], expected: dict[str, float]
) -> None:
    c = Config()
    for name, value in configured.items():
        setattr(c.AgentClient, name, value)
    client = agent_client(c, logging.getLogger("test"), timeout=2.0, max_age=1.0)
    assert {name: getattr(client, name) for name in expected} == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("ca_cert", "/nowhere/ca.pem", "cannot read '/nowhere/ca.pem'"),
        ("max_body_size", 0, "max_body_size must be >= 1"),
        ("max_gpus", -1, "max_gpus must be >= 1"),
    ],
)
def test_bad_client_settings_are_refused(name: str, value: object, message: str) -> None:
    c = Config()
    setattr(c.AgentClient, name, value)
    with pytest.raises(ConfigError, match=message):
        AgentClient(config=c)
