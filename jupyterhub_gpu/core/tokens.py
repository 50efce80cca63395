"""Per-node agent tokens, derived from one site secret.

The hub holds one site secret (``c.GPUCluster.agent_token``, default
``$JUPYTERHUB_GPU_SITE_SECRET``; the culler's ``agent_token`` the same); each node's agent
holds only its own token (``$JUPYTERHUB_GPU_AGENT_TOKEN`` or ``--token-file`` on the node)::

    token = HMAC-SHA256(key=site secret, message=node name), as 64 hex digits

so a node that leaks its token (a root user on it, a backup of its token file) opens no
other node's agent, and the site secret never has to leave the hub. The same value in a
shell: ``printf %s gpu-b | openssl dgst -sha256 -hmac "$SECRET"`` (the hex after ``= ``).

A pure function, no I/O: the hub (``Cluster``), the agent's ``--print-token`` and the
tests all call :func:`node_token`. The agent compares what it is sent with its token in
constant time (``hmac.compare_digest``, ``agent/handlers.py``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

#: Where the hub and the culler read the site secret by default. The older name
#: ``JUPYTERHUB_GPU_AGENT_TOKEN`` is still read there when this one is unset; on a node
#: that name is the node's own token, never the site secret.
SITE_SECRET_ENV = "JUPYTERHUB_GPU_SITE_SECRET"
OLD_SITE_SECRET_ENV = "JUPYTERHUB_GPU_AGENT_TOKEN"


def site_secret_from(environ: Mapping[str, str]) -> str:
    """The site secret a hub-side process finds in its environment ('' if none)."""
    return environ.get(SITE_SECRET_ENV) or environ.get(OLD_SITE_SECRET_ENV, "")


#: A site secret shorter than this is refused: an empty or short secret makes every
#: node's token guessable (HMAC of a known key is public).
MIN_SECRET_LENGTH = 16


def node_token(site_secret: str, node: str) -> str:
    """The agent token of ``node``: HMAC-SHA256(site secret, node name), hex.

    Leading and trailing whitespace of the secret is ignored (a token file's newline).
    ``ValueError`` when the secret is shorter than :data:`MIN_SECRET_LENGTH` or the node
    name is empty; the message never contains the secret.
    """
    secret = site_secret.strip()
    if len(secret) < MIN_SECRET_LENGTH:
        raise ValueError(
            f"the agents' site secret must be at least {MIN_SECRET_LENGTH} random characters "
            "(make one with: openssl rand -hex 32)"
        )
    if not node:
        raise ValueError("a node name is needed to derive its agent token")
    return hmac.new(secret.encode(), node.encode(), hashlib.sha256).hexdigest()
