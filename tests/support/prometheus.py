"""A real Prometheus server (Debian's ``prometheus`` package) for integration tests.

It scrapes the given targets every second with a generated configuration in a folder of
the test, evaluates the given rule files every second, and answers PromQL through its
HTTP API. Use it as a context manager (it stops on exit)::

    jobs = [ScrapeJob("jupyterhub", "127.0.0.1:8000", "/hub/metrics", token)]
    with Prometheus(tmp_path / "prometheus", jobs, rule_files=[ALERTS]) as prom:
        series = prom.wait_for_series("jupyterhub_gpu_gpus", timeout=30)

Nothing here listens anywhere but on loopback (a free port, never 9090).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from tests.support.hub import free_port

#: Where Debian's ``prometheus`` package puts the server (scripts/cluster.sh installs it).
PROMETHEUS_BINARY = "/usr/bin/prometheus"


class PrometheusError(RuntimeError):
    """Prometheus answered a query or API call with an error (e.g. a bad expression)."""


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: ``target`` is ``host:port``; ``token`` is sent as
    ``Authorization: Bearer <token>`` (from a chmod-600 file), or nothing when ``None``."""

    job: str
    target: str
    metrics_path: str = "/metrics"
    token: str | None = field(default=None, repr=False)
    scheme: str = "http"


@dataclass
class Prometheus:
    workdir: Path
    jobs: Sequence[ScrapeJob]
    rule_files: Sequence[Path] = ()
    port: int = field(default_factory=free_port)
    interval_s: float = 1.0  # scrape and rule evaluation interval
    binary: str = field(default_factory=lambda: shutil.which("prometheus") or PROMETHEUS_BINARY)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    # ------------------------------------------------------------------ life cycle
    def write_config(self) -> Path:
        """prometheus.yml (and one token file per job that has a token) in ``workdir``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        names = [j.job for j in self.jobs]
        if len(names) != len(set(names)):
            raise ValueError(f"scrape job names must be unique: {names}")
        interval = f"{round(self.interval_s * 1000)}ms"
        scrape_configs: list[dict[str, Any]] = []
        for n, job in enumerate(self.jobs):
            entry: dict[str, Any] = {
                "job_name": job.job,
                "metrics_path": job.metrics_path,
                "scheme": job.scheme,
                "static_configs": [{"targets": [job.target]}],
            }
            if job.token is not None:
                token_file = self.workdir / f"token-{n}"
                token_file.touch(mode=0o600)
                token_file.chmod(0o600)
                token_file.write_text(job.token)
                entry["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
            scrape_configs.append(entry)
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,  # may not exceed the interval
                "evaluation_interval": interval,
            },
            "scrape_configs": scrape_configs,
        }
        if self.rule_files:
            config["rule_files"] = [str(Path(f).resolve()) for f in self.rule_files]
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start(self, timeout: float = 60) -> Prometheus:
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError(
                f"no Prometheus server at {self.binary}: install Debian's prometheus package "
                "(scripts/cluster.sh up does)"
            )
        config = self.write_config()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    "--storage.tsdb.retention.time=1d",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=info",
                ],
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready in {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no prometheus log)"

    # ------------------------------------------------------------------ HTTP API
    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """``GET /api/v1/<path>``: the answer's ``data``; :class:`PrometheusError` with
        Prometheus's own message when it answers ``"status": "error"``."""
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        try:
            body = r.json()
        except ValueError:
            raise PrometheusError(f"/api/v1/{path}: HTTP {r.status_code}: {r.text[:500]}") from None
        if r.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(
                f"/api/v1/{path} {dict(params or {})}: HTTP {r.status_code} "
                f"{body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query now: one ``{"metric": labels, "value": [t, "v"]}`` per series
        (``"values"`` for a range selector); a scalar or string comes back as one entry
        without labels. Raises :class:`PrometheusError` for an invalid expression."""
        data = self.api("query", {"query": expr})
        result = data["result"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": result}]
        return list(result)

    def wait_for_series(self, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
        """Query ``expr`` until it returns at least one series; an invalid expression
        fails at once, no data after ``timeout`` s raises :class:`TimeoutError`."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"no series for {expr!r} in {timeout}s; {self.describe()}")
            time.sleep(0.5)

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", {"state": "active"})["activeTargets"])

    def wait_for_targets(self, timeout: float = 30) -> list[dict[str, Any]]:
        """Wait until every scrape job's target has been scraped successfully."""
        deadline = time.monotonic() + timeout
        while True:
            targets = self.targets()
            up = {t["labels"]["job"] for t in targets if t["health"] == "up"}
            if up >= {j.job for j in self.jobs}:
                return targets
            if time.monotonic() > deadline:
                raise TimeoutError(f"targets not up in {timeout}s; {self.describe()}")
            time.sleep(0.5)

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (``name``, ``query``, ``health``, ``state``, ``lastError``,
        ...), with its group's name and file under ``group`` and ``file``."""
        groups = self.api("rules")["groups"]
        return [{**r, "group": g["name"], "file": g["file"]} for g in groups for r in g["rules"]]

    def describe(self) -> str:
        """The targets' health, for failure messages."""
        try:
            return "targets: " + ", ".join(
                f"{t['labels']['job']}={t['health']}"
                + (f" ({t['lastError']})" if t.get("lastError") else "")
                for t in self.targets()
            )
        except (httpx.HTTPError, PrometheusError) as e:
            return f"targets unknown ({e})"
