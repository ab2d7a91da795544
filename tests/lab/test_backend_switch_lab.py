"""Switching the executor backend on the 4-node lab: vLLM's own multi-node backend (`-e dgxspark_executor_backend=mp`)
from nothing, then to Ray and back, with releases.

Every run here names its backend, whatever DGXSPARK_LAB_BACKEND says (the serving modules' backend: make test-lab-mp
runs those under mp). Checks, in file order, each starting from what the one before left:
an mp deploy serves with a rank on every node (rank 0 on the head with the API, the others `--headless`) and no Ray
container anywhere, status naming the ranks; a second mp deploy changes and restarts nothing; a headless rank killed
converges by the supervisor alone (vLLM #32136: the whole group restarted, rank 0 last); a rank that cannot reach rank
0's rendezvous (a firewall rule on its node) fails the deploy after vllm_container_join_timeout, by name, instead of
the stall watchdog's nameless wait; a deploy to Ray leaves no vLLM
rank on the workers and serves; rollback.yml refuses the mp release across the switch without changing a container;
a switch back to mp whose new release fails its speed gate names the Ray release's backend and puts nothing back (no
Ray container left either: the switch removed Ray).

`make test` runs it on the second lab, after the modules that take its nodes down; alone:

    DGXSPARK_LAB_INSTANCE=2 python3 lab/labctl.py up --nodes 4 --serving
    DGXSPARK_LAB_INSTANCE=2 DGXSPARK_LAB_STATE_SUFFIX=-2 .venv/bin/pytest -m lab -s tests/lab/test_backend_switch_lab.py
"""

import json
import re
import time

import pytest

from ansible_lab import (HEAD, RAY, VLLM, changed_tasks, containers, extra_vars, recap, run_playbook, says_healthy,
                         serving_lab)
from test_healing_lab import group_starts, status, vllm_start, wait_recovered

pytestmark = pytest.mark.lab

PLAYBOOK = "deploy-397b.yml"
SLOW = {"vllm_container_min_tokens_per_s": 100000}


def args_of(lab, node):
    return json.loads(lab.host(node).check_output("docker inspect --format '{{json .Args}}' %s" % VLLM))


@pytest.fixture(scope="module")
def mp_deployed(lab):
    """The first mp deploy on the 4-node lab, from whatever it ran before (nothing, on make test's second lab)."""
    return run_playbook(serving_lab(lab), PLAYBOOK, backend="mp")


def test_mp_serves_with_a_rank_on_every_node_and_no_ray(lab, mp_deployed):
    rc, out = mp_deployed
    assert rc == 0, out[-6000:]
    assert re.search(r"Smoke answer \([1-9][0-9]* tokens\): \S", out), out[-3000:]
    state = containers(lab)
    assert all(set(names) == {VLLM} for names in state.values()), state
    assert "--headless" not in args_of(lab, HEAD) and "--port" in args_of(lab, HEAD)
    for node in lab.nodes[1:]:
        assert "--headless" in args_of(lab, node), node
    rc, out = status(lab, "mp")
    assert rc == 0 and says_healthy(out), out[-3000:]
    assert "Ranks: vLLM's own multi-node backend (mp), 4 nodes, rendezvous " in out
    # The release recorded is each node's rank, as status reads it (it read Ray's containers under mp once).
    assert re.search(r"release: [0-9a-f]{12} deployed ", out) and "the containers running now are not" not in out, out[-3000:]


def test_a_second_mp_deploy_changes_and_restarts_nothing(lab, mp_deployed):
    before = containers(lab)
    rc, out = run_playbook(lab, PLAYBOOK, backend="mp")
    assert rc == 0, out[-4000:]
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap(out).values()), changed_tasks(out) or recap(out)
    assert containers(lab) == before


def test_a_killed_headless_rank_converges_without_ansible(lab, mp_deployed):
    # The head keeps /health 200 while idle; the supervisor's real request finds the engine dead (vLLM #32136 leaves
    # no half group behind): it restarts the whole group, the headless ranks first, then rank 0 with the engine.
    before = vllm_start(lab)
    started = time.time()
    lab.host("spark-gamma").check_output("kill -9 $(docker inspect -f '{{.State.Pid}}' %s)" % VLLM)
    _took, out = wait_recovered(lab, "mp: a headless rank killed", started, vllm_before=before, backend="mp")
    assert "The supervisor restarted the group 1 time" in out, out[-3000:]
    starts = group_starts(lab, started, backend="mp")
    assert starts[HEAD] == max(starts.values()), starts


def test_a_rank_that_cannot_reach_rank_0_fails_the_deploy_by_name_after_the_join_timeout(lab, mp_deployed):
    # spark-delta's packets to the rendezvous are dropped (what a wrong firewall rule or route does on a Spark); a new
    # vLLM option makes the deploy start the group again, without the automatic rollback (its own tests prove it).
    delta = lab.host("spark-delta")
    delta.check_output("nft add table inet dgxspark_lab_test && nft add chain inet dgxspark_lab_test out "
                       "'{ type filter hook output priority 0; }' && nft add rule inet dgxspark_lab_test out "
                       "ip daddr 192.168.100.10 tcp dport 29501 drop")
    try:
        rc, out = run_playbook(lab, PLAYBOOK, "--tags", "vllm", *extra_vars(vllm_container_extra_args={"max_num_seqs": 32},
                                                                            vllm_container_join_timeout=30,
                                                                            dgxspark_release_rollback=False), backend="mp")
    finally:
        delta.check_output("nft delete table inet dgxspark_lab_test")
    assert rc != 0
    assert re.search(r"waits for a rank that does not come\. Rank 0's rendezvous 192\.168\.100\.10:29501 has been open for "
                     r"\d+ s \(vllm_container_join_timeout 30 s\), and the rank of spark-delta \(192\.168\.100\.13\) has not "
                     r"joined it", out), out[-4000:]
    # Not the stall watchdog's message, and no rank stopped (the rank waits to connect): none is named as stopped.
    assert "has been still for" not in out and "stopped (status" not in out, out[-4000:]
    # Left with the failed group: the next test's switch to Ray replaces it.


def test_to_ray_leaves_no_rank_on_the_workers_and_serves(lab, mp_deployed):
    rc, out = run_playbook(lab, PLAYBOOK, backend="ray")
    assert rc == 0, out[-6000:]
    assert "Ray on spark-alpha: 4/4 nodes alive, 4 GPUs" in out
    state = containers(lab)
    assert set(state[HEAD]) == {RAY, VLLM} and all(set(state[n]) == {RAY} for n in lab.nodes[1:]), state


def test_rollback_refuses_the_mp_release_across_the_switch_and_changes_nothing(lab, mp_deployed):
    rc, out = status(lab, "ray")
    previous = re.search(r"release: [0-9a-f]{12} deployed .*; previous ([0-9a-f]{12}) deployed", out).group(1)
    before = containers(lab)
    rc, out = run_playbook(lab, "rollback.yml", backend="ray")
    assert rc != 0
    assert ("The previous release %s ran with executor backend mp, and this inventory deploys ray: rollback.yml does "
            "not switch backends (nothing was changed)" % previous) in out, out[-3000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), changed_tasks(out) or recap(out)
    assert containers(lab) == before


def test_a_switch_to_mp_that_fails_is_not_undone_by_itself_and_names_the_ray_release(lab, mp_deployed):
    rc, out = status(lab, "ray")
    proven = re.search(r"release: ([0-9a-f]{12}) deployed", out).group(1)
    rc, out = run_playbook(lab, PLAYBOOK, *extra_vars(SLOW), backend="mp")
    assert rc != 0
    assert re.search(r"decodes [0-9.]+ tok/s in one stream of 64 tokens .*: below min_tokens_per_s 100000", out), out[-4000:]
    assert ("The last proven release %s ran with executor backend ray, which this deploy switched to mp: it is not put "
            "back by itself (nothing was put back)" % proven) in out, out[-4000:]
    assert "-e dgxspark_executor_backend=ray to serve it again" in out
    assert "was put back on every node" not in out
    assert all(RAY not in names for names in containers(lab).values()), containers(lab)
