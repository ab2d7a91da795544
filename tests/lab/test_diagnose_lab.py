"""playbooks/diagnose.yml on the 4-node lab, on vLLM's own engine: on a healthy cluster one 0600 tarball with every
node's versions, containers (their NCCL environment), logs, journals, kernel messages, rails, image and the status table;
on a broken one (a node's management network cut) the same bundle, the cut node a line in unreachable.txt. No secret
the lab keeps (API key, Ray token, the supervisor's SSH key) appears in any file of either bundle or in the run's
output, and the nodes are left unchanged. The time and size are printed (`DIAGNOSE ...`).

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab -s tests/lab/test_diagnose_lab.py
"""

import os
import re
import stat
import tarfile
import time

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.secrets_dir import secret_files
from ansible_lab import BACKEND, node_container, recap, run_playbook, serving_cluster

pytestmark = pytest.mark.lab

CUT = "spark-delta"


def lab_secrets(lab):
    """{name: content} of the secrets the lab's controller keeps (the public key is not one)."""
    found = dict((name, text.strip()) for name, text in secret_files(os.path.join(lab.state_dir, "secrets")).items())
    # Under mp no Ray token is made (one left by an earlier Ray deploy is checked all the same).
    assert {"vllm_api_key", "ray_token"} <= set(found) if BACKEND == "ray" else "vllm_api_key" in found, found.keys()
    return found


def diagnose(lab, where):
    started = time.time()
    rc, out = run_playbook(lab, "diagnose.yml", "-e", "diagnose_dir=%s" % where, timeout=600)
    took = time.time() - started
    assert rc == 0, out[-5000:]
    path = re.search(r"Diagnostics bundle: (\S+\.tar\.gz)", out).group(1)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with tarfile.open(path) as bundle:
        files = dict((member.name.split("/", 1)[1], bundle.extractfile(member).read().decode("utf-8", "replace"))
                     for member in bundle.getmembers() if member.isfile())
    print("\nDIAGNOSE %d nodes: %.0f s, bundle %.0f KiB (%d files)" % (len(lab.nodes), took, os.path.getsize(path) / 1024.0,
                                                                   len(files)))
    return out, files


def assert_no_secret(lab, out, files):
    for name, secret in lab_secrets(lab).items():
        assert secret and secret not in out, "%s is in the run's output" % name
        leaked = [path for path, text in files.items() if secret in text]
        assert not leaked, "%s is in %s" % (name, leaked)


@pytest.fixture(scope="module")
def deployed(lab):
    return serving_cluster(lab)


def test_a_healthy_cluster_gives_one_redacted_bundle_and_changes_nothing(deployed, tmp_path):
    out, files = diagnose(deployed, tmp_path)
    assert all(counts["changed"] == 0 for host, counts in recap(out).items() if host != "localhost"), recap(out)
    assert files["unreachable.txt"] == "" and files["status.txt"].rstrip().endswith("healthy")
    assert '"head": "spark-alpha"' in files["plan.json"]
    for node in deployed.nodes:
        assert files["%s/versions.txt" % node].startswith("os: Debian GNU/Linux 12"), files["%s/versions.txt" % node]
        assert "NVIDIA GB10" in files["%s/versions.txt" % node]
        assert "    NCCL_SOCKET_IFNAME=" in files["%s/containers.txt" % node]
        assert files["%s/logs/%s.log" % (node, node_container())].strip()
        assert '"devices"' in files["%s/cx7.json" % node]
        assert "vLLM: 0.32" in files["%s/image.txt" % node]
    # A variable that holds a secret keeps its name, never its value.
    assert not re.search(r"(TOKEN|API_KEY)=(?!<redacted|\$)\S", "".join(files.values())), "a secret variable's value"
    assert '"phase": "serving"' in files["spark-alpha/files/var_lib_dgxspark_supervisor_report.json"]
    assert files["spark-alpha/journal/dgxspark-supervisor.service.log"].strip()
    assert_no_secret(deployed, out, files)


def test_a_cut_node_is_a_line_in_the_bundle(deployed, tmp_path):
    deployed.labctl("mgmt", CUT, "cut")
    try:
        out, files = diagnose(deployed, tmp_path)
    finally:
        deployed.labctl("mgmt", CUT, "restore")
    assert files["unreachable.txt"].startswith("%s: " % CUT), files["unreachable.txt"]
    assert not any(path.startswith(CUT + "/") for path in files)
    assert "problems:" in files["status.txt"] and CUT in files["status.txt"]
    assert all("%s/versions.txt" % node in files for node in deployed.nodes if node != CUT)
    assert_no_secret(deployed, out, files)
