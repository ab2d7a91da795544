"""The alert rules and their promtool tests stay together: every rule has a promtool case that fires it and one that
must not (tools/promtool.sh runs them), and every gauge of the collection's own that a rule reads is one the node
metrics script writes (a renamed gauge would leave a rule that never fires)."""
import os
import re

import yaml

from node_metrics_script import metrics

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
RULES = os.path.join(ROOT, "roles", "monitoring", "files", "dgxspark_alerts.rules.yml")
TESTS = os.path.join(ROOT, "tests", "promtool", "dgxspark_alerts.test.yml")


def load(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def rules():
    return [rule for group in load(RULES)["groups"] for rule in group["rules"]]


def cases():
    return [case for test in load(TESTS)["tests"] for case in test["alert_rule_test"]]


def test_every_rule_has_a_case_that_fires_it_and_one_that_does_not():
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names)) and names
    firing = set(case["alertname"] for case in cases() if case.get("exp_alerts"))
    quiet = set(case["alertname"] for case in cases() if not case.get("exp_alerts"))
    assert set(names) - firing == set(), "rules without a case that fires them"
    assert set(names) - quiet == set(), "rules without a case where they must stay quiet"
    assert (firing | quiet) - set(names) == set(), "cases for rules that do not exist"


def test_every_rule_says_how_bad_and_what_happened():
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_every_gauge_of_ours_that_a_rule_reads_is_written_by_the_node_metrics_script():
    read = set(name for rule in rules() for name in re.findall(r"\bdgxspark_[a-z_]+\b", rule["expr"]))
    assert read and read <= set(metrics.HELP), read - set(metrics.HELP)


GROUP_IN_SUMMARY = "{{ $labels.node }}{{ with $labels.group }} (group {{ . }}){{ end }}"


def test_every_alert_keeps_a_fleets_group_label_and_names_it_after_the_node():
    """A fleet's targets carry `group` (issue 51): an aggregation that kept only `node` would drop it from the alert, and
    a summary that names the node names its group after it (nothing without the label: one group reads as before)."""
    for rule in rules():
        for kept in re.findall(r"\b(?:sum|max|min|avg|count) by \(([^)]*)\)", rule["expr"]):
            labels = [label.strip() for label in kept.split(",")]
            assert "node" not in labels or "group" in labels, (rule["alert"], kept)
        summary = rule["annotations"]["summary"]
        assert "$labels.node" in summary, rule["alert"]
        assert summary.count("$labels.node") == summary.count(GROUP_IN_SUMMARY), (rule["alert"], summary)
