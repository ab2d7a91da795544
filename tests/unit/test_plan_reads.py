# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan is read as it is: a key the plan always has gets no default(...) fallback in a role or playbook (a fallback
hides a plan that changed shape, and answers for it with a guess: `executor_backend | default('ray')` under mp)."""

from __future__ import annotations

import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The plan fact, or a role's copy of it (_ray_cluster_plan), then keys or indexes, then a default filter.
PLAN_KEY_WITH_DEFAULT = re.compile(r'\b(?:dgxspark_plan|_[a-z0-9_]+_plan)(?:\.[A-Za-z_][A-Za-z0-9_]*|\[[^\]]+\])+\s*\|\s*(?:default|d)\s*\(')


def _sources():
    for top in ('roles', 'playbooks', 'molecule'):
        for dirpath, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith(('.yml', '.yaml', '.j2')):
                    yield os.path.join(dirpath, name)


@pytest.mark.parametrize('text, found', [
    ("{{ _ray_cluster_plan.executor_backend | default('ray') == 'ray' }}", True),
    ("{{ dgxspark_plan.patches | default([]) | dgxspark.cluster.patch_node_files('/etc') }}", True),
    ("{{ dgxspark_plan['mp_master'] | d(none) }}", True),
    ("{{ _node_firewall_plan.mp_master.port|default(0) }}", True),
    ("{{ _ray_cluster_plan.executor_backend == 'ray' }}", False),
    ("{{ dgxspark_plan | default({}) }}", False),  # the whole plan where none may exist (diagnose: a plan that failed)
    ("{{ _plan.nodes | selectattr('host', 'equalto', inventory_hostname) | first | default(none) }}", False),
    ("{{ hostvars[_vllm_container_plan.head]._x | default(false) }}", False),
])
def test_the_pattern(text, found):
    assert bool(PLAN_KEY_WITH_DEFAULT.search(text)) is found


def test_no_role_or_playbook_reads_a_plan_key_with_a_default():
    hits = []
    for path in _sources():
        with open(path, encoding='utf-8') as handle:
            for number, line in enumerate(handle, 1):
                if not line.lstrip().startswith('#') and PLAN_KEY_WITH_DEFAULT.search(line):
                    hits.append('%s:%d: %s' % (os.path.relpath(path, REPO), number, line.strip()))
    assert hits == [], 'a plan key read with a default (the plan always has it: read it as it is):\n' + '\n'.join(hits)


def test_every_playbook_that_reads_the_plan_imports_it():
    """stop.yml read dgxspark_plan.serving without planning: the plan must come from plan.yml (or a playbook that
    imports it) in every playbook that reads it, directly or through its task and vars files."""
    import glob  # pylint: disable=import-outside-toplevel
    import os  # pylint: disable=import-outside-toplevel
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    planning = ('import_playbook: plan.yml', 'import_playbook: deploy.yml', 'import_playbook: status.yml')
    missing = []
    for path in sorted(glob.glob(os.path.join(root, 'playbooks', '*.yml'))):
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
        reads = 'dgxspark_plan' in text.replace('dgxspark_plan_', '') or 'vars/release.yml' in text or 'tasks/' in text
        if os.path.basename(path) != 'plan.yml' and reads and not any(p in text for p in planning):
            missing.append(os.path.basename(path))
    assert missing == []


# The executor backend is asked only where behaviour differs, each time of the plan: which containers each node runs
# (cluster_plan.serving_kinds), vLLM's own options for it (vllm_args.executor), the inputs each backend refuses
# (role_inputs.backend_problems), and a rollback to a release of the other backend (release_rollback.yml, rollback.yml).
# Every other role, playbook and plugin reads what the plan derived: nodes[].runs, serving.release_containers,
# serving.node_container, serving.rendezvous, the containers it made.
BACKEND_QUESTION = re.compile(r"""executor_backend\b[^\n=!]{0,20}[!=]=|[!=]=\s*[\w.'"\[\]]*executor_backend\b"""
                              r"""|\bbackend\s*[!=]=\s*['"](?:mp|ray)['"]|\bmp\b['"\]]*\s*[!=]=|[!=]=\s*['"]mp['"]""")
BACKEND_ASKED = {
    'plugins/plugin_utils/cluster_plan.py': 1,
    'plugins/plugin_utils/vllm_args.py': 1,
    'plugins/plugin_utils/role_inputs.py': 1,
    'playbooks/tasks/release_rollback.yml': 1,
    'playbooks/rollback.yml': 1,
}


@pytest.mark.parametrize('text, found', [
    ("    if plan['executor_backend'] == 'ray':", True),
    ("_mp: \"{{ _vllm_container_plan.executor_backend == 'mp' }}\"", True),
    ("  when: _backend != dgxspark_plan.executor_backend", True),
    ("    ray = plan.get('executor_backend', 'ray') == 'ray'", True),
    ("    if backend == 'mp':", True),
    ("    mp = values['dgxspark_executor_backend'] == 'mp'", True),
    ("    if options['distributed_executor_backend'] == 'ray':", True),
    ("    ray = 'ray' in node['runs']", False),
    ("        'executor_backend': values['dgxspark_executor_backend'],", False),
    ("_ray_cluster_runs: \"{{ _ray_cluster_spec is not none }}\"", False),
])
def test_the_backend_question_pattern(text, found):
    assert bool(BACKEND_QUESTION.search(text)) is found


def test_the_backend_is_asked_only_where_behaviour_differs():
    asked = {}
    for top in ('roles', 'playbooks', 'plugins'):
        for dirpath, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if not name.endswith(('.py', '.yml', '.yaml', '.j2')) or dirpath.endswith(os.path.join('plugins', 'filter')) and name.endswith('.yml'):
                    continue  # a filter's .yml is its documentation
                path = os.path.join(dirpath, name)
                with open(path, encoding='utf-8') as handle:
                    lines = [line for line in handle if not line.lstrip().startswith('#') and BACKEND_QUESTION.search(line)]
                if lines:
                    asked[os.path.relpath(path, REPO)] = len(lines)
    assert asked == BACKEND_ASKED, ('read what the plan derived from the backend (nodes[].runs, serving.release_containers, '
                                    'serving.rendezvous) instead of asking it again')
    assert sum(asked.values()) <= 6
