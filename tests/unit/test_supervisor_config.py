"""The supervisor's configuration from the cluster plan (plugins/plugin_utils/supervisor_config.py), over a plan the
collection's cluster_plan module made for a 4-node inventory (tests/unit/fixtures), and the core's own check of it."""
import copy
import importlib.util
import json
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.supervisor_config import (
    SupervisorConfigError, node_ctl_config, supervisor_config)

HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location(
    "dgxspark_supervisor_core", os.path.join(HERE, "..", "..", "roles", "supervisor", "files", "dgxspark_supervisor_core.py"))
core = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(core)

# Made by playbooks/plan.yml for inventories/4node with deploy-397b.yml's presets (Ray), and with
# -e dgxspark_executor_backend=mp: the plan as every role reads it (dgxspark_plan_result.plan, to_nice_json).
with open(os.path.join(HERE, "fixtures", "plan_4node.json"), encoding="utf-8") as _handle:
    PLAN = json.load(_handle)
with open(os.path.join(HERE, "fixtures", "plan_4node_mp.json"), encoding="utf-8") as _handle:
    MP_PLAN = json.load(_handle)
SETTINGS = {"rank_container": "dgxspark-ray", "engine_container": "dgxspark-vllm", "interval_s": "30", "deadline_s": 30,
            "failures_to_restart": 3, "grace_s": 3600, "stall_s": 900, "frozen_s": 300, "budget_restarts": 3, "budget_window_s": 3600,
            "crash_budget_restarts": 10, "crash_backoff_s": 30, "crash_backoff_max_s": 600,
            "memory_wait_s": 600, "memory_needed_gib": None, "url": "http://127.0.0.1:8000",
            "api_key_file": "/etc/dgxspark/secrets/vllm_api_key", "model": "Qwen/Qwen3.5-397B-A17B-FP8",
            "state_dir": "/var/lib/dgxspark/supervisor", "node_ctl": "/usr/local/lib/dgxspark/supervisor/dgxspark_node_ctl.py",
            "ssh": {"key": "/etc/dgxspark/supervisor/id_ed25519", "known_hosts": "/etc/dgxspark/supervisor/known_hosts"}}


def test_the_group_is_every_rank_in_order_then_the_engine_and_the_core_accepts_it():
    config = supervisor_config(PLAN, SETTINGS)
    assert config["group"] == [
        {"node": "spark-alpha", "container": "dgxspark-ray"}, {"node": "spark-beta", "container": "dgxspark-ray"},
        {"node": "spark-gamma", "container": "dgxspark-ray"}, {"node": "spark-delta", "container": "dgxspark-ray"},
        {"node": "spark-alpha", "container": "dgxspark-vllm", "engine": True}]
    assert config["nodes"] == {"spark-alpha": {"local": True}, "spark-beta": {"address": "192.168.100.11"},
                               "spark-gamma": {"address": "192.168.100.12"}, "spark-delta": {"address": "192.168.100.13"}}
    assert config["interval_s"] == 30  # a number, whatever the template gave
    assert core.check_config(config) == []


@pytest.mark.parametrize("needed_gib, expected_kib", [(None, int(103.445 * 1024 * 1024)), ("", int(103.445 * 1024 * 1024)),
                                                      (90, 90 * 1024 * 1024), ("80.5", int(80.5 * 1024 * 1024))])
def test_memory_needed_is_the_plan_s_budget_unless_set(needed_gib, expected_kib):
    config = supervisor_config(PLAN, dict(SETTINGS, memory_needed_gib=needed_gib))
    assert set(config["memory_needed_kib"].values()) == {expected_kib}
    assert sorted(config["memory_needed_kib"]) == ["spark-alpha", "spark-beta", "spark-delta", "spark-gamma"]


def _plan(**changes):
    plan = copy.deepcopy(PLAN)
    plan.update(changes)
    return plan


@pytest.mark.parametrize("plan, settings, message", [
    (_plan(nodes=[]), SETTINGS, "the plan has no nodes, or its rank 0 is not its head"),
    (_plan(head="spark-beta"), SETTINGS, "its rank 0 is not its head"),
    (_plan(memory={}), SETTINGS, "no memory figure"),
    (PLAN, dict(SETTINGS, memory_needed_gib="lots"), "memory_needed_gib must be a number of GiB, got 'lots'"),
    (PLAN, dict(SETTINGS, interval_s="often"), "interval_s must be a whole number, got 'often'"),
    (_plan(nodes=[dict(n, rail_addresses={}) if n["rank"] == 2 else n for n in PLAN["nodes"]]), SETTINGS,
     "node spark-gamma has no address on rail rail1 in the plan"),
])
def test_what_cannot_make_a_configuration_is_named(plan, settings, message):
    with pytest.raises(SupervisorConfigError) as error:
        supervisor_config(plan, settings)
    assert message in str(error.value)


@pytest.mark.parametrize("host, containers", [("spark-alpha", ["dgxspark-ray", "dgxspark-vllm"]),
                                              ("spark-delta", ["dgxspark-ray"])])
def test_the_node_command_touches_the_node_s_own_containers_only(host, containers):
    settings = dict(SETTINGS, meminfo="/proc/meminfo", stop_timeout_s="30")
    assert node_ctl_config(host, PLAN, settings) == {"containers": containers, "meminfo": "/proc/meminfo",
                                                     "stop_timeout_s": 30}


def test_with_mp_the_group_is_the_headless_ranks_then_rank_0_and_the_core_accepts_it():
    config = supervisor_config(MP_PLAN, SETTINGS)
    assert config["group"] == [
        {"node": "spark-beta", "container": "dgxspark-vllm"}, {"node": "spark-gamma", "container": "dgxspark-vllm"},
        {"node": "spark-delta", "container": "dgxspark-vllm"}, {"node": "spark-alpha", "container": "dgxspark-vllm", "engine": True}]
    assert core.check_config(config) == []


@pytest.mark.parametrize("host", ["spark-alpha", "spark-delta"])
def test_with_mp_the_node_command_touches_the_node_s_vllm_rank_only(host):
    settings = dict(SETTINGS, meminfo="/proc/meminfo", stop_timeout_s="30")
    assert node_ctl_config(host, MP_PLAN, settings)["containers"] == ["dgxspark-vllm"]


@pytest.mark.parametrize("tls, expected", [
    (None, None),
    ({"enabled": False, "ca_file": None, "server_name": None}, None),
    ({"enabled": True, "ca_file": "/etc/dgxspark/tls/api-ca.crt", "server_name": "10.0.0.5"},
     {"ca_file": "/etc/dgxspark/tls/api-ca.crt", "server_name": "10.0.0.5"}),
])
def test_with_tls_the_probe_verifies_the_plan_s_ca_for_its_server_name(tls, expected):
    plan = dict(PLAN, api=dict(PLAN.get("api") or {}, tls=tls))
    config = supervisor_config(plan, dict(SETTINGS, url="https://127.0.0.1:8000"))
    assert config["tls"] == expected and core.check_config(config) == []
