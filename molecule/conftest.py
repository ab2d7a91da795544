"""Fixtures shared by the testinfra suites of every molecule scenario (molecule/<role>/tests/)."""

import os
import subprocess
import sys

import pytest


def converge_playbook():
    """The scenario's own converge.yml, else the shared one (molecule/shared/converge.yml)."""
    scenario_dir = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", "")
    project_dir = os.environ.get("MOLECULE_PROJECT_DIRECTORY", "")
    for path in (os.path.join(scenario_dir, "converge.yml"), os.path.join(project_dir, "molecule", "shared", "converge.yml")):
        if os.path.isfile(path):
            return path
    return None


@pytest.fixture(name="check_diff_run", scope="session")
def fixture_check_diff_run():
    """One `--check --diff` run of the converge playbook on every converged node (roles that need the whole
    cluster in the play get it), once per scenario; tests read each host's PLAY RECAP line from it."""
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    playbook = converge_playbook()
    if not inventory or not playbook:
        pytest.skip("not run by molecule (no MOLECULE_INVENTORY_FILE / converge playbook)")
    ansible_playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return subprocess.run([ansible_playbook, "-i", inventory, playbook, "--check", "--diff"],
                          capture_output=True, text=True, timeout=600, check=False)


def recap_line(proc, hostname):
    """The PLAY RECAP line of `hostname` in an ansible-playbook run, or None."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith(hostname + " ") and "changed=" in line]
    return lines[-1] if lines else None
