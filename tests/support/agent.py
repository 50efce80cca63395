"""Node agents as real processes (declared mode), for integration tests."""

from __future__ import annotations

import os
import secrets
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jupyterhub_gpu.core.tokens import node_token
from tests.support.hub import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class AgentProcess:
    node: str
    inventory: Path
    log: Path
    # the site secret, as the hub is given it; the agent gets only node_token
    token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    tls: tuple[Path, Path, Path] | None = None  # (CA, certificate, key): serve HTTPS

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.tls[0]) if self.tls else True

    def _up_check(self) -> ssl.SSLContext | bool:
        """For the start-up check only: the CA is checked, not the host name (a test may
        give an agent a certificate for another host on purpose)."""
        if not self.tls:
            return True
        context = ssl.create_default_context(cafile=self.tls[0])
        context.check_hostname = False
        return context

    @property
    def node_token(self) -> str:
        """This agent's own token, derived from the site secret and its node name."""
        return node_token(self.token, self.node)

    def start(self, poll_interval: float = 0.2) -> AgentProcess:
        env = {**os.environ, "JUPYTERHUB_GPU_AGENT_TOKEN": self.node_token}
        args = [
            "--probe=declared",
            f"--inventory={self.inventory}",
            f"--node={self.node}",
            f"--port={self.port}",
            f"--poll-interval={poll_interval}",
        ]
        if self.tls:
            args += [f"--certfile={self.tls[1]}", f"--keyfile={self.tls[2]}"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub_gpu.services.agent", *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent {self.node} exited: {self.log.read_text()[-2000:]}")
            try:
                ok = httpx.get(f"{self.url}/healthz", timeout=1, verify=self._up_check())
                if ok.status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"agent {self.node} did not come up")

    def set_state(self, uuid: str, **values: Any) -> None:
        r = httpx.put(
            f"{self.url}/v1/gpus/{uuid}/state",
            json=values,
            headers={"Authorization": f"token {self.node_token}"},
            timeout=5,
            verify=self.verify,
        )
        r.raise_for_status()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
