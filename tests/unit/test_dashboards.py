"""The Grafana dashboards under dashboards/: valid JSON a Grafana provisions (unique panel ids, panels that do not
overlap, every query on the dashboard's datasource variable), every query valid PromQL (Prometheus' own parser, through
`promtool check rules` over one recording rule per query), and every metric of the collection's own that a query
reads written by the node metrics script, every query filtered by the serving group variable (issue 51). Whether each
query returns live data: tests/lab/test_monitoring_lab.py."""
import glob
import json
import os
import re
import subprocess

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.monitoring_config import prometheus_config
from node_metrics_script import metrics

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PROMTOOL = os.path.join(ROOT, ".cache", "prometheus-deb", "usr", "bin", "promtool")
DASHBOARDS = sorted(glob.glob(os.path.join(ROOT, "dashboards", "*.json")))


def load(path):
    with open(path) as handle:
        return json.load(handle)


def queries(dashboard):
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_there_are_dashboards():
    assert [os.path.basename(path) for path in DASHBOARDS] == ["dgxspark-overview.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_a_dashboard_grafana_can_provision(path):
    dashboard = load(path)
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = set((x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"]))
        assert not mine & cells, "%s overlaps another panel" % panel["title"]
        cells |= mine
        assert panel["targets"] and panel["description"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["expr"].strip(), panel["title"]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "group"]


@pytest.mark.skipif(not os.path.exists(PROMTOOL), reason="tools/promtool.sh unpacks promtool (make test runs it first)")
@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_every_query_is_valid_promql(path, tmp_path):
    recorded = [{"record": "dashboard:query_%d" % n, "expr": expr} for n, expr in enumerate(queries(load(path)))]
    rules = {"groups": [{"name": "dashboard", "rules": recorded}]}
    rules_file = tmp_path / "queries.rules.yml"
    rules_file.write_text(yaml.safe_dump(rules))
    proc = subprocess.run([PROMTOOL, "check", "rules", str(rules_file)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_every_gauge_of_ours_a_query_reads_is_written(path):
    read = set(name for expr in queries(load(path)) for name in re.findall(r"\bdgxspark_[a-z_]+\b", expr))
    assert read and read <= set(metrics.HELP), read - set(metrics.HELP)


def test_the_provisioning_file_names_a_file_provider():
    with open(os.path.join(ROOT, "dashboards", "provisioning.yml")) as handle:
        provisioning = yaml.safe_load(handle)
    assert provisioning["apiVersion"] == 1 and provisioning["providers"][0]["type"] == "file"


GROUP_MATCHER = 'group=~"$group"'
# PromQL's tokens here: a matcher list, a name, any other character. A name followed by "(" is a function; the labels of
# `by (...)` and the ranges in [...] are taken out first.
TOKEN = re.compile(r'\{[^}]*\}|[A-Za-z_:][A-Za-z0-9_:]*|\S')
KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def selectors(expr):
    """[(metric name, its matchers or '')] of every vector selector of EXPR."""
    bare = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', ' ', expr)
    bare = re.sub(r'\[[^\]]*\]', ' ', bare)
    tokens = TOKEN.findall(bare)
    found = []
    for at, token in enumerate(tokens):
        following = tokens[at + 1] if at + 1 < len(tokens) else ''
        if re.match(r'[A-Za-z_:]', token) and token not in KEYWORDS and following != '(':
            found.append((token, following if following.startswith('{') else ''))
    return found


@pytest.mark.parametrize("expr, expected", [
    ('sum(rate(vllm:generation_tokens_total{group=~"$group"}[1m]))', [("vllm:generation_tokens_total", '{group=~"$group"}')]),
    ('histogram_quantile(0.5, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))',
     [("vllm:e2e_request_latency_seconds_bucket", "")]),
    ('node_memory_SwapTotal_bytes{job="node",group=~"$group"} - node_memory_SwapFree_bytes{job="node"}',
     [("node_memory_SwapTotal_bytes", '{job="node",group=~"$group"}'), ("node_memory_SwapFree_bytes", '{job="node"}')]),
    ("up", [("up", "")]),
])
def test_the_selector_finder(expr, expected):
    assert selectors(expr) == expected


@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_every_query_filters_by_the_serving_group(path):
    """Every selector of every panel's query matches group=~"$group": a fleet's user who picks a group sees that group's
    series only (issue 51); All (.*) also matches the series of a one-group cluster, which have no group label."""
    dashboard = load(path)
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            found = selectors(target["expr"])
            assert found, (panel["title"], target["expr"])
            for name, matchers in found:
                assert GROUP_MATCHER in matchers, (panel["title"], name, target["expr"])


@pytest.mark.parametrize("path", DASHBOARDS, ids=os.path.basename)
def test_the_group_variable_lists_the_serving_groups_and_shows_everything_by_default(path):
    variable = dict((v["name"], v) for v in load(path)["templating"]["list"])["group"]
    assert (variable["type"], variable["includeAll"], variable["allValue"]) == ("query", True, ".*")
    assert variable["current"]["value"] == ["$__all"] and variable["datasource"]["uid"] == "${datasource}"
    # label_values(<selector>, group): a metric whose targets carry the label in a fleet (monitoring_config), so that
    # the list holds the serving groups
    match = re.fullmatch(r'label_values\((\w+)\{job="(\w+)"\}, group\)', variable["query"])
    assert match and variable["definition"] == variable["query"], variable["query"]
    metric, job = match.groups()
    plan = {"head": "s1", "serving_group": "fleet_a", "rails": [{"name": "rail1"}],
            "nodes": [{"host": "s1", "rank": 0, "runs": ["ray", "vllm"], "rail_addresses": {"rail1": "192.168.100.10"}}]}
    settings = {"scrape_interval_s": 15, "evaluation_interval_s": 15, "node_exporter_port": 9100, "vllm_port": 8000,
                "ray_metrics_port": 6384, "scrape_ray": True, "api_key_file": "/k", "rules_files": [], "cluster": "c",
                "router": {"host": "s1", "port": 4000}}
    jobs = dict((j["job_name"], j) for j in prometheus_config(plan, settings)["scrape_configs"])
    assert metric == "up" and [g["labels"]["group"] for g in jobs[job]["static_configs"]] == ["fleet_a"]
    # the router's `fleet` is no serving group: not listed (it shows under All)
    assert job != "router"
