"""The Grafana dashboard (docs/grafana/jupyterhub-gpu.json) and the alerting rules
(docs/grafana/alerts.yml) against a real Prometheus scraping the real hub and agents.

Grafana itself is not packaged here; what a board can get wrong is its queries, and those
run in Prometheus. The hub of ``test_multinode`` (whose fixtures and helpers this module
reuses) with its three agents: one server holds a GPU (idle: utilisation 0), another a
quarter of an RTX 3090 (the hub shares them in four; idle too), one spawn is refused (its
image needs a newer driver), one GPU is broken and another busy. Prometheus (Debian's
package) scrapes the hub's ``/hub/metrics`` with a service token whose role has
``read:metrics`` only, and each agent's ``/metrics`` with that node's token, every second.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.integration.test_multinode import (  # noqa: F401  (fixtures: agents, cluster)
    CUDA11,
    RTX3090,
    UUIDS,
    agents,
    cluster,
    spawn_ready,
    spawn_refused,
    start_hub,
)
from tests.support.agent import AgentProcess
from tests.support.cluster import REPO, Engine
from tests.support.hub import Hub
from tests.support.prometheus import Prometheus, PrometheusError, ScrapeJob

pytestmark = pytest.mark.integration

DASHBOARD = REPO / "docs" / "grafana" / "jupyterhub-gpu.json"
ALERTS = REPO / "docs" / "grafana" / "alerts.yml"

METRICS_TOKEN = secrets.token_hex(16)
# a service that may read /hub/metrics and nothing else (JupyterHub's authenticate_prometheus
# stays on: without this scope the hub answers 403)
METRICS_CONFIG = f"""
c.JupyterHub.services = c.JupyterHub.services + [
    {{"name": "prometheus", "api_token": {METRICS_TOKEN!r}}}
]
c.JupyterHub.load_roles = c.JupyterHub.load_roles + [
    {{"name": "metrics", "scopes": ["read:metrics"], "services": ["prometheus"]}}
]
c.GPUSharing.models = {{{RTX3090[0]!r}: {{"shares": 4}}}}
"""

HELD = "jupyterhub_gpu_allocated == 1"
#: What Grafana's own variables become in a query run here (the data is seconds old).
GRAFANA_VARIABLES = {"__range": "1m", "__rate_interval": "1m", "__interval": "1m"}
#: Rules whose condition the set-up below makes true: each must be pending (each has a
#: ``for`` of five minutes or more).
TRUE_HERE = {"GPUAllocatedButIdle", "GPUUnhealthy", "GPUsUnavailable"}
#: Rules whose condition is false here (no accounting database: nothing waits; the agents
#: read every 0.2 s): the rule returns nothing and its left-hand side holds values that
#: fail the comparison.
FALSE_HERE = {"GPUAccountingBacklog", "GPUAgentReadingsStale"}
COMPARISON = re.compile(r"^(?P<lhs>.+?)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<rhs>-?[0-9.]+)\s*$", re.S)
OPS = {
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


# ---------------------------------------------------------------------------- the files
def walk_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside (collapsed) rows."""
    for panel in panels:
        yield panel
        yield from walk_panels(panel.get("panels") or [])


def substitute(expr: str, variables: dict[str, str]) -> str:
    """``$name`` and ``${name}`` replaced; an unknown variable fails the test."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in variables, f"unknown dashboard variable ${name} in {expr!r}"
        return variables[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every query of the dashboard: each panel target's ``expr``, and
    each query variable's ``label_values(SELECTOR, LABEL)`` as ``count by (LABEL)
    (SELECTOR)`` (the same series). Query variables become their "All" value (``.*``)."""
    board = json.loads(DASHBOARD.read_text())
    variables = dict(GRAFANA_VARIABLES)
    queries: list[tuple[str, str]] = []
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        variables[var["name"]] = var.get("allValue") or ".*"
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((?P<sel>.+),\s*(?P<label>\w+)\)", q.strip())
        assert m, f"variable {var['name']}: not label_values(selector, label): {q!r}"
        queries.append((f"variable ${var['name']}", f"count by ({m['label']}) ({m['sel']})"))
    for panel in walk_panels(board["panels"]):
        for target in panel.get("targets") or []:
            if target.get("expr"):
                queries.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    return [(where, substitute(expr, variables)) for where, expr in queries]


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


# ---------------------------------------------------------------------------- the test
def test_every_dashboard_and_alert_query_returns_data(
    make_hub: Callable[..., Hub],
    engines: list[Engine],
    cluster: dict[str, AgentProcess],  # noqa: F811  (test_multinode's fixture)
    tmp_path: Path,
) -> None:
    """Every dashboard query (panels and variables) must be valid PromQL and return at
    least one series here (one server holds a quarter of an RTX 3090, for the sharing
    panels). Every alerting rule must be loaded with health "ok"; a rule
    whose condition the set-up makes true (an idle allocated GPU, a broken GPU, which the
    hub counts unavailable) must return series and be pending; a rule whose condition is
    false here (accounting backlog, stale agent readings) must return nothing, and its
    expression without the final comparison (the series it judges, e.g.
    ``jupyterhub_gpu_accounting_backlog`` for ``... > 0``) must return series whose values
    all fail that comparison: the rule looks at data that exists and judges it false,
    rather than matching nothing because a name or label is wrong."""
    broken = UUIDS["node-c"][1]
    cluster["node-c"].set_state(broken, healthy=False)
    hub = start_hub(make_hub, engines, cluster, METRICS_CONFIG)
    held = spawn_ready(hub, "watched", CUDA11)["gpu_uuids"]  # utilisation 0: idle
    quarter = {**CUDA11, "gpu_model": RTX3090[0], "gpu_share": "1/4"}
    (shared,) = spawn_ready(hub, "sharer", quarter)["gpu_uuids"]  # idle too
    spawn_refused(hub, "refused", {**CUDA11, "image": "demo-cuda13"}, "driver")
    busy = next(u for n in UUIDS.values() for u in n if u not in (*held, shared, broken))
    node_of_busy = next(node for node, uuids in UUIDS.items() if busy in uuids)
    cluster[node_of_busy].set_state(busy, utilization_pct=90, memory_used_mib=4096)

    metrics = f"{hub.url}/hub/metrics"
    assert httpx.get(metrics, timeout=10).status_code == 403, "/hub/metrics open to anyone"
    jobs = [ScrapeJob("jupyterhub", urlsplit(hub.url).netloc, "/hub/metrics", METRICS_TOKEN)]
    jobs += [
        ScrapeJob(f"gpu-agent-{node}", urlsplit(agent.url).netloc, "/metrics", agent.node_token)
        for node, agent in sorted(cluster.items())
    ]
    with Prometheus(tmp_path / "prometheus", jobs, rule_files=[ALERTS]) as prom:
        prom.wait_for_targets(timeout=30)
        check_dashboard(prom, [*held, shared], broken)
        check_shares(prom, shared)
        check_alerts(prom)


def check_dashboard(prom: Prometheus, held: list[str], broken: str) -> None:
    """Every dashboard query returns data; the idle join and the unhealthy table find
    exactly the held GPUs (whole or by shares) and the broken one."""
    failures: list[str] = []
    for where, expr in dashboard_queries():
        try:
            prom.wait_for_series(expr, timeout=30)
        except (PrometheusError, TimeoutError) as e:
            failures.append(f"{where}: {expr}\n    {e}")
    assert not failures, "dashboard queries without data:\n" + "\n".join(failures)

    # the join finds exactly the held GPU (every free GPU is idle too; one is busy)
    idle = prom.query("jupyterhub_gpu_utilization_percent < 5 and on(node, uuid) " + HELD)
    assert sorted(s["metric"]["uuid"] for s in idle) == sorted(held), idle
    unhealthy = prom.query("jupyterhub_gpu_healthy == 0")
    assert [s["metric"]["uuid"] for s in unhealthy] == [broken], unhealthy


def check_shares(prom: Prometheus, shared: str) -> None:
    """The sharing panels' series: the one shared GPU, a quarter of it held, three free;
    a quarter of a GPU held as a share by the sharer's group."""
    shares = prom.query("jupyterhub_gpu_shares")
    by_state = {(s["metric"]["uuid"], s["metric"]["state"]): s["value"][1] for s in shares}
    assert by_state == {(shared, "held"): "1", (shared, "free"): "3"}, shares
    as_shares = prom.query('sum(jupyterhub_gpu_held_gpus{kind="share"})')
    assert [s["value"][1] for s in as_shares] == ["0.25"], as_shares


def check_alerts(prom: Prometheus) -> None:
    """The rules made true here return series; the others judge existing series false;
    all are loaded and evaluated (see the test's docstring)."""
    rules = alert_rules()
    assert {r["alert"] for r in rules} == TRUE_HERE | FALSE_HERE, "a rule not tested"
    failures: list[str] = []
    for rule in rules:
        name, expr = rule["alert"], rule["expr"]
        if name in TRUE_HERE:
            try:
                prom.wait_for_series(expr, timeout=30)
            except (PrometheusError, TimeoutError) as e:
                failures.append(f"alert {name} (true here): {expr}\n    {e}")
            continue
        m = COMPARISON.match(expr.strip())
        assert m, f"alert {name}: no final comparison in {expr!r}"
        try:
            lhs = prom.wait_for_series(m["lhs"], timeout=30)
            if prom.query(expr):
                failures.append(f"alert {name}: its condition holds here: {expr}")
            true_now = [s for s in lhs if OPS[m["op"]](float(s["value"][1]), float(m["rhs"]))]
            if true_now:
                failures.append(f"alert {name}: {m['lhs']} {m['op']} {m['rhs']}: {lhs}")
        except (PrometheusError, TimeoutError) as e:
            failures.append(f"alert {name} (false here): {m['lhs']}\n    {e}")
    assert not failures, "alerting rules:\n" + "\n".join(failures)
    check_rules_loaded(prom, {r["alert"] for r in rules})


def check_rules_loaded(prom: Prometheus, names: set[str]) -> None:
    """Each rule is loaded from alerts.yml, evaluated with health "ok"; the ones made true
    are pending (none has a ``for`` shorter than five minutes)."""
    deadline = time.monotonic() + 30
    while True:
        loaded = {r["name"]: r for r in prom.rules() if r["type"] == "alerting"}
        settled = set(loaded) == names and all(
            r["health"] == "ok" and (r["state"] == "pending") == (n in TRUE_HERE)
            for n, r in loaded.items()
        )
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(loaded) == names, f"rules loaded: {sorted(loaded)}"
    for name, rule in loaded.items():
        assert rule["file"] == str(ALERTS.resolve()), rule["file"]
        assert rule["health"] == "ok", f"{name}: {rule['health']} {rule.get('lastError')}"
        expected = "pending" if name in TRUE_HERE else "inactive"
        assert rule["state"] == expected, f"{name}: {rule['state']}, expected {expected}"
