"""configure_jobs grants the job scope to users (their tokens) and servers' tokens, and
c.GPUJobs' settings become the rules core/jobs checks (issue 32)."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from jupyterhub_gpu.errors import ConfigError
from jupyterhub_gpu.hub.api.jobs import JOBS_SCOPE
from jupyterhub_gpu.hub.extensions import configure_jobs
from jupyterhub_gpu.hub.jobs import GPUJobs
from jupyterhub_gpu.hub.runtime import SETTINGS_KEY, HubRuntime

pytestmark = pytest.mark.unit


def test_the_scope_is_granted_to_users_and_servers() -> None:
    c = Config()
    c.JupyterHub.load_roles = [{"name": "tester", "scopes": ["admin:users"], "services": ["t"]}]
    configure_jobs(c)
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert JOBS_SCOPE in roles["user"]["scopes"] and "self" in roles["user"]["scopes"]
    assert roles["server"]["scopes"] == [
        "users:activity!user", "access:servers!server", JOBS_SCOPE
    ]  # fmt: skip
    assert roles["tester"]["scopes"] == ["admin:users"]
    assert JOBS_SCOPE in c.JupyterHub.custom_scopes
    assert any(h[0] == r"/api/gpu/jobs" for h in c.JupyterHub.extra_handlers)
    runtime = c.JupyterHub.tornado_settings[SETTINGS_KEY]
    assert isinstance(runtime, HubRuntime) and len(runtime.cluster_hooks) == 1


def test_a_sites_server_token_scopes_get_the_scope_too() -> None:
    c = Config()
    c.Spawner.server_token_scopes = ["access:servers!server"]
    configure_jobs(c)
    assert c.Spawner.server_token_scopes == ["access:servers!server", JOBS_SCOPE]


@pytest.mark.parametrize("jobs_first", [True, False])
def test_the_dashboards_logins_carry_the_job_scope(jobs_first: bool) -> None:
    """The dashboard reads a viewer's jobs with the viewer's own login: its OAuth client
    may ask for the job scope, whichever is configured first."""
    from jupyterhub_gpu.hub.extensions import configure_dashboard

    c = Config()
    c.JupyterHub.services = [{"name": "other", "command": ["x"]}]
    steps = [configure_jobs, configure_dashboard]
    for step in steps if jobs_first else reversed(steps):
        step(c)
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert services["gpu-dashboard"]["oauth_client_allowed_scopes"] == [JOBS_SCOPE]
    assert services["gpu-dashboard"]["command"].count("--GPUDashboard.show_jobs=True") == 1
    assert "oauth_client_allowed_scopes" not in services["other"]


def test_without_jobs_the_dashboard_asks_no_job_scope() -> None:
    from jupyterhub_gpu.hub.extensions import configure_dashboard

    c = Config()
    configure_dashboard(c)
    (service,) = c.JupyterHub.services
    assert "oauth_client_allowed_scopes" not in service
    assert "--GPUDashboard.show_jobs=True" not in service["command"]


def test_settings() -> None:
    c = Config()
    c.GPUJobs.default_time = "2h"
    c.GPUJobs.max_time = "1d"
    c.GPUJobs.output_limit_mib = 1
    s = GPUJobs(config=c).settings()
    assert (s.default_time_s, s.max_time_s, s.output_limit_bytes) == (7200, 86400, 1 << 20)
    assert s.grace_s == 120
    with pytest.raises(ConfigError, match=r"GPUJobs\.grace must be more than 0"):
        GPUJobs(grace=0)
