"""Testinfra checks for the os_hardening scenario (lab nodes after converge + idempotence).

Expected values come from the inventory the scenario ran with (the lab's group_vars), read through
Ansible, so the test follows the lab's settings instead of repeating them.
"""

import json
import re

import pytest
from conftest import recap_line

# Commands go over SSH with the connection molecule's inventory gives each node (not through an Ansible run each:
# that took a minute and a half of CPU per scenario).
testinfra_hosts = ["ansible://all"]

SYSCTL_FILE_DEFAULT = "/etc/sysctl.d/90-dgxspark-os.conf"
LIMITS_FILE_DEFAULT = "/etc/security/limits.d/90-dgxspark-memlock.conf"


@pytest.fixture(name="hvars", scope="module")
def fixture_hvars(host):
    """The role's variables for this host (inventory value or the role default)."""
    variables = host.ansible.get_variables()
    defaults = {
        "os_hardening_swappiness": 1,
        "os_hardening_sysctl_file": SYSCTL_FILE_DEFAULT,
        "os_hardening_limits_file": LIMITS_FILE_DEFAULT,
        "os_hardening_memlock": "unlimited",
        "os_hardening_docker_memlock_ulimit": False,
        "os_hardening_docker_daemon_json": "/etc/docker/daemon.json",
        "os_hardening_sysctl_apply_runtime": True,
        "os_hardening_default_target": "multi-user.target",
    }
    result = {}
    for name, value in defaults.items():
        value = variables.get(name, value)
        if isinstance(value, str) and "{{" in value:
            # get_variables() gives the raw inventory text; let Ansible render the template.
            value = host.ansible("ansible.builtin.debug", "var=%s" % name, check=False)[name]
        if isinstance(defaults[name], bool) and isinstance(value, str):
            value = value.strip().lower() in ("true", "yes", "1", "on")
        result[name] = value
    return result


def test_default_target_is_multi_user(host, hvars):
    assert host.check_output("systemctl get-default") == hvars["os_hardening_default_target"]
    link = host.file("/etc/systemd/system/default.target")
    assert link.is_symlink
    assert link.linked_to.endswith("/" + hvars["os_hardening_default_target"])


@pytest.mark.parametrize("unit", ["lightdm.service", "gdm.service"])
def test_display_managers_stopped_and_disabled(host, unit):
    service = host.service(unit)
    assert not service.is_running
    assert not service.is_enabled
    # The alias gdm3 (resolved to gdm) and display-manager.service are gone with the disable.
    assert not host.file("/etc/systemd/system/display-manager.service").exists
    assert not host.file("/etc/systemd/system/gdm3.service").exists


def test_sysctl_drop_in(host, hvars):
    drop_in = host.file(hvars["os_hardening_sysctl_file"])
    assert drop_in.is_file
    assert drop_in.user == "root" and drop_in.group == "root"
    assert drop_in.mode == 0o644
    lines = [line.strip() for line in drop_in.content_string.splitlines() if line.strip() and not line.startswith("#")]
    assert lines == ["vm.swappiness = %d" % int(hvars["os_hardening_swappiness"])]


def test_sysctl_drop_in_is_what_systemd_applies_at_boot(host, hvars):
    """The drop-in is in systemd-sysctl's configuration and no later file overrides the value."""
    config = host.check_output("systemd-analyze cat-config sysctl.d")
    assert "# " + hvars["os_hardening_sysctl_file"] in config
    values = [line.split("=", 1)[1].strip() for line in config.splitlines()
              if line.strip().lstrip("-").startswith(("vm.swappiness", "vm/swappiness"))]
    assert values[-1] == str(int(hvars["os_hardening_swappiness"]))


def test_swappiness_running_value(host, hvars):
    if not hvars["os_hardening_sysctl_apply_runtime"]:
        pytest.skip("os_hardening_sysctl_apply_runtime is false here: /proc/sys is read-only")
    assert host.sysctl("vm.swappiness") == int(hvars["os_hardening_swappiness"])


def test_limits_drop_in(host, hvars):
    drop_in = host.file(hvars["os_hardening_limits_file"])
    assert drop_in.is_file
    assert drop_in.mode == 0o644
    assert drop_in.user == "root"
    entries = {tuple(line.split()) for line in drop_in.content_string.splitlines() if line.strip() and not line.startswith("#")}
    value = str(hvars["os_hardening_memlock"])
    for kind in ("soft", "hard"):
        assert ("root", kind, "memlock", value) in entries
    # Raised for root (the users that run RDMA work) only, not for every user.
    assert not any(entry[0] == "*" for entry in entries), entries
    # Never appended to limits.conf (seed 000 did, once per run).
    for line in host.file("/etc/security/limits.conf").content_string.splitlines():
        assert line.lstrip().startswith("#") or "memlock" not in line


def test_memlock_effective_in_new_login_session(host, hvars):
    """pam_limits reads limits.d for a new session: su - (PAM session) sees the limit, soft and hard."""
    expected = str(hvars["os_hardening_memlock"])
    assert host.check_output("su - root -c 'ulimit -S -l'") == expected
    assert host.check_output("su - root -c 'ulimit -H -l'") == expected


def test_daemon_json(host, hvars):
    daemon_json = host.file(hvars["os_hardening_docker_daemon_json"])
    assert daemon_json.is_file
    config = json.loads(daemon_json.content_string)
    # The lab image's keys survive whatever the role did.
    assert config.get("storage-driver") == "overlay2"
    assert config.get("log-driver") == "json-file"
    if hvars["os_hardening_docker_memlock_ulimit"]:
        value = -1 if str(hvars["os_hardening_memlock"]) == "unlimited" else int(hvars["os_hardening_memlock"]) * 1024
        assert config["default-ulimits"]["memlock"] == {"Name": "memlock", "Soft": value, "Hard": value}
        assert daemon_json.mode == 0o644
    else:
        assert "default-ulimits" not in config
    assert host.service("docker").is_running


def earlyoom_args(host):
    pid = host.check_output("systemctl show -p MainPID --value earlyoom.service")
    assert pid != "0", host.run("systemctl status earlyoom.service").stdout
    return host.check_output("cat /proc/%s/cmdline" % pid).split("\0")[1:-1]


def test_earlyoom_runs_with_the_role_s_thresholds_and_names(host):
    assert host.service("earlyoom.service").is_enabled
    args = earlyoom_args(host)
    assert args[:6] == ["-m", "4,2", "-s", "100,100", "-r", "3600"], args
    assert args[6:] == ["--prefer", "^(VLLM::.*|ray::.*|vllm|raylet|gcs_server)$",
                        "--avoid", "^(sshd|dockerd|containerd.*|systemd.*|earlyoom)$"], args


def test_earlyoom_picks_a_serving_process_and_never_sshd_or_docker(host):
    """earlyoom's own choice, as it would act with memory gone (a dry run whose threshold, 99 % of memory, is always
    crossed): a process named like vLLM's engine core, holding 64 MiB, before another process holding 256 MiB (the one
    the kernel would pick), dockerd, containerd, systemd and sshd."""
    names = earlyoom_args(host)[6:]
    process = ("import ctypes, time; ctypes.CDLL(None).prctl(15, b'%s', 0, 0, 0); "
               "ballast = b'x' * (%d << 20); time.sleep(30)")
    out = host.run("python3 -c \"%s\" & engine=$!; python3 -c \"%s\" & other=$!; sleep 2; "
                   "timeout 4 earlyoom --dryrun -m 99,99 -s 100,100 -r 0 %s 2>&1; kill $engine $other"
                   % (process % ("VLLM::EngineCore", 64), process % ("other-service", 256),
                      " ".join("'%s'" % word for word in names))).stdout
    victims = re.findall(r'sending SIG\w+ to process \d+ uid \d+ "([^"]+)"', out)
    assert victims and set(victims) == {"VLLM::EngineCor"}, out


def test_logind_keeps_the_ipc_of_users_whose_last_session_ends_in_its_running_configuration(host):
    """The drop-in, and the running logind's own value (D-Bus): the role restarted it when the value differed."""
    dropin = host.file("/etc/systemd/logind.conf.d/90-dgxspark.conf")
    assert dropin.mode == 0o644 and dropin.content_string.endswith("[Login]\nRemoveIPC=no\n")
    assert host.check_output("busctl get-property org.freedesktop.login1 /org/freedesktop/login1 "
                             "org.freedesktop.login1.Manager RemoveIPC") == "b false"


def test_check_diff_on_converged_node_changes_nothing(host, check_diff_run):
    """`--check --diff` of the converge playbook on the converged nodes reports changed=0."""
    assert check_diff_run.returncode == 0, check_diff_run.stdout + check_diff_run.stderr
    recap = recap_line(check_diff_run, host.backend.get_hostname())
    assert recap and "changed=0" in recap and "failed=0" in recap, check_diff_run.stdout
