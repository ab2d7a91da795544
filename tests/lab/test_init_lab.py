"""playbooks/init.yml on the served 4-node lab, then a deploy with the inventory it wrote (needs the lab: conftest.py).

The draft names the lab's real sysfs shape (its CX-7 stand-in), keeps the rail addresses the nodes have, and plans the
lab's cluster; a deploy-397b.yml with it (and the lab's labelled differences, as -e) serves the same cluster as the lab's
own inventory, so every phase has nothing to do. A second init changes nothing. (test_lab.py drafts from nodes that were
only brought up.)

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab tests/lab/test_init_lab.py
"""

import os

import pytest

from ansible_lab import changed_tasks, init_draft, run_playbook, says_healthy, serving_cluster

pytestmark = pytest.mark.lab


def test_init_drafts_the_served_lab_and_a_deploy_with_it_has_nothing_to_do(lab, tmp_path):
    serving_cluster(lab)
    rc, out, draft, extra, env = init_draft(lab, str(tmp_path))
    assert rc == 0, out[-4000:]
    with open(os.path.join(draft, "group_vars", "all", "main.yml"), encoding="utf-8") as handle:
        group_vars = handle.read()
    for text in ("dgxspark_model_profile: qwen3_5_397b_a17b_fp8", "dgxspark_tensor_parallel_size: 4",
                 "interface: enP2p1s0f1np1", "subnet: 192.168.101.0/24",
                 "rail1 (enp1s0f1np1): the addresses the nodes have kept (192.168.100.0/24).", "4 Sparks: behind a switch"):
        assert text in group_vars, (text, group_vars)

    rc, again, _, _, _ = init_draft(lab, str(tmp_path))
    assert rc == 0 and "hosts.yml unchanged, group_vars/all/main.yml unchanged" in " ".join(again.split()), again[-3000:]

    rc, out = run_playbook(lab, "deploy-397b.yml", *extra, source=draft, env=env)
    assert rc == 0, out[-6000:]
    # The same cluster as the lab's inventory planned: every phase converged with the same inputs, nothing changes.
    assert changed_tasks(out) == [], changed_tasks(out)
    assert "Phase vllm skipped on every node" in out and "Phase network skipped on every node" in out
    assert "Endpoint" in out or "curl -s http" in out, out[-3000:]
    rc, status = run_playbook(lab, "status.yml", *extra, source=draft, env=env, timeout=300)
    assert rc == 0 and says_healthy(status), status[-3000:]
