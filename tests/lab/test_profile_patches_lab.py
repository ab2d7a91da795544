"""Profile patches on a 2-node lab (issue 11): a user's profile directory with a `python` patch and a `sitecustomize`.

Seed 003's 2-Spark shape (Qwen3-VL-235B AWQ at TP=2, with its own sitecustomize patch), as molecule's scenarios deploy
it: two nodes show every kind of serving container (the head's Ray and vLLM, a worker's Ray) at half the CPU of four.
Under mp (DGXSPARK_LAB_BACKEND=mp) every node's container is its vLLM rank, and the rest holds the same.

- The deploy copies them to every node, mounts them into every serving container, the start scripts check their sha256
  and apply them (the Ray containers of every node and the vLLM container of the head), and the cluster serves.
- The Python processes of the containers load the sitecustomize (the seed 003 cuDNN patch, the real file).
- A re-run changes nothing and restarts nothing.
- A profile whose patch was written for another vLLM is refused with the image's version, before any file or container
  changed on any node.
- A patch file altered on a node stops its container at the next start, with the reason in the log.

    DGXSPARK_LAB_NODES=2 .venv/bin/python -m pytest -m lab tests/lab/test_profile_patches_lab.py
"""

import hashlib
import os
import re
import shutil
import time

import pytest
import yaml

from ansible_lab import BACKEND, REPO, VLLM, extra_vars, node_container, playbook_ok, recap, run_playbook, serving_lab

pytestmark = pytest.mark.lab

HEAD, WORKER = "spark-alpha", "spark-beta"
PROFILES = os.path.join(REPO, "profiles", "models")
# The variables of molecule's 2-node scenarios: the profile of seed 003's shape and what it runs with.
TWO_NODE_VARS_FILE = os.path.join(REPO, "molecule", "shared", "group_vars", "all", "20-two-node-cluster.yml")


def read_yaml(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


TWO_NODE_VARS = read_yaml(TWO_NODE_VARS_FILE)
# A python patch that edits the container (as a vLLM patch edits vLLM), idempotently: it counts its applications.
LAB_PATCH = b'''import os
import sys
MARKER = "/var/tmp/dgxspark-lab-patch"
count = int(open(MARKER).read()) if os.path.exists(MARKER) else 0
with open(MARKER, "w") as handle:
    handle.write(str(count + 1))
sys.stderr.write("lab patch: applied %d time(s) in this container\\n" % (count + 1))
'''


def write_profile(directory, name, vllm_range):
    """<directory>/<name>.yml: the 2-node profile (with its seed 003 sitecustomize) plus a python patch first."""
    profile = read_yaml(os.path.join(PROFILES, TWO_NODE_VARS["dgxspark_model_profile"] + ".yml"))
    os.makedirs(os.path.join(directory, "patches"), exist_ok=True)
    with open(os.path.join(directory, "patches", "lab_marker.py"), "wb") as handle:
        handle.write(LAB_PATCH)
    for patch in profile["patches"]:
        shutil.copy(os.path.join(PROFILES, patch["file"]), os.path.join(directory, "patches"))
    lab_marker = {"file": "patches/lab_marker.py", "sha256": hashlib.sha256(LAB_PATCH).hexdigest(), "kind": "python",
                  "vllm": vllm_range, "reason": "lab test: a patch that edits the container"}
    profile["patches"].insert(0, lab_marker)
    with open(os.path.join(directory, name + ".yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(profile, handle)


def deploy_args(directory, profile):
    # Without the phases that read nothing of the patches (the OS's, the monitoring's): on the second lab's fresh nodes
    # they are minutes of apt, and tests of their own cover them. (The firewall stays: without it status.yml rightly
    # calls the cluster unhealthy, its ports open to every network.)
    return ["--skip-tags", "os,monitoring"] + extra_vars(TWO_NODE_VARS, dgxspark_profiles_dir=directory,
                                                         dgxspark_model_profile=profile, dgxspark_tensor_parallel_size=2)


def node_state(lab):
    """What a refused or no-op run must leave as it was: each node's container IDs and start times, its patch files
    with their content, and how often the lab patch ran in its group container (Ray's, or its rank under mp)."""
    state = {}
    for node in lab.nodes:
        host = lab.host(node)
        state[node] = (host.check_output("docker ps -aq --no-trunc | sort | xargs -r docker inspect -f '{{.Id}} {{.State.StartedAt}}'"),
                       host.check_output("find /etc/dgxspark/patches -type f -exec sha256sum {} + 2>/dev/null | sort || true"),
                       host.check_output("docker exec %s cat /var/tmp/dgxspark-lab-patch" % node_container()))
    return state


@pytest.fixture(scope="module")
def profiles_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("profiles"))
    write_profile(directory, "lab_patched", ">=0.32,<0.34")  # the lab's vLLM is 0.32 (lab/serving/README.md)
    write_profile(directory, "lab_patched_for_0_34", ">=0.34")
    return directory


@pytest.fixture(scope="module")
def deployed(lab, profiles_dir):
    # Its last test leaves the group restarting: nothing serves after it (`make test` runs it first on the second lab,
    # which then leaves serving; with the other modules, it is the last serving one, conftest.SERVING_MODULES).
    return playbook_ok(serving_lab(lab, count=2), "deploy.yml", *deploy_args(profiles_dir, "lab_patched"))


def test_every_serving_container_checked_and_applied_the_patches(lab, deployed):
    assert re.search(r"Smoke answer \([1-9][0-9]* tokens\): \S", deployed), deployed[-3000:]
    containers = sorted(set([(node, node_container()) for node in lab.nodes] + [(HEAD, VLLM)]))
    for node, container in containers:
        log = lab.host(node).check_output("docker logs %s 2>&1" % container)
        assert "dgxspark patches: lab_marker.py (python) verified and applied" in log, (node, container, log[-2000:])
        assert "dgxspark patches: sitecustomize/cudnn_off_sitecustomize.py (sitecustomize) verified" in log, (node, container)
        # the lab inventory's own site patch, checked the same way, before the profile's
        assert "dgxspark patches: sitecustomize/lab_cpu_engine_sitecustomize.py (sitecustomize) verified" in log
        # Once per start of this container (a container stopped and started again applies it again, idempotently).
        assert int(lab.host(node).check_output("docker exec %s cat /var/tmp/dgxspark-lab-patch" % container)) >= 1


def test_python_processes_of_the_containers_load_every_sitecustomize(lab, deployed):
    for node in lab.nodes:
        out = lab.host(node).check_output(
            "docker exec %s python3 -c 'import sys, sitecustomize; "
            "print(sitecustomize.__file__, sorted(type(f).__name__ for f in sys.meta_path if \"After\" in type(f).__name__))'"
            % node_container())
        # the collection's loader ran both: the seed 003 patch (torch) and the lab's (vLLM)
        assert out == "/opt/dgxspark/patches/site/sitecustomize.py ['_AfterTorchImport', '_AfterVllmImport']", (node, out)
        # The worker processes (the engine's) run it too. With Ray, its workers inherit it from the container. With mp,
        # vLLM's workers rename themselves (VLLM::Worker_TP0, over their environment's memory): the lab patch's own line
        # for the weight loader, which only a worker imports, shows the sitecustomize ran there.
        if BACKEND == "ray":
            environ = lab.host(node).check_output(
                "for p in $(pgrep -f '[d]efault_worker.py' | head -3); do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep ^PYTHONPATH=; done; true")
            assert environ and set(environ.splitlines()) == {"PYTHONPATH=/opt/dgxspark/patches/site"}, (node, environ)
        else:
            log = lab.host(node).check_output("docker logs %s 2>&1" % VLLM)
            assert "dgxspark LAB patch: vllm.model_executor.model_loader.weight_utils changed" in log, (node, log[-2000:])


def test_a_rerun_changes_and_restarts_nothing(lab, deployed, profiles_dir):
    before = node_state(lab)
    rc, out = run_playbook(lab, "deploy.yml", *deploy_args(profiles_dir, "lab_patched"))
    assert rc == 0, out[-4000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    assert node_state(lab) == before


def test_a_patch_for_another_vllm_is_refused_before_anything_changes(lab, deployed, profiles_dir):
    before = node_state(lab)
    rc, out = run_playbook(lab, "deploy.yml", *deploy_args(profiles_dir, "lab_patched_for_0_34"))
    assert rc != 0
    assert ("profile lab_patched_for_0_34: patch patches/lab_marker.py applies to vLLM >=0.34, but the image has vLLM "
            "0.32.0+cpu; refusing to start it") in out, out[-4000:]
    # Preflight refuses it first; the ray role refuses it too when its phase runs alone (--tags ray).
    assert "Preflight found 2 problems; the deploy stops before any host is changed" in out
    rc, out = run_playbook(lab, "deploy.yml", "--tags", "ray", *deploy_args(profiles_dir, "lab_patched_for_0_34"))
    assert rc != 0 and "No file or container was changed on any node" in out, out[-4000:]
    assert node_state(lab) == before


def test_a_patch_altered_on_a_node_stops_its_container_with_the_reason(lab, deployed, profiles_dir):
    worker = lab.host(WORKER)
    container = node_container()
    worker.check_output("echo '# altered' >> /etc/dgxspark/patches/lab_marker.py && docker restart %s" % container)
    deadline, log = time.time() + 60, ""
    while time.time() < deadline and "not starting" not in log:
        time.sleep(2)
        log = worker.check_output("docker logs --since 2m %s 2>&1" % container)
    assert "/opt/dgxspark/patches/lab_marker.py has sha256" in log and "the profile records" in log, log[-2000:]
    # The ray phase (which pauses the supervisor) puts the file back (its stamp watches the files) and starts the
    # container with it, and waits until the node is back in Ray. (vLLM, whose engine lost that rank, is restarted with
    # the group by the supervisor once the deploy resumes it: nothing waits for it here.) Under mp the rank is vLLM's
    # container: the vllm phase starts the group again.
    started = int(time.time())
    rc, out = run_playbook(lab, "deploy.yml", "--tags", "ray" if BACKEND == "ray" else "ray,vllm",
                           *deploy_args(profiles_dir, "lab_patched"))
    assert rc == 0, out[-4000:]
    assert BACKEND != "ray" or "Ray on spark-alpha: 2/2 nodes alive, 2 GPUs" in out, out[-4000:]
    log = worker.check_output("docker logs --since %d %s 2>&1" % (started, container))
    assert "dgxspark patches: lab_marker.py (python) verified and applied" in log, log[-2000:]
