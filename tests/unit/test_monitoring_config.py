"""The monitoring role's configurations from the cluster plan (plugins/plugin_utils/monitoring_config.py), over a plan
the collection's cluster_plan module made for a 4-node inventory (tests/unit/fixtures); the Prometheus configuration
is also checked by Prometheus' own promtool where tools/promtool.sh unpacked it."""
import copy
import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.monitoring_config import (
    MonitoringConfigError, node_metrics_config, prometheus_config)

HERE = os.path.dirname(os.path.abspath(__file__))
PROMTOOL = os.path.join(HERE, "..", "..", ".cache", "prometheus-deb", "usr", "bin", "promtool")
# Made by playbooks/plan.yml for inventories/4node with deploy-397b.yml's presets (Ray), and with
# -e dgxspark_executor_backend=mp: the plan as every role reads it (dgxspark_plan_result.plan, to_nice_json).
with open(os.path.join(HERE, "fixtures", "plan_4node.json"), encoding="utf-8") as _handle:
    PLAN = json.load(_handle)
with open(os.path.join(HERE, "fixtures", "plan_4node_mp.json"), encoding="utf-8") as _handle:
    MP_PLAN = json.load(_handle)
SCRAPE = {"scrape_interval_s": "15", "evaluation_interval_s": 15, "node_exporter_port": 9100, "vllm_port": "8000",
          "ray_metrics_port": 6384, "scrape_ray": True, "api_key_file": "/etc/prometheus/dgxspark_vllm_api_key",
          "rules_files": ["/etc/prometheus/rules/dgxspark_alerts.rules.yml"], "cluster": "spark-4node"}
NODE = {"rank_container": "dgxspark-ray", "engine_container": "dgxspark-vllm",
        "supervisor_report": "/var/lib/dgxspark/supervisor/report.json", "phase_dir": "/var/lib/dgxspark/phases",
        "output": "/var/lib/prometheus/node-exporter/dgxspark.prom", "nvidia_smi": "nvidia-smi",
        "memory_floor_share": 0.25, "memory_floor_gib": None}
NODES = [("spark-alpha", "192.168.100.10"), ("spark-beta", "192.168.100.11"), ("spark-gamma", "192.168.100.12"),
         ("spark-delta", "192.168.100.13")]


def targets(job):
    return [(group["labels"]["node"], target) for group in job["static_configs"] for target in group["targets"]]


def test_every_node_the_engine_and_every_rank_are_scraped_over_rail_1_with_their_node_label():
    config = prometheus_config(PLAN, SCRAPE)
    jobs = dict((job["job_name"], job) for job in config["scrape_configs"])
    assert list(jobs) == ["node", "vllm", "ray"]
    assert targets(jobs["node"]) == [(host, "%s:9100" % ip) for host, ip in NODES]
    assert targets(jobs["vllm"]) == [("spark-alpha", "192.168.100.10:8000")]
    assert jobs["vllm"]["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/dgxspark_vllm_api_key"}
    assert targets(jobs["ray"]) == [(host, "%s:6384" % ip) for host, ip in NODES]
    assert config["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s",
                                "external_labels": {"cluster": "spark-4node"}}
    assert config["rule_files"] == ["/etc/prometheus/rules/dgxspark_alerts.rules.yml"]


@pytest.mark.parametrize("tls, expected", [
    (None, {}),
    ({"enabled": False}, {}),
    ({"enabled": True, "ca_file": "/etc/dgxspark/tls/api-ca.crt", "server_name": "10.0.0.5"},
     {"scheme": "https", "tls_config": {"ca_file": "/etc/dgxspark/tls/api-ca.crt", "server_name": "10.0.0.5",
                                        "insecure_skip_verify": False}}),
    # a public CA's certificate: the system's trust store
    ({"enabled": True, "ca_file": None, "server_name": "api.example"},
     {"scheme": "https", "tls_config": {"server_name": "api.example", "insecure_skip_verify": False}}),
])
def test_the_engine_is_scraped_as_it_serves_over_https_for_the_name_its_certificate_holds(tls, expected):
    plan = dict(PLAN, api=dict(PLAN.get("api") or {}, tls=tls))
    job = dict((job["job_name"], job) for job in prometheus_config(plan, SCRAPE)["scrape_configs"])["vllm"]
    assert dict((key, job[key]) for key in ("scheme", "tls_config") if key in job) == expected
    assert job["authorization"]["credentials_file"] == SCRAPE["api_key_file"]


@pytest.mark.parametrize("settings, plan", [
    (dict(SCRAPE, scrape_ray=False), PLAN),
    # vLLM's own multi-node backend runs no Ray: nothing to scrape there, whatever scrape_ray says.
    (SCRAPE, MP_PLAN),
])
def test_without_ray_metrics_or_without_ray_no_ray_job(settings, plan):
    config = prometheus_config(plan, settings)
    assert [job["job_name"] for job in config["scrape_configs"]] == ["node", "vllm"]


ROUTER_TLS_OFF = {"enabled": False, "server_name": None, "ca_file": None}
ROUTER_TLS_ON = {"enabled": True, "server_name": "spark-alpha.example", "ca_file": "/etc/dgxspark/tls/api-ca.crt"}


@pytest.mark.parametrize("router, expected", [
    (None, None),
    # a router on a node of another group: that group's Prometheus scrapes it
    ({"host": "spark-epsilon", "port": 4000, "tls": ROUTER_TLS_OFF}, None),
    ({"host": "spark-beta", "port": 4000, "tls": ROUTER_TLS_OFF},
     {"targets": [("spark-beta", "192.168.100.11:4000")], "extra": {}}),
    ({"host": "spark-alpha", "port": "4100", "tls": ROUTER_TLS_ON},
     {"targets": [("spark-alpha", "192.168.100.10:4100")],
      "extra": {"scheme": "https", "tls_config": {"server_name": "spark-alpha.example", "insecure_skip_verify": False,
                                                  "ca_file": "/etc/dgxspark/tls/api-ca.crt"}}}),
], ids=["no-router", "other-group", "plain", "tls"])
def test_the_fleet_router_is_scraped_behind_the_key_by_its_groups_prometheus(router, expected):
    jobs = dict((job["job_name"], job) for job in prometheus_config(PLAN, dict(SCRAPE, router=router))["scrape_configs"])
    if expected is None:
        assert "router" not in jobs
        return
    job = jobs["router"]
    assert targets(job) == expected["targets"]
    assert job["metrics_path"] == "/metrics/"
    assert job["authorization"] == {"type": "Bearer", "credentials_file": SCRAPE["api_key_file"]}
    assert dict((key, job[key]) for key in ("scheme", "tls_config") if key in job) == expected["extra"]


@pytest.mark.skipif(not os.path.exists(PROMTOOL), reason="tools/promtool.sh unpacks promtool (make test runs it first)")
def test_promtool_accepts_the_configuration(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(open(os.path.join(HERE, "..", "..", "roles", "monitoring", "files",
                                       "dgxspark_alerts.rules.yml")).read())
    key = tmp_path / "key"
    key.write_text("sk-test")
    router = {"host": "spark-alpha", "port": 4000, "tls": ROUTER_TLS_OFF}
    config = prometheus_config(PLAN, dict(SCRAPE, api_key_file=str(key), rules_files=[str(rules)], router=router))
    assert "router" in [job["job_name"] for job in config["scrape_configs"]]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("change, message", [
    (lambda s, p: s.update(node_exporter_port=70000), "node_exporter_port must be a port number"),
    (lambda s, p: s.update(vllm_port="http"), "vllm_port must be a port number, got 'http'"),
    (lambda s, p: s.update(scrape_interval_s=0), "scrape_interval_s must be a whole number of seconds above 0"),
    (lambda s, p: p["nodes"][1]["rail_addresses"].clear(), "node spark-beta has no address on rail rail1"),
    (lambda s, p: p.update(head="spark-beta"), "its rank 0 is not its head"),
])
def test_bad_settings_or_plan_are_refused_with_what_is_wrong(change, message):
    settings, plan = dict(SCRAPE), copy.deepcopy(PLAN)
    change(settings, plan)
    with pytest.raises(MonitoringConfigError, match=message):
        prometheus_config(plan, settings)


@pytest.mark.parametrize("host, plan, settings, containers, report, floor_bytes", [
    # 121.7 GiB node, 103.445 GiB budget: 18.255 GiB outside vLLM, a quarter of it
    ("spark-alpha", PLAN, NODE, ["dgxspark-ray", "dgxspark-vllm"], "/var/lib/dgxspark/supervisor/report.json",
     int(0.25 * (121.7 - 103.445) * 2 ** 30)),
    ("spark-gamma", PLAN, NODE, ["dgxspark-ray"], "", int(0.25 * (121.7 - 103.445) * 2 ** 30)),
    ("spark-beta", PLAN, dict(NODE, memory_floor_gib="6"), ["dgxspark-ray"], "", 6 * 2 ** 30),
    ("spark-beta", PLAN, dict(NODE, memory_floor_share="0.5"), ["dgxspark-ray"], "", int(0.5 * (121.7 - 103.445) * 2 ** 30)),
    # mp: every node's vLLM container is its rank, and no node has Ray's.
    ("spark-alpha", MP_PLAN, NODE, ["dgxspark-vllm"], "/var/lib/dgxspark/supervisor/report.json",
     int(0.25 * (121.7 - 103.445) * 2 ** 30)),
    ("spark-gamma", MP_PLAN, NODE, ["dgxspark-vllm"], "", int(0.25 * (121.7 - 103.445) * 2 ** 30)),
])
def test_node_metrics_settings(host, plan, settings, containers, report, floor_bytes):
    config = node_metrics_config(host, plan, settings)
    assert config == {"node": host, "output": NODE["output"], "containers": containers, "supervisor_report": report,
                      "phase_dir": "/var/lib/dgxspark/phases", "nvidia_smi": "nvidia-smi", "memory_floor_bytes": floor_bytes}


@pytest.mark.parametrize("host, settings, message", [
    ("spark-omega", NODE, "spark-omega is not a node of the plan"),
    ("spark-beta", dict(NODE, memory_floor_share=0), "memory_floor_share must be above 0 and at most 1"),
    ("spark-beta", dict(NODE, memory_floor_share="a lot"), "memory_floor_share is not a number"),
    ("spark-beta", dict(NODE, memory_floor_gib="six"), "memory_floor_gib must be a number of GiB"),
])
def test_bad_node_metrics_settings_are_refused(host, settings, message):
    with pytest.raises(MonitoringConfigError, match=message):
        node_metrics_config(host, PLAN, settings)
