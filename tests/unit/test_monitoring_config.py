"""The monitoring role's configurations from the cluster plan (plugins/plugin_utils/monitoring_config.py), over a plan
the collection's cluster_plan module made for a 4-node inventory (tests/unit/fixtures), the shipped inventories' recorded
plans (one group: prometheus.yml byte for byte as before) and a fleet's group plans (the `group` label); the Prometheus
configuration is also checked by Prometheus' own promtool where tools/promtool.sh unpacked it."""
import copy
import json
import os
import subprocess

import pytest
import yaml
from ansible.plugins.filter.core import to_nice_yaml

from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import load_profiles
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import cluster_plan as cp
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


# ---------------------------------------------------------------- one group: prometheus.yml as before (issue 51)

PLANS = os.path.join(HERE, "fixtures", "plans")
RECORDED = os.path.join(HERE, "fixtures", "monitoring")
# The settings as roles/monitoring passes them with one group: no dgxspark_fleet, so no router.
ONE_GROUP = dict(SCRAPE, cluster="dgxspark", router=None)
API_TLS_ON = {"enabled": True, "server_name": "spark-alpha", "ca_file": "/etc/dgxspark/tls/api-ca.crt"}


def recorded_plan(case):
    with open(os.path.join(PLANS, case + ".json"), encoding="utf-8") as handle:
        return json.load(handle)["plan"]


# (case, the plan) for every shipped inventory's recorded plan (test_plan_golden.py keeps them as the inventories plan
# today), the mp backend's and one with the API's TLS.
ONE_GROUP_CASES = [(name[:-len(".json")], lambda name=name: recorded_plan(name[:-len(".json")]))
                   for name in sorted(os.listdir(PLANS)) if name.endswith(".json")] + [
    ("4node_mp", lambda: copy.deepcopy(MP_PLAN)),
    ("4node_api_tls", lambda: dict(recorded_plan("4node"), api=dict(recorded_plan("4node")["api"], tls=API_TLS_ON))),
]


@pytest.mark.parametrize("case, plan", ONE_GROUP_CASES, ids=[c[0] for c in ONE_GROUP_CASES])
def test_one_group_renders_prometheus_yml_byte_for_byte_as_before(case, plan):
    """What the role writes (to_nice_yaml(indent=2)), against the text recorded before fleets had a `group` label
    (fixtures/monitoring/<case>.prometheus.txt, recorded from main at e364222): a changed byte would restart every
    existing user's Prometheus on upgrade. Record again only for an intended change, said in its commit:
    MONITORING_GOLDEN_RECORD=1 .venv/bin/python -m pytest -p no:cacheprovider tests/unit/test_monitoring_config.py"""
    plan = plan()
    assert "serving_group" not in plan
    rendered = to_nice_yaml(prometheus_config(plan, ONE_GROUP), indent=2)
    path = os.path.join(RECORDED, case + ".prometheus.txt")
    if os.environ.get("MONITORING_GOLDEN_RECORD") == "1":
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(rendered)
    with open(path, encoding="utf-8") as handle:
        assert rendered == handle.read()
    assert "group" not in rendered


# ---------------------------------------------------------------- a fleet: every target of a group carries its name

PROFILES = load_profiles([os.path.join(HERE, "..", "..", "profiles", "models")])[0]
INT4 = {"dgxspark_model_profile": "qwen3_5_397b_a17b_int4_autoround", "dgxspark_tensor_parallel_size": 4,
        "dgxspark_gpu_memory_utilization": 0.78}
VL = {"dgxspark_model_profile": "qwen3_vl_235b_a22b_awq", "dgxspark_tensor_parallel_size": 2,
      "dgxspark_gpu_memory_utilization": 0.75, "dgxspark_max_model_len": 32768, "dgxspark_kv_cache_dtype": "fp8"}
FLEET_A = ["s1", "s2", "s3", "s4"]
FLEET_B = ["s5", "s6"]


def group_plan(name, hosts, values, address_base):
    """A fleet's group plan as plugins/action/cluster_plan.py makes it: build_plan over the group's hosts (its rail
    addresses after the groups before), named by serving_group (the action's, which test_fleet_plan_playbook.py checks
    on inventories/8node)."""
    plan = cp.build_plan({"head": hosts[:1], "workers": hosts[1:]}, dict((h, dict(values)) for h in hosts), PROFILES,
                         address_base=address_base, hosts_where="group %s" % name)
    return dict(plan, serving_group=name)


def labelled(config):
    """{job: [(labels, target)]} of a configuration."""
    return dict((job["job_name"], [(group["labels"], target) for group in job["static_configs"] for target in group["targets"]])
                for job in config["scrape_configs"])


def at(hosts, first, port, group):
    return [({"node": host, "group": group}, "192.168.100.%d:%d" % (first + n, port)) for n, host in enumerate(hosts)]


ROUTER_ON_S1 = {"host": "s1", "port": 4000, "tls": ROUTER_TLS_OFF}
FLEET_CASES = [
    # (id, the group's plan, the router, {job: [(labels, target)]})
    ("fleet_a", lambda: group_plan("fleet_a", FLEET_A, INT4, 0), None,
     {"node": at(FLEET_A, 10, 9100, "fleet_a"), "vllm": at(FLEET_A[:1], 10, 8000, "fleet_a"),
      "ray": at(FLEET_A, 10, 6384, "fleet_a")}),
    ("fleet_b", lambda: group_plan("fleet_b", FLEET_B, VL, 4), None,
     {"node": at(FLEET_B, 14, 9100, "fleet_b"), "vllm": at(FLEET_B[:1], 14, 8000, "fleet_b"),
      "ray": at(FLEET_B, 14, 6384, "fleet_b")}),
    ("fleet_b-mp", lambda: group_plan("fleet_b", FLEET_B, dict(VL, dgxspark_executor_backend="mp"), 4), None,
     {"node": at(FLEET_B, 14, 9100, "fleet_b"), "vllm": at(FLEET_B[:1], 14, 8000, "fleet_b")}),
    # the router serves every group's model: `group: fleet`, not its node's group (monitoring_config.router_job)
    ("fleet_a-router", lambda: group_plan("fleet_a", FLEET_A, INT4, 0), ROUTER_ON_S1,
     {"node": at(FLEET_A, 10, 9100, "fleet_a"), "vllm": at(FLEET_A[:1], 10, 8000, "fleet_a"),
      "ray": at(FLEET_A, 10, 6384, "fleet_a"), "router": at(["s1"], 10, 4000, "fleet")}),
    # the router runs on fleet_a's node: fleet_b's Prometheus does not scrape it
    ("fleet_b-router-elsewhere", lambda: group_plan("fleet_b", FLEET_B, VL, 4), ROUTER_ON_S1,
     {"node": at(FLEET_B, 14, 9100, "fleet_b"), "vllm": at(FLEET_B[:1], 14, 8000, "fleet_b"),
      "ray": at(FLEET_B, 14, 6384, "fleet_b")}),
]


@pytest.mark.parametrize("plan, router, expected", [c[1:] for c in FLEET_CASES], ids=[c[0] for c in FLEET_CASES])
def test_a_fleets_group_labels_every_target_with_its_group_and_the_router_with_fleet(plan, router, expected):
    assert labelled(prometheus_config(plan(), dict(SCRAPE, router=router))) == expected


@pytest.mark.skipif(not os.path.exists(PROMTOOL), reason="tools/promtool.sh unpacks promtool (make test runs it first)")
def test_promtool_accepts_a_fleet_groups_configuration(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-test")
    config = prometheus_config(group_plan("fleet_a", FLEET_A, INT4, 0), dict(SCRAPE, api_key_file=str(key), router=ROUTER_ON_S1))
    path = tmp_path / "prometheus.yml"
    path.write_text(to_nice_yaml(dict(config, rule_files=[]), indent=2))
    proc = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
