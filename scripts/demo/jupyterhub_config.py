"""Demo hub: the local test engine as one GPU node with a declared 2-GPU inventory.

Started by scripts/demo.sh; not a production config (see the top-level
jupyterhub_config.py for a real site).
"""

import os
from pathlib import Path

c = get_config()  # type: ignore[name-defined]  # noqa: F821

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("JHGPU_STATE", "/var/lib/jupyterhub-gpu-test"))
DEMO = Path(os.environ.get("JHGPU_DEMO_DIR", HERE.parents[1] / ".demo"))

c.JupyterHub.bind_url = "http://127.0.0.1:8000"
c.JupyterHub.hub_connect_ip = "127.0.0.1"
c.JupyterHub.db_url = f"sqlite:///{DEMO / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(DEMO / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(DEMO / "proxy.pid")

# login: any demo user name with the demo password (LDAP replaces this in issue 5)
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ.get("JHGPU_DEMO_PASSWORD", "gpu-demo")
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"admin"}

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
c.GPUDockerSpawner.resource_defaults = {"max_gpus": 2, "max_cpu": 2, "max_mem_gib": 4,
                                        "default_cpu": 1, "default_mem_gib": 2}
c.GPUDockerSpawner.home_template = str(DEMO / "homes" / "{username}")
c.GPUDockerSpawner.hub_id = "demo"
c.GPUDockerSpawner.prefix = "jhgpu-demo"
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

from jupyterhub_gpu.config import check_config  # noqa: E402

check_config(c)
