"""What a site's ``jupyterhub_config.py`` calls to add the hub extensions, and the one way
they register with the hub.

Each ``configure_*`` adds its API handlers, page templates and template variables through
:func:`register`, which also puts the process's :class:`~.runtime.HubRuntime` in
``c.JupyterHub.tornado_settings``: JupyterHub hands that dict to every handler
(``self.settings``) and every user object (``user.settings``, which the spawner reads), so
handlers reach the cluster and the queue through it, never through the spawner class.

Call them at the end of ``jupyterhub_config.py``, after ``c.JupyterHub.services`` and
``load_roles`` are set::

    from jupyterhub_gpu.hub.extensions import (
        configure_culler, configure_dashboard, configure_my_images, configure_prepuller,
        configure_reservations)
    configure_culler(c, config_file="/etc/jupyterhub-gpu/culler_config.py")
    configure_dashboard(c)
    configure_my_images(c)
    configure_reservations(c)
    configure_usage(c)
    configure_prepuller(c, images="all", disk_budget_gib=80)
    configure_ssh(c, port=8022)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from traitlets.config import Config, LazyConfigValue

from jupyterhub_gpu.hub.runtime import SETTINGS_KEY, HubRuntime

HUB_TEMPLATES = Path(__file__).resolve().parent / "templates"


def _value(section: Any, key: str, empty: Any) -> Any:
    """The configured value of ``section.key`` (a copy), ``empty`` when unset."""
    if key not in section:
        return empty
    value = section[key]
    if isinstance(value, LazyConfigValue):
        return value.get_value(empty)
    return type(empty)(value)


def register(
    c: Config,
    handlers: Sequence[tuple[Any, ...]] = (),
    *,
    template_vars: Mapping[str, Any] | None = None,
    custom_scopes: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Add ``handlers`` to ``c.JupyterHub.extra_handlers`` (JupyterHub adds the hub
    prefix), our page templates to ``template_paths`` (first, once), ``template_vars``
    and ``custom_scopes``; and the runtime to ``tornado_settings`` (once)."""
    hub = c.JupyterHub
    settings = _value(hub, "tornado_settings", {})
    if SETTINGS_KEY not in settings:
        hub.tornado_settings = {**settings, SETTINGS_KEY: HubRuntime()}
    if custom_scopes:
        hub.custom_scopes = {**_value(hub, "custom_scopes", {}), **custom_scopes}
    if handlers:
        hub.extra_handlers = [*_value(hub, "extra_handlers", []), *handlers]
    paths = [str(p) for p in _value(hub, "template_paths", [])]
    if str(HUB_TEMPLATES) not in paths:
        hub.template_paths = [str(HUB_TEMPLATES), *paths]
    if template_vars:
        hub.template_vars = {**_value(hub, "template_vars", {}), **template_vars}
    _share_page(c)


#: Our services whose pages are the hub's page.html (edges/hub_page.py): they get its bar's
#: links in $JUPYTERHUB_GPU_PAGE, kept up to date by every configure_* call.
PAGE_SERVICES = ("jupyterhub_gpu.services.dashboard", "jupyterhub_gpu.services.usage")


def _share_page(c: Config) -> None:
    """Hand the navigation bar's links (our ``jhgpu_*`` template variables and the
    services the hub lists) to our services that render the hub's page."""
    hub = c.JupyterHub
    services = _value(hub, "services", [])
    tvars = {
        k: v
        for k, v in _value(hub, "template_vars", {}).items()
        if str(k).startswith("jhgpu_") and isinstance(v, str | bool | int)
    }
    shown = [str(s["name"]) for s in services if s.get("url") and s.get("display", True)]
    page = json.dumps({"template_vars": tvars, "services": shown}, sort_keys=True)
    changed = False
    out = []
    for service in services:
        command = " ".join(str(a) for a in service.get("command", []))
        if any(m in command for m in PAGE_SERVICES):
            env = dict(service.get("environment") or {})
            if env.get("JUPYTERHUB_GPU_PAGE") != page:
                service = {**service, "environment": {**env, "JUPYTERHUB_GPU_PAGE": page}}
                changed = True
        out.append(service)
    if changed:
        hub.services = out


def _grant_users(roles: list[dict[str, Any]], scope: str) -> list[dict[str, Any]]:
    """``roles`` with ``scope`` added to the ``user`` role (which is made if missing)."""
    out = [dict(r) for r in roles]
    user = next((r for r in out if r.get("name") == "user"), None)
    if user is None:
        out.append({"name": "user", "scopes": ["self", scope]})
    elif scope not in user.get("scopes", []):
        user["scopes"] = [*user.get("scopes", ["self"]), scope]
    return out


def _dashboards_read_jobs(
    services: list[dict[str, Any]], roles: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``services`` where the dashboard's logins also carry the job scope, once jobs are
    on (the ``user`` role has it): the dashboard lists, reads and cancels a viewer's jobs
    with the viewer's own rights, through the hub's job API (whichever of
    ``configure_dashboard`` and ``configure_jobs`` comes first)."""
    jobs_scope = "custom:gpu-jobs"  # api.jobs.JOBS_SCOPE (importing it defines the scope)
    user = next((r for r in roles if r.get("name") == "user"), {})
    if jobs_scope not in user.get("scopes", []):
        return services
    out = []
    for service in services:
        command = " ".join(str(w) for w in service.get("command", []))
        if "jupyterhub_gpu.services.dashboard" in command:
            scopes = list(service.get("oauth_client_allowed_scopes", []))
            if jobs_scope not in scopes:
                service = {**service, "oauth_client_allowed_scopes": [*scopes, jobs_scope]}
            flag = "--GPUDashboard.show_jobs=True"
            if flag not in service.get("command", []):
                service = {**service, "command": [*service["command"], flag]}
        out.append(service)
    return out


def _dashboard_service(
    name: str, url: str, show_names: bool, config_file: str, accounting_url: str | None
) -> dict[str, Any]:
    """The service's entry in ``c.JupyterHub.services`` (run by the hub, no OAuth prompt:
    it is part of the hub). The database URL goes in the environment: a password on the
    command line would show in ``ps``."""
    command = [sys.executable, "-m", "jupyterhub_gpu.services.dashboard"]
    command += [f"--GPUDashboard.show_names={show_names}"]
    if config_file:
        command.append(f"--config={config_file}")
    environment = {}
    if accounting_url is not None:  # "" too: the hub records nothing, so no charts
        environment["JUPYTERHUB_GPU_ACCOUNTING_URL"] = accounting_url
    return {
        "name": name,
        "url": url,
        "command": command,
        "environment": environment,
        "oauth_no_confirm": True,
    }


def configure_dashboard(
    c: Config,
    *,
    name: str = "gpu-dashboard",
    url: str = "http://127.0.0.1:10103",
    show_names: bool = True,
    config_file: str = "",
    accounting_url: str | None = None,
    snapshot_max_age: float = 5.0,
    nav_link: bool = True,
) -> None:
    """Add the GPU dashboard to a hub's configuration: the hub API and its custom scopes
    (:mod:`.api.cluster`), the service (run by the hub), its role with the fewest scopes it
    needs, every user's access to it, and the navigation bar's link.

    ``show_names``: whether users who are not admins see other users' names (the privacy
    setting, docs/dashboard.md). ``config_file``: more ``c.GPUDashboard.*`` settings.
    ``accounting_url``: the usage database (default: ``GPUCluster.accounting_url``
    when set, else its default); passed in the service's environment, never its command
    line. ``snapshot_max_age``: seconds a reading of the nodes is reused by the API.
    """
    from jupyterhub_gpu.hub.api.cluster import (
        ADMIN_SCOPE,
        CUSTOM_SCOPES,
        READ_SCOPE,
        ClusterAPIHandler,
        NodeDrainAPIHandler,
        SnapshotCache,
    )

    cache = SnapshotCache(max_age=snapshot_max_age)
    register(
        c,
        [
            (r"/api/gpu/cluster", ClusterAPIHandler, {"cache": cache}),
            (r"/api/gpu/nodes/([^/]+)/drain", NodeDrainAPIHandler, {"cache": cache}),
        ],
        template_vars={"jhgpu_dashboard": name} if nav_link else None,
        custom_scopes=CUSTOM_SCOPES,
    )
    _add_notices(c, lab_only=True)  # each server's GPU readout in its JupyterLab
    # one reading of the nodes for the dashboard and the readouts alike
    _value(c.JupyterHub, "tornado_settings", {})[SETTINGS_KEY].snapshots = cache
    hub = c.JupyterHub
    if accounting_url is None:
        accounting_url = _site_accounting_url(c)
    service = _dashboard_service(name, url, show_names, config_file, accounting_url)
    hub.services = _dashboards_read_jobs(
        [*_value(hub, "services", []), {**service, "display": not nav_link}],
        _value(hub, "load_roles", []),
    )
    role = {
        "name": name,
        "scopes": [READ_SCOPE, ADMIN_SCOPE, "delete:servers"],
        "services": [name],
    }
    roles = _grant_users(_value(hub, "load_roles", []), f"access:services!service={name}")
    hub.load_roles = [*roles, role]
    _share_page(c)


def _site_accounting_url(c: Config) -> str | None:
    """``c.GPUCluster.accounting_url`` when set (or the old ``c.GPUDockerSpawner`` key),
    else None (the service's own default)."""
    for section in ("GPUCluster", "GPUDockerSpawner"):
        if "accounting_url" in c[section]:
            return str(c[section].accounting_url)
    return None


def configure_usage(
    c: Config,
    *,
    name: str = "gpu-accounting",
    url: str = "http://127.0.0.1:10102",
    accounting_url: str | None = None,
    nav_link: bool = True,
) -> None:
    """Add the usage service (docs/accounting.md): each user's own usage page at
    ``/services/<name>/`` (admins may pick a user) and the usage API under it, run by the
    hub, every user's access to it, and the navigation bar's "My usage" link.

    ``accounting_url``: the database (default: ``GPUCluster.accounting_url`` when
    set, else its default); passed in the service's environment, never its command line.
    """
    hub = c.JupyterHub
    if accounting_url is None:
        accounting_url = _site_accounting_url(c)
    environment = {}
    if accounting_url is not None:
        environment["JUPYTERHUB_GPU_ACCOUNTING_URL"] = accounting_url
    service = {
        "name": name,
        "url": url,
        "command": [sys.executable, "-m", "jupyterhub_gpu.services.usage"],
        "environment": environment,
        "oauth_no_confirm": True,
        "display": not nav_link,
    }
    hub.services = [*_value(hub, "services", []), service]
    hub.load_roles = _grant_users(_value(hub, "load_roles", []), f"access:services!service={name}")
    register(c, template_vars={"jhgpu_usage": name} if nav_link else None)


def configure_culler(
    c: Config,
    *,
    name: str = "gpu-culler",
    config_file: str = "",
    notes_file: str | None = None,
    deadlines_file: str | None = None,
    share_notices_file: str | None = None,
    warnings_file: str | None = None,
    policy_file: str | None = None,
    args: Sequence[str] = (),
    site_secret: str | None = None,
    suspend: bool | None = None,
) -> None:
    """Add the GPU idle culler (docs/culler.md): the service (run by the hub), its role with
    the fewest scopes it needs, and the hub API it learns the nodes' agents from
    (``/hub/api/gpu/agents``), so that the nodes are written in one place, the hub's.

    ``config_file``: more ``c.GPUIdleCuller.*`` settings (timeouts, group overrides).
    ``notes_file``, ``deadlines_file``, ``share_notices_file``, ``warnings_file`` and
    ``policy_file``: the files the culler writes and the hub reads (default:
    ``c.GPUCluster``'s ``cull_notes_file``, ``cull_deadlines_file``, ``share_notices_file``,
    ``cull_warnings_file`` and ``cull_policy_file`` when set);
    they are set on both sides here. The notices above every hub page (the culler's
    warnings with "I'm still here", why a server was culled) and their API are added.
    ``args``: more command-line options of the culler (e.g.
    ``["--log-level=DEBUG"]``). The agents' CA, ``c.AgentClient.ca_cert`` when set
    before this call, is passed on as ``GPUIdleCuller.agent_ca_cert``. ``site_secret``:
    the agents' site secret (default: the hub's ``$JUPYTERHUB_GPU_SITE_SECRET``); it
    reaches the culler in its environment, never on its command line. For the warning
    mails (off unless ``GPUIdleCuller.mail_warnings``), the culler's environment also
    gets the hub's public URL (``JupyterHub.public_url``) and the queue's time zone
    (``queue_policy``'s ``timezone``) when they are set before this call. ``suspend``:
    suspend idle servers instead of stopping them (``GPUCluster.suspend`` and
    ``GPUIdleCuller.suspend``; default: ``c.GPUCluster.suspend`` as set before this call);
    the suspend API and its scope, held by the culler's role only, are added either way.
    """
    from jupyterhub_gpu.core.tokens import SITE_SECRET_ENV, site_secret_from
    from jupyterhub_gpu.hub.api.cluster import AGENTS_SCOPE, AGENTS_SCOPES, AgentsAPIHandler
    from jupyterhub_gpu.hub.api.cull import HANDLERS as CULL
    from jupyterhub_gpu.hub.api.suspend import HANDLERS as SUSPEND
    from jupyterhub_gpu.hub.api.suspend import SUSPEND_SCOPE, SUSPEND_SCOPES

    register(
        c,
        [(r"/api/gpu/agents", AgentsAPIHandler), *CULL, *SUSPEND],
        custom_scopes={**AGENTS_SCOPES, **SUSPEND_SCOPES},
    )
    _add_notices(c)
    site = c.GPUCluster  # where the hub reads the files (an old c.GPUDockerSpawner key too)
    old = {k: v for k, v in dict(c.GPUDockerSpawner).items() if k not in site}
    if notes_file is None and "cull_notes_file" in site:
        notes_file = str(site.cull_notes_file)
    elif notes_file is None and "cull_notes_file" in old:
        notes_file = str(old["cull_notes_file"])
    if deadlines_file is None and "cull_deadlines_file" in site:
        deadlines_file = str(site.cull_deadlines_file)
    elif deadlines_file is None and "cull_deadlines_file" in old:
        deadlines_file = str(old["cull_deadlines_file"])
    command = [sys.executable, "-m", "jupyterhub_gpu.services.culler"]
    if config_file:
        command.append(f"--config={config_file}")
    if notes_file is not None:
        site.cull_notes_file = notes_file
        command.append(f"--GPUIdleCuller.notes_file={notes_file}")
    if deadlines_file is not None:
        site.cull_deadlines_file = deadlines_file
        command.append(f"--GPUIdleCuller.deadlines_file={deadlines_file}")
    if share_notices_file is None and "share_notices_file" in site:
        share_notices_file = str(site.share_notices_file)
    elif share_notices_file is None and "share_notices_file" in old:
        share_notices_file = str(old["share_notices_file"])
    if share_notices_file is not None:
        site.share_notices_file = share_notices_file
        command.append(f"--GPUIdleCuller.share_notices_file={share_notices_file}")
    if warnings_file is None and "cull_warnings_file" in site:
        warnings_file = str(site.cull_warnings_file)
    elif warnings_file is None and "cull_warnings_file" in old:
        warnings_file = str(old["cull_warnings_file"])
    if warnings_file is not None:
        site.cull_warnings_file = warnings_file
        command.append(f"--GPUIdleCuller.warnings_file={warnings_file}")
    if policy_file is None and "cull_policy_file" in site:
        policy_file = str(site.cull_policy_file)
    if policy_file is not None:  # the terms the spawn form tells each user
        site.cull_policy_file = policy_file
        command.append(f"--GPUIdleCuller.policy_file={policy_file}")
    if suspend is None:
        suspend = bool(site.suspend) if "suspend" in site else False
    if suspend:  # the hub checkpoints, the culler asks it to (docs/culler.md)
        site.suspend = True
        command.append("--GPUIdleCuller.suspend=True")
    ca_cert = c.AgentClient.ca_cert if "ca_cert" in c.AgentClient else ""
    if ca_cert:  # the agents' CA: the culler reads them over HTTPS as the hub does
        command.append(f"--GPUIdleCuller.agent_ca_cert={ca_cert}")
    command += list(args)
    secret = site_secret if site_secret is not None else site_secret_from(os.environ)
    hub = c.JupyterHub
    environment = {SITE_SECRET_ENV: secret, **_culler_mail_environment(c)}
    service = {"name": name, "command": command, "environment": environment}
    hub.services = [*_value(hub, "services", []), service]
    role = {
        "name": name,
        "scopes": [
            "list:users",
            "read:servers",
            "admin:server_state",  # which GPUs each server holds, and that server's token
            "delete:servers",  # no access:servers: it reads a server with its own token
            "read:users:groups",  # for group_overrides
            AGENTS_SCOPE,
            SUSPEND_SCOPE,  # suspend instead of stop, when the hub's GPUCluster.suspend is on
        ],
        "services": [name],
    }
    hub.load_roles = [*_value(hub, "load_roles", []), role]


def _culler_mail_environment(c: Config) -> dict[str, str]:
    """What the culler's warning mails take from the hub's settings, as environment
    defaults its config file may override: the hub's public URL (the mail's link) and the
    queue's time zone (the mail's clock time)."""
    from jupyterhub_gpu.core.culling.mail import PUBLIC_HUB_URL_ENV, TIMEZONE_ENV

    env = {}
    public = str(c.JupyterHub.public_url) if "public_url" in c.JupyterHub else ""
    if public:
        env[PUBLIC_HUB_URL_ENV] = public.rstrip("/") + "/hub/"
    for section in ("GPUCluster", "GPUDockerSpawner"):
        policy = c[section].get("queue_policy") if section in c else None
        if isinstance(policy, dict) and isinstance(policy.get("timezone"), str):
            env[TIMEZONE_ENV] = policy["timezone"].strip()
            break
    return env


def configure_my_images(c: Config) -> None:
    """Add saved images ("My images", docs/my-images.md): the API, the page and its link
    in the navigation bar. Saving itself is on once ``c.SavedImages.registry`` is set."""
    from jupyterhub_gpu.hub.api.my_images import HANDLERS

    register(c, HANDLERS, template_vars={"jhgpu_my_images": True})


def configure_reservations(c: Config) -> None:
    """Add the reservations API (:mod:`.api.reservations`), and the notices of running
    servers whose GPUs a reservation will take (:mod:`.api.notices`, shown above every hub
    page)."""
    from jupyterhub_gpu.hub.api.reservations import HANDLERS as RESERVATIONS

    register(c, RESERVATIONS)
    _add_notices(c)


def _add_notices(c: Config, lab_only: bool = False) -> None:
    """The notices above every hub page and in JupyterLab, with each server's GPU
    readout in its JupyterLab's status bar (:mod:`.api.notices`), once. ``lab_only``:
    only JupyterLab's (``/hub/gpu/lab-notices``: the dashboard's readout), not the
    hub pages' notices."""
    from jupyterhub_gpu.hub.api.notices import HANDLERS as NOTICES
    from jupyterhub_gpu.hub.api.notices import LabNoticesHandler

    present = {h[1] for h in _value(c.JupyterHub, "extra_handlers", []) if len(h) > 1}
    handlers = [h for h in NOTICES if h[1] not in present]
    if lab_only:
        register(c, [h for h in handlers if h[1] is LabNoticesHandler])
        return
    register(c, handlers, template_vars={"jhgpu_notices": True})


def configure_prepuller(c: Config, **policy: Any) -> None:
    """Turn the pre-puller on (docs/prepull.md): ``c.PrePuller.enabled``, any of its
    settings given here (``images="most-used:3"``, ``disk_budget_gib=80``, ...; an unknown
    one is refused), and its API (``/hub/api/gpu/prepull``: its state, and a round now).
    The rounds start once the hub runs (and with its first spawn form, server start or
    poll, whichever comes first)."""
    from jupyterhub_gpu.hub.api.cluster import CUSTOM_SCOPES
    from jupyterhub_gpu.hub.api.prepull import HANDLERS
    from jupyterhub_gpu.hub.prepull import PrePuller

    known = set(PrePuller.class_trait_names(config=True)) - {"enabled"}
    unknown = sorted(set(policy) - known)
    if unknown:
        raise TypeError(
            f"configure_prepuller: unknown setting(s) {', '.join(unknown)}; "
            f"it knows {', '.join(sorted(known))}."
        )
    PrePuller(**policy)  # a bad value is refused here, with its sentence
    c.PrePuller.enabled = True
    for key, value in policy.items():
        setattr(c.PrePuller, key, value)
    register(c, HANDLERS, custom_scopes=CUSTOM_SCOPES)
    import asyncio
    import logging

    from jupyterhub_gpu.hub.runtime import start_prepuller_at_hub_start

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # not in a running hub (a test reading the configuration)
    log = logging.getLogger("JupyterHub")
    loop.call_soon(lambda: asyncio.ensure_future(start_prepuller_at_hub_start(log)))


def configure_ssh(
    c: Config,
    *,
    name: str = "gpu-ssh",
    ip: str = "127.0.0.1",
    port: int = 8022,
    host_key_file: str = "/var/lib/jupyterhub-gpu/ssh_host_ed25519_key",
    hub_url: str | None = None,
    password_auth: bool = True,
    start_servers: bool = False,
    config_file: str = "",
    args: Sequence[str] = (),
) -> None:
    """Add the SSH gateway (docs/ssh.md): ``ssh alice@HOST -p PORT`` opens a shell in
    alice's running default server, ``alice.NAME@HOST`` in her server NAME. Adds the
    service (run by the hub), its role with the scopes it needs (where a login lands,
    :mod:`.api.ssh`: no server tokens; its open sessions, for the dashboard and the
    metrics; ``users:activity``, so input over SSH counts for the idle culler), and that
    API.

    ``ip``/``port``: where it listens (default 127.0.0.1:8022). ``host_key_file``: its
    host key, made once (0600) in the site's state folder. ``hub_url``: the hub's public
    URL for the sentences users read (default: ``JupyterHub.public_url``, else
    ``bind_url``). ``password_auth``: a hub API token of the user as the password
    (False: keys only). ``start_servers``: ssh into a stopped default server starts it
    with its last options (the role then also gets ``servers`` and ``read:servers``).
    ``config_file``/``args``: more ``c.GPUSSHGateway.*`` settings.
    """
    from jupyterhub_gpu.hub.api.ssh import HANDLERS, SESSIONS_SCOPE, SSH_SCOPES, TARGETS_SCOPE

    register(c, HANDLERS, custom_scopes=SSH_SCOPES)
    hub = c.JupyterHub
    if hub_url is None:
        for key in ("public_url", "bind_url"):
            if hub.get(key):
                hub_url = str(hub[key])
                break
    command = [
        sys.executable,
        "-m",
        "jupyterhub_gpu.services.ssh",
        f"--GPUSSHGateway.ip={ip}",
        f"--GPUSSHGateway.port={int(port)}",
        f"--GPUSSHGateway.host_key_file={host_key_file}",
        f"--GPUSSHGateway.password_auth={bool(password_auth)}",
        f"--GPUSSHGateway.start_servers={bool(start_servers)}",
    ]
    if hub_url:
        command.append(f"--GPUSSHGateway.hub_url={hub_url.rstrip('/')}")
    if config_file:
        command.append(f"--config={config_file}")
    command += list(args)
    hub.services = [*_value(hub, "services", []), {"name": name, "command": command}]
    # where a login lands, the servers' activity for the culler, its open sessions for
    # the dashboard and the metrics: nothing more
    scopes = [TARGETS_SCOPE, SESSIONS_SCOPE, "users:activity"]
    if start_servers:  # start a user's server, and read its progress
        scopes += ["servers", "read:servers"]
    role = {"name": name, "scopes": scopes, "services": [name]}
    hub.load_roles = [*_value(hub, "load_roles", []), role]


def configure_jobs(c: Config) -> None:
    """Add batch jobs (docs/jobs.md): the job API (:mod:`.api.jobs`) with its scope
    ``custom:gpu-jobs``, granted to every user (and so to their tokens) and to their
    servers' tokens (the ``server`` role), so ``jupyterhub-gpu job submit`` works from a
    terminal in a server and from a laptop with a token of the hub's token page. The
    job runner (:mod:`.jobs`) starts with the hub; ``c.GPUJobs.*`` are its settings.
    """
    import asyncio
    import logging

    from jupyterhub_gpu.hub.api.jobs import HANDLERS, JOB_SCOPES, JOBS_SCOPE
    from jupyterhub_gpu.hub.jobs import protect_at_creation, start_at_hub_start

    register(c, HANDLERS, custom_scopes=JOB_SCOPES)
    hub = c.JupyterHub
    roles = _grant_users(_value(hub, "load_roles", []), JOBS_SCOPE)
    server = next((r for r in roles if r.get("name") == "server"), None)
    if server is None:
        roles.append(
            {
                "name": "server",
                "scopes": ["users:activity!user", "access:servers!server", JOBS_SCOPE],
            }
        )
    elif JOBS_SCOPE not in server.get("scopes", []):
        server["scopes"] = [*server.get("scopes", []), JOBS_SCOPE]
    hub.load_roles = roles
    hub.services = _dashboards_read_jobs(_value(hub, "services", []), roles)
    token_scopes = c.Spawner.get("server_token_scopes")
    if isinstance(token_scopes, list) and JOBS_SCOPE not in token_scopes:
        c.Spawner.server_token_scopes = [*token_scopes, JOBS_SCOPE]
    runtime: HubRuntime = hub.tornado_settings[SETTINGS_KEY]
    log = logging.getLogger("JupyterHub")
    runtime.cluster_hooks.append(protect_at_creation(runtime, log))
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # not in a running hub (a test reading the configuration)
    loop.call_soon(lambda: asyncio.ensure_future(start_at_hub_start(log)))


__all__ = [
    "configure_culler",
    "configure_dashboard",
    "configure_jobs",
    "configure_my_images",
    "configure_prepuller",
    "configure_reservations",
    "configure_ssh",
    "configure_usage",
    "register",
]


def configure_join(
    c: Config,
    *,
    etc: str | Path,
    state: str | Path,
    name: str = "gpu-join",
    address: str = "",
    port: int = 9451,
) -> None:
    """Run the join service (``jupyterhub-gpu node serve``) as a service of the hub:
    GPU nodes join with ``jupyterhub-gpu node join`` (docs/install.md, Quick install).

    ``address``: where it listens, with HTTPS (default: ``c.JupyterHub.hub_connect_ip``,
    the address the nodes reach the hub at; without one, no join service); the shared
    home's folder and the users'
    network come from the spawner's settings. It needs no hub API token: it writes the
    nodes file, which the hub re-reads.
    """
    from jupyterhub_gpu.core.homes import template_root

    hub = c.JupyterHub
    address = address or str(_value(hub, "hub_connect_ip", ""))
    if not address:  # no join service: check_config names the missing or mistyped key
        return
    spawner = c.GPUDockerSpawner
    command = [sys.executable, "-m", "jupyterhub_gpu.cli", "node", "serve",
               "--etc", str(etc), "--state", str(state), "--address", address,
               "--port", str(port)]  # fmt: skip
    if "home_template" in spawner:
        command += ["--home-root", str(template_root(str(spawner.home_template)))]
    if "user_bridge" in spawner:
        command += ["--bridge", str(spawner.user_bridge)]
    if "user_network" in spawner:
        command += ["--network", str(spawner.user_network)]
    hub.services = [*_value(hub, "services", []), {"name": name, "command": command}]
