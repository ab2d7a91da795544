"""os_hardening against the virtual Spark lab (`python3 lab/labctl.py up --nodes 2`).

Runs playbooks/os.yml on one lab node (spark-beta) with the lab's values for the role's variables
(LAB_VARS, the same as inventories/lab/group_vars/all.yml) and inspects the node with `docker exec`.
Covers what the molecule scenario cannot with the lab's settings: Docker's daemon.json merge (switched
on here), bad inputs leaving the node untouched, the graphical-session warning, drop_caches honesty.
"""

import json
import os
import subprocess
import sys

import labctl  # tests/lab/conftest.py puts lab/ on the path
import pytest
import yaml

pytestmark = pytest.mark.lab

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# This lab instance's (DGXSPARK_LAB_INSTANCE: make test runs this module on its second lab).
INVENTORY = os.path.join(labctl.STATE_DIR, "inventory")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
NODE = os.environ.get("DGXSPARK_LAB_TEST_NODE", "spark-beta")
CONTAINER = labctl.container_name(NODE)

# The lab's differences from a real Spark for this role (real-Spark defaults in the role).
LAB_VARS = {
    "os_hardening_sysctl_apply_runtime": False,   # /proc/sys is read-only in a lab node
    "os_hardening_memlock": 8192,                  # the node's hard memlock limit (KiB); it cannot raise it
    "os_hardening_docker_memlock_ulimit": False,   # Docker inside the node cannot apply memlock -1
    "os_hardening_drop_caches_supported": False,   # /proc/sys/vm/drop_caches is read-only
}
# The plan runs first and checks the role's inputs; it refuses the lab inventory's model (Qwen3.5-397B FP8, 4 nodes) on a
# 2-node lab, which then plans molecule's 2-node shape (seed 003's), as molecule's scenarios do.
TWO_NODE_SHAPE = os.path.join(REPO, "molecule", "shared", "group_vars", "all", "20-two-node-cluster.yml")
SYSCTL_FILE = "/etc/sysctl.d/90-dgxspark-os.conf"
LIMITS_FILE = "/etc/security/limits.d/90-dgxspark-memlock.conf"
DAEMON_JSON = "/etc/docker/daemon.json"


def node_sh(script, check=True):
    proc = subprocess.run(["docker", "exec", CONTAINER, "sh", "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError("%s: rc=%d\n%s%s" % (script, proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout.strip()


def cluster_shape():
    """The variables that make the lab's node count plan: none on 4 nodes, molecule's 2-node shape on fewer."""
    if (labctl.load_state() or {}).get("nodes", 4) >= 4:
        return {}
    with open(TWO_NODE_SHAPE, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def play(*args, extra=None, tags=None):
    variables = dict(cluster_shape(), **LAB_VARS)
    variables.update(extra or {})
    # localhost too: the plan runs there (it checks the role's inputs; the role does not run without it).
    cmd = [ANSIBLE_PLAYBOOK, "-i", INVENTORY, os.path.join(REPO, "playbooks", "os.yml"), "--limit", NODE + ",localhost",
           "-e", json.dumps(variables)] + list(args)
    if tags:
        cmd += ["--tags", tags]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def changed(proc, planned=True):
    """The node's changed count; 0 where the plan refused the inputs (planned=False) and no play reached the node."""
    for line in proc.stdout.splitlines():
        if line.startswith(NODE) and "changed=" in line:
            return int(line.split("changed=")[1].split()[0])
    if not planned and "The cluster plan is invalid" in proc.output:
        return 0
    raise AssertionError("no recap for %s:\n%s" % (NODE, proc.output))


def snapshot():
    """What the role may change on the node, as text."""
    return node_sh("for f in %s %s %s; do echo \"== $f\"; cat \"$f\" 2>/dev/null; done; "
                   "readlink /etc/systemd/system/default.target; systemctl get-default" % (SYSCTL_FILE, LIMITS_FILE, DAEMON_JSON),
                   check=False)


@pytest.fixture(scope="module", autouse=True)
def lab_node():
    if not os.path.isfile(os.path.join(INVENTORY, "hosts.yml")):
        pytest.skip("the lab is not up (python3 lab/labctl.py up --nodes 2)")
    probe = subprocess.run(["docker", "exec", CONTAINER, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("lab node %s is not running" % NODE)


@pytest.fixture(name="daemon_json_restored")
def fixture_daemon_json_restored():
    original = node_sh("cat %s" % DAEMON_JSON)
    yield original
    node_sh("cat > %s <<'EOF'\n%s\nEOF\nsystemctl reset-failed docker; systemctl restart docker" % (DAEMON_JSON, original))


def test_bad_inputs_leave_the_node_untouched():
    before = snapshot()
    for extra, message, planned in (
        # The plan refuses these on the controller: no play reaches the node.
        ({"os_hardening_swappiness": 300}, "os_hardening_swappiness is 300: use 0 to 200", False),
        ({"os_hardening_swappiness": "often"}, "os_hardening_swappiness: must be an integer, got the string 'often'", False),
        ({"os_hardening_display_managers": ["kdm"]}, "Got no match for: kdm", False),
        # Above the node's hard limit: pam_limits would refuse every login (SSH included); only the node knows its
        # limit, and the role refuses it before any change.
        ({"os_hardening_memlock": "unlimited"}, "cannot be granted on %s" % NODE, True),
    ):
        proc = play(extra=extra)
        assert proc.returncode != 0, proc.output
        assert message in proc.output, proc.output
        assert changed(proc, planned) == 0, proc.output
        assert planned or "PLAY [Harden the OS" not in proc.stdout, proc.output
    assert snapshot() == before
    assert node_sh("su - root -c true; echo ok") == "ok"


def test_converge_idempotent_and_check_diff_clean():
    first = play()
    assert first.returncode == 0, first.output
    second = play()
    assert second.returncode == 0, second.output
    assert changed(second) == 0, second.output
    check = play("--check", "--diff")
    assert check.returncode == 0, check.output
    assert changed(check) == 0, check.output
    assert node_sh("systemctl get-default") == "multi-user.target"
    assert node_sh("stat -c %%a %s %s" % (SYSCTL_FILE, LIMITS_FILE)).split() == ["644", "644"]
    assert "vm.swappiness = 1" in node_sh("cat %s" % SYSCTL_FILE)
    # A new PAM session (su -) reads limits.d; the lab's value is the node's hard limit.
    assert node_sh("su - root -c 'ulimit -S -l; ulimit -H -l'").split() == ["8192", "8192"]
    # swappiness is reported, not applied (read-only /proc/sys): the role says so.
    assert "swap " in second.output and "GiB total" in second.output


def test_display_managers_stopped_disabled_and_default_target():
    node_sh("printf '[Unit]\\nDescription=stand-in lightdm (test)\\n[Service]\\nExecStart=/bin/sleep infinity\\n"
            "[Install]\\nWantedBy=graphical.target\\nAlias=display-manager.service\\n' > /etc/systemd/system/lightdm.service"
            " && systemctl daemon-reload && systemctl enable --now lightdm.service && systemctl set-default graphical.target")
    try:
        check = play("--check", "--diff", tags="os_headless")
        assert check.returncode == 0 and changed(check) >= 2, check.output
        assert node_sh("systemctl is-active lightdm", check=False) == "active"
        proc = play(tags="os_headless")
        assert proc.returncode == 0, proc.output
        assert changed(proc) >= 2, proc.output
        assert node_sh("systemctl is-active lightdm", check=False) == "inactive"
        assert node_sh("systemctl is-enabled lightdm", check=False) == "disabled"
        assert node_sh("systemctl get-default") == "multi-user.target"
        again = play(tags="os_headless")
        assert changed(again) == 0, again.output
    finally:
        node_sh("systemctl disable --now lightdm.service; rm -f /etc/systemd/system/lightdm.service; "
                "systemctl daemon-reload; systemctl set-default multi-user.target", check=False)


def test_graphical_session_warning_reports_rss():
    node_sh("cp /bin/sleep /usr/local/bin/Xorg && systemd-run --unit=fake-xorg /usr/local/bin/Xorg 600")
    try:
        proc = play(tags="os_headless")
        assert proc.returncode == 0, proc.output
        assert "WARNING: a graphical session still runs on %s" % NODE in proc.output, proc.output
        assert "Xorg (pid" in proc.output and "MiB" in proc.output, proc.output
    finally:
        node_sh("systemctl stop fake-xorg; rm -f /usr/local/bin/Xorg", check=False)
    quiet = play(tags="os_headless")
    assert "WARNING: a graphical session" not in quiet.output


TINY_IMAGE = "dgxspark-os-hardening-test:tiny"
# A one-binary image (dash and its libraries) imported inside the node: no registry needed.
TINY_IMAGE_SCRIPT = (
    "set -e; d=$(mktemp -d); mkdir -p $d/bin; cp /bin/dash $d/bin/sh; "
    "for l in $(ldd /bin/dash | grep -o '/[^ ]*'); do mkdir -p $d$(dirname $l); cp -L $l $d$l; done; "
    "tar -C $d -c . | docker import - %s >/dev/null; rm -rf $d" % TINY_IMAGE)


def test_docker_daemon_json_merged_keeping_other_keys(daemon_json_restored):
    """Merge with the Docker step on; a container then starts with the memlock limit by default.

    4096 KiB (below the node's 8192 hard limit, which Docker inside the node can apply; -1 it cannot)
    makes the effect visible: a container gets 4096 only through daemon.json's default-ulimits.
    """
    config = json.loads(daemon_json_restored)
    config["labels"] = ["keep=me"]
    config["default-ulimits"] = {"nofile": {"Name": "nofile", "Soft": 1024, "Hard": 1024}}
    node_sh("cat > %s <<'EOF'\n%s\nEOF\nsystemctl reset-failed docker; systemctl restart docker" % (DAEMON_JSON, json.dumps(config)))
    node_sh(TINY_IMAGE_SCRIPT)
    try:
        assert node_sh("docker run --rm --network none %s /bin/sh -c 'ulimit -l'" % TINY_IMAGE) == "8192"
        extra = {"os_hardening_docker_memlock_ulimit": True, "os_hardening_memlock": 4096}
        proc = play(extra=extra, tags="os_docker")
        assert proc.returncode == 0, proc.output
        assert changed(proc) == 2, proc.output  # the file and the Docker restart (handler)
        assert "RUNNING HANDLER [dgxspark.cluster.os_hardening : Restart Docker (os_hardening)]" in proc.output
        merged = json.loads(node_sh("cat %s" % DAEMON_JSON))
        assert merged["labels"] == ["keep=me"]
        assert merged["storage-driver"] == config["storage-driver"]
        assert merged["log-opts"] == config["log-opts"]
        assert merged["default-ulimits"] == {
            "nofile": {"Name": "nofile", "Soft": 1024, "Hard": 1024},
            "memlock": {"Name": "memlock", "Soft": 4096 * 1024, "Hard": 4096 * 1024},
        }
        assert node_sh("stat -c %%a %s" % DAEMON_JSON) == "644"
        assert node_sh("systemctl is-active docker") == "active"
        assert node_sh("docker run --rm --network none %s /bin/sh -c 'ulimit -S -l; ulimit -H -l'" % TINY_IMAGE).split() == ["4096", "4096"]
        again = play(extra=extra, tags="os_docker")
        assert again.returncode == 0 and changed(again) == 0, again.output
        check = play("--check", "--diff", extra=extra, tags="os_docker")
        assert check.returncode == 0 and changed(check) == 0, check.output
    finally:
        node_sh("docker rmi -f %s" % TINY_IMAGE, check=False)


def test_docker_daemon_json_not_json_is_refused(daemon_json_restored):
    del daemon_json_restored
    node_sh("printf '{\"storage-driver\": \"overlay2\",' > %s" % DAEMON_JSON)
    proc = play(extra={"os_hardening_docker_memlock_ulimit": True}, tags="os_docker")
    assert proc.returncode != 0, proc.output
    assert "is not a valid JSON object" in proc.output, proc.output
    assert node_sh("cat %s" % DAEMON_JSON) == '{"storage-driver": "overlay2",'


def test_docker_step_off_leaves_daemon_json_alone(daemon_json_restored):
    proc = play(tags="os_docker")
    assert proc.returncode == 0 and changed(proc) == 0, proc.output
    assert node_sh("cat %s" % DAEMON_JSON) == daemon_json_restored


def test_drop_caches_unsupported_says_so_and_changes_nothing():
    proc = play(tags="drop_caches")
    assert proc.returncode == 0, proc.output
    assert "drop_caches skipped on %s" % NODE in proc.output, proc.output
    assert changed(proc) == 0


def test_drop_caches_is_not_faked_where_it_cannot_work():
    """With the lab's read-only /proc/sys, claiming support makes the step fail, not pretend."""
    proc = play(extra={"os_hardening_drop_caches_supported": True}, tags="drop_caches")
    assert proc.returncode != 0, proc.output
    assert "vm.drop_caches" in proc.output


PROBE_USER = "dgxspark-ipc-probe"
PROBE_SEM = "/dev/shm/sem.dgxspark-ipc-probe"


def semaphore_after_the_last_session():
    """'kept' or 'removed': a regular user's POSIX semaphore (a /dev/shm/sem.* file) once the user's only session (a
    `runuser -l` PAM session, which pam_systemd registers with logind) has ended and logind has let the user go."""
    node_sh("id %s >/dev/null 2>&1 || useradd -m %s; rm -f %s" % (PROBE_USER, PROBE_USER, PROBE_SEM))
    node_sh("runuser -l %s -c 'touch %s'" % (PROBE_USER, PROBE_SEM))
    # logind lets a user go UserStopDelaySec (10 s) after its last session; RemoveIPC acts then.
    node_sh("for i in $(seq 60); do loginctl show-user %s >/dev/null 2>&1 || exit 0; sleep 0.5; done; exit 1" % PROBE_USER)
    return node_sh("test -e %s && echo kept || echo removed" % PROBE_SEM)


def test_logind_keeps_a_regular_user_s_semaphores_after_its_last_session_only_with_the_drop_in():
    try:
        off = play(extra={"os_hardening_logind_keep_ipc": False}, tags="os_logind")
        assert off.returncode == 0, off.output
        # systemd's default: what hangs an engine started over SSH (eugr #352); the probe sees it.
        assert semaphore_after_the_last_session() == "removed"
        on = play(tags="os_logind")
        # One task: the drop-in written and logind restarted (its running value differed).
        assert on.returncode == 0 and changed(on) == 1, on.output
        assert node_sh("busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager "
                       "RemoveIPC") == "b false"
        assert node_sh("cat /etc/systemd/logind.conf.d/90-dgxspark.conf").endswith("[Login]\nRemoveIPC=no")
        again = play(tags="os_logind")
        assert again.returncode == 0 and changed(again) == 0, again.output
        assert semaphore_after_the_last_session() == "kept"
    finally:
        node_sh("rm -f %s; userdel -r %s" % (PROBE_SEM, PROBE_USER), check=False)


def sm_clock():
    return node_sh("nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits")


def test_gpu_clocks_locked_by_a_unit_restarted_when_changed_and_given_back():
    unit = "/etc/systemd/system/dgxspark-gpu-clocks.service"
    try:
        locked = play(extra={"os_hardening_gpu_clocks_mhz": [1800, 2200]}, tags="os_gpu_clocks")
        assert locked.returncode == 0 and changed(locked) == 1, locked.output
        # The stand-in holds its idle 850 MHz inside the locked range, as the GPU does.
        assert node_sh("systemctl is-active dgxspark-gpu-clocks.service; systemctl is-enabled dgxspark-gpu-clocks.service"
                       ).split() == ["active", "enabled"]
        assert sm_clock() == "1800"
        again = play(extra={"os_hardening_gpu_clocks_mhz": [1800, 2200]}, tags="os_gpu_clocks")
        assert again.returncode == 0 and changed(again) == 0, again.output
        moved = play(extra={"os_hardening_gpu_clocks_mhz": [1900, 2000]}, tags="os_gpu_clocks")
        # The unit rewritten and restarted (it ran with the old range) in the same task.
        assert moved.returncode == 0 and changed(moved) == 1, moved.output
        assert sm_clock() == "1900"
        bad = play(extra={"os_hardening_gpu_clocks_mhz": [2200, 1800]}, tags="os_gpu_clocks")
        assert bad.returncode != 0 and changed(bad, planned=False) == 0, bad.output
        assert "os_hardening_gpu_clocks_mhz is [2200, 1800]: give [MIN, MAX] in MHz" in " ".join(bad.output.split())
        assert sm_clock() == "1900"
    finally:
        off = play(tags="os_gpu_clocks")
    assert off.returncode == 0, off.output
    assert node_sh("test -e %s && echo present || echo absent" % unit) == "absent"
    assert sm_clock() == "850"
    quiet = play(tags="os_gpu_clocks")
    assert quiet.returncode == 0 and changed(quiet) == 0, quiet.output
