"""A fleet on the 4-node lab (issue 51 items 1 and 4): two serving groups of two nodes, each serving the lab model with
TP=2 (two replicas of one model), deployed by one `deploy.yml` run from one inventory (tests' fleet_inventory: the lab's
variables, spark-alpha+spark-beta as fleet_a and spark-gamma+spark-delta as fleet_b; the router, item 2, left out).

Checks: each group's head serves its own group (Ray of two nodes each, its own engine) and answers a chat; status.yml
shows the fleet and each group; `stop.yml -e dgxspark_serving_group=fleet_b` stops that group only (its supervisor
paused) while fleet_a still answers; then a one-group deploy of the 4 nodes (the lab's own inventory, deploy-397b.yml)
serves again, and spark-gamma, fleet_b's head before, is a worker with no supervisor left that could restart its old
group. One fleet deploy for the module; it leaves the users' default layout serving, for the next serving module.

    DGXSPARK_LAB_INSTANCE=2 python3 lab/labctl.py up --serving && \\
      DGXSPARK_LAB_INSTANCE=2 .venv/bin/python -m pytest -m lab tests/lab/test_fleet_lab.py
"""

import json
import os
import re
import subprocess

import pytest

from ansible_lab import (REPO, RAY, VLLM, containers, fleet_inventory, lab_inventory_env, node_container, run_playbook,
                         says_healthy, serving_lab, tls_args)
from prober import Prober

pytestmark = pytest.mark.lab

GROUPS = {"fleet_a": ["spark-alpha", "spark-beta"], "fleet_b": ["spark-gamma", "spark-delta"]}
# Two Sparks hold seed 003's model at TP=2 (the fp8 397B needs four); the lab serves its tiny model under that name.
# LAB: seed 003's vision and attention options are the CUDA build's (site args off, as the lab's quantization is).
FLEET_VALUES = {
    "dgxspark_model_profile": "qwen3_vl_235b_a22b_awq",
    "dgxspark_tensor_parallel_size": 2,
    "dgxspark_vllm_site_args": {"kv_cache_memory_bytes": "256M", "compilation_config": '{"mode": 2, "backend": "eager"}',
                                "enforce_eager": False, "quantization": None, "attention_backend": None,
                                "limit_mm_per_prompt": None},
}
SUPERVISOR_UNIT = "/etc/systemd/system/dgxspark-supervisor.service"
SUPERVISOR_PROGRAM = "/usr/local/lib/dgxspark/supervisor/dgxspark_supervisor.py"
SUPERVISOR_PAUSED = "/var/lib/dgxspark/supervisor/paused"


def fleet_plans(source, env):
    """{group: its plan}: the plan action alone on the controller (it contacts no node)."""
    run_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", **env)
    cmd = [os.path.join(REPO, ".venv", "bin", "ansible"), "localhost", "-i", source, "-m", "dgxspark.cluster.cluster_plan"] + tls_args()
    result = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["group_plans"]


def prober(lab, plan):
    """A client of one group's head API (its own address, the plan's key and served name)."""
    with open(plan["api"]["api_key_file"], encoding="utf-8") as handle:
        key = handle.read().strip()
    tls = plan["api"]["tls"]
    return Prober("%s://%s:%d/v1/chat/completions" % ("https" if tls["enabled"] else "http", lab.mgmt_ip[plan["head"]],
                                                     plan["api"]["port"]), key, plan["api"]["served_model_name"],
                  cafile=tls["controller"]["ca_file"])


def running(lab, node, container):
    return lab.host(node).run("docker inspect --format '{{.State.Running}}' %s" % container).stdout.strip() == "true"


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    serving_lab(lab)
    source = fleet_inventory(lab, str(tmp_path_factory.mktemp("fleet")), GROUPS, **FLEET_VALUES)
    env = lab_inventory_env(lab)
    rc, out = run_playbook(lab, "deploy.yml", "--skip-tags", "router", source=source, env=env)
    assert rc == 0, out[-8000:]
    return {"source": source, "env": env, "output": out, "plans": fleet_plans(source, env), "containers": containers(lab)}


def test_each_group_serves_on_its_own_nodes_and_its_head_answers(lab, fleet):
    out, plans = fleet["output"], fleet["plans"]
    assert sorted(plans) == sorted(GROUPS)
    for name, nodes in GROUPS.items():
        assert plans[name]["head"] == nodes[0] and [n["host"] for n in plans[name]["nodes"]] == nodes
        if node_container() == RAY:
            assert re.search(r"Ray on %s: 2/2 nodes alive" % nodes[0], out), out[-6000:]
        assert VLLM in fleet["containers"][nodes[0]]
        assert prober(lab, plans[name]).ask(), name
    # Each group's engine serves the lab model under the same name: two replicas of one model.
    assert plans["fleet_a"]["api"]["served_model_name"] == plans["fleet_b"]["api"]["served_model_name"]
    # Every group has its own supervisor, on its own head.
    for head in ("spark-alpha", "spark-gamma"):
        assert lab.host(head).run("systemctl is-active dgxspark-supervisor").stdout.strip() == "active", head


def test_status_shows_the_fleet_and_each_group(lab, fleet):
    rc, out = run_playbook(lab, "status.yml", source=fleet["source"], env=fleet["env"], timeout=600)
    assert rc == 0, out[-6000:]
    assert "Fleet: 2 serving groups, 2 healthy" in out, out[-6000:]
    assert "Serving group fleet_a" in out and "Serving group fleet_b" in out
    assert out.index("Serving group fleet_a") < out.index("Serving group fleet_b")


def test_stopping_one_group_leaves_the_other_serving(lab, fleet):
    rc, out = run_playbook(lab, "stop.yml", "-e", "dgxspark_serving_group=fleet_b", source=fleet["source"], env=fleet["env"],
                           timeout=600)
    assert rc == 0, out[-6000:]
    for node in GROUPS["fleet_a"]:
        assert node not in re.findall(r"^(?:ok|changed|skipping): \[([^\]]+)\]", out, re.MULTILINE), node
    assert not running(lab, "spark-gamma", VLLM) and not running(lab, "spark-delta", node_container())
    assert running(lab, "spark-alpha", VLLM) and running(lab, "spark-beta", node_container())
    # fleet_b's supervisor is paused (it would start its group again); fleet_a's is not.
    assert lab.host("spark-gamma").file(SUPERVISOR_PAUSED).exists
    assert not lab.host("spark-alpha").file(SUPERVISOR_PAUSED).exists
    assert prober(lab, fleet["plans"]["fleet_a"]).ask()
    rc, out = run_playbook(lab, "status.yml", source=fleet["source"], env=fleet["env"], timeout=600)
    assert rc != 0 and "Fleet: 2 serving groups, 1 healthy (not: fleet_b)" in out, out[-6000:]


def test_a_one_group_deploy_after_the_fleet_removes_the_former_heads_supervisor(lab, fleet):
    rc, out = run_playbook(lab, "deploy-397b.yml")
    assert rc == 0, out[-8000:]
    assert says_healthy(out), out[-4000:]
    gamma = lab.host("spark-gamma")
    assert not gamma.file(SUPERVISOR_UNIT).exists and not gamma.file(SUPERVISOR_PROGRAM).exists
    assert not gamma.file("/etc/dgxspark/supervisor/config.json").exists
    assert gamma.file("/etc/dgxspark/supervisor/node_ctl.json").exists  # the head reaches it through its node command
    assert gamma.run("systemctl is-active dgxspark-supervisor").stdout.strip() != "active"
    assert lab.host("spark-alpha").run("systemctl is-active dgxspark-supervisor").stdout.strip() == "active"
    assert all(node_container() in containers(lab)[node] for node in lab.nodes)
