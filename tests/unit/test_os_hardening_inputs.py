"""os_hardening: bad inputs are refused by the plan, on the controller, before any node is contacted.

Runs playbooks/os.yml against a throw-away copy of inventories/2node whose nodes are the controller itself
(connection local, check mode, no become): the plan play, then only the role's argument check and its node checks
(tag `always`) can run, and `--tags os_inputs_only` selects no other task. A valid input passes the same gate, so a
failing case fails because of its input.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(REPO, "roles", "os_hardening")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
NODES = ("spark-2", "spark-3")
# This machine may be a container that cannot raise its hard memlock limit (8192 KiB), as a lab node.
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
         "os_hardening_memlock": 8192}


def local_inventory(tmp_path):
    """inventories/2node (it plans), its nodes reached as the controller itself."""
    target = tmp_path / "inventory"
    shutil.copytree(os.path.join(REPO, "inventories", "2node", "group_vars"), str(target / "group_vars"))
    (target / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "head": {"hosts": {NODES[0]: dict(LOCAL)}}, "workers": {"hosts": {NODES[1]: dict(LOCAL)}}}}}))
    return str(target)


def run_os_playbook(tmp_path, extra_vars, tags="os_inputs_only"):
    cmd = [ANSIBLE_PLAYBOOK, "-i", local_inventory(tmp_path), os.path.join(REPO, "playbooks", "os.yml"),
           "--check", "--tags", tags, "-e", json.dumps(extra_vars)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    proc.output = proc.stdout + proc.stderr
    return proc


def recap_hosts(stdout):
    """The hosts of the PLAY RECAP."""
    recap = stdout.split("PLAY RECAP", 1)[-1]
    return sorted(re.findall(r"^(\S+)\s+: ok=", recap, re.M))


def test_valid_inputs_pass_the_plan_and_the_node_checks(tmp_path):
    proc = run_os_playbook(tmp_path, {"os_hardening_swappiness": 1, "os_hardening_memlock": 8192,
                                      "os_hardening_gpu_clocks_mhz": [0, 2200], "os_hardening_earlyoom_mem_percent": 5})
    assert proc.returncode == 0, proc.output
    assert recap_hosts(proc.stdout) == ["localhost"] + list(NODES), proc.output
    assert "changed=0" in proc.stdout and "failed=0" in proc.stdout, proc.output


# Each bad value, and the start of the plan's problem line for it (the host, the value, the rule and the fix follow).
BAD_INPUTS = [
    ("swappiness-above-200", {"os_hardening_swappiness": 201},
     "os_hardening_swappiness is 201: use 0 to 200 (vm.swappiness takes 0 to 200; 1, the default"),
    ("swappiness-negative", {"os_hardening_swappiness": -1}, "os_hardening_swappiness is -1: use 0 to 200"),
    ("swappiness-not-integer", {"os_hardening_swappiness": "low"},
     "os_hardening_swappiness: must be an integer, got the string 'low'"),
    ("swappiness-float", {"os_hardening_swappiness": 1.5}, "os_hardening_swappiness: "),
    ("unknown-display-manager", {"os_hardening_display_managers": ["gdm3", "kdm"]},
     "os_hardening_display_managers: value of os_hardening_display_managers must be one or more of"),
    ("memlock-word", {"os_hardening_memlock": "lots"},
     "os_hardening_memlock is 'lots': neither \"unlimited\" nor a positive integer (KiB, the limits.conf unit)"),
    ("memlock-zero", {"os_hardening_memlock": 0}, "os_hardening_memlock is 0: neither \"unlimited\" nor a positive integer"),
    ("memlock-with-unit", {"os_hardening_memlock": "64M"}, "os_hardening_memlock is '64M': neither"),
    ("target-without-suffix", {"os_hardening_default_target": "multi-user"},
     "os_hardening_default_target is 'multi-user': not a systemd target unit name (NAME.target): use multi-user.target"),
    ("sysctl-file-not-in-sysctl-d", {"os_hardening_sysctl_file": "/etc/sysctl.conf"},
     "os_hardening_sysctl_file is '/etc/sysctl.conf': not a .conf file directly under /etc/sysctl.d/"),
    ("limits-conf-itself", {"os_hardening_limits_file": "/etc/security/limits.conf"},
     "os_hardening_limits_file is '/etc/security/limits.conf': not a .conf file directly under /etc/security/limits.d/"),
    ("limits-file-not-conf", {"os_hardening_limits_file": "/etc/security/limits.d/memlock"},
     "os_hardening_limits_file is '/etc/security/limits.d/memlock': not a .conf file"),
    ("empty-memlock-domains", {"os_hardening_memlock_domains": []},
     "os_hardening_memlock_domains is []: give a non-empty list of limits.conf domains"),
    ("memlock-domain-with-space", {"os_hardening_memlock_domains": ["* hard"]},
     "os_hardening_memlock_domains is ['* hard']: give a non-empty list of limits.conf domains"),
    ("earlyoom-percent-zero", {"os_hardening_earlyoom_mem_percent": 0},
     "os_hardening_earlyoom_mem_percent is 0: use 1 to 50"),
    ("earlyoom-percent-above-50", {"os_hardening_earlyoom_mem_percent": 51},
     "os_hardening_earlyoom_mem_percent is 51: use 1 to 50"),
    ("earlyoom-name-with-space", {"os_hardening_earlyoom_prefer": ["VLLM:: .*"]},
     "os_hardening_earlyoom_prefer is ['VLLM:: .*']: every name must be a non-empty regex without spaces"),
    ("earlyoom-name-anchored", {"os_hardening_earlyoom_avoid": ["^sshd$"]},
     "os_hardening_earlyoom_avoid is ['^sshd$']: every name must be"),
    ("drop-caches-mode", {"os_hardening_drop_caches_mode": 4}, "os_hardening_drop_caches_mode: value of os_hardening_drop_caches_mode must be one of"),
    ("gpu-clocks-reversed", {"os_hardening_gpu_clocks_mhz": [2200, 1800]},
     "os_hardening_gpu_clocks_mhz is [2200, 1800]: give [MIN, MAX] in MHz with MIN <= MAX"),
    ("gpu-clocks-one-value", {"os_hardening_gpu_clocks_mhz": [2200]}, "os_hardening_gpu_clocks_mhz is [2200]: give [MIN, MAX]"),
    ("gpu-clocks-not-numbers", {"os_hardening_gpu_clocks_mhz": ["fast", "faster"]},
     "os_hardening_gpu_clocks_mhz: every item must be an integer, got the list ['fast', 'faster']"),
    ("apply-runtime-not-bool", {"os_hardening_sysctl_apply_runtime": "maybe"},
     "os_hardening_sysctl_apply_runtime: "),
]


def assert_refused_by_the_plan_alone(proc, expected):
    """The plan play failed with the problem, naming where it was set; no play ran on a node."""
    assert proc.returncode != 0, proc.output
    assert "The cluster plan is invalid" in proc.output, proc.output
    assert "- %s" % expected in proc.output, proc.output
    line = next(line for line in proc.output.splitlines() if expected in line)
    assert line.rstrip().endswith("(set on every node)"), line
    assert recap_hosts(proc.stdout) == ["localhost"], proc.output
    assert "PLAY [Harden the OS" not in proc.stdout and "PLAY [Drop the page cache" not in proc.stdout, proc.output


@pytest.mark.parametrize("extra_vars,expected", [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_fails_at_the_plan_before_any_node(tmp_path, extra_vars, expected):
    assert_refused_by_the_plan_alone(run_os_playbook(tmp_path, extra_vars), expected)


def test_every_bad_input_is_named_at_once(tmp_path):
    last = {}  # one bad value a variable: the last row's
    for _name, extra_vars, expected in BAD_INPUTS:
        [(variable, value)] = extra_vars.items()
        last[variable] = (value, expected)
    proc = run_os_playbook(tmp_path, dict((variable, value) for variable, (value, _e) in last.items()))
    for _value, expected in last.values():
        assert_refused_by_the_plan_alone(proc, expected)


def test_bad_input_stops_drop_caches_too(tmp_path):
    proc = run_os_playbook(tmp_path, {"os_hardening_drop_caches_mode": 7}, tags="drop_caches")
    assert_refused_by_the_plan_alone(proc, "os_hardening_drop_caches_mode: value of os_hardening_drop_caches_mode must be one of: 1, 2, 3, got: 7")


def test_drop_caches_runs_after_the_plan(tmp_path):
    proc = run_os_playbook(tmp_path, {"os_hardening_drop_caches_supported": False}, tags="drop_caches")
    assert proc.returncode == 0, proc.output
    assert "PLAY [Drop the page cache" in proc.stdout and recap_hosts(proc.stdout) == ["localhost"] + list(NODES), proc.output


def test_the_role_refuses_to_run_without_the_plan(tmp_path):
    """--limit without localhost skips the plan: the role then stops at its argument check, before any change."""
    cmd_tail = ["--limit", NODES[0]]
    inventory = local_inventory(tmp_path)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, os.path.join(REPO, "playbooks", "os.yml"), "--check",
                           "--tags", "os_inputs_only"] + cmd_tail, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "dgxspark_plan" in output and "missing required arguments" in output, output
    assert "changed=0" in proc.stdout, output


def test_argument_specs_match_defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(ROLE, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        specs = yaml.safe_load(handle)["argument_specs"]
    options = dict((name, option) for name, option in specs["main"]["options"].items() if name != "dgxspark_plan")
    assert set(options) == set(defaults)
    for name, option in options.items():
        assert option["default"] == defaults[name], name
    for name, option in specs["drop_caches"]["options"].items():
        assert option["default"] == defaults[name], name
        assert option == options[name] or option["type"] == options[name]["type"], name


def test_the_role_restates_no_rule_of_the_plan():
    """Every input rule lives in one place (issue 47): the role asserts only what the node alone answers."""
    with open(os.path.join(ROLE, "tasks", "validate.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)[0]["block"]
    asserted = " ".join(" ".join(task["ansible.builtin.assert"]["that"]) for task in tasks if "ansible.builtin.assert" in task)
    assert re.findall(r"(?<!\w)os_hardening_\w+", asserted) == [], asserted


def test_limits_conf_is_never_a_target():
    """Seed 000 appended to /etc/security/limits.conf on every run: the role must never touch it."""
    for root, _dirs, files in os.walk(ROLE):
        for name in files:
            with open(os.path.join(root, name), encoding="utf-8") as handle:
                text = handle.read()
            for line in text.splitlines():
                if "/etc/security/limits.conf" in line:
                    assert "never" in line or "not" in line, (name, line)
