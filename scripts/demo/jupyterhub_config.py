"""Demo hub: real LDAP logins, the local test engine as one GPU node (declared 2-GPU inventory).

Started by scripts/demo.sh, which also starts the private demo directory
(scripts/ldap-server.sh: slapd on 127.0.0.1:3890 with scripts/ldap/demo.ldif). Log in as
alice / alice-gpu, bob / bob-gpu or carol / carol-gpu (admin, group hub-admins); dave
(no uidNumber) and erin (not in gpu-users) are refused. Not a production config (see the
top-level jupyterhub_config.py and docs/auth.md for a real site).
"""

import os
import secrets
from pathlib import Path

c = get_config()  # type: ignore[name-defined]  # noqa: F821

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("JHGPU_STATE", "/var/lib/jupyterhub-gpu-test"))
DEMO = Path(os.environ.get("JHGPU_DEMO_DIR", HERE.parents[1] / ".demo"))
DEMO.mkdir(parents=True, exist_ok=True)

c.JupyterHub.bind_url = "http://127.0.0.1:8000"
c.JupyterHub.hub_connect_ip = "127.0.0.1"
c.JupyterHub.db_url = f"sqlite:///{DEMO / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(DEMO / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(DEMO / "proxy.pid")


# auth_state (uid, gid, home, groups) is encrypted: JUPYTERHUB_CRYPT_KEY if set, else a
# key made once and kept in .demo/jupyterhub_crypt_key (mode 0600)
def _crypt_key() -> str:
    path = DEMO / "jupyterhub_crypt_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip()


if not os.environ.get("JUPYTERHUB_CRYPT_KEY"):
    c.CryptKeeper.keys = [bytes.fromhex(_crypt_key())]

# login: the demo LDAP directory (DEMO ONLY: plain LDAP on loopback, public passwords)
SUFFIX = "dc=example,dc=org"
c.JupyterHub.authenticator_class = "jupyterhub_gpu.auth.ldap.GPULDAPAuthenticator"
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
c.GPUDockerSpawner.nodes = [
    {
        "name": "node-a",
        "docker_url": f"unix://{STATE / 'engines/node-a/docker.sock'}",
        "address": "127.0.0.1",
    }
]
c.GPUDockerSpawner.probe_mode = "declared"
c.GPUDockerSpawner.inventory_file = str(HERE / "inventory.yaml")
c.GPUDockerSpawner.image = "jupyterhub-gpu/singleuser-test:6.1.1"
c.GPUDockerSpawner.catalog_file = str(HERE / "catalog.yaml")
c.GPUDockerSpawner.resource_defaults = {
    "max_gpus": 2,
    "max_cpu": 2,
    "max_mem_gib": 4,
    "default_cpu": 1,
    "default_mem_gib": 2,
}
# containers run as the LDAP uid:gid; the LDAP homeDirectory /home/<user> maps to
# .demo/homes/<user> (created by the hub, owned by the user, mode 0700)
c.GPUDockerSpawner.require_identity = True
c.GPUDockerSpawner.home_template = str(DEMO / "homes" / "{username}")
c.GPUDockerSpawner.hub_id = "demo"
c.GPUDockerSpawner.prefix = "jhgpu-demo"
c.JupyterHub.allow_named_servers = True
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

from jupyterhub_gpu.config import check_config  # noqa: E402

check_config(c)
