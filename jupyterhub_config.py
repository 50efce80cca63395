"""Example configuration for a real site. Copy it, then replace every <PLACEHOLDER>.

Start with:  jupyterhub -f jupyterhub_config.py
Secrets (LDAP bind password, the agents' site secret, JUPYTERHUB_CRYPT_KEY) come from
the environment or from files only root and the hub can read, never from this file. The
hub's state (its database, cookie secret, the accounting database, drains) lives under
/var/lib/jupyterhub-gpu, never relative to the directory the hub is started in.
"""

import os

c = get_config()  # type: ignore[name-defined]  # noqa: F821

# --- the hub -----------------------------------------------------------------------
c.JupyterHub.bind_url = "https://<HUB_HOSTNAME>/"
c.JupyterHub.ssl_cert = "/etc/jupyterhub-gpu/tls/hub.crt"
c.JupyterHub.ssl_key = "/etc/jupyterhub-gpu/tls/hub.key"
# single-user servers on the GPU nodes call back to the hub at this address
c.JupyterHub.hub_bind_url = "http://0.0.0.0:8081"
c.JupyterHub.hub_connect_ip = "<HUB_IP_REACHABLE_FROM_NODES>"
STATE = "/var/lib/jupyterhub-gpu"
c.JupyterHub.db_url = f"sqlite:///{STATE}/jupyterhub.sqlite"
# the cookie secret also keys the containers' seals (docs/architecture.md): back it up
c.JupyterHub.cookie_secret_file = f"{STATE}/jupyterhub_cookie_secret"

# --- login: the lab's LDAP (see docs/auth.md; OAuth/OIDC is documented there too) ---
c.JupyterHub.authenticator_class = "jupyterhub_gpu.hub.auth.ldap.GPULDAPAuthenticator"
c.LDAPAuthenticator.server_address = "<ldap.example.org>"
c.LDAPAuthenticator.server_port = 636
c.LDAPAuthenticator.tls_strategy = "on_connect"
c.LDAPAuthenticator.lookup_dn = True
c.LDAPAuthenticator.lookup_dn_search_user = "<cn=jupyterhub,ou=services,dc=example,dc=org>"
c.LDAPAuthenticator.lookup_dn_search_password = os.environ.get("LDAP_SEARCH_PASSWORD", "")
c.LDAPAuthenticator.user_search_base = "<ou=people,dc=example,dc=org>"
c.LDAPAuthenticator.user_attribute = "uid"
c.LDAPAuthenticator.allowed_groups = ["<cn=gpu-users,ou=groups,dc=example,dc=org>"]
# the user's groups: for group_bounds below, charge groups and reservations (docs/auth.md)
c.GPULDAPAuthenticator.group_search_base = "<ou=groups,dc=example,dc=org>"
c.GPULDAPAuthenticator.admin_groups = {"<hub-admins>"}  # group names (or DNs)
c.Authenticator.enable_auth_state = True  # needs JUPYTERHUB_CRYPT_KEY in the environment
# with auth_state, GPUDockerSpawner.require_identity is on: a user without uidNumber is
# refused rather than run as the fallback uid

# --- GPU nodes ------------------------------------------------------------------------
c.JupyterHub.spawner_class = "gpudocker"
c.GPUCluster.nodes = [
    {
        "name": "gpu-a",  # e.g. 3x RTX 3090
        "docker_url": "tcp://<gpu-a.example.org>:2376",
        "address": "<gpu-a IP the hub reaches servers at>",
        "tls": {
            "ca_cert": "/etc/jupyterhub-gpu/docker-tls/ca.pem",
            "client_cert": "/etc/jupyterhub-gpu/docker-tls/cert.pem",
            "client_key": "/etc/jupyterhub-gpu/docker-tls/key.pem",
        },
        "agent_url": "https://<gpu-a.example.org>:9450",  # GPUs read through NVML there
        "labels": {"site": "<building>", "rack": "<rack>"},
    },
    # {"name": "gpu-b", ...},
]
# each node's GPUs come from its agent (agent_url, NVML on the node; docs/agent.md), the
# agents' site secret from $JUPYTERHUB_GPU_SITE_SECRET. A node without an agent would need
# c.GPUCluster.probe_mode = "declared" and an inventory_file instead.
c.AgentClient.ca_cert = "/etc/jupyterhub-gpu/docker-tls/ca.pem"  # the agents' TLS (docs/agent.md)
# drains made on the dashboard survive a restart
c.GPUCluster.drains_file = f"{STATE}/drains.json"
c.GPUCluster.accounting_url = f"sqlite:///{STATE}/jupyterhub-gpu-accounting.sqlite"

# --- shared storage: the same CephFS/GlusterFS/NFS path on every node -------------
c.GPUDockerSpawner.home_template = "/mnt/cephfs/home/{username}"
c.GPUDockerSpawner.home_container_path = "/home/{username}"

# --- images and limits (docs/spawn-form.md) -------------------------------------------
# Users choose an image from the catalog (default: the one the package ships,
# jupyterhub_gpu/data/catalog.yaml; your own, pointing at your registry, with
# c.GPUCluster.catalog_file = "...").
# The spawner sets image, cpu_limit and mem_limit per server from the user's choice
# within these bounds (check_config warns if you set them).
c.GPUDockerSpawner.pull_policy = "ifnotpresent"
c.GPUDockerSpawner.resource_defaults = {
    "max_gpus": 4,  # per server
    "max_gpus_per_user": 4,  # held at once over all of a user's servers
    "max_cpu": 8,
    "max_mem_gib": 32,
}
c.GPUDockerSpawner.group_bounds = {
    "<ml-lab>": {"max_gpus_per_user": 8},  # the most generous of a user's groups applies
}
# named servers: each has its own image and GPUs; at most 3 per user
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 3
c.Spawner.start_timeout = 300  # first pull of a CUDA image on a node takes minutes
c.Spawner.http_timeout = 120

# --- the GPU idle culler, a hub-managed service (docs/culler.md) -----------------------
# configure_culler(c) below adds the service, its role and the hub API it learns the nodes'
# agents from; its own settings (timeouts, group_overrides) in culler_config.py. These
# files are written by the culler and read by the hub:
c.GPUCluster.cull_notes_file = f"{STATE}/cull-notes.json"
# the GPU queue's estimates, the dashboard's "culled at the earliest"
c.GPUCluster.cull_deadlines_file = f"{STATE}/cull-deadlines.json"
# the culler's warnings before a cull: on the users' pages, with "I'm still here"
c.GPUCluster.cull_warnings_file = f"{STATE}/cull-warnings.json"

# --- refuse to start on a bad nodes/inventory/catalog/bounds setting -------------------
# --- the cluster dashboard at /services/gpu-dashboard/ (docs/dashboard.md) ------------
from jupyterhub_gpu.hub.config import check_config  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_culler as add_culler  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_dashboard as add_dashboard  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_my_images as add_my_images  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_reservations as add_reservations  # noqa: E402
from jupyterhub_gpu.hub.extensions import configure_ssh as add_ssh  # noqa: E402

add_culler(c, config_file="/etc/jupyterhub-gpu/culler_config.py")
add_dashboard(c, show_names=True)  # False: users see only their own names (privacy)
add_reservations(c)  # GPU reservations: jupyterhub-gpu reserve (docs/scheduling.md)
# ssh alice@hub -p 8022: a shell or a command in her running server (docs/ssh.md)
add_ssh(c, ip="0.0.0.0", port=8022, host_key_file=f"{STATE}/ssh_host_ed25519_key")
# users save their environments as images (docs/my-images.md); saving is on with a registry
add_my_images(c)
c.SavedImages.registry = "registry.lab.example:5000"  # every node's engine pushes and pulls here
c.SavedImages.index_url = "https://pypi.org/simple"  # or the site's mirror
c.SavedImages.max_images = 5
check_config(c)
