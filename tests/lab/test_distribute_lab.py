"""The distribute phase on the 4-node lab: the serving image and the model reach the nodes that lack them along the chain
of nodes over the rails, verified; a re-run does nothing; bad inputs fail before anything changed; a node that goes down in
the middle is named and a re-run resumes.

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab tests/lab/test_distribute_lab.py
"""

import json
import subprocess
import threading
import time

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import human_bytes
import labctl  # lab/, on sys.path through conftest.py
from ansible_lab import recap, run_playbook

pytestmark = pytest.mark.lab

PLAYBOOK = "distribute.yml"
MODEL = "/var/lib/dgxspark-lab/models/qwen3-moe-tiny"
BIG = "/var/lib/dgxspark-lab/models/distribute-test"


def extra_vars(**values):
    return ["-e", json.dumps(values)]


# The model's files, without the collection's own: the manifest, and the mark of a copy the distribution made.
MODEL_FILES = "find . -type f ! -name .dgxspark-manifest.json ! -name .dgxspark-copy"


def model_state(lab, path=MODEL):
    """{node: 'name size mtime sha256' lines of the model files}: what a copy, a repair or a refusal would change."""
    state = {}
    for node in lab.nodes:
        out = lab.host(node).run("cd {0} 2>/dev/null && {1} -printf '%P %s %T@\\n' | sort && {1} -print0 | sort -z | xargs -0r sha256sum"
                                 .format(path, MODEL_FILES))
        state[node] = out.stdout
    return state


def model_bytes(lab, node, path=MODEL):
    """The size of the model's files on a node (what the phase copies to a node that has none of them)."""
    sizes = lab.host(node).check_output("cd {0} && {1} -printf '%s\\n'".format(path, MODEL_FILES))
    return sum(int(size) for size in sizes.split())


def image_ids(lab):
    return dict((node, lab.host(node).run("docker images -q --no-trunc | sort").stdout.split()) for node in lab.nodes)


def content(lab, path=MODEL):
    """{node: sha256 of the sorted sha256sum list of the files} (the model's content on each node)."""
    return dict((node, lab.host(node).run(
        "cd {0} && {1} -print0 | sort -z | xargs -0r sha256sum | sha256sum".format(path, MODEL_FILES)).stdout)
        for node in lab.nodes)


KEY = "/etc/dgxspark/secrets/distribute_ed25519"


def distribution_key_left(lab, nodes=None):
    """{node: what of the node-to-node key is still there}: the key file, or an authorized_keys line with its comment."""
    left = {}
    for node in nodes or lab.nodes:
        out = lab.host(node).run("ls %s 2>/dev/null; grep -h dgxspark-distribute /root/.ssh/authorized_keys 2>/dev/null" % KEY)
        if out.stdout.strip():
            left[node] = out.stdout.strip()
    return left


def try_the_key(lab, sender, receiver, command):
    """Use the node-to-node key from ``sender`` to ask ``receiver`` (at its rail address) to run ``command``."""
    host_key = " ".join(lab.host(receiver).run("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2])
    known = lab.host(sender).run("cat /etc/dgxspark/distribute_known_hosts").stdout.splitlines()
    address = next(line.split()[0].split(",")[0] for line in known if line.endswith(host_key))
    return lab.host(sender).run("ssh -i %s -o UserKnownHostsFile=/etc/dgxspark/distribute_known_hosts -o BatchMode=yes "
                                "-o StrictHostKeyChecking=yes root@%s %s" % (KEY, address, command))


@pytest.fixture(scope="module")
def rails(lab):
    """A 4-node lab with the serving image and model everywhere and the rails configured (the network phase)."""
    if len(lab.nodes) != 4:
        lab.resize(4)
    lab.labctl("serving")
    rc, out = run_playbook(lab, "deploy-397b.yml", "--tags", "network")
    assert rc == 0, out[-4000:]
    rc, out = run_playbook(lab, PLAYBOOK)  # the head's manifest, written once
    assert rc == 0, out[-4000:]
    return lab


def test_nodes_that_lack_the_image_or_model_receive_them_verified_and_a_rerun_does_nothing(rails):
    lab = rails
    lab.host("spark-gamma").run("rm -rf %s" % MODEL)
    shard = "%s/model-00002-of-00004.safetensors" % MODEL
    # Same size, other content, newer mtime (a corrupt copy): hashed, found wrong, removed and copied again.
    lab.host("spark-beta").run("printf XXXX | dd of=%s bs=1 seek=100 conv=notrunc status=none && touch %s" % (shard, shard))
    # (a serving container left by another module would keep its image)
    lab.host("spark-delta").run("docker rm -f dgxspark-ray dgxspark-vllm; docker rmi -f $(docker images -q) >/dev/null")
    # Without room for the image twice (spooled, then loaded into Docker on the same filesystem) nothing starts.
    before = model_state(lab), image_ids(lab)
    rc, out = run_playbook(lab, PLAYBOOK, *extra_vars(distribute_reserve_bytes=10 ** 16, distribute_model=False))
    assert rc != 0
    assert "spark-delta: not enough disk for the serving image: " in out, out[-3000:]
    # (the lab's nodes keep Docker's store on a filesystem of its own, so each place is named with its own shortfall)
    assert " spooled at /var/lib/dgxspark/distribute + 10000.0 TB kept free" in out, out[-3000:]
    assert " loaded into Docker at /var/lib/docker + 10000.0 TB kept free" in out, out[-3000:]
    assert (model_state(lab), image_ids(lab)) == before and distribution_key_left(lab) == {}
    rc, out = run_playbook(lab, PLAYBOOK)
    assert rc == 0, out[-5000:]
    assert len(set(content(lab).values())) == 1, content(lab)
    # The serving image's ID (a node may keep an older image that one of its stopped containers still names).
    serving = dict((node, lab.host(node).run("docker image inspect -f '{{.Id}}' %s" % lab.state()["serving_image"]).stdout.strip())
                   for node in ("spark-alpha", "spark-delta"))
    assert serving["spark-delta"] == serving["spark-alpha"] and serving["spark-delta"], serving
    assert "Start the model streams on the head" in out and "Start the image chain on the head" in out
    assert distribution_key_left(lab) == {}, "the phase ended; the key and its authorization must be gone"

    state = model_state(lab), image_ids(lab)
    started = time.time()
    rc, out = run_playbook(lab, PLAYBOOK)
    assert rc == 0, out[-4000:]
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap(out).values()), recap(out)
    assert (model_state(lab), image_ids(lab)) == state
    print("no-op re-run: %.1f s" % (time.time() - started))


def test_a_missing_source_directory_is_refused_before_anything_changes(rails):
    lab = rails
    before = model_state(lab), image_ids(lab)
    rc, out = run_playbook(lab, PLAYBOOK, *extra_vars(distribute_model_path="/var/lib/dgxspark-lab/models/no-such-model"))
    assert rc != 0
    assert "the model directory /var/lib/dgxspark-lab/models/no-such-model does not exist" in out, out[-3000:]
    assert (model_state(lab), image_ids(lab)) == before


def test_a_node_without_room_is_named_with_what_it_needs_and_has_before_any_copy(rails):
    lab = rails
    lab.host("spark-gamma").run("rm -rf %s" % MODEL)
    before = model_state(lab), image_ids(lab)
    try:
        rc, out = run_playbook(lab, PLAYBOOK, *extra_vars(distribute_reserve_bytes=10 ** 16))
        assert rc != 0
        size = human_bytes(model_bytes(lab, "spark-alpha"))
        assert "spark-gamma: not enough disk for the model at %s: %s to copy + 10000.0 TB kept free" % (MODEL, size) in out, \
            out[-3000:]
        assert " free; free " in out
        assert (model_state(lab), image_ids(lab)) == before
    finally:
        rc, out = run_playbook(lab, PLAYBOOK)
        assert rc == 0, out[-3000:]


def test_a_node_that_goes_down_mid_copy_is_named_and_a_rerun_resumes(rails):
    lab = rails
    # 240 MB of random data (incompressible, not sparse) in 16 files, behind a 100 Mbit/s limit per port: about 10 s per hop.
    lab.host("spark-alpha").run("mkdir -p %s && cd %s && for i in $(seq -w 1 16); do head -c 15M /dev/urandom > shard-$i.bin; done"
                                % (BIG, BIG))
    lab.labctl("up", "--nodes", "4", "--rate", "100mbit")
    opts = extra_vars(distribute_model_path=BIG, distribute_image=False, distribute_stall_timeout=20,
                      distribute_progress_interval=5)
    stopped = threading.Event()
    misuse = {}

    def stop_gamma_once_copying(line):
        if "Wait for the model on the head" in line and not stopped.is_set():
            stopped.set()
            # This lab's gamma (a second lab, DGXSPARK_LAB_INSTANCE, names its containers apart).
            gamma = labctl.container_name("spark-gamma")
            threading.Timer(4, lambda: subprocess.run(["docker", "stop", "-t", "1", gamma], check=False)).start()
            # While the copies run, the key is on the head; it runs the relay's receiving operations and nothing else.
            misuse["beta"] = try_the_key(lab, "spark-alpha", "spark-beta", "'cat /etc/shadow'")

    try:
        rc, out = run_playbook(lab, PLAYBOOK, *opts, on_line=stop_gamma_once_copying)
        assert rc != 0 and stopped.is_set()
        assert "spark-gamma" in out.split("Wait for the model on the head", 1)[1], out[-4000:]
        assert "UNREACHABLE" in out or "the stream from 192.168.10" in out, out[-4000:]
        refused = misuse["beta"]
        assert refused.rc == 2 and "refused: only the relay /usr/local/lib/dgxspark/distribute_relay.py runs with this key" \
            in refused.stderr and "root:" not in refused.stdout, (refused.rc, refused.stdout, refused.stderr)
        reachable = [node for node in lab.nodes if node != "spark-gamma"]
        assert distribution_key_left(lab, reachable) == {}, "the reachable nodes lose the key even after a failed copy"
        lab.labctl("up", "--nodes", "4", "--rate", "100mbit")
        rc, out = run_playbook(lab, PLAYBOOK, *opts)
        assert rc == 0, out[-4000:]
        assert len(set(content(lab, BIG).values())) == 1, content(lab, BIG)
        assert distribution_key_left(lab) == {}
    finally:
        lab.labctl("up", "--nodes", "4", "--rate", "none")
        for node in lab.nodes:
            lab.host(node).run("rm -rf %s" % BIG)


HUB = "/var/lib/dgxspark-lab/download-test"
MIRROR = "/var/lib/dgxspark-lab/hub-mirror"
REPO = "Qwen/Qwen3.5-397B-A17B-FP8"  # the lab profile's repository; the "Hub" is the stand-in hf's local mirror
TOKEN = "hf_lab_download_test_token_0123456789"


def test_a_gated_download_on_the_head_is_refused_without_the_token_then_downloaded_once_and_distributed(rails, tmp_path):
    lab = rails
    head = lab.host("spark-alpha")
    head.run("rm -rf {m} && mkdir -p {m}/Qwen--Qwen3.5-397B-A17B-FP8 && cd {m}/Qwen--Qwen3.5-397B-A17B-FP8 && echo '{{}}' > config.json"
             " && head -c 3M /dev/urandom > model-00001-of-00002.safetensors && head -c 2M /dev/urandom > model-00002-of-00002.safetensors"
             " && printf {t} > .gated".format(m=MIRROR, t=TOKEN))
    for node in lab.nodes:
        lab.host(node).run("rm -rf %s" % HUB)
    opts = extra_vars(dgxspark_model=REPO, dgxspark_model_dir=HUB, dgxspark_model_download=True, distribute_image=False,
                      distribute_download_env={"HF_ENDPOINT": "file://%s" % MIRROR},
                      distribute_download_volumes=["%s:%s:ro" % (MIRROR, MIRROR)])
    try:
        rc, out = run_playbook(lab, PLAYBOOK, *opts)
        assert rc != 0
        assert "GatedRepoError: 401" in out, out[-3000:]
        assert all(lab.host(node).run("ls %s/hub/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots 2>/dev/null" % HUB).stdout == ""
                   for node in lab.nodes)

        vault = tmp_path / "token.json"
        vault.write_text(json.dumps({"dgxspark_hf_token": TOKEN}))
        rc, out = run_playbook(lab, PLAYBOOK, *opts, "-e", "@%s" % vault)
        assert rc == 0, out[-4000:]
        assert TOKEN not in out
        assert "Download the profile's repository" in out
        snapshot = "%s/hub/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/*/model-00002-of-00002.safetensors" % HUB
        sums = dict((node, lab.host(node).run("sha256sum %s | cut -d' ' -f1" % snapshot).stdout) for node in lab.nodes)
        assert len(set(sums.values())) == 1 and list(sums.values())[0], sums
        assert head.run("test -e /etc/dgxspark/secrets/distribute_hf_token").rc != 0  # read by the download only

        rc, out = run_playbook(lab, PLAYBOOK, *opts, "-e", "@%s" % vault)
        assert rc == 0, out[-4000:]
        assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)  # the manifest is there: no download
    finally:
        for node in lab.nodes:
            lab.host(node).run("rm -rf %s" % HUB)
        head.run("rm -rf %s /etc/dgxspark/secrets/distribute_hf_token" % MIRROR)
