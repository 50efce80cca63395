"""The agent's HTTP API (tornado). Every endpoint but ``/healthz`` needs the token.

- ``GET /v1/gpus``: the node's inventory as JSON (:mod:`jupyterhub_gpu.wire.agent`);
- ``GET /metrics``: Prometheus text format;
- ``PUT /v1/gpus/{uuid}/state``: set live values (declared inventories only);
- ``GET /healthz``: ``ok`` (liveness, no token).

Authentication: ``Authorization: token <token>`` (or ``Bearer``); missing -> 401,
wrong -> 403. The token is compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from tornado import web

from jupyterhub_gpu.services.agent.poller import SnapshotPoller, UnknownGPU
from jupyterhub_gpu.wire.agent import gpu_to_json, inventory_to_json, parse_live_update

access_log = logging.getLogger("jupyterhub_gpu.services.agent.access")


class JSONErrorHandler(web.RequestHandler):
    """Errors as ``{"error": "<a sentence>"}``, never a traceback."""

    def fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish({"error": message})

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.finish({"error": self._reason})

    def set_default_headers(self) -> None:
        self.set_header("Cache-Control", "no-store")


class TokenHandler(JSONErrorHandler):
    """Base for endpoints that need ``Authorization: token <token>``."""

    def initialize(self, token: str, poller: SnapshotPoller, **kwargs: Any) -> None:
        self._token = token.encode()
        self.poller = poller

    def prepare(self) -> None:
        header = self.request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() not in {"token", "bearer"} or not value.strip():
            self.set_header("WWW-Authenticate", 'token realm="jupyterhub-gpu-agent"')
            self.fail(401, "send 'Authorization: token <agent token>'")
            return
        if not hmac.compare_digest(value.strip().encode(), self._token):
            self.fail(403, "the token is not valid for this agent")


class GPUsHandler(TokenHandler):
    def get(self) -> None:
        snapshot = self.poller.snapshot
        if snapshot is None:
            self.fail(503, f"the GPUs have not been read yet ({self.poller.last_error})")
            return
        self.finish(inventory_to_json(snapshot.inventory, snapshot.time))


class GPUStateHandler(TokenHandler):
    def put(self, uuid: str) -> None:
        if not self.poller.settable:
            self.fail(
                409,
                "live values can only be set on an agent serving a declared inventory; "
                "this one reads the GPUs through NVML",
            )
            return
        try:
            body = json.loads(self.request.body or b"null")
        except ValueError:
            self.fail(400, "the body is not valid JSON")
            return
        try:
            values = parse_live_update(body)
            gpu = self.poller.set_live(uuid, values)
        except UnknownGPU as e:
            self.fail(404, str(e))
            return
        except ValueError as e:
            self.fail(400, str(e))
            return
        self.finish(gpu_to_json(gpu))


class MetricsHandler(TokenHandler):
    def initialize(self, registry: CollectorRegistry, **kwargs: Any) -> None:  # type: ignore[override]
        super().initialize(**kwargs)
        self.registry = registry

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.registry))


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("ok")


def log_request(handler: web.RequestHandler) -> None:
    """Access log without headers (so never the token); quiet for successful requests."""
    status = handler.get_status()
    level = logging.DEBUG if status < 400 else logging.WARNING
    request = handler.request
    access_log.log(
        level,
        "%d %s %s (%s) %.1fms",
        status,
        request.method,
        request.path,
        request.remote_ip,
        1000.0 * request.request_time(),
    )


def make_web_app(
    token: str, poller: SnapshotPoller, registry: CollectorRegistry
) -> web.Application:
    common = {"token": token, "poller": poller}
    return web.Application(
        [
            (r"/v1/gpus/?", GPUsHandler, common),
            (r"/v1/gpus/([^/]+)/state", GPUStateHandler, common),
            (r"/metrics", MetricsHandler, {**common, "registry": registry}),
            (r"/healthz", HealthHandler),
        ],
        log_function=log_request,
        serve_traceback=False,
    )
