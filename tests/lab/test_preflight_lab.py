"""Preflight on the 4-node lab (issue 9): each bad input stops `deploy-397b.yml` in its preflight phase with a message
naming the node, what was found, what was expected and the fix, and no file or container changed on any node.

Bad inputs, each staged with a lab knob and undone afterwards: a driver mismatch (`labctl driver`), the serving image
missing on one node (distribution off), one model shard missing and one of another size on another node (distribution
off), a node whose management network is cut (`labctl mgmt`), a Ray port taken by a foreign process, too little free
memory (`labctl memory`, the stand-in meminfo).

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab tests/lab/test_preflight_lab.py
"""

import json

import pytest

from ansible_lab import playbook_ok, run_playbook, serving_lab

pytestmark = pytest.mark.lab

MODEL_DIR = "/var/lib/dgxspark-lab/models/qwen3-moe-tiny"
LOGIND_DROPIN = "/etc/systemd/logind.conf.d/90-dgxspark.conf"
# What a deploy changes: the collection's files and stamps, the netplan and sysctl drop-ins, every container's state.
WATCHED = "/etc/dgxspark /etc/netplan /etc/sysctl.d /etc/security/limits.d /var/lib/dgxspark " + MODEL_DIR
# The supervisor's report is rewritten at each of its looks (a live reading, not something a deploy changed).
SNAPSHOT = ("find %s -type f ! -path /var/lib/dgxspark/supervisor/report.json -exec sha256sum {} + 2>/dev/null | sort; "
            "docker ps -aq --no-trunc | sort | xargs -r docker inspect -f '{{.Id}} {{.State.Status}} {{.State.StartedAt}}'") % WATCHED


def snapshot(lab, nodes=None):
    return dict((node, lab.host(node).check_output(SNAPSHOT)) for node in (nodes or lab.nodes))


@pytest.fixture(scope="module")
def stopped_lab(lab):
    """4 nodes with the serving image and the lab model, serving containers stopped (so that their memory is free)."""
    playbook_ok(serving_lab(lab), "stop.yml")
    return lab


def deploy_stops_at_preflight(lab, *extra, nodes=None):
    """Run deploy-397b.yml; assert it failed in the preflight phase and changed nothing; return its output."""
    before = snapshot(lab, nodes)
    rc, out = run_playbook(lab, "deploy-397b.yml", *extra, timeout=600)
    assert rc != 0, out[-4000:]
    assert "Preflight found" in out and "the deploy stops before any host is changed" in out, out[-6000:]
    assert "PLAY [Configure the CX-7 rails" not in out  # no later phase started
    assert snapshot(lab, nodes) == before
    return out


def test_a_healthy_lab_passes_preflight_with_one_table(stopped_lab):
    rc, out = run_playbook(stopped_lab, "preflight.yml")
    assert rc == 0, out[-4000:]
    assert "44 checks on 4 nodes: 0 problems" in out
    for node in stopped_lab.nodes:
        assert "- %s" % node in out or node in out


def test_a_driver_mismatch_is_named(stopped_lab):
    stopped_lab.labctl("driver", "spark-delta", "580.142")
    try:
        out = deploy_stops_at_preflight(stopped_lab)
    finally:
        stopped_lab.labctl("driver", "spark-delta", "580.95.05")
    assert ("spark-delta: gpu: found driver 580.142; expected driver 580.95.05, as on spark-alpha, spark-beta, spark-gamma. "
            "Fix: install the same driver on every node") in out


def test_a_busy_gpu_stuck_at_low_clocks_is_named(stopped_lab):
    # eugr #334: a GB10 at 702 MHz under load, until its AC power is pulled (the stand-in reports what labctl stages).
    stopped_lab.labctl("gpu", "spark-gamma", "--load", "96", "--sm-mhz", "702")
    try:
        out = deploy_stops_at_preflight(stopped_lab)
    finally:
        stopped_lab.labctl("gpu", "spark-gamma", "--reset")
    assert ("spark-gamma: gpu: found SM clock 702 MHz at 96% utilisation (maximum 3003 MHz); expected at least 1501 MHz "
            "(half the maximum) under load. Fix: pull the node's AC power for a minute") in out, out[-4000:]
    assert "44 checks on 4 nodes: 1 problem" in out


def test_a_docker_network_inside_a_rail_subnet_is_named(stopped_lab):
    # A network of another tool on the node (a compose project's) that took addresses of rail 2.
    gamma = stopped_lab.host("spark-gamma")
    gamma.check_output("docker network create --subnet 192.168.101.128/25 other-project >/dev/null")
    try:
        out = deploy_stops_at_preflight(stopped_lab)
    finally:
        gamma.run("docker network rm other-project")
    assert ("spark-gamma: docker: found Docker network other-project (192.168.101.128/25) overlaps rail2 "
            "(192.168.101.0/24)") in out, out[-4000:]
    assert "Fix: docker network rm other-project, or give Docker default-address-pools outside the rails" in out


def test_the_image_missing_on_one_node(stopped_lab):
    tag = stopped_lab.state()["serving_image"]
    gamma = stopped_lab.host("spark-gamma")
    gamma.check_output("docker rmi -f %s" % tag)
    try:
        # With the distribution on, the deploy would bring it: preflight passes and says so.
        rc, out = run_playbook(stopped_lab, "preflight.yml")
        assert rc == 0 and "to be distributed" in out, out[-4000:]
        out = deploy_stops_at_preflight(stopped_lab, "-e", json.dumps({"dgxspark_distribute_image": False}))
    finally:
        stopped_lab.labctl("serving", "spark-gamma")
    assert "spark-gamma: image: found image %s missing" % tag in out
    assert "turn the distribution on (dgxspark_distribute_image: true)" in out


def test_a_missing_and_a_resized_model_shard(stopped_lab):
    beta, gamma = stopped_lab.host("spark-beta"), stopped_lab.host("spark-gamma")
    shards = sorted(beta.check_output("cd %s && ls *.safetensors" % MODEL_DIR).split())
    beta.check_output("mv %s/%s /root/preflight-shard" % (MODEL_DIR, shards[0]))
    gamma.check_output("cp -p %s/%s /root/preflight-shard && truncate -s +4096 %s/%s" % (MODEL_DIR, shards[-1], MODEL_DIR, shards[-1]))
    try:
        out = deploy_stops_at_preflight(stopped_lab, "-e", json.dumps({"dgxspark_distribute_model": False}))
    finally:
        beta.check_output("mv /root/preflight-shard %s/%s" % (MODEL_DIR, shards[0]))
        gamma.check_output("mv /root/preflight-shard %s/%s" % (MODEL_DIR, shards[-1]))
    assert "spark-beta: model: found 1 missing (%s)" % shards[0] in out
    assert "spark-gamma: model: found 1 of another size (%s)" % shards[-1] in out
    assert "copy the model from spark-alpha, or turn the distribution on (dgxspark_distribute_model: true)" in out


def test_a_node_cut_from_the_management_network(stopped_lab):
    others = ["spark-alpha", "spark-beta", "spark-delta"]
    before = snapshot(stopped_lab, ["spark-gamma"])
    stopped_lab.labctl("mgmt", "spark-gamma", "cut")
    try:
        out = deploy_stops_at_preflight(stopped_lab, nodes=others)
    finally:
        stopped_lab.labctl("mgmt", "spark-gamma", "restore")
    assert snapshot(stopped_lab, ["spark-gamma"]) == before
    assert "spark-gamma: ssh: found unreachable" in out
    assert "Fix: check that the node is up, its management address, the SSH key and sudo" in out
    # The other nodes were read and checked all the same: no subset proceeds, every node is in the table.
    assert "44 checks on 4 nodes: 1 problem" in out


def test_a_ray_port_taken_by_a_foreign_process(stopped_lab):
    beta = stopped_lab.host("spark-beta")
    beta.check_output("nohup python3 -m http.server 6380 --bind 0.0.0.0 >/dev/null 2>&1 & echo $! > /run/preflight-squatter")
    try:
        out = deploy_stops_at_preflight(stopped_lab)
    finally:
        beta.check_output("kill $(cat /run/preflight-squatter) && rm /run/preflight-squatter")
    assert "spark-beta: ports: found 6380 (Ray node_manager) held by python3 pid" in out
    assert "stop what holds them, or move the collection's ports (ray_cluster_ports, vllm_container_port)" in out


def test_too_little_free_memory_names_the_largest_consumers(stopped_lab):
    stopped_lab.labctl("memory", "spark-beta", "--available-gib", "40")
    try:
        out = deploy_stops_at_preflight(stopped_lab)
    finally:
        stopped_lab.labctl("memory", "spark-beta", "--reset")
    assert "spark-beta: memory: found MemAvailable 40.0 GiB; expected at least 103.4 GiB free" in out
    assert "the largest consumers are " in out and "(pid " in out


def test_an_engine_of_a_regular_user_where_logind_removes_its_ipc(stopped_lab):
    """An image whose USER is a regular user (UID 1000) on nodes whose logind removes IPC (the lab's Debian default), with
    the os phase told not to change it: every node is refused, since the head's image runs the engine everywhere."""
    alpha = stopped_lab.host("spark-alpha")
    image = "dgxspark-lab/serving-as-uid-1000:test"
    # The lab's image (docker import) has no command: create needs one.
    alpha.check_output("cid=$(docker create %s true) && docker commit --change 'USER 1000' $cid %s >/dev/null && docker rm $cid >/dev/null"
                       % (stopped_lab.state()["serving_image"], image))
    # A node that an earlier deploy's os phase gave RemoveIPC=no has it set aside, so that logind runs with systemd's
    # default on every node.
    for node in stopped_lab.nodes:
        stopped_lab.host(node).check_output("if [ -e %s ]; then mv %s /root/logind-dropin && systemctl restart systemd-logind; fi"
                                            % (LOGIND_DROPIN, LOGIND_DROPIN))
    try:
        out = deploy_stops_at_preflight(stopped_lab, "-e", json.dumps({"dgxspark_serving_image": image,
                                                                        "os_hardening_logind_keep_ipc": False}))
    finally:
        alpha.check_output("docker rmi %s >/dev/null" % image)
        for node in stopped_lab.nodes:
            stopped_lab.host(node).check_output("if [ -e /root/logind-dropin ]; then mv /root/logind-dropin %s && "
                                                "systemctl restart systemd-logind; fi" % LOGIND_DROPIN)
    for node in stopped_lab.nodes:
        assert ("%s: ipc: found logind RemoveIPC=yes (systemd's default) and an engine that runs as 1000 (the image's USER)"
                % node) in out, out[-6000:]
    assert "Fix: set os_hardening_logind_keep_ipc: true (the os phase writes RemoveIPC=no and restarts systemd-logind)" in out
    assert "44 checks on 4 nodes: 4 problems" in out


def test_bad_role_variables_are_refused_by_the_plan_before_any_node_changes(stopped_lab):
    """Role variables an inventory sets (issue 25): a secret in an extra map, two services on one port, an API network with
    host bits, a value outside the role's choices: all named at once by the plan on the controller; no node changed."""
    before = snapshot(stopped_lab)
    bad = {"vllm_container_extra_env": {"HF_TOKEN": "hf_not_a_real_token"}, "vllm_container_port": 6379,
           "dgxspark_api_allowed_cidrs": ["10.99.0.1/16"], "ray_cluster_restart_policy": "never"}
    rc, out = run_playbook(stopped_lab, "deploy-397b.yml", "-e", json.dumps(bad), timeout=300)
    assert rc != 0, out[-4000:]
    # The lab gives Prometheus the API's networks (dgxspark_monitoring_allowed_cidrs): the bad network is refused for both.
    assert "The cluster plan is invalid (5 problems)" in out, out[-6000:]
    for text in ("vllm_container_extra_env sets HF_TOKEN, a secret", "hf_not_a_real_token",
                 "port 6379 is given to ray_cluster_ports.gcs and vllm_container_port (the vLLM API)",
                 "dgxspark_api_allowed_cidrs has 10.99.0.1/16, which has host bits set: did you mean 10.99.0.0/16?",
                 "dgxspark_monitoring_allowed_cidrs has 10.99.0.1/16, which has host bits set: did you mean 10.99.0.0/16?",
                 "value of ray_cluster_restart_policy must be one of: no, always, unless-stopped, on-failure, got: never"):
        if text == "hf_not_a_real_token":
            assert text not in out  # the refusal names the variable, never the secret
        else:
            assert text in out, (text, out[-6000:])
    assert "PLAY [Check every node" not in out and "TASK [Read every node for the preflight checks" not in out
    assert snapshot(stopped_lab) == before
