"""vLLM's compile cache and releases (issue 49, item 9) on a 2-node lab: one directory a node (VLLM_CACHE_ROOT, the Ray
workers' too), emptied when another release starts, kept while one release restarts.

A file planted in every node's cache stands for what a release's engine wrote (the lab's CPU engine may write nothing
there). In order: a deploy of a new release (an engine option changed) empties the cache of every node before its engine
starts; a restart by the supervisor (the engine's main process killed) keeps what the release wrote; rollback.yml empties
it for the release it puts back, whose id the marker then names, so that it does not load what the failed one wrote.
Seen failing before the change: the planted files survived the new release and the rollback.

    DGXSPARK_LAB_NODES=2 .venv/bin/python -m pytest -m lab tests/lab/test_vllm_cache_lab.py
"""

import os
import re
import time

import pytest
import yaml

from ansible_lab import HEAD, REPO, VLLM, changed_tasks, extra_vars, playbook_ok, run_playbook, says_healthy, serving_lab

pytestmark = pytest.mark.lab

CACHE = "/var/cache/dgxspark/vllm"
MARKER = ".dgxspark-release"
TWO_NODE_VARS_FILE = os.path.join(REPO, "molecule", "shared", "group_vars", "all", "20-two-node-cluster.yml")
RECOVERY_LIMIT_S = 900


def two_node_vars(**more):
    """The 2-node shape (seed 003's, as molecule and test_isolation_lab deploy it): every playbook plans with it."""
    with open(TWO_NODE_VARS_FILE, encoding="utf-8") as handle:
        two_node = yaml.safe_load(handle)
    return extra_vars(two_node, dgxspark_tensor_parallel_size=2, **more)


def deploy_args(**more):
    """The 2-node shape, skipping the phases no check needs."""
    return ["--skip-tags", "os,monitoring"] + two_node_vars(**more)


def cache_of(lab):
    """{node: (the marker's release or None, the other entries of the cache directory)}."""
    found = {}
    for node in lab.nodes:
        host = lab.host(node)
        marker = host.run("cat %s/%s" % (CACHE, MARKER))
        entries = host.check_output("ls -A %s" % CACHE).split()
        found[node] = (marker.stdout.strip() if marker.rc == 0 else None, sorted(e for e in entries if e != MARKER))
    return found


def plant(lab, name):
    """A file in every node's cache: what the serving release's engine wrote."""
    for node in lab.nodes:
        lab.host(node).check_output("touch %s/%s" % (CACHE, name))


def emptied_on(out, task):
    """The hosts on which TASK (the end of its name) reported a change: emptied the cache."""
    hosts = set()
    for line in changed_tasks(out):
        name, _sep, names = line.rpartition(": ")
        if name.endswith(task):
            hosts.update(names.split(", "))
    return hosts


def vllm_start(lab):
    return lab.host(HEAD).check_output("docker inspect -f '{{.State.StartedAt}}' %s" % VLLM)


def release_ids(lab):
    """(the release that serves, the one before it or None), as status.yml names them: after a rollback it names none
    (rollback.yml's line says which release it replaced instead)."""
    rc, out = run_playbook(lab, "status.yml", *two_node_vars(), timeout=300)
    assert rc == 0, out[-3000:]
    line = re.search(r"release: [0-9a-f]{12} deployed .*", out)
    assert line, out[-3000:]
    previous = re.search(r"; previous ([0-9a-f]{12}) deployed", line.group(0))
    return line.group(0).split()[1], previous.group(1) if previous else None


@pytest.fixture(scope="module")
def deployed(lab):
    serving_lab(lab, 2)
    playbook_ok(lab, "deploy.yml", *deploy_args())
    return lab


def test_a_new_release_empties_the_cache_a_restart_keeps_it_and_a_rollback_empties_it_again(deployed):
    lab = deployed
    plant(lab, "written-by-the-first-release")
    # A new release: the deploy empties every node's cache before its engine starts, and names the run in the marker.
    out = playbook_ok(lab, "deploy.yml", *deploy_args(vllm_container_extra_args={"max_num_seqs": 64}))
    assert emptied_on(out, "Empty vLLM's compile cache on every node when a new release starts") == set(lab.nodes), \
        changed_tasks(out)
    after_deploy = cache_of(lab)
    for node, (marker, entries) in after_deploy.items():
        assert marker and marker.startswith("new release deployed ") and "written-by-the-first-release" not in entries, \
            (node, marker, entries)
    current, previous = release_ids(lab)
    assert previous and previous != current, (current, previous)

    # The supervisor restarts the release (its engine's main process killed): the cache stays as the release left it.
    plant(lab, "written-by-the-second-release")
    before = vllm_start(lab)
    started = time.time()
    lab.host(HEAD).check_output("kill -9 $(docker inspect -f '{{.State.Pid}}' %s)" % VLLM)
    while True:
        assert time.time() - started < RECOVERY_LIMIT_S, "the supervisor did not bring the engine back"
        if vllm_start(lab) != before:
            rc, out = run_playbook(lab, "status.yml", *two_node_vars(), timeout=300)
            if rc == 0 and says_healthy(out):
                break
        time.sleep(10)
    assert "The supervisor restarted the group" in out, out[-3000:]
    for node, (marker, entries) in cache_of(lab).items():
        assert marker == after_deploy[node][0] and "written-by-the-second-release" in entries, (node, marker, entries)

    # rollback.yml puts the first release back: its engine starts on an emptied cache that names it.
    rc, out = run_playbook(lab, "rollback.yml", *two_node_vars())
    assert rc == 0, out[-4000:]
    assert emptied_on(out, "Empty vLLM's compile cache on the node unless it is the release's put back") == set(lab.nodes), \
        changed_tasks(out)
    for node, (marker, entries) in cache_of(lab).items():
        assert marker == previous and "written-by-the-second-release" not in entries, (node, marker, entries)
    assert release_ids(lab)[0] == previous
