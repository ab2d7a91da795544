# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's meta/argument_specs.yml is in sync with its defaults/main.yml, and its variables carry the role's prefix."""

from __future__ import annotations

import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(name for name in os.listdir(os.path.join(REPO, "roles")) if os.path.isdir(os.path.join(REPO, "roles", name)))
# Given to every host by playbooks/plan.yml, the plan entry every playbook imports: a required input with no default.
PLAN_INPUTS = {"dgxspark_plan", "dgxspark_fleet"}  # dgxspark_fleet: with serving groups only


def load(role, *parts):
    path = os.path.join(REPO, "roles", role, *parts)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_there_are_roles():
    assert {"cx7_netplan", "fabric_check", "os_hardening"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_match_defaults(role):
    specs = load(role, "meta", "argument_specs.yml")
    assert specs, "%s has no meta/argument_specs.yml" % role
    defaults = load(role, "defaults", "main.yml") or {}
    options = {name: option for name, option in specs["argument_specs"]["main"]["options"].items() if name not in PLAN_INPUTS}
    assert set(options) == set(defaults), "only in specs: %s; only in defaults: %s" % (
        sorted(set(options) - set(defaults)), sorted(set(defaults) - set(options)))
    for name, option in options.items():
        assert option.get("description"), name
        if isinstance(defaults[name], str) and "{{" in defaults[name]:
            # Computed from cluster-wide variables: the spec may leave the default out (its description says it).
            assert option.get("default") in (None, defaults[name]), name
            continue
        assert option.get("default") == defaults[name], name


@pytest.mark.parametrize("role", ROLES)
def test_role_variables_are_prefixed(role):
    defaults = load(role, "defaults", "main.yml") or {}
    assert all(name.startswith(role + "_") for name in defaults), sorted(n for n in defaults if not n.startswith(role + "_"))


@pytest.mark.parametrize("role", ROLES)
def test_a_role_that_reads_the_plan_requires_it_and_never_plans_itself(role):
    """The plan is built once per run (playbooks/plan.yml): a role that reads it declares it required, none builds its own."""
    tasks_dir = os.path.join(REPO, "roles", role, "tasks")
    texts = [open(os.path.join(root, f), encoding="utf-8").read() for root, _d, files in os.walk(tasks_dir) for f in files]
    texts += [open(os.path.join(REPO, "roles", role, "vars", "main.yml"), encoding="utf-8").read()] if os.path.exists(
        os.path.join(REPO, "roles", role, "vars", "main.yml")) else []
    assert not any("dgxspark.cluster.cluster_plan:" in text for text in texts), "%s builds a plan of its own" % role
    option = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"].get("dgxspark_plan")
    reads = any("dgxspark_plan" in text for text in texts)
    assert bool(option) == reads, "%s reads dgxspark_plan: %s; declares it: %s" % (role, reads, bool(option))
    if option:
        assert option["required"] is True and "default" not in option
