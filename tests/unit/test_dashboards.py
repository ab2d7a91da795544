"""The Grafana dashboards under dashboards/: valid JSON a Grafana provisions (unique panel ids, panels that do not
overlap, every query on the dashboard's datasource variable), every query valid PromQL (Prometheus' own parser, through
`promtool check rules` over one recording rule per query), and every metric of the collection's own that a query
reads written by the node metrics script. Whether each query returns live data: tests/lab/test_monitoring_lab.py."""
import glob
import json
import os
import re
import subprocess

import pytest
import yaml

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
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]


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
