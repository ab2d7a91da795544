"""vLLM's own multi-node backend (`dgxspark_executor_backend: mp`) beside Ray on the 4-node lab, with releases.

vLLM's own engine (its CPU build) serves across the four lab nodes without Ray: a container per node, rank 0 on the head
with the API, the others `--headless`. Checks, in file order, each starting from what the one before left:
a Ray -> mp switch whose new release fails its speed gate is refused by the automatic rollback, which names the Ray
release's backend and puts nothing back (no Ray container left either: the switch removed Ray); an mp deploy then
serves, status naming the ranks; a second mp deploy changes and restarts nothing; a headless rank killed converges by
the supervisor alone (the whole group restarted, rank 0 last); an mp release below the speed gate
is replaced by the proven mp release on every rank, which answers again; rollback.yml refuses the Ray release across
the switch without changing a container; a deploy back to Ray leaves no vLLM rank on the workers and serves.

Not part of `make test` (its twenty minutes wait for the suite's time, issue 19; tools/test-suite.sh leaves it out):

    DGXSPARK_LAB_INSTANCE=2 python3 lab/labctl.py up --nodes 4 --serving
    DGXSPARK_LAB_INSTANCE=2 DGXSPARK_LAB_STATE_SUFFIX=-2 .venv/bin/pytest -m lab -s tests/lab/test_mp_backend_lab.py
"""

import json
import re
import time

import pytest

from ansible_lab import containers, extra_vars, recap, run_playbook, says_healthy, serving_cluster
from test_healing_lab import vllm_start, wait_recovered

pytestmark = pytest.mark.lab

PLAYBOOK = "deploy-397b.yml"
RAY = "dgxspark-ray"
VLLM = "dgxspark-vllm"
HEAD = "spark-alpha"
# The lab's CPU build binds each rank's OpenMP threads to the cores it sees as its own; four ranks on one machine's two
# cores must not (a lab-only extra variable, as lab/serving/README.md says).
MP = {"dgxspark_executor_backend": "mp", "vllm_container_extra_env": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}}
SLOW = {"vllm_container_min_tokens_per_s": 100000}


def proven_release(lab, *extra):
    rc, out = run_playbook(lab, "status.yml", *extra)
    assert rc == 0, out[-3000:]
    return re.search(r"release: ([0-9a-f]{12}) deployed", out).group(1)


def args_of(lab, node):
    return json.loads(lab.host(node).check_output("docker inspect --format '{{json .Args}}' %s" % VLLM))


@pytest.fixture(scope="module")
def ray_serving(lab):
    """The users' default deploy (Ray) serving: where a switch to mp starts."""
    return serving_cluster(lab)


def test_a_switch_to_mp_that_fails_is_not_undone_by_itself_and_names_the_ray_release(ray_serving):
    lab = ray_serving
    proven = proven_release(lab)
    rc, out = run_playbook(lab, PLAYBOOK, *extra_vars(MP, SLOW))
    assert rc != 0
    assert re.search(r"decodes [0-9.]+ tok/s in one stream of 64 tokens .*: below min_tokens_per_s 100000", out), out[-4000:]
    assert ("The last proven release %s ran with executor backend ray, which this deploy switched to mp: it is not put "
            "back by itself (nothing was put back)" % proven) in out, out[-4000:]
    assert "-e dgxspark_executor_backend=ray to serve it again" in out
    assert "was put back on every node" not in out
    assert all(RAY not in names for names in containers(lab).values()), containers(lab)


def test_mp_serves_with_a_rank_on_every_node_and_no_ray(lab):
    rc, out = run_playbook(lab, PLAYBOOK, *extra_vars(MP))
    assert rc == 0, out[-6000:]
    assert re.search(r"Smoke answer: \S", out), out[-3000:]
    state = containers(lab)
    assert all(set(names) == {VLLM} for names in state.values()), state
    assert "--headless" not in args_of(lab, HEAD) and "--port" in args_of(lab, HEAD)
    for node in lab.nodes[1:]:
        assert "--headless" in args_of(lab, node), node
    rc, out = run_playbook(lab, "status.yml", *extra_vars(MP))
    assert rc == 0 and says_healthy(out), out[-3000:]
    assert "Ranks: vLLM's own multi-node backend (mp), 4 nodes, rendezvous " in out


def test_a_second_mp_deploy_changes_and_restarts_nothing(lab):
    before = containers(lab)
    rc, out = run_playbook(lab, PLAYBOOK, *extra_vars(MP))
    assert rc == 0, out[-4000:]
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap(out).values()), recap(out)
    assert containers(lab) == before


def test_a_killed_headless_rank_converges_without_ansible(lab):
    # The head keeps /health 200 while idle; the supervisor's real request finds the engine dead (vLLM #32136 leaves
    # no half group behind): it restarts the whole group, the headless ranks first, then rank 0 with the engine.
    before = vllm_start(lab)
    started = time.time()
    lab.host("spark-gamma").check_output("kill -9 $(docker inspect -f '{{.State.Pid}}' %s)" % VLLM)
    _took, out = wait_recovered(lab, "mp: a headless rank killed", started, vllm_before=before,
                                status_args=extra_vars(MP))
    assert "The supervisor restarted the group 1 time" in out, out[-3000:]
    starts = dict((node, lab.host(node).check_output("docker inspect -f '{{.State.StartedAt}}' %s" % VLLM))
                  for node in lab.nodes)
    assert all(start > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started)) for start in starts.values()), starts
    assert starts[HEAD] == max(starts.values()), starts


def test_an_mp_release_below_the_speed_gate_is_replaced_by_the_proven_one_on_every_rank(lab):
    proven = proven_release(lab, *extra_vars(MP))
    before = containers(lab)
    rc, out = run_playbook(lab, PLAYBOOK, "--tags", "vllm",
                           *extra_vars(MP, SLOW, {"vllm_container_extra_args": {"max_num_seqs": 32}}))
    assert rc != 0
    assert "The last proven release %s (deployed " % proven in out, out[-4000:]
    assert "was put back on every node and answers again" in out and "the supervisor is resumed" in out
    after = containers(lab)
    # Every rank was started again, on the proven release's options.
    assert all(after[node][VLLM] != before[node][VLLM] for node in lab.nodes), (before, after)
    assert all("--max-num-seqs" not in args_of(lab, node) for node in lab.nodes)
    rc, out = run_playbook(lab, "status.yml", *extra_vars(MP))
    assert rc == 0 and says_healthy(out), out[-4000:]
    assert "release: %s deployed " % proven in out


def test_rollback_refuses_the_ray_release_across_the_switch_and_changes_nothing(lab):
    rc, out = run_playbook(lab, "status.yml", *extra_vars(MP))
    previous = re.search(r"release: [0-9a-f]{12} deployed .*; previous ([0-9a-f]{12}) deployed", out).group(1)
    before = containers(lab)
    rc, out = run_playbook(lab, "rollback.yml", *extra_vars(MP))
    assert rc != 0
    assert ("The previous release %s ran with executor backend ray, and this inventory deploys mp: rollback.yml does "
            "not switch backends (nothing was changed)" % previous) in out, out[-3000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    assert containers(lab) == before


def test_back_to_ray_leaves_no_rank_on_the_workers_and_serves(lab):
    rc, out = run_playbook(lab, PLAYBOOK)
    assert rc == 0, out[-6000:]
    assert "Ray on spark-alpha: 4/4 nodes alive, 4 GPUs" in out
    state = containers(lab)
    assert set(state[HEAD]) == {RAY, VLLM} and all(set(state[n]) == {RAY} for n in lab.nodes[1:]), state
