"""Docker clients for GPU nodes: the one way the hub (and ``check-node``) reaches an engine.

A node's client trusts only the node's own CA and ignores the environment's CA bundles and
proxies (see :func:`node_client`). ``hub/cluster.py`` keeps one per node; the
``check-node`` command opens its own.
"""

from __future__ import annotations

from typing import Any

import docker

from jupyterhub_gpu.wire.nodes_file import NodeSpec


def tls_config(spec: NodeSpec) -> Any:
    """docker-py's TLS settings for ``spec``: the hub's client certificate, the node's CA
    (``False`` for a node without ``tls``)."""
    if not spec.tls:
        return False
    return docker.tls.TLSConfig(
        client_cert=(spec.tls["client_cert"], spec.tls["client_key"]),
        ca_cert=spec.tls["ca_cert"],
        verify=True,
    )


def node_client(spec: NodeSpec, timeout: float, tls: Any) -> docker.APIClient:
    """A Docker client for ``spec`` that trusts only the node's own CA.

    docker-py's client is a ``requests.Session``; with ``trust_env`` on, requests lets
    ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` override the session's CA (requests issue
    3829), so on a host that sets them the node's certificate would be checked against the
    system CAs instead of the node's, and the proxy variables would apply to the Docker
    API. Neither may decide how the hub reaches a node's engine."""

    return _NodeClient(base_url=spec.docker_url, version="auto", timeout=timeout, tls=tls)


class _NodeClient(docker.APIClient):
    """docker-py's client with ``trust_env`` off (see :func:`node_client`)."""

    def _retrieve_server_version(self) -> str:
        self.trust_env = False  # set in __init__ before its first request (the negotiation)
        return str(super()._retrieve_server_version())
