"""Demo hub: real LDAP logins, the local test engine as one GPU node (declared 2-GPU inventory).

Started by scripts/demo.sh, which also starts the private demo directory
(scripts/ldap-server.sh: slapd on 127.0.0.1:3890 with scripts/ldap/demo.ldif). Log in as
alice / alice-gpu, bob / bob-gpu or carol / carol-gpu (admin, group hub-admins); dave
(no uidNumber) and erin (not in gpu-users) are refused. The hub also runs the node agent
for node-a and the GPU idle culler as services. The agent runs inside node-a's network
namespace, as on a real node (declared mode, 10.250.1.2:9450, out of reach of user
servers behind the node firewall), with node-a's own token derived from the site secret
(.demo/agent_token); the culler holds the site secret and derives it too. Not a production
config (see the top-level jupyterhub_config.py and docs/auth.md for a real site).
"""

import os
import secrets
import sys
from pathlib import Path

from jupyterhub_gpu.core.tokens import node_token

c = get_config()  # type: ignore[name-defined]  # noqa: F821

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("JHGPU_STATE", "/var/lib/jupyterhub-gpu-test"))
DEMO = Path(os.environ.get("JHGPU_DEMO_DIR", HERE.parents[1] / ".demo"))
DEMO.mkdir(parents=True, exist_ok=True)

# node-a is a network namespace of its own (scripts/cluster.sh) at 10.250.1.2; user
# servers run on its user bridge behind the node firewall and reach the hub's API at the
# site address 10.250.0.1, nothing else of this machine (LDAP, the proxy's API and the
# public proxy stay on 127.0.0.1, out of their reach)
SITE_ADDRESS = "10.250.0.1"
NODE_A = "10.250.1.2"
c.JupyterHub.bind_url = "http://127.0.0.1:8000"
c.JupyterHub.hub_bind_url = f"http://{SITE_ADDRESS}:8081"
c.JupyterHub.hub_connect_ip = SITE_ADDRESS
c.JupyterHub.db_url = f"sqlite:///{DEMO / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(DEMO / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(DEMO / "proxy.pid")


def _secret(name: str) -> str:
    """A random secret made once and kept in .demo/<name> (mode 0600)."""
    path = DEMO / name
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip()


# auth_state (uid, gid, home, groups) is encrypted: JUPYTERHUB_CRYPT_KEY if set, else a
# key made once and kept in .demo/jupyterhub_crypt_key
if not os.environ.get("JUPYTERHUB_CRYPT_KEY"):
    c.CryptKeeper.keys = [bytes.fromhex(_secret("jupyterhub_crypt_key"))]

# login: the demo LDAP directory (DEMO ONLY: plain LDAP on loopback, public passwords)
SUFFIX = "dc=example,dc=org"
c.JupyterHub.authenticator_class = "jupyterhub_gpu.hub.auth.ldap.GPULDAPAuthenticator"
ldap = c.GPULDAPAuthenticator
ldap.server_address = os.environ.get("LDAP_HOST", "127.0.0.1")
ldap.server_port = int(os.environ.get("LDAP_PORT", "3890"))
ldap.tls_strategy = "insecure"
ldap.bind_dn_template = [f"uid={{username}},ou=people,{SUFFIX}"]
ldap.group_search_base = f"ou=groups,{SUFFIX}"
ldap.allowed_groups = [f"cn=gpu-users,ou=groups,{SUFFIX}"]
ldap.admin_groups = {"hub-admins"}
ldap.manage_groups = True  # LDAP groups show up as JupyterHub groups
c.Authenticator.allow_all = False

c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.nodes = [
    {
        "name": "node-a",
        "docker_url": f"unix://{STATE / 'engines/node-a/docker.sock'}",
        "address": NODE_A,
    }
]
c.GPUCluster.probe_mode = "declared"
c.GPUCluster.inventory_file = str(HERE / "inventory.yaml")
c.GPUCluster.catalog_file = str(HERE / "catalog.yaml")
c.GPUDockerSpawner.resource_defaults = {
    "max_gpus": 2,
    "max_gpus_per_user": 2,  # over all of a user's servers (named ones included)
    "max_cpu": 2,
    "max_mem_gib": 4,
    "default_cpu": 1,
    "default_mem_gib": 2,
}
# containers run as the LDAP uid:gid; the LDAP homeDirectory /home/<user> maps to
# .demo/homes/<user> (created by the hub, owned by the user, mode 0700)
c.GPUDockerSpawner.require_identity = True
c.GPUDockerSpawner.home_template = str(DEMO / "homes" / "{username}")
c.GPUCluster.hub_id = "demo"
# every allocation and its usage: `jupyterhub-gpu report --db sqlite:///.demo/jupyterhub-gpu-accounting.sqlite`
ACCOUNTING_URL = f"sqlite:///{DEMO / 'jupyterhub-gpu-accounting.sqlite'}"
c.GPUCluster.accounting_url = ACCOUNTING_URL
c.GPUDockerSpawner.prefix = "jhgpu-demo"
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 3

# services: node-a's agent and the GPU idle culler with the fewest scopes (docs/culler.md;
# scripts/demo/culler_config.py). On a real site the agent runs on the node itself
# (docs/agent.md); here the hub (root) starts it inside node-a's network namespace
# (scripts/cluster.sh), listening on node-a's address, so it is reached as a real node's
# agent is, and the node firewall keeps user servers away from it. AGENT_TOKEN is the site
# secret (the culler's, and the hub's $JUPYTERHUB_GPU_SITE_SECRET default): the agent gets
# only node-a's own token, derived from it (docs/agent.md)
AGENT_PORT = int(os.environ.get("JHGPU_DEMO_AGENT_PORT", "9450"))
AGENT_TOKEN = os.environ.get("JUPYTERHUB_GPU_SITE_SECRET") or _secret("agent_token")
AGENT_URL = f"http://{NODE_A}:{AGENT_PORT}"
culler_env = {
    "JUPYTERHUB_GPU_SITE_SECRET": AGENT_TOKEN,
    "JHGPU_DEMO_DIR": str(DEMO),
    "JHGPU_DEMO_AGENT_URL": AGENT_URL,
}
if os.environ.get("JHGPU_DEMO_CULL_TIMEOUT"):
    culler_env["JHGPU_DEMO_CULL_TIMEOUT"] = os.environ["JHGPU_DEMO_CULL_TIMEOUT"]
c.JupyterHub.services = [
    {
        "name": "gpu-agent-node-a",
        "command": [
            "nsenter",
            "--net=/var/run/netns/jhgpu-node-a",
            sys.executable,
            "-m",
            "jupyterhub_gpu.services.agent",
            "--probe=declared",
            f"--inventory={HERE / 'inventory.yaml'}",
            "--node=node-a",
            f"--ip={NODE_A}",
            f"--port={AGENT_PORT}",
            "--log-level=WARN",
        ],
        "environment": {"JUPYTERHUB_GPU_AGENT_TOKEN": node_token(AGENT_TOKEN, "node-a")},
    },
    {
        "name": "gpu-culler",
        "command": [
            sys.executable,
            "-m",
            "jupyterhub_gpu.services.culler",
            f"--config={HERE / 'culler_config.py'}",
        ],
        "environment": culler_env,
    },
]
c.JupyterHub.load_roles = [
    {
        "name": "gpu-culler",
        "scopes": [
            "list:users",
            "read:servers",
            "admin:server_state",
            "delete:servers",
        ],
        "services": ["gpu-culler"],
    },
]
# users read why the culler stopped their server in the spawn form
c.GPUCluster.cull_notes_file = str(DEMO / "cull-notes.json")
# the queue's estimates and the dashboard's "culled at the earliest" come from it
c.GPUCluster.cull_deadlines_file = str(DEMO / "cull-deadlines.json")
# the culler's terms, which the spawn form tells each user
c.GPUCluster.cull_policy_file = str(DEMO / "cull-policy.json")
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

# the cluster dashboard at /services/gpu-dashboard/ (docs/dashboard.md)
from jupyterhub_gpu.hub.config import check_config  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_dashboard as add_dashboard  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_my_images as add_my_images  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_reservations as add_reservations  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_usage as add_usage  # noqa: E402

add_dashboard(c)
# "My usage": each user's GPU time by day; admins see anyone's (docs/accounting.md)
add_usage(c, accounting_url=ACCOUNTING_URL)
add_reservations(c)  # admins reserve GPUs: jupyterhub-gpu reserve (docs/scheduling.md)
add_my_images(c)  # "My images"; saving is on when the demo has a registry (below)
# the jupyterhub-gpu command (batch jobs) in every server: the demo image does not carry it
# yet, so this repository's package and a small launcher are mounted read-only
DEMO_MOUNTS = [
    {"source": str(HERE.parents[1] / "jupyterhub_gpu"),
     "target": "/opt/jupyterhub-gpu-cli/jupyterhub_gpu"},
    {"source": str(HERE / "jupyterhub-gpu"), "target": "/usr/local/bin/jupyterhub-gpu"},
]  # fmt: skip
if os.environ.get("JHGPU_DEMO_REGISTRY"):
    c.SavedImages.registry = os.environ["JHGPU_DEMO_REGISTRY"]
    c.SavedImages.registry_url = "http://" + os.environ["JHGPU_DEMO_REGISTRY"]
    c.SavedImages.no_index = True  # containers and builds here have no route out
    c.SavedImages.find_links = [str(DEMO / "wheels")]
    # the same wheels, read-only in every server (users pip install --user from there)
    (DEMO / "wheels").mkdir(exist_ok=True)
    DEMO_MOUNTS.append({"source": str(DEMO / "wheels"), "target": "/srv/wheels"})
# the SSH gateway on 127.0.0.1:8022 (docs/ssh.md): ssh -p 8022 alice@127.0.0.1, with a key
# in .demo/homes/alice/.ssh/authorized_keys; its host key is kept in .demo
from jupyterhub_gpu.hub.extensions import configure_ssh as add_ssh  # noqa: E402

add_ssh(c, port=8022, host_key_file=str(DEMO / "ssh_host_ed25519_key"))
# batch jobs (docs/jobs.md): in a server's terminal, jupyterhub-gpu job submit --gpus 1 --
# python train.py; output in ~/jobs/ID/output.log, listed on the dashboard
from jupyterhub_gpu.hub.extensions import configure_jobs as add_jobs  # noqa: E402

add_jobs(c)
c.GPUDockerSpawner.group_mounts = {"gpu-users": DEMO_MOUNTS}
check_config(c)
