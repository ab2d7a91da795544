"""A fleet on the 4-node lab (issue 51 items 1, 2, 4 and 5): two serving groups of two nodes, each serving the lab model
with TP=2, behind the fleet's router (LiteLLM's proxy on spark-alpha, the first group's head), deployed by one
`deploy.yml` run from one inventory (tests' fleet_inventory: the lab's variables, spark-alpha+spark-beta as fleet_a and
spark-gamma+spark-delta as fleet_b).

Checks: each group's head serves its own group (Ray of two nodes each, its own engine) and answers a chat; as two
replicas of one model, the router lists the model once and both groups answer requests sent to it; status.yml shows the
fleet and each group; as two served models (fleet_b's served name changed in its group_vars: a deploy restarts fleet_b's
engine alone and swaps the router), the router lists both and each model is answered by its own group; `stop.yml -e
dgxspark_serving_group=fleet_b` stops that group only (its supervisor paused) while fleet_a still answers, directly and
through the router; then a one-group deploy of the 4 nodes (the lab's own inventory, deploy-397b.yml) serves again,
spark-gamma, fleet_b's head before, is a worker with no supervisor left that could restart its old group, and the router
is gone from spark-alpha (one group has none). One fleet
deploy for the module; it leaves the users' default layout serving, for the next serving module.

    DGXSPARK_LAB_INSTANCE=2 python3 lab/labctl.py up --serving && \\
      DGXSPARK_LAB_INSTANCE=2 .venv/bin/python -m pytest -m lab tests/lab/test_fleet_lab.py
"""

import json
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from ansible_lab import (RAY, VLLM, containers, fleet_inventory, fleet_plan, group_api_key, group_api_url, group_tls_context,
                         lab_inventory_env, node_container, run_playbook, says_healthy, serving_lab)
from prober import TEST_INTERVAL, Prober

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
# fleet_b's served name when the fleet serves two models
SECOND_NAME = "lab/second-model"
SUPERVISOR_UNIT = "/etc/systemd/system/dgxspark-supervisor.service"
SUPERVISOR_PROGRAM = "/usr/local/lib/dgxspark/supervisor/dgxspark_supervisor.py"
SUPERVISOR_PAUSED = "/var/lib/dgxspark/supervisor/paused"


def prober(lab, plan):
    """A client of one group's head API (its own address, the plan's key and served name)."""
    return Prober(group_api_url(lab, plan, "/v1/chat/completions"), group_api_key(plan), plan["api"]["served_model_name"],
                  cafile=plan["api"]["tls"]["controller"]["ca_file"])


def call(url, plan, key=True, body=None):
    """(status, parsed JSON or text) of a request from the controller, with the fleet's key unless key is false; https
    verified with the plan's cluster CA."""
    context = group_tls_context(plan, url)
    headers = dict([("Content-Type", "application/json")] + ([("Authorization", "Bearer " + group_api_key(plan))] if key else []))
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=300, context=context) as response:
            text = response.read().decode()
            return response.status, (json.loads(text) if text.startswith("{") else text)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# The test's requests ask for a max_tokens that nothing else sends (the supervisor's and the status' probes ask for 1,
# the speed gate for more than 10): an engine counts them in vLLM's histogram of max_tokens, between its buckets 5 and 10.
MAX_TOKENS = 7


def requests_served(lab, plan):
    """How many of the test's requests (max_tokens MAX_TOKENS) the group's engine finished."""
    status, text = call(group_api_url(lab, plan, "/metrics"), plan)
    assert status == 200, text
    buckets = {}
    for line in text.splitlines():
        found = re.match(r'vllm:request_params_max_tokens_bucket\{.*le="([0-9.]+)".*\} ([0-9.e+]+)$', line)
        if found:
            buckets[float(found.group(1))] = buckets.get(float(found.group(1)), 0.0) + float(found.group(2))
    return buckets[10.0] - buckets[5.0]


def chat(router, plan, model):
    return call(router["url"] + "/chat/completions", plan,
                body={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS})


def served_through_the_router(lab, fleet, model, count, streams):
    """{group: requests its engine finished} while COUNT chats for MODEL go through the router, STREAMS at a time;
    every one must be answered."""
    plans, router = fleet["plans"], fleet["router"]
    before = dict((name, requests_served(lab, plan)) for name, plan in plans.items())
    with ThreadPoolExecutor(streams) as pool:
        answers = list(pool.map(lambda _n: chat(router, plans["fleet_a"], model), range(count)))
    assert all(status == 200 for status, _body in answers), answers
    return dict((name, requests_served(lab, plan) - before[name]) for name, plan in plans.items())


def deploy_fleet(lab, source, env):
    rc, out = run_playbook(lab, "deploy.yml", source=source, env=env)
    assert rc == 0, out[-8000:]
    planned = fleet_plan(source, env)
    return {"source": source, "env": env, "output": out, "plans": planned["group_plans"],
            "router": planned["fleet"]["router"], "containers": containers(lab)}


def running(lab, node, container):
    return lab.host(node).run("docker inspect --format '{{.State.Running}}' %s" % container).stdout.strip() == "true"


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    serving_lab(lab)
    directory = str(tmp_path_factory.mktemp("fleet"))
    return dict(deploy_fleet(lab, fleet_inventory(lab, directory, GROUPS, **FLEET_VALUES), lab_inventory_env(lab)),
                values=FLEET_VALUES)


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


def test_the_router_lists_one_model_and_both_replicas_answer_through_it(lab, fleet):
    plans, router = fleet["plans"], fleet["router"]
    model = plans["fleet_a"]["api"]["served_model_name"]
    assert router["host"] == "spark-alpha" and [r["group"] for r in router["models"][0]["replicas"]] == list(GROUPS)
    assert call(router["url"] + "/models", plans["fleet_a"], key=False)[0] == 401
    status, body = call(router["url"] + "/models", plans["fleet_a"])
    assert status == 200 and [m["id"] for m in body["data"]] == [model], body
    # least-busy: a second request in flight goes to the other replica
    served = served_through_the_router(lab, fleet, model, count=12, streams=4)
    assert sum(served.values()) == 12 and all(served.values()), served


def router_prober(fleet):
    """A client of the fleet's endpoint (the router), once a second."""
    plan = fleet["plans"]["fleet_a"]
    return Prober(fleet["router"]["url"] + "/chat/completions", group_api_key(plan), plan["api"]["served_model_name"],
                  TEST_INTERVAL, cafile=plan["api"]["tls"]["controller"]["ca_file"])


def engine_args(lab, head):
    return lab.host(head).check_output("docker inspect --format '{{json .Args}}' %s" % VLLM)


# The banners of the roll's two steps, once per group's batch: the router swapped without the group (rolling_out.yml),
# and with every group again (deploy.yml, after the release record; its rescue's twin after a failed change).
TAKE_OUT = "Take the group out of the fleet's router and let it finish its requests"
PUT_BACK = "Put the group back into the fleet's router"


def roll_marks(out):
    """The order in which the run took groups out of the router and put them back: [(step, group of the batch)] (the
    first host that reports a step may be any of its batch)."""
    found = re.findall(r"^TASK \[(%s|%s)[^\n]*\n(?:(?!TASK \[)[^\n]*\n)*?(?:included: \S+ for |(?:ok|changed|skipping): \[)"
                       r"(spark-\w+)" % (re.escape(TAKE_OUT), re.escape(PUT_BACK)), out, re.MULTILINE)
    group_of = dict((node, name) for name, nodes in GROUPS.items() for node in nodes)
    return [("out" if step == TAKE_OUT else "back", group_of[host]) for step, host in found]


def test_a_release_of_the_two_replicas_changes_one_at_a_time_and_no_request_through_the_router_fails(lab, fleet):
    # An engine option for both groups: the roll takes fleet_a out of the router, drains and changes it, gates it, puts
    # it back; then fleet_b. A client of the router meanwhile gets every answer.
    fleet["values"] = dict(FLEET_VALUES, vllm_container_extra_args={"max_num_seqs": 64})
    fleet_inventory(lab, fleet["source"], GROUPS, **fleet["values"])
    prober = router_prober(fleet)
    prober.start()
    prober.wait_answer(0, timeout=60)
    started = time.time()
    try:
        rc, out = run_playbook(lab, "deploy.yml", source=fleet["source"], env=fleet["env"])
        prober.wait_answer(time.time(), timeout=60)
    finally:
        prober.stopped.set()
    assert rc == 0, out[-8000:]
    print("\nROLL two replicas: %.0f s, %d answers through the router, %d failed, longest silence %.1f s" % (
        time.time() - started, len(prober.answers), len(prober.failures), prober.longest_silence_within(started, time.time())))
    assert prober.failures == [], [round(t - started, 1) for t in prober.failures]
    assert roll_marks(out) == [("out", "fleet_a"), ("back", "fleet_a"), ("out", "fleet_b"), ("back", "fleet_b")], roll_marks(out)
    # fleet_a's new engine answered its readiness before fleet_b was taken out, fleet_b's after.
    waits = [m.start() for m in re.finditer(r"^TASK \[dgxspark\.cluster\.vllm_container : Wait for vLLM to load", out, re.MULTILINE)]
    takes = [m.start() for m in re.finditer(r"^TASK \[%s" % re.escape(TAKE_OUT), out, re.MULTILINE)]
    assert len(waits) == 2 and takes[0] < waits[0] < takes[1] < waits[1], (waits, takes)
    for head in ("spark-alpha", "spark-gamma"):
        assert "--max-num-seqs" in engine_args(lab, head), head
    # Both back in the router: one model, answered by both replicas.
    served = served_through_the_router(lab, fleet, fleet["plans"]["fleet_a"]["api"]["served_model_name"], count=8, streams=4)
    assert all(served.values()), served
    fleet["containers"] = containers(lab)


def test_a_failed_gate_puts_that_replica_back_and_leaves_the_other_untouched(lab, fleet):
    # fleet_a gets another option and a speed gate no engine passes: its new engine fails the gate, its last release (the
    # roll's) comes back, it returns to the router, and the roll stops before fleet_b.
    fleet_inventory(lab, fleet["source"], GROUPS, group_values={"fleet_a": {
        "vllm_container_extra_args": {"max_num_seqs": 48}, "vllm_container_min_tokens_per_s": 100000}}, **fleet["values"])
    before = containers(lab)
    prober = router_prober(fleet)
    prober.start()
    prober.wait_answer(0, timeout=60)
    try:
        rc, out = run_playbook(lab, "deploy.yml", source=fleet["source"], env=fleet["env"])
    finally:
        fleet_inventory(lab, fleet["source"], GROUPS, **fleet["values"])
        prober.stopped.set()
    assert rc != 0 and "The new release failed" in out and "below min_tokens_per_s 100000" in out, out[-8000:]
    assert "was put back on every node and answers again" in out, out[-8000:]
    assert prober.failures == [], prober.failures
    assert '"64"' in engine_args(lab, "spark-alpha") and '"48"' not in engine_args(lab, "spark-alpha")
    now = containers(lab)
    for node in GROUPS["fleet_b"]:
        assert now[node] == before[node], node
    assert roll_marks(out) == [("out", "fleet_a"), ("back", "fleet_a")], roll_marks(out)
    assert "TASK [Put the group back into the fleet's router when it serves again]" in out
    served = served_through_the_router(lab, fleet, fleet["plans"]["fleet_a"]["api"]["served_model_name"], count=8, streams=4)
    assert all(served.values()), served


def test_status_shows_the_fleet_and_each_group(lab, fleet):
    rc, out = run_playbook(lab, "status.yml", source=fleet["source"], env=fleet["env"], timeout=600)
    assert rc == 0, out[-6000:]
    assert "Fleet: 2 serving groups, 2 healthy" in out, out[-6000:]
    assert "Serving group fleet_a" in out and "Serving group fleet_b" in out
    assert out.index("Serving group fleet_a") < out.index("Serving group fleet_b")


def test_two_served_models_each_answered_by_its_own_group(lab, fleet):
    # fleet_b serves under a name of its own: its engine restarts, fleet_a's containers are left as they were.
    fleet_inventory(lab, fleet["source"], GROUPS, group_values={"fleet_b": {"vllm_container_served_model_name": SECOND_NAME}},
                    **fleet["values"])
    before = containers(lab)
    fleet.update(deploy_fleet(lab, fleet["source"], fleet["env"]))
    for node in GROUPS["fleet_a"]:
        assert fleet["containers"][node] == before[node], node
    assert fleet["containers"]["spark-gamma"][VLLM] != before["spark-gamma"][VLLM]
    plans, router = fleet["plans"], fleet["router"]
    first = plans["fleet_a"]["api"]["served_model_name"]
    assert plans["fleet_b"]["api"]["served_model_name"] == SECOND_NAME
    status, body = call(router["url"] + "/models", plans["fleet_a"])
    assert status == 200 and sorted(m["id"] for m in body["data"]) == sorted([first, SECOND_NAME]), body
    assert served_through_the_router(lab, fleet, first, count=4, streams=2) == {"fleet_a": 4, "fleet_b": 0}
    assert served_through_the_router(lab, fleet, SECOND_NAME, count=4, streams=2) == {"fleet_a": 0, "fleet_b": 4}


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
    assert chat(fleet["router"], fleet["plans"]["fleet_a"], fleet["plans"]["fleet_a"]["api"]["served_model_name"])[0] == 200
    rc, out = run_playbook(lab, "status.yml", source=fleet["source"], env=fleet["env"], timeout=600)
    assert rc != 0 and "Fleet: 2 serving groups, 1 healthy (not: fleet_b)" in out, out[-6000:]


def test_a_one_group_deploy_after_the_fleet_removes_the_former_heads_supervisor_and_the_router(lab, fleet):
    rc, out = run_playbook(lab, "deploy-397b.yml")
    assert rc == 0, out[-8000:]
    assert says_healthy(out), out[-4000:]
    # One group has no router: the one the fleet put on spark-alpha is gone, its port closed and its key removed.
    alpha = lab.host("spark-alpha")
    for path in ("/etc/systemd/system/dgxspark-router@.service", "/etc/systemd/system/dgxspark-router-nat.service",
                 "/etc/systemd/system/dgxspark-router-nat-watch.timer", "/etc/dgxspark/router", "/usr/local/lib/dgxspark/router"):
        assert not alpha.file(path).exists, path
    assert alpha.run("nft list table inet dgxspark_router").rc != 0
    for port in [fleet["router"]["port"]] + list(fleet["router"]["instances"].values()):
        assert not alpha.socket("tcp://0.0.0.0:%d" % port).is_listening, port
    assert alpha.run("id dgxspark-router").rc != 0
    gamma = lab.host("spark-gamma")
    assert not gamma.file(SUPERVISOR_UNIT).exists and not gamma.file(SUPERVISOR_PROGRAM).exists
    assert not gamma.file("/etc/dgxspark/supervisor/config.json").exists
    assert gamma.file("/etc/dgxspark/supervisor/node_ctl.json").exists  # the head reaches it through its node command
    assert gamma.run("systemctl is-active dgxspark-supervisor").stdout.strip() != "active"
    assert lab.host("spark-alpha").run("systemctl is-active dgxspark-supervisor").stdout.strip() == "active"
    assert all(node_container() in containers(lab)[node] for node in lab.nodes)
