"""A deadlock that looks healthy, staged on the lab (issue 50, item 5; eugr/spark-vllm-docker #260: the GPU busy, the token
counter frozen with requests running, /health green).

A worker rank stops in the middle of a collective (its process stopped with SIGSTOP: Ray's worker actor, or vLLM's
worker process under mp) while long streaming completions run: the head's rank blocks in its next all-reduce and the
engine generates nothing more, but its API server still answers /health and /metrics (requests running, the counter
standing). The test shows first that the state is real, then:
- Prometheus' `DgxsparkEngineDeadlocked` goes pending (or firing); its windows (3 min without a token, then 2 min) are
  shortened for the test in the installed rules file (45 s, then 15 s), which is put back afterwards;
- the supervisor, paused while the state is shown and resumed into it, names the hang ("requests have run ... with no
  token generated ... the engine is hung") and restarts the group. A supervisor resumed (or started) into a hang takes
  it with a fresh grace, and its probe waits behind the stuck requests: it is the engine's token counter that shows the
  engine had served. Its frozen window (supervisor_frozen_s, 300 s) is shortened to 20 s in the installed configuration,
  shorter than the 3 probes of the lab's 10 s looks, so that the hang, not the probes, is named; put back afterwards;
- after the restart the cluster serves again: a completion answers, the token counter moves, status.yml is healthy.
The hang lasts for the test only: vLLM gives up a step after 300 s (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, and Ray's
compiled-graph timeout), and the engine dies, which the supervisor would restart too.

It reuses the cluster the serving modules leave (ansible_lab.serving_cluster; on a 2-node lab, the 2-node shape of
test_openai_client_lab with monitoring), about 3 min once the cluster serves. Prints `DETECTION deadlock ...`,
`ALERT DgxsparkEngineDeadlocked ...` and `RECOVERY deadlock ...`.

    DGXSPARK_LAB_NODES=2 .venv/bin/python -m pytest -m lab -s tests/lab/test_deadlock_lab.py
"""

import base64
import json
import os
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
import yaml

from ansible_lab import (BACKEND, HEAD, api_open, api_url, extra_vars, node_container, playbook_ok, run_playbook, says_healthy,
                         serving_cluster, serving_lab)
from test_monitoring_lab import prometheus, wait_for
from test_openai_client_lab import LAB_PROFILE_PARSERS, TWO_NODE_VARS_FILE, client, models
from test_supervisor_lab import CONFIG, SUPERVISOR, UNIT, message_time, report, wait_report

pytestmark = pytest.mark.lab

WORKER = "spark-beta"
STREAMS = 3
# The supervisor's frozen window for the test: shorter than the probes' count (3 looks of at least the lab's 10 s probe
# deadline), so that the hang is named; the lab's looks every 10 s (inventories/lab).
FROZEN_S, INTERVAL_S = 20, 10
RULES = "/etc/prometheus/rules/dgxspark_alerts.rules.yml"
ALERT = "DgxsparkEngineDeadlocked"
# The process of the worker's rank that the test stops, by its title: Ray's worker actor (ray_executor_v2's, or the older
# executor's), or vLLM's worker process under mp (VLLM::Worker_TP1). Ray's raylet keeps running: a stopped raylet is a
# node lost, which Ray reports and the engine dies of, no deadlock.
RANK_PROCESS = {"ray": ("ray::RayWorkerProc", "ray::RayWorkerWrapper"), "mp": ("VLLM::Worker",)}
BACKUP = "/root/deadlock-test-%s.bak"


def playbook_args(lab):
    """The arguments that deploy (and read the status of) the lab's serving cluster: on a 2-node lab its 2-node shape."""
    if lab.count != 2:
        return []
    with open(TWO_NODE_VARS_FILE, encoding="utf-8") as handle:
        two_node = yaml.safe_load(handle)
    return extra_vars(two_node, dgxspark_tensor_parallel_size=2, vllm_container_extra_args=LAB_PROFILE_PARSERS)


def prometheus_answers(lab):
    try:
        prometheus(lab, "/api/v1/status/buildinfo")
        return True
    except (urllib.error.URLError, OSError, AssertionError):
        return False


def api_key(lab):
    with open(os.path.join(lab.state_dir, "secrets", "vllm_api_key"), encoding="utf-8") as handle:
        return handle.read().strip()


def engine_get(lab, path, timeout=5):
    """(status, body) of a GET on the head's API with the key."""
    request = urllib.request.Request(api_url(lab, path, HEAD), headers={"Authorization": "Bearer " + api_key(lab)})
    try:
        with api_open(lab, request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, ""


def load(lab):
    """(requests running, tokens generated) from the engine's /metrics, summed over its series."""
    status, text = engine_get(lab, "/metrics")
    assert status == 200, status
    found = {"vllm:num_requests_running": 0.0, "vllm:generation_tokens_total": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            found[name] += float(line.rsplit(" ", 1)[1])
    return int(found["vllm:num_requests_running"]), int(found["vllm:generation_tokens_total"])


@pytest.fixture(scope="module")
def served(lab):
    """(lab, model, playbook arguments): the cluster serving with Prometheus, and the supervisor seeing it serve."""
    if lab.count == 2:
        serving_lab(lab, count=2)
        if not models(lab) or not prometheus_answers(lab):
            playbook_ok(lab, "deploy.yml", "--skip-tags", "os", *playbook_args(lab))
    else:
        serving_cluster(lab)
    wait_report(lab, "see the group serve", lambda r: r["phase"] == "serving", 120)
    names = models(lab)
    assert names and len(names) == 1, names
    return lab, names[0], playbook_args(lab)


def stream(lab, model, chunks):
    """One long streaming completion; appends each chunk's arrival time to `chunks`, and the error that ends it."""
    try:
        for _chunk in client(lab).completions.create(model=model, prompt="Count on and on:", max_tokens=16000, stream=True,
                                                     temperature=0, extra_body={"ignore_eos": True}):
            chunks.append(time.time())
    except (openai.APIError, OSError) as error:  # the group restarted under it
        chunks.append(error)


def shortened_rules(installed):
    """The installed alert rules with DgxsparkEngineDeadlocked's windows shortened for the test."""
    rules = yaml.safe_load(installed)
    [rule] = [r for group in rules["groups"] for r in group["rules"] if r.get("alert") == ALERT]
    assert "[3m]" in rule["expr"] and rule["for"] == "2m", rule
    rule["expr"], rule["for"] = rule["expr"].replace("[3m]", "[45s]"), "15s"
    return yaml.safe_dump(rules, sort_keys=False, width=200)


def reload_prometheus(lab, window):
    """Reload Prometheus' rules; True once its DgxsparkEngineDeadlocked reads `window`."""
    lab.host(HEAD).check_output("systemctl reload prometheus")
    return wait_for(lambda: window in deadlock_rule(lab), 30, step=2)


def deadlock_rule(lab):
    """The query of DgxsparkEngineDeadlocked as Prometheus loaded it."""
    return " ".join(r["query"] for g in prometheus(lab, "/api/v1/rules")["groups"] for r in g["rules"] if r["name"] == ALERT)


def alert_states(lab):
    return [(a["labels"].get("node"), a["state"]) for a in prometheus(lab, "/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == ALERT]


@pytest.fixture
def shortened_windows(served):
    """The supervisor's frozen window and the alert's windows shortened in the installed files, put back afterwards
    (the supervisor restarted and Prometheus reloaded on both ends; a deploy finds the files as it wrote them)."""
    lab = served[0]
    head = lab.host(HEAD)
    head.check_output("%s pause lab test: staging a deadlock" % SUPERVISOR)
    head.check_output("cp -p %s %s && cp -p %s %s" % (CONFIG, BACKUP % "config", RULES, BACKUP % "rules"))
    try:
        head.check_output("""python3 -c 'import json; p = "%s"; c = json.load(open(p)); c["frozen_s"] = %d; """
                          """json.dump(c, open(p, "w"), indent=1)' && systemctl restart %s""" % (CONFIG, FROZEN_S, UNIT))
        rules = base64.b64encode(shortened_rules(head.check_output("cat %s" % RULES)).encode()).decode()
        head.check_output("echo %s | base64 -d > %s" % (rules, RULES))
        assert reload_prometheus(lab, "[45s]"), deadlock_rule(lab)
        yield lab
    finally:
        head.check_output("mv %s %s && mv %s %s" % (BACKUP % "config", CONFIG, BACKUP % "rules", RULES))
        head.check_output("rm -f /var/lib/dgxspark/supervisor/paused && systemctl restart %s" % UNIT)
        assert reload_prometheus(lab, "[3m]"), deadlock_rule(lab)


def stop_a_worker_rank(lab):
    """SIGSTOP the worker node's rank process (found by its container); returns its pids."""
    worker = lab.host(WORKER)
    top = worker.check_output("docker top %s -eo pid,args" % node_container())
    pids = [line.split()[0] for line in top.splitlines()[1:] if any(title in line for title in RANK_PROCESS[BACKEND])]
    assert pids, top
    worker.check_output("kill -STOP %s" % " ".join(pids))
    return pids


def test_a_deadlock_that_looks_healthy_fires_the_alert_and_the_supervisor_restarts_the_group(served, shortened_windows):
    lab, model, _args = served
    head = lab.host(HEAD)
    streams = [[] for _ in range(STREAMS)]
    for chunks in streams:
        threading.Thread(target=stream, args=(lab, model, chunks), daemon=True).start()
    # Every stream generates before the rank stops.
    assert wait_for(lambda: all(len(chunks) >= 5 for chunks in streams), 120, step=1), [len(c) for c in streams]
    pids = stop_a_worker_rank(lab)
    stopped = time.time()
    try:
        # The state is real: /health answers, requests run, the counter and every stream stand still.
        time.sleep(5)
        running, tokens = load(lab)
        chunks_then = [len(chunks) for chunks in streams]
        time.sleep(15)
        assert engine_get(lab, "/health")[0] == 200
        assert load(lab) == (running, tokens) and running >= STREAMS, (load(lab), running, tokens)
        assert [len(chunks) for chunks in streams] == chunks_then
        print("\nDEADLOCK staged: /health 200, %d requests running, the token counter at %d for 15 s" % (running, tokens))
        # Prometheus' alert goes pending, then firing (shortened windows: 45 s without a token, then 15 s).
        seen = wait_for(lambda: [s for node, s in alert_states(lab) if node == HEAD and s in ("pending", "firing")], 150)
        assert seen, prometheus(lab, "/api/v1/alerts")
        print("ALERT %s %s %.0f s after the rank stopped" % (ALERT, seen[0], time.time() - stopped))
        # The supervisor, resumed into the hang, names it and restarts the group.
        assert report(lab)["phase"] == "paused"
        resumed = time.time()
        head.check_output("%s resume" % SUPERVISOR)
        seen = wait_report(lab, "name the hang", lambda r: (message_time(r, "with no token generated") or 0) >= int(resumed),
                           FROZEN_S + 6 * INTERVAL_S)
        detected = message_time(seen, "with no token generated") - resumed
        print("DETECTION deadlock (a worker rank stopped, /health 200): %.0f s after the supervisor's resume" % detected)
        restarting = [m for m in seen["messages"] if "restarting the group" in m][-1]
        assert "requests have run for" in restarting and "the engine is hung, though it may answer /health" in restarting
        assert "after serving: crash 1 of" in restarting, restarting  # it had served: the crash budget
        assert detected <= FROZEN_S + 3 * INTERVAL_S + 15, seen["messages"]
    finally:
        lab.host(WORKER).run("kill -CONT %s" % " ".join(pids))  # gone once the group restarted
    # Back: the group started again, a completion answers and the counter moves.
    wait_report(lab, "see the group serve again", lambda r: r["phase"] == "serving"
                and (message_time(r, "group started again") or 0) >= int(resumed), 420)
    tokens_before = load(lab)[1]
    answer = client(lab).completions.create(model=model, prompt="1", max_tokens=8, temperature=0,
                                            extra_body={"ignore_eos": True})
    assert answer.usage.completion_tokens == 8
    assert load(lab)[1] >= tokens_before + 8
    print("RECOVERY deadlock: serving %.0f s after the rank stopped" % (time.time() - stopped))


def test_after_the_deadlock_the_supervisor_runs_its_own_configuration_and_status_says_healthy(served):
    lab, _model, args = served
    assert '"frozen_s": 300' in lab.host(HEAD).check_output("cat %s" % CONFIG)
    wait_report(lab, "serve with its own configuration", lambda r: r["phase"] == "serving", 120)
    rc, out = run_playbook(lab, "status.yml", *args, timeout=300)
    assert rc == 0 and says_healthy(out), out[-4000:]
    assert report(lab)["restarts"] == [] and "paused" not in lab.host(HEAD).check_output("ls /var/lib/dgxspark/supervisor")
