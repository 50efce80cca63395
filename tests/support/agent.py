"""Node agents as real processes (declared mode), for integration tests."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.hub import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class AgentProcess:
    node: str
    inventory: Path
    log: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, poll_interval: float = 0.2) -> AgentProcess:
        env = {**os.environ, "JUPYTERHUB_GPU_AGENT_TOKEN": self.token}
        args = [
            "--probe=declared",
            f"--inventory={self.inventory}",
            f"--node={self.node}",
            f"--port={self.port}",
            f"--poll-interval={poll_interval}",
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub_gpu.agent", *args],
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
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"agent {self.node} did not come up")

    def set_state(self, uuid: str, **values: Any) -> None:
        r = httpx.put(
            f"{self.url}/v1/gpus/{uuid}/state",
            json=values,
            headers={"Authorization": f"token {self.token}"},
            timeout=5,
        )
        r.raise_for_status()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
