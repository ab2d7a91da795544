"""os_hardening: bad inputs fail with a clear message before any task changes anything.

Runs playbooks/os.yml against a throw-away inventory whose only node is the controller itself
(connection local, check mode, no become): only the role's argument_spec and its validation
tasks (tag `always`) can run, and `--tags os_inputs_only` selects no other task. A valid input
passes the same gate, so a failing case fails because of its input.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(REPO, "roles", "os_hardening")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def run_os_playbook(tmp_path, extra_vars, tags="os_inputs_only"):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"head": {"hosts": {"inputnode": {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
    }}}}}}))
    cmd = [ANSIBLE_PLAYBOOK, "-i", str(inventory), os.path.join(REPO, "playbooks", "os.yml"),
           "--check", "--tags", tags, "-e", json.dumps(extra_vars)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_valid_inputs_pass_the_gate(tmp_path):
    proc = run_os_playbook(tmp_path, {"os_hardening_swappiness": 1, "os_hardening_memlock": 8192,
                                      "os_hardening_gpu_clocks_mhz": [0, 2200]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed=0" in proc.stdout


BAD_INPUTS = [
    ("swappiness-above-200", {"os_hardening_swappiness": 201}, "outside 0..200"),
    ("swappiness-negative", {"os_hardening_swappiness": -1}, "outside 0..200"),
    ("swappiness-not-integer", {"os_hardening_swappiness": "low"}, "os_hardening_swappiness"),
    ("swappiness-float", {"os_hardening_swappiness": 1.5}, "os_hardening_swappiness"),
    ("unknown-display-manager", {"os_hardening_display_managers": ["gdm3", "kdm"]},
     "os_hardening_display_managers"),
    ("memlock-word", {"os_hardening_memlock": "lots"}, "neither \"unlimited\" nor a positive integer"),
    ("memlock-zero", {"os_hardening_memlock": 0}, "neither \"unlimited\" nor a positive integer"),
    ("memlock-with-unit", {"os_hardening_memlock": "64M"}, "neither \"unlimited\" nor a positive integer"),
    ("target-without-suffix", {"os_hardening_default_target": "multi-user"}, "is not a systemd target"),
    ("sysctl-file-not-in-sysctl-d", {"os_hardening_sysctl_file": "/etc/sysctl.conf"}, "directly under /etc/sysctl.d/"),
    ("limits-conf-itself", {"os_hardening_limits_file": "/etc/security/limits.conf"}, "never edited"),
    ("limits-file-not-conf", {"os_hardening_limits_file": "/etc/security/limits.d/memlock"}, "never edited"),
    ("empty-memlock-domains", {"os_hardening_memlock_domains": []}, "os_hardening_memlock_domains"),
    ("memlock-domain-with-space", {"os_hardening_memlock_domains": ["* hard"]}, "limits.conf domains"),
    ("drop-caches-mode", {"os_hardening_drop_caches_mode": 4}, "os_hardening_drop_caches_mode"),
    ("gpu-clocks-reversed", {"os_hardening_gpu_clocks_mhz": [2200, 1800]}, "os_hardening_gpu_clocks_mhz is [2200, 1800]"),
    ("gpu-clocks-one-value", {"os_hardening_gpu_clocks_mhz": [2200]}, "give [MIN, MAX] in MHz"),
    ("gpu-clocks-not-numbers", {"os_hardening_gpu_clocks_mhz": ["fast", "faster"]}, "os_hardening_gpu_clocks_mhz"),
    ("apply-runtime-not-bool", {"os_hardening_sysctl_apply_runtime": "maybe"}, "os_hardening_sysctl_apply_runtime"),
]


@pytest.mark.parametrize(
    "extra_vars,expected",
    [(case[1], case[2]) for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_fails_before_any_change(tmp_path, extra_vars, expected):
    proc = run_os_playbook(tmp_path, extra_vars)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert expected in out, out
    assert "changed=0" in proc.stdout, out


def test_bad_input_stops_drop_caches_too(tmp_path):
    proc = run_os_playbook(tmp_path, {"os_hardening_drop_caches_mode": 7}, tags="drop_caches")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "os_hardening_drop_caches_mode" in out, out


def test_argument_specs_match_defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(ROLE, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        specs = yaml.safe_load(handle)["argument_specs"]
    options = specs["main"]["options"]
    assert set(options) == set(defaults)
    for name, option in options.items():
        assert option["default"] == defaults[name], name
    for name, option in specs["drop_caches"]["options"].items():
        assert option["default"] == defaults[name], name
        assert option == options[name] or option["type"] == options[name]["type"], name


def test_limits_conf_is_never_a_target():
    """Seed 000 appended to /etc/security/limits.conf on every run: the role must never touch it."""
    for root, _dirs, files in os.walk(ROLE):
        for name in files:
            with open(os.path.join(root, name), encoding="utf-8") as handle:
                text = handle.read()
            for line in text.splitlines():
                if "/etc/security/limits.conf" in line:
                    assert "never" in line or "not" in line, (name, line)
