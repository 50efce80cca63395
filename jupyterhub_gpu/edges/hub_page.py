"""The hub's own page template for the services' pages (the dashboard, the usage page), so
that they show inside the hub's navigation bar, not as bare pages.

JupyterHub renders ``page.html`` with a Jinja loader over its ``template_paths`` and its
own templates under the ``templates/`` prefix (``app.py``); this module builds the same
loader in a service's process: the service's own templates first, then the package's hub
templates (``jupyterhub_gpu/hub/templates``: its ``page.html`` adds the GPU links to the
bar), then JupyterHub's. :func:`namespace` gives ``page.html`` the variables JupyterHub's
handlers give it (``template_namespace`` in ``handlers/base.py``) as far as a service can
know them: the links of the bar come from ``$JUPYTERHUB_GPU_PAGE`` (JSON, written by
``hub/extensions.py``: the ``jhgpu_*`` template variables and the displayed services).

The hub's ``page.html`` carries inline scripts; :func:`inline_script_hashes` lets a page
with a strict Content-Security-Policy allow exactly those (their SHA-256), nothing else.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

PAGE_ENV = "JUPYTERHUB_GPU_PAGE"
HUB_TEMPLATES = Path(__file__).resolve().parent.parent / "hub" / "templates"
_INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)
MAX_PAGE_ENV = 65536  # bytes of $JUPYTERHUB_GPU_PAGE read


def jupyterhub_templates() -> Path:
    """JupyterHub's own templates (``share/jupyterhub/templates``)."""
    from jupyterhub._data import DATA_FILES_PATH

    return Path(DATA_FILES_PATH) / "templates"


@functools.cache
def environment(own: str) -> jinja2.Environment:
    """Templates from ``own`` (a folder), then the hub's page with our bar, then
    JupyterHub's (``templates/page.html``). Autoescaped; an undefined name is empty, as
    in the hub (its ``page.html`` reads names a page may not set)."""
    loader = jinja2.ChoiceLoader(
        [
            jinja2.FileSystemLoader([own, str(HUB_TEMPLATES)]),
            jinja2.PrefixLoader(
                {"templates": jinja2.FileSystemLoader(str(jupyterhub_templates()))}
            ),
        ]
    )
    return jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True)


@dataclass(frozen=True)
class PageUser:
    """What ``page.html`` reads of the user (``name``, ``json_escaped_name``)."""

    name: str
    admin: bool = False

    @property
    def json_escaped_name(self) -> str:
        return json.dumps(self.name)[1:-1]


@dataclass(frozen=True)
class ServiceLink:
    name: str
    href: str


def page_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``$JUPYTERHUB_GPU_PAGE`` read: ``{"template_vars": {...}, "services": [names]}``;
    anything else reads as none (the bar then has the hub's own links only)."""
    text = (os.environ if environ is None else environ).get(PAGE_ENV, "")[:MAX_PAGE_ENV]
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    tvars = data.get("template_vars")
    services = data.get("services")
    return {
        "template_vars": {
            str(k): v
            for k, v in (tvars.items() if isinstance(tvars, dict) else ())
            if str(k).startswith("jhgpu_") and isinstance(v, str | bool | int)
        },
        "services": [str(s) for s in services if isinstance(s, str)]
        if isinstance(services, list)
        else [],
    }


def namespace(
    user: PageUser,
    *,
    prefix: str = "/",
    hub_prefix: str = "/hub/",
    xsrf: str = "",
    settings: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The variables of the hub's ``page.html`` for ``user`` on a service's page."""
    s = page_settings() if settings is None else settings
    static = hub_prefix + "static/"

    def static_url(path: str, include_version: bool = True) -> str:
        return static + path

    services: Sequence[str] = s.get("services", [])
    return {
        "base_url": hub_prefix,
        "prefix": prefix,
        "user": user,
        "login_url": hub_prefix + "login",
        "logout_url": hub_prefix + "logout",
        "static_url": static_url,
        "version_hash": "",
        "services": [ServiceLink(n, f"{prefix}services/{n}/") for n in services],
        "parsed_scopes": {"admin-ui"} if user.admin else set(),
        "admin_access": user.admin,
        "no_spawner_check": True,
        "xsrf": xsrf,
        "xsrf_token": "",
        **s.get("template_vars", {}),
        **(extra or {}),
    }


def inline_script_hashes(html: str) -> list[str]:
    """``'sha256-…'`` of every inline ``<script>`` of ``html``, for a CSP's script-src."""
    out = []
    for body in _INLINE.findall(html):
        digest = hashlib.sha256(body.encode("utf-8")).digest()
        out.append(f"'sha256-{base64.b64encode(digest).decode()}'")
    return sorted(set(out))
