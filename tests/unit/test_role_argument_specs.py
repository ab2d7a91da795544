# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's meta/argument_specs.yml is in sync with its defaults/main.yml, and its variables carry the role's prefix."""

from __future__ import annotations

import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(name for name in os.listdir(os.path.join(REPO, "roles")) if os.path.isdir(os.path.join(REPO, "roles", name)))


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
    options = specs["argument_specs"]["main"]["options"]
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
