"""Monitoring on the 4-node lab (roles/monitoring, the deploy's `monitoring` phase), on vLLM's own engine: after a
deploy and a benchmark, the head's Prometheus has every target up (4 node exporters and the engine's /metrics, read
with the API key), every query of every dashboard under dashboards/ returns data, the rules are loaded, and an alert
fires for real when its cause is staged (a worker's node exporter stopped: DgxsparkNodeExporterDown), then clears.
Scrape duration and Prometheus' memory are printed (`SCRAPE ...`, `PROMETHEUS RSS ...`).

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab -s tests/lab/test_monitoring_lab.py
"""

import glob
import json
import os
import re
import time

import pytest

import prometheus_lab
from ansible_lab import HEAD, REPO, VLLM, node_container, run_playbook, serving_cluster

pytestmark = pytest.mark.lab

STOPPED = "spark-delta"
DASHBOARDS = sorted(glob.glob(os.path.join(REPO, "dashboards", "*.json")))


def prometheus(lab, path, **params):
    """GET Prometheus' HTTP API on the head's management address (the firewall lets the lab's management network in:
    inventories/lab's allowed CIDRs), with the cluster's password (prometheus_lab) -> data."""
    return prometheus_lab.api(lab, path, **params)


def targets(lab):
    return sorted((t["labels"]["job"], t["labels"]["node"], t["health"])
                  for t in prometheus(lab, "/api/v1/targets")["activeTargets"])


def query(lab, expr, *labels):
    """An instant query -> sorted tuples of the named labels of each series ("value": the sample's value)."""
    result = prometheus(lab, "/api/v1/query", query=expr)["result"]
    return sorted(tuple(r["value"][1] if label == "value" else r["metric"][label] for label in labels) for r in result)


def wait_for(check, timeout, step=3):
    """check() until it is true or the timeout passed -> its last value."""
    deadline = time.time() + timeout
    while True:
        seen = check()
        if seen or time.time() > deadline:
            return seen
        time.sleep(step)


@pytest.fixture(scope="module")
def benchmarked(lab, tmp_path_factory):
    cluster = serving_cluster(lab)
    values = {"benchmark_concurrency": [1, 2], "benchmark_prompt_tokens": 32, "benchmark_output_tokens": 16,
              "benchmark_requests_per_user": 2, "benchmark_results_dir": str(tmp_path_factory.mktemp("bench"))}
    rc, out = run_playbook(cluster, "benchmark.yml", "-e", json.dumps(values), timeout=600)
    assert rc == 0, out[-4000:]
    # One scrape after the last request (Prometheus scrapes every 15 s, the role's default).
    time.sleep(16)
    return cluster


def test_every_target_is_up_and_the_rules_are_loaded(benchmarked):
    expected = [("node", node, "up") for node in sorted(benchmarked.nodes)] + [("vllm", HEAD, "up")]
    seen = wait_for(lambda: targets(benchmarked) == sorted(expected), 60)
    assert seen, targets(benchmarked)
    rules = prometheus(benchmarked, "/api/v1/rules")["groups"]
    names = set(rule["name"] for group in rules for rule in group["rules"])
    # Prometheus loaded every rule of the role's file, by name (the file is what promtool tests).
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "roles", "monitoring", "files",
                           "dgxspark_alerts.rules.yml")) as handle:
        written = set(re.findall(r"^\s+- alert: (\S+)$", handle.read(), re.M))
    assert len(written) >= 17 and names == written, (names, written)
    durations = [t["lastScrapeDuration"] for t in prometheus(benchmarked, "/api/v1/targets")["activeTargets"]]
    print("\nSCRAPE duration per target: max %.3f s, mean %.3f s over %d targets"
          % (max(durations), sum(durations) / len(durations), len(durations)))
    rss_kib = int(benchmarked.host(HEAD).check_output("ps -o rss= -C prometheus").split()[0])
    print("PROMETHEUS RSS on the head: %.0f MiB" % (rss_kib / 1024.0))


@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_every_dashboard_query_returns_live_data(benchmarked, path):
    with open(path) as handle:
        dashboard = json.load(handle)
    # As Grafana sends them with every variable on "All": $group is its allValue (.*), which also matches the lab's
    # series that have no group label (one group). Sent as written, group=~"$group" would match nothing.
    alls = [("$" + v["name"], v["allValue"]) for v in dashboard["templating"]["list"] if v.get("includeAll")]

    def as_sent(expr):
        for name, value in alls:
            expr = expr.replace(name, value)
        return expr
    queries = [(panel["title"], as_sent(target["expr"])) for panel in dashboard["panels"] for target in panel["targets"]]

    def without_data():
        return ["%s: %s" % (title, expr) for title, expr in queries
                if not prometheus(benchmarked, "/api/v1/query", query=expr)["result"]]
    # A rate needs two scrapes of its series: an engine that an earlier module restarted has few yet.
    assert wait_for(lambda: not without_data(), 45), "queries without data:\n" + "\n".join(without_data())


def test_the_gauges_of_every_node_reach_prometheus(benchmarked):
    # The gauges are written every 30 s in the lab and scraped every 15 s: a container that an earlier module restarted
    # shows as running up to 45 s later.
    # Each node's group container (Ray's, or its rank under mp) and the engine on the head.
    running = sorted(set([(node, node_container()) for node in benchmarked.nodes] + [(HEAD, VLLM)]))
    assert wait_for(lambda: query(benchmarked, "dgxspark_container_running == 1", "node", "container") == running, 90), \
        query(benchmarked, "dgxspark_container_running", "node", "container", "value")
    serving = 'dgxspark_supervisor_phase{phase="serving"}'
    assert wait_for(lambda: query(benchmarked, serving, "node", "value") == [(HEAD, "1")], 90), \
        query(benchmarked, "dgxspark_supervisor_phase == 1", "node", "phase")
    gpus = [(node, "1") for node in sorted(benchmarked.nodes)]
    assert query(benchmarked, "dgxspark_gpu_query_ok", "node", "value") == gpus


def test_a_stopped_node_exporter_fires_its_alert_then_clears(benchmarked):
    worker = benchmarked.host(STOPPED)
    stopped = time.time()
    worker.check_output("systemctl stop prometheus-node-exporter")
    try:
        def firing():
            alerts = prometheus(benchmarked, "/api/v1/alerts")["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "DgxsparkNodeExporterDown" and a["state"] == "firing"]
        # Up to a scrape and an evaluation (15 s each) before the rule sees it, then its `for: 1m`, then an evaluation.
        fired = wait_for(firing, 180)
        assert [a["labels"]["node"] for a in fired] == [STOPPED], prometheus(benchmarked, "/api/v1/alerts")
        print("\nALERT DgxsparkNodeExporterDown firing %.0f s after the exporter stopped (for: 1m)" % (time.time() - stopped))
        assert fired[0]["annotations"]["summary"] == "The node exporter of %s does not answer" % STOPPED
    finally:
        worker.check_output("systemctl start prometheus-node-exporter")
    cleared = wait_for(lambda: not firing() and ("node", STOPPED, "up") in targets(benchmarked), 120)
    assert cleared, (targets(benchmarked), firing())
