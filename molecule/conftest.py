"""Fixtures shared by the testinfra suites of every molecule scenario (molecule/<role>/tests/).

The serving tests run in two scenarios, `serving` (Ray) and `serving_mp` (vLLM's own multi-node backend): each check
takes the backend from the plan (`plan`, `backend`), and a check of one backend only says so (`ray_only`, `mp_only`:
skipped in the other scenario, which has its own check of the same thing)."""

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


RAY = "dgxspark-ray"
VLLM = "dgxspark-vllm"


@pytest.fixture(name="plan", scope="module")
def fixture_plan(host):
    """The cluster plan as the roles read it (once per host and module: an Ansible run each)."""
    return host.ansible("dgxspark.cluster.cluster_plan", "", check=False)["plan"]


@pytest.fixture(name="backend", scope="module")
def fixture_backend(plan):
    return plan["executor_backend"]


@pytest.fixture(name="ray_only")
def fixture_ray_only(backend):
    if backend != "ray":
        pytest.skip("a check of the Ray backend (serving scenario)")


@pytest.fixture(name="mp_only")
def fixture_mp_only(backend):
    if backend != "mp":
        pytest.skip("a check of vLLM's own multi-node backend (serving_mp scenario)")


def node_container(backend):
    """The serving container that carries a node's environment: Ray's with Ray, the node's vLLM rank with mp."""
    return RAY if backend == "ray" else VLLM


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
