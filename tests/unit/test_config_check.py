"""check_config: the hub refuses to start on a bad setting, naming entry and field."""

from __future__ import annotations

import ast
import importlib
import json
import logging
import re
from pathlib import Path

import pytest
import yaml
from dockerspawner import DockerSpawner
from jupyterhub.app import JupyterHub
from jupyterhub.spawner import Spawner
from traitlets.config import Config, PyFileConfigLoader

from jupyterhub_gpu.core.tokens import node_token
from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.config import (
    CHECKED_SECTIONS,
    OVERRIDDEN_CREATE_KWARGS,
    OVERRIDDEN_HOST_CONFIG,
    OVERRIDDEN_TRAITS,
    check_config,
    known_keys,
    override_warnings,
)
from jupyterhub_gpu.services.agent.app import GPUAgent
from jupyterhub_gpu.services.culler.app import GPUIdleCuller

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "scripts" / "demo" / "catalog.yaml"


def good() -> Config:
    c = Config()
    c.GPUCluster.nodes = [{"name": "n1", "docker_url": "unix:///s", "address": "127.0.0.1"}]
    c.GPUCluster.probe_mode = "declared"
    c.GPUCluster.inventory_file = str(REPO / "tests" / "data" / "cluster-hetero.yaml")
    c.GPUCluster.catalog_file = str(CATALOG)
    c.GPUDockerSpawner.home_template = "/mnt/cephfs/home/{username}"
    return c


def test_good_config_passes() -> None:
    check_config(good())


def test_site_example_and_demo_configs_are_checked() -> None:
    for path in (REPO / "jupyterhub_config.py", REPO / "scripts" / "demo" / "jupyterhub_config.py"):
        assert "check_config(c)" in path.read_text()


def test_demo_runs_node_a_agent_and_the_culler_as_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo hub's services start with settings that fit together: the agent runs in
    node-a's network namespace on node-a's address with node-a's own token, the culler
    reads it there with the site secret it derives that token from, and writes the notes
    the spawn form reads."""
    monkeypatch.setenv("JHGPU_DEMO_DIR", str(tmp_path))
    monkeypatch.setenv("JHGPU_DEMO_CULL_TIMEOUT", "120")
    monkeypatch.delenv("JUPYTERHUB_GPU_AGENT_TOKEN", raising=False)
    c = PyFileConfigLoader(
        "jupyterhub_config.py", path=str(REPO / "scripts" / "demo")
    ).load_config()
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert set(services) == {
        "gpu-agent-node-a", "gpu-culler", "gpu-accounting", "gpu-dashboard", "gpu-ssh",
    }  # fmt: skip
    # the SSH gateway on 127.0.0.1:8022, its host key kept in the demo's folder
    ssh_cmd = services["gpu-ssh"]["command"]
    assert "--GPUSSHGateway.ip=127.0.0.1" in ssh_cmd and "--GPUSSHGateway.port=8022" in ssh_cmd
    assert f"--GPUSSHGateway.host_key_file={tmp_path / 'ssh_host_ed25519_key'}" in ssh_cmd
    dashboard = services["gpu-dashboard"]  # reads the demo's accounting file, not a default
    assert dashboard["environment"]["JUPYTERHUB_GPU_ACCOUNTING_URL"] == (
        c.GPUCluster.accounting_url
    )
    # the usage API reads the database the hub writes, and users may reach it
    usage = services["gpu-accounting"]
    assert usage["command"][1:] == ["-m", "jupyterhub_gpu.services.usage"]
    assert usage["environment"]["JUPYTERHUB_GPU_ACCOUNTING_URL"] == (
        c.GPUCluster.accounting_url
    )  # in its environment, never on its command line
    # the services that render the hub's page get its bar's links ("My usage" among them)
    page = json.loads(usage["environment"]["JUPYTERHUB_GPU_PAGE"])
    assert page["template_vars"]["jhgpu_usage"] == "gpu-accounting"
    assert page == json.loads(services["gpu-dashboard"]["environment"]["JUPYTERHUB_GPU_PAGE"])
    assert str(tmp_path) in c.GPUCluster.accounting_url
    (user_role,) = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert "access:services!service=gpu-accounting" in user_role["scopes"]
    token = (tmp_path / "agent_token").read_text().strip()
    assert len(token) >= 32 and (tmp_path / "agent_token").stat().st_mode & 0o077 == 0

    agent_cmd = services["gpu-agent-node-a"]["command"]
    # inside node-a's namespace, as scripts/cluster.sh names it (netns() { echo "jhgpu-$1"; })
    assert agent_cmd[:2] == ["nsenter", "--net=/var/run/netns/jhgpu-node-a"]
    assert 'echo "jhgpu-$1"' in (REPO / "scripts" / "cluster.sh").read_text()
    assert agent_cmd[3:5] == ["-m", "jupyterhub_gpu.services.agent"]
    agent = GPUAgent()
    agent.parse_command_line(agent_cmd[5:])
    nodes = yaml.safe_load(Path(agent.inventory).read_text())["nodes"]
    assert agent.probe == "declared" and agent.node == "node-a"
    assert agent.node in {n["name"] for n in nodes}
    (node_a,) = c.GPUCluster.nodes
    assert node_a["name"] == agent.node and agent.ip == node_a["address"] == "10.250.1.2"
    # the agent holds its node's own token, never the site secret
    agent_token = services["gpu-agent-node-a"]["environment"]["JUPYTERHUB_GPU_AGENT_TOKEN"]
    assert agent_token == node_token(token, "node-a") and agent_token != token

    culler_cmd, env = services["gpu-culler"]["command"], services["gpu-culler"]["environment"]
    assert culler_cmd[1:3] == ["-m", "jupyterhub_gpu.services.culler"]
    for key, value in {**env, "JUPYTERHUB_API_TOKEN": "from-the-hub"}.items():
        monkeypatch.setenv(key, value)
    culler = GPUIdleCuller()
    culler.initialize(culler_cmd[3:])
    culler.check_config()
    assert culler.agent_urls == {agent.node: f"http://{agent.ip}:{agent.port}"}
    assert culler.agent_token == token  # the site secret: it derives each agent's token
    assert culler.timeout == culler.gpu_timeout == 120
    assert culler.notes_file == c.GPUCluster.cull_notes_file
    (role,) = [r for r in c.JupyterHub.load_roles if r["name"] == "gpu-culler"]
    assert role["services"] == ["gpu-culler"]
    assert {"list:users", "admin:server_state", "delete:servers"} <= set(role["scopes"])
    assert "access:servers" not in role["scopes"]  # servers are read with their own tokens


def _bad_catalog(tmp_path: Path) -> str:
    data = yaml.safe_load(CATALOG.read_text())
    data["images"][1]["cuda_version"] = "twelve"
    f = tmp_path / "catalog.yaml"
    f.write_text(yaml.safe_dump(data))
    return str(f)


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (
            lambda c, t: setattr(c.GPUCluster, "catalog_file", _bad_catalog(t)),
            "images[1] (demo-cuda11).cuda_version",
        ),
        (
            lambda c, t: setattr(c.GPUCluster, "nodes", [{"name": "x", "docker_url": "http://h"}]),
            "nodes[0] (x).docker_url",
        ),
        (
            lambda c, t: setattr(c.GPUDockerSpawner, "resource_defaults", {"max_gpu": 2}),
            "unknown key 'max_gpu'",
        ),
        (
            lambda c, t: setattr(c.GPUDockerSpawner, "home_template", "home/{username}"),
            "absolute folder",
        ),
        (
            lambda c, t: setattr(c.GPUCluster, "inventory_file", str(t / "missing.yaml")),
            "cannot read",
        ),
        (lambda c, t: setattr(c.DockerSpawner, "default_uid", 0), "never run as root"),
        (
            lambda c, t: setattr(c.GPUSharing, "models", {"X": {"shares": 4, "mod": "mps"}}),
            "GPUSharing.models['X']: unknown key(s) mod",
        ),
        (
            lambda c, t: setattr(c.GPUSharing, "mps_shm_directory", "/dev/shm"),
            "GPUSharing.mps_shm_directory: /dev/shm is the node's own",
        ),
        (
            lambda c, t: setattr(c.GPUSharing, "mps_pipe_dir", "/tmp/nvidia-mps"),
            "did you mean GPUSharing.mps_pipe_directory?",
        ),
    ],
)
def test_bad_settings_are_refused(mutate, fragment: str, tmp_path: Path) -> None:
    c = good()
    mutate(c, tmp_path)
    with pytest.raises(ConfigError) as e:
        check_config(c)
    assert fragment in str(e.value)


# -- item 8: unknown keys, overridden traits, the site example loaded for real ----------


@pytest.mark.parametrize(
    "section, key, fragment",
    [
        ("GPUDockerSpawner", "max_gpus_per_server", "c.GPUDockerSpawner.max_gpus_per_server is "
         "not a setting of GPUDockerSpawner"),
        ("GPUDockerSpawner", "resource_default", "did you mean "
         "GPUDockerSpawner.resource_defaults?"),
        ("GPUDockerSpawner", "require_identiy", "did you mean GPUDockerSpawner.require_identity?"),
        ("DockerSpawner", "pull_polcy", "did you mean DockerSpawner.pull_policy?"),
        ("GPULDAPAuthenticator", "ldap_timout", "did you mean GPULDAPAuthenticator.ldap_timeout?"),
        ("LDAPAuthenticator", "server_adress", "did you mean LDAPAuthenticator.server_address?"),
        ("AgentClient", "timout", "did you mean AgentClient.timeout?"),
        ("GPUIdleCuller", "gpu_timout", "did you mean GPUIdleCuller.gpu_timeout?"),
        ("GPUAgent", "prot", "c.GPUAgent.prot is not a setting of GPUAgent"),
        ("DockerSpawner", "max_gpu", "c.DockerSpawner.max_gpu is not a setting of "
         "GPUDockerSpawner"),
    ],
)  # fmt: skip
def test_unknown_keys_are_refused_by_name(section: str, key: str, fragment: str) -> None:
    c = good()
    c[section][key] = 1
    with pytest.raises(ConfigError) as e:
        check_config(c)
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    "section, key",
    [
        ("GPUDockerSpawner", "require_identity"),  # our own trait
        ("GPUDockerSpawner", "start_timeout"),  # Spawner's, inherited
        ("GPUDockerSpawner", "pull_policy"),  # DockerSpawner's, inherited
        ("GPULDAPAuthenticator", "enable_auth_state"),  # Authenticator's
        ("GPULDAPAuthenticator", "server_address"),  # LDAPAuthenticator's
        ("AgentClient", "max_snapshot_age"),
        ("DockerSpawner", "home_template"),  # GPUDockerSpawner reads its bases' sections
        ("LDAPAuthenticator", "ldap_timeout"),
        ("Spawner", "anything_at_all"),  # JupyterHub's own sections are not ours to police
    ],
)
def test_known_keys_pass(section: str, key: str) -> None:
    c = good()
    c[section][key] = 30 if key != "pull_policy" else "ifnotpresent"
    check_config(c)


def test_every_checked_section_names_a_class_that_reads_it() -> None:
    for section in CHECKED_SECTIONS:
        module, _, name = CHECKED_SECTIONS[section].partition(":")
        cls = getattr(importlib.import_module(module), name)
        assert section in {c.__name__ for c in cls.mro()} and known_keys(section)


@pytest.mark.parametrize(
    "setting, expected",
    [
        (("GPUDockerSpawner", "image", "x:1"), ["c.GPUDockerSpawner.image is ignored"]),
        (("DockerSpawner", "mem_limit", "32G"), ["c.DockerSpawner.mem_limit is ignored"]),
        (("Spawner", "cpu_limit", 8), ["c.Spawner.cpu_limit is ignored"]),
        (
            ("DockerSpawner", "extra_host_config", {"network_mode": "host", "dns": ["1.1.1.1"]}),
            ["c.DockerSpawner.extra_host_config['network_mode'] is ignored"],
        ),
        (
            ("GPUDockerSpawner", "extra_create_kwargs", {"user": "0"}),
            ["extra_create_kwargs['user']"],
        ),
        (("JupyterHub", "allow_named_servers", True), ["named_server_limit_per_user"]),
        (("GPUDockerSpawner", "pull_policy", "always"), []),
    ],
)  # fmt: skip
def test_settings_the_spawner_overrides_are_warned_about(
    setting: tuple[str, str, object], expected: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    c = good()
    section, key, value = setting
    c[section][key] = value
    with caplog.at_level(logging.WARNING, logger="JupyterHub"):
        check_config(c)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == len(expected)
    for warning, fragment in zip(warnings, expected, strict=True):
        assert fragment in warning


def test_lazy_updates_of_extra_host_config_are_seen() -> None:
    c = good()
    c.DockerSpawner.extra_host_config.update({"cap_drop": []})
    assert override_warnings(c) == [
        "c.DockerSpawner.extra_host_config['cap_drop'] is ignored: GPUDockerSpawner sets it "
        "for every server"
    ]


def _self_assignments(tree: ast.AST) -> dict[str, list[ast.expr]]:
    found: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and node.value is not None
                ):
                    found.setdefault(t.attr, []).append(node.value)
    return found


def test_the_override_lists_match_what_the_spawner_sets() -> None:
    """Every DockerSpawner/Spawner setting that spawner.py (or the mixin it extends,
    admission.py) assigns is in OVERRIDDEN_TRAITS (and nothing else is), and the
    extra_host_config/extra_create_kwargs keys it replaces are the ones listed: a new
    override in the spawner fails here until it is warned about."""
    module = ast.parse((REPO / "jupyterhub_gpu" / "hub" / "spawner.py").read_text())
    (cls,) = [
        n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "GPUDockerSpawner"
    ]
    mixin_module = ast.parse((REPO / "jupyterhub_gpu" / "hub" / "admission.py").read_text())
    (mixin,) = [
        n
        for n in mixin_module.body
        if isinstance(n, ast.ClassDef) and n.name == "QueueingSpawnerMixin"
    ]
    assigned = _self_assignments(cls)
    for attr, values in _self_assignments(mixin).items():
        assigned.setdefault(attr, []).extend(values)
    inherited = set(DockerSpawner.class_traits(config=True))
    merged = {"extra_host_config", "extra_create_kwargs"}  # ours win key by key: listed below
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    by_method = {
        "check_allowed": ("allowed_images",),
        "get_ip_and_port": ("use_internal_ip",),
        # the whole container is core/workload.py's: DockerSpawner's mounts are not in it
        "create_object": ("volumes", "read_only_volumes", "mounts", "links"),
    }
    implied = {trait for method, ts in by_method.items() if method in methods for trait in ts}

    # the container's keys come from the pure description the spawner submits
    # (core/workload.py): it sets every key it owns, the site's never win
    from jupyterhub_gpu.core.containers import ServerContainer
    from jupyterhub_gpu.core.form.resources import ResourceLimits
    from jupyterhub_gpu.core.workload import Workload, make_container

    assert "make_container(" in ast.unparse(cls)
    container = ServerContainer(
        1000, 100, (), {}, ("GPU-1",), "net", ResourceLimits(1.0, 1, 1, 1), ("/h", "/c")
    )
    request = make_container(Workload("n", "i", ["c"], {}, container, port=8888))
    assert set(request.host) == OVERRIDDEN_HOST_CONFIG
    assert set(request.create) | {"host_config"} == OVERRIDDEN_CREATE_KWARGS
    implied.add("network_name")  # DockerSpawner's network_mode comes from network_name
    assert (set(assigned) & inherited) - merged | implied == set(OVERRIDDEN_TRAITS)


def test_forbidden_host_config_is_warned_about() -> None:
    c = Config()
    c.DockerSpawner.extra_host_config = {"privileged": True, "dns": ["1.1.1.1"]}
    (line,) = override_warnings(c)
    assert "['privileged'] is ignored" in line and "isolation" in line


# every <placeholder> of the site example, and a value a site could give it
SITE_PLACEHOLDERS = {
    "<PLACEHOLDER>": "PLACEHOLDER",
    "<HUB_HOSTNAME>": "hub.example.org",
    "<HUB_IP_REACHABLE_FROM_NODES>": "10.0.0.2",
    "<ldap.example.org>": "ldap.example.org",
    "<cn=jupyterhub,ou=services,dc=example,dc=org>": "cn=jupyterhub,ou=services,dc=example,dc=org",
    "<ou=people,dc=example,dc=org>": "ou=people,dc=example,dc=org",
    "<cn=gpu-users,ou=groups,dc=example,dc=org>": "cn=gpu-users,ou=groups,dc=example,dc=org",
    "<gpu-a.example.org>": "gpu-a.example.org",
    "<gpu-a IP the hub reaches servers at>": "10.0.0.11",
    "<building>": "b1",
    "<rack>": "r1",
    "<ml-lab>": "ml-lab",
    "<ou=groups,dc=example,dc=org>": "ou=groups,dc=example,dc=org",
    "<hub-admins>": "hub-admins",
}


def test_site_example_config_loads_for_real(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The top-level jupyterhub_config.py, placeholders filled and /etc paths moved under
    tmp_path, runs as the hub runs it (its own check_config(c) included), sets only
    settings that exist and nothing the spawner overrides."""
    text = (REPO / "jupyterhub_config.py").read_text()
    assert set(re.findall(r"<[^<>\n]+>", text)) == set(SITE_PLACEHOLDERS)
    for placeholder, value in SITE_PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    etc = tmp_path / "etc"
    text = text.replace("/etc/jupyterhub-gpu/", f"{etc}/")
    text = text.replace("/srv/jupyterhub/", f"{tmp_path}/")
    text = text.replace("/var/lib/jupyterhub-gpu", str(tmp_path / "state"))
    (etc / "docker-tls").mkdir(parents=True)
    for pem in ("ca.pem", "cert.pem", "key.pem"):
        (etc / "docker-tls" / pem).write_text("test\n")
    hetero = yaml.safe_load((REPO / "tests" / "data" / "cluster-hetero.yaml").read_text())
    (etc / "gpu-inventory.yaml").write_text(yaml.safe_dump({"nodes": hetero["nodes"][:1]}))
    (tmp_path / "jupyterhub_config.py").write_text(text)

    with caplog.at_level(logging.WARNING, logger="JupyterHub"):
        c = PyFileConfigLoader("jupyterhub_config.py", path=str(tmp_path)).load_config()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert c.JupyterHub.spawner_class == "gpudocker"
    assert c.JupyterHub.named_server_limit_per_user >= 1
    assert c.GPUDockerSpawner.resource_defaults["max_gpus_per_user"] >= 1
    # the hub's own sections too: every key is a trait of the class that reads it
    for section, cls in (("JupyterHub", JupyterHub), ("Spawner", Spawner)):
        assert not set(c[section]) - set(cls.class_traits(config=True)), section
    hub = JupyterHub(config=c)
    assert hub.named_server_limit_per_user == c.JupyterHub.named_server_limit_per_user


def test_demo_config_sets_nothing_the_spawner_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("JHGPU_DEMO_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="JupyterHub"):
        c = PyFileConfigLoader(
            "jupyterhub_config.py", path=str(REPO / "scripts" / "demo")
        ).load_config()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert c.JupyterHub.named_server_limit_per_user >= 1


def test_named_servers_get_a_default_limit_and_an_explicit_one_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from traitlets.config import Config

    from jupyterhub_gpu.hub.config import DEFAULT_NAMED_SERVER_LIMIT, check_config

    c = Config()
    c.JupyterHub.allow_named_servers = True
    with caplog.at_level("WARNING"):
        check_config(c)
    assert c.JupyterHub.named_server_limit_per_user == DEFAULT_NAMED_SERVER_LIMIT == 3
    assert "named_server_limit_per_user is not set: 3" in caplog.text
    for explicit in (0, 10):
        c = Config()
        c.JupyterHub.allow_named_servers = True
        c.JupyterHub.named_server_limit_per_user = explicit
        check_config(c)
        assert c.JupyterHub.named_server_limit_per_user == explicit
    c = Config()  # named servers off: nothing set
    check_config(c)
    assert "named_server_limit_per_user" not in c.JupyterHub


@pytest.mark.parametrize(
    "settings, hub_limit, start_limit",
    [
        ({}, 0, 100),  # the queue is on by default: JupyterHub's default limit moves
        ({("JupyterHub", "concurrent_spawn_limit"): 20}, 0, 20),
        ({("JupyterHub", "concurrent_spawn_limit"): 0}, 0, None),  # no limit: none made
        ({("GPUDockerSpawner", "max_queue_wait"): 0}, None, None),  # no queue: untouched
        ({("GPUDockerSpawner", "max_queue_wait"): 0,  # off, but on for one group
          ("GPUDockerSpawner", "queue_policy"): {"groups": {"ml": {"max_queue_wait": 60}}}},
         0, 100),
        ({("GPUDockerSpawner", "max_queue_wait"): 0,  # off for every group too
          ("GPUDockerSpawner", "queue_policy"): {"default_group": {"max_queue_wait": 0}}},
         None, None),
        (
            {("JupyterHub", "concurrent_spawn_limit"): 20,
             ("GPUDockerSpawner", "concurrent_start_limit"): 5},
            0,
            5,  # an explicit start limit is kept
        ),
    ],
)  # fmt: skip
def test_the_spawn_limit_moves_off_queued_spawns(
    settings: dict[tuple[str, str], object], hub_limit: int | None, start_limit: int | None
) -> None:
    """JupyterHub's concurrent_spawn_limit counts spawns waiting in the GPU queue; with the
    queue on it bounds the creation of servers instead (GPUDockerSpawner's)."""
    c = good()
    for (section, key), value in settings.items():
        c[section][key] = value
    check_config(c)
    assert c.JupyterHub.get("concurrent_spawn_limit") == hub_limit
    # where the hub reads it: c.GPUCluster (a key set the old way still counts)
    limit = c.GPUCluster.get(
        "concurrent_start_limit", c.GPUDockerSpawner.get("concurrent_start_limit")
    )
    assert limit == start_limit


def test_a_bad_queue_policy_stops_the_hub_at_start() -> None:
    c = good()
    c.GPUDockerSpawner.queue_policy = {"groups": {"ml-lab": {"max_gpu": 2}}}
    with pytest.raises(ConfigError, match=r"queue_policy\.groups\.ml-lab\.max_gpu: unknown key"):
        check_config(c)
    c.GPUDockerSpawner.queue_policy = {"groups": {"ml-lab": {"max_gpus": 2}}}
    check_config(c)


def test_a_moved_key_set_the_old_way_still_works_and_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """c.GPUDockerSpawner.<key> of a key that moved to c.GPUCluster keeps working for one
    release; check_config and the hub say which key to set instead; c.GPUCluster wins."""
    from jupyterhub_gpu.hub.cluster_settings import gpu_cluster

    c = good()
    c.GPUDockerSpawner.hub_id = "old-way"
    c.GPUDockerSpawner.drains_file = "/var/lib/jupyterhub-gpu/old.json"
    c.GPUCluster.drains_file = "/var/lib/jupyterhub-gpu/new.json"
    with caplog.at_level(logging.WARNING, logger="JupyterHub"):
        check_config(c)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "c.GPUDockerSpawner.hub_id is deprecated: set c.GPUCluster.hub_id instead (the old "
        "key still works in this release)"
    ]
    warned: set[str] = set()
    site = gpu_cluster(c, logging.getLogger("JupyterHub"), warned=warned)
    assert site.hub_id == "old-way" and site.drains_file.endswith("new.json")
    assert warned == {"hub_id"}
    with pytest.raises(ConfigError, match=r"GPUCluster\.node_check_interval"):
        gpu_cluster(c, logging.getLogger("test"), {"node_check_interval": 0})
