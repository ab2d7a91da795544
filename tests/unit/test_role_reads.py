# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No role reads another role's variables (issue 47): what roles agree on (containers' names, ports, the endpoint,
readiness deadlines) is in the plan, dgxspark_plan.serving and dgxspark_plan.api, which every role reads instead."""

from __future__ import annotations

import glob
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(os.listdir(os.path.join(ROOT, 'roles')))
# Facts one role's tasks register for another, not variables a user sets: what only a node knows of its serving
# environment (serving_env's result, its RDMA devices), whether a Ray container changed in this run (the engine's driver
# went with it), and the fabric probe the network phase's check may reuse.
REGISTERED_FOR_ANOTHER_ROLE = {
    ('fabric_check', 'cx7_netplan_fabric_probe'),
    ('ray_cluster', 'serving_env_from_node'),
    ('vllm_container', 'ray_cluster_changed'),
    ('vllm_container', 'serving_env_from_node'),
}
# Names that happen to begin with a role's name without being its variables (a template's own set, a settings key).
NOT_VARIABLES = {('monitoring', 'supervisor_report'), ('node_firewall', 'monitoring_nets')}


def _variables(role):
    """A role's variables: its argument specs' options and its defaults."""
    with open(os.path.join(ROOT, 'roles', role, 'meta', 'argument_specs.yml'), encoding='utf-8') as handle:
        specs = yaml.safe_load(handle)['argument_specs']
    names = set().union(*(set((entry.get('options') or {})) for entry in specs.values()))
    defaults = os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')
    if os.path.exists(defaults):
        with open(defaults, encoding='utf-8') as handle:
            names |= set(yaml.safe_load(handle) or {})
    return names - {'dgxspark_plan', 'dgxspark_fleet'}  # the plan's, given to every host by plan.yml


def _code(role):
    """The role's tasks, handlers, vars, defaults and templates, comments left out (meta documents other roles)."""
    lines = []
    for path in sorted(glob.glob(os.path.join(ROOT, 'roles', role, '**', '*'), recursive=True)):
        if os.path.isfile(path) and path.endswith(('.yml', '.j2')) and os.sep + 'meta' + os.sep not in path:
            with open(path, encoding='utf-8') as handle:
                lines.extend(re.sub(r'(^|\s)#.*$', '', line) for line in handle.read().splitlines())
    return '\n'.join(lines)


def _reads():
    """{(reading role, name)} of every other role's variable, or name with another role's prefix, a role's code has."""
    found = set()
    for role in ROLES:
        code = _code(role)
        for other in ROLES:
            if other == role:
                continue
            found |= {(role, name) for name in _variables(other) if re.search(r'\b%s\b' % re.escape(name), code)}
            found |= {(role, name) for name in re.findall(r'\b(%s_[a-z0-9_]+)' % other, code)}
    return found


def test_no_role_reads_another_roles_variables():
    reads = _reads() - NOT_VARIABLES
    assert sorted(reads - REGISTERED_FOR_ANOTHER_ROLE) == [], 'read it from the plan (dgxspark_plan.serving or .api)'
    # and the list above holds nothing that is no longer read
    assert sorted(REGISTERED_FOR_ANOTHER_ROLE - reads) == []


def test_the_scan_finds_a_read_where_there_is_one(tmp_path, monkeypatch):
    """The check itself: a role default that reads vllm_container_port, as supervisor's did, is found."""
    code = _code('supervisor') + '\nsupervisor_engine_port: "{{ vllm_container_port | default(8000) }}"\n'
    monkeypatch.setattr(sys.modules[__name__], '_code', lambda role: code if role == 'supervisor' else '')
    assert ('supervisor', 'vllm_container_port') in _reads()
