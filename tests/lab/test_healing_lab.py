"""Self-healing on the 4-node lab (issues 9 and 21): after each fault the cluster serves again without Ansible, and
`status.yml` says healthy; each recovery time is printed (`RECOVERY <fault>: <s> s`, collected by bench/faults). The
supervisor (roles/supervisor) heals: Docker restarts nothing by itself (restart policy "no").

- A worker's Ray container crashes (its main process killed): a rank of the group is lost, and the supervisor restarts
  the whole group in order (every Ray container, the head's first, then the engine), which serves again. Under mp
  (DGXSPARK_LAB_BACKEND=mp), a worker's rank container: the supervisor restarts every rank, the head's (the engine) last.
- Every node restarts at once (`labctl restart` of all four: a power cut): the supervisor starts the group at boot,
  once every node answers with the memory the plan needs.
- A node becomes unreachable in the middle of a deploy: the play stops naming the node and the phase; a re-run after the
  node is back converges with no manual step.
(A hung engine, a crash loop and the memory guard: tests/lab/test_supervisor_lab.py; an option vLLM rejects:
tests/lab/test_deploy_lab.py.)

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab -s tests/lab/test_healing_lab.py
"""

import json
import os
import time
import urllib.error
import urllib.request

import pytest

from ansible_lab import BACKEND, HEAD, api_open, api_url, node_container, run_playbook, says_healthy, serving_cluster

pytestmark = pytest.mark.lab

RECOVERY_LIMIT_S = 900


def api_answers(lab):
    """True when the head answers one chat completion with the key (what a client needs)."""
    with open(os.path.join(lab.state_dir, "secrets", "vllm_api_key")) as handle:
        key = handle.read().strip()
    body = json.dumps({"model": "Qwen/Qwen3.5-397B-A17B-FP8", "max_tokens": 1,
                       "messages": [{"role": "user", "content": "ping"}]}).encode()
    request = urllib.request.Request(api_url(lab, "/v1/chat/completions", HEAD), data=body,
                                     headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with api_open(lab, request, timeout=10) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def status(lab, backend=None):
    rc, out = run_playbook(lab, "status.yml", timeout=300, backend=backend)
    return rc, out


def vllm_start(lab):
    """When the head's vLLM container last started (None while the head cannot be asked)."""
    try:
        return lab.host(HEAD).check_output("docker inspect -f '{{.State.StartedAt}}' dgxspark-vllm")
    except Exception:  # pylint: disable=broad-except  # the head is rebooting
        return None


def wait_recovered(lab, fault, started, vllm_before=None, backend=None):
    """Poll the API until it answers, then status.yml (with BACKEND, the lab's when None) until healthy;
    print and return the recovery time. With vllm_before (the vLLM start before the fault), the fault must first have
    reached vLLM (its engine lost a rank and it started again), so that a healthy status read before the fault spread
    does not count."""
    deadline = started + RECOVERY_LIMIT_S
    while time.time() < deadline:
        if vllm_before is not None and vllm_start(lab) in (None, vllm_before):
            time.sleep(2)
            continue
        if api_answers(lab):
            rc, out = status(lab, backend)
            if rc == 0 and says_healthy(out):
                took = time.time() - started
                print("\nRECOVERY %s: %.0f s" % (fault, took))
                return took, out
        time.sleep(5)
    # The collection's own status (every node's Ray and vLLM containers, restarts, last error) says why, read now: the
    # loop only reads it once the API answers.
    api = "answers" if api_answers(lab) else "does not answer"
    _rc, out = status(lab, backend)
    pytest.fail("%s: not healthy %d s after the fault (vLLM started %s, before the fault %s; the API %s); status now:\n%s"
                % (fault, RECOVERY_LIMIT_S, vllm_start(lab), vllm_before, api, out[-6000:]))
    return None


@pytest.fixture(scope="module")
def deployed(lab):
    yield serving_cluster(lab)
    # Heals a node left cut or stopped by a failed test; the cluster stays serving for the next serving module.
    lab.labctl("up", "--nodes", "4")


def group_starts(lab, since, backend=None):
    """{node: when its group container started under BACKEND (the lab's when None)}, each asserted to be after SINCE
    (a time.time())."""
    starts = dict((node, lab.host(node).check_output("docker inspect -f '{{.State.StartedAt}}' %s" % node_container(backend)))
                  for node in lab.nodes)
    assert all(start > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since)) for start in starts.values()), starts
    return starts


def test_a_crashed_worker_container_heals_without_ansible(deployed):
    gamma = deployed.host("spark-gamma")
    before = vllm_start(deployed)
    started = time.time()
    gamma.check_output("kill -9 $(docker inspect -f '{{.State.Pid}}' %s)" % node_container())
    _took, out = wait_recovered(deployed, "worker %s container crashed" % BACKEND, started, vllm_before=before)
    assert "The supervisor restarted the group 1 time" in out  # reported, as a note, not as a problem
    # The whole group, in order. Ray: every Ray container started again, the head's first, then the engine. mp (vLLM
    # #32136: a headless rank neither exits nor recovers when its group breaks): every rank, the headless ones first.
    starts = group_starts(deployed, started)
    if BACKEND == "ray":
        assert starts[HEAD] == min(starts.values()) and vllm_start(deployed) > max(starts.values()), starts
    else:
        assert starts[HEAD] == max(starts.values()), starts


def test_a_power_cut_of_every_node_heals_without_ansible(deployed):
    # Every node reboots at once (down 45 s, as machines are): the supervisor starts at the head's boot, waits until every
    # node answers with its memory, and starts the group in order; the workers join the new head, and the engine starts
    # once the cluster can place it. One reboot of all covers a worker's and the head's boot, and the bring-up that launchers leave to hand.
    before = vllm_start(deployed)
    started = time.time()
    deployed.labctl("restart", *deployed.nodes)
    wait_recovered(deployed, "every node restarted at once (a power cut)", started, vllm_before=before)
    starts = group_starts(deployed, started)
    if BACKEND == "mp":
        # Rank 0 rendezvouses with the headless ranks started before it (its --master-addr and port).
        assert starts[HEAD] == max(starts.values()), starts
        return
    # The engine asked for its placement group only once every rebooted node was back and settled (vllm-serve.sh's
    # dgxspark_ray_ready.py), so it never waited on a group Ray could not place: one made while a node drained or was
    # registering stayed pending for good once (Ray 2.60 lost the new node's GPU from its count).
    log = deployed.host(HEAD).check_output("docker logs --since %d dgxspark-vllm 2>&1" % int(started))
    assert "dgxspark_ray_ready: Ray offers 4 free GPU(s) on 4 ready node(s); the engine needs 4 (" in log, log[-3000:]
    assert "Waiting for creating a placement group" not in log, log[-3000:]


def test_a_node_lost_in_the_middle_of_a_deploy_is_named_and_a_rerun_converges(deployed):
    # The OS phase forced to run (--tags os: the plan, then that phase alone; what comes before a phase is the same for
    # any phase); spark-delta's management network is cut as it starts.
    cut = {"done": False}
    cut_at = "PLAY [Harden the OS of every node]"
    next_play = "PLAY [Install the host firewall of every node]"

    def cut_at_the_os_phase(line):
        if not cut["done"] and line.startswith(cut_at):
            cut["done"] = True
            deployed.labctl("mgmt", "spark-delta", "cut")

    try:
        rc, out = run_playbook(deployed, "deploy-397b.yml", "--tags", "os", "-e", "dgxspark_phase_force=true",
                               on_line=cut_at_the_os_phase)
    finally:
        deployed.labctl("mgmt", "spark-delta", "restore")
    assert cut["done"] and rc != 0
    stopped_at = out[out.index(cut_at):]
    assert "fatal: [spark-delta]: UNREACHABLE!" in stopped_at[:stopped_at.index(next_play)], out[-4000:]
    later_phases = stopped_at[stopped_at.index(next_play):]
    later_phases = later_phases.split("PLAY [Plan the DGX Spark cluster", 1)[0]  # up to the verify's own plan
    assert "TASK [" not in later_phases, later_phases  # no later phase ran anything (their banners still print)
    assert "TASK [Build the status table]" not in stopped_at  # nor the verify table, with no node read
    started = time.time()
    rc, out = run_playbook(deployed, "deploy-397b.yml")
    assert rc == 0, out[-6000:]
    print("\nRECOVERY node unreachable mid-deploy (the re-run): %.0f s" % (time.time() - started))
    assert says_healthy(out)
