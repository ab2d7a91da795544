"""Phases whose roles read nothing of the model (network, os, firewall) leave the model's inputs out of their digest:
the table of what is left out, the digest on real plan data, and a check over playbooks/vars/phases.yml, the roles of those phases and
the plugins they call that none of them reads a left-out variable or plan key."""
import os
import re

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.module_utils.phase_state import PhaseStateError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.phase_inputs import (
    MODEL_PLAN_KEYS, MODEL_VARIABLES, without_model_inputs)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.phase_inputs import inputs_digest as phase_inputs_digest

REPO = os.path.join(os.path.dirname(__file__), '..', '..')
# A plan of inventories/4node as the cluster_plan action returns it (trimmed to one key of each kind).
PLAN = {'head': 'spark-alpha', 'mtu': 9000, 'nccl_transport': 'rdma',
        'rails': [{'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24', 'address_offset': 10}],
        'nodes': [{'host': 'spark-alpha', 'rank': 0, 'rail_addresses': {'rail1': '192.168.100.10'}}],
        'model_profile': 'qwen3_5_397b_a17b_fp8', 'hf_repo': 'Qwen/Qwen3.5-397B-A17B-FP8', 'max_model_len': 131072,
        'memory': {'budget_gib': 103.445, 'fits': True}, 'vllm_options': {'block_size': 128}, 'patches': [],
        'tensor_parallel_size': 4, 'variables': {'dgxspark_model_profile': 'qwen3_5_397b_a17b_fp8'}}
VARS = {'dgxspark_rails': PLAN['rails'], 'dgxspark_mtu': 9000, 'dgxspark_model_profile': 'qwen3_5_397b_a17b_fp8',
        'dgxspark_hf_token': 'hf_x', 'os_hardening_swappiness': 10}


@pytest.mark.parametrize('change,same', [
    ({'plan': {'model_profile': 'qwen3_vl_235b_a22b_awq', 'hf_repo': 'QuantTrio/Qwen3-VL'}}, True),
    ({'plan': {'max_model_len': 32768, 'memory': {'fits': False}}}, True),
    ({'plan': {'vllm_options': {'block_size': 64}, 'patches': [{'file': 'p.py'}]}}, True),
    ({'vars': {'dgxspark_hf_token': 'hf_other'}, 'plan': {'variables': {'dgxspark_model_profile': 'other'}}}, True),
    ({'plan': {'mtu': 8000}}, False),                               # the rails' MTU: the network phase's own input
    ({'plan': {'nccl_transport': 'socket'}}, False),                # kept: not a model input
    ({'vars': {'dgxspark_mtu': 8000}}, False),
    ({'vars': {'os_hardening_swappiness': 1}}, False),              # a role's own variable
    ({'vars': {'dgxspark_api_allowed_cidrs': ['10.0.0.0/8']}}, False),  # a new variable the firewall reads
])
def test_only_the_model_s_inputs_are_left_out(change, same):
    changed = {'plan': dict(PLAN, **change.get('plan', {})), 'vars': dict(VARS, **change.get('vars', {}))}
    base = {'plan': PLAN, 'vars': VARS}
    assert (phase_inputs_digest(changed, ['roles/os_hardening'], model_free=True)
            == phase_inputs_digest(base, ['roles/os_hardening'], model_free=True)) is same
    # a phase that reads the model sees every change
    assert phase_inputs_digest(changed, ['roles/os_hardening']) != phase_inputs_digest(base, ['roles/os_hardening'])


def test_without_model_inputs_keeps_the_rest_and_the_input_intact():
    data = {'plan': dict(PLAN), 'vars': dict(VARS), 'other': 1}
    kept = without_model_inputs(data)
    assert sorted(kept['plan']) == ['head', 'mtu', 'nccl_transport', 'nodes', 'rails']
    assert sorted(kept['vars']) == ['dgxspark_mtu', 'dgxspark_rails', 'os_hardening_swappiness']
    assert kept['other'] == 1 and data == {'plan': PLAN, 'vars': VARS, 'other': 1}


@pytest.mark.parametrize('data', [['plan'], 'plan', None])
def test_a_model_free_digest_needs_plan_and_vars(data):
    with pytest.raises(PhaseStateError):
        without_model_inputs(data)
    with pytest.raises(PhaseStateError, match='model-free phase must be a mapping'):
        phase_inputs_digest(data, [], model_free=True)


def _definitions():
    with open(os.path.join(REPO, 'playbooks', 'vars', 'phases.yml'), encoding='utf-8') as handle:
        return yaml.safe_load(handle)['dgxspark_phase_definitions']


def _model_free_roles():
    return dict((name, d['roles']) for name, d in _definitions().items() if d.get('model_free'))


def _files(paths):
    for path in paths:
        for root, _dirs, names in os.walk(path):
            for name in names:
                if name.endswith(('.yml', '.yaml', '.j2', '.py', '.sh', '.json')):
                    yield os.path.join(root, name)


# The plan's builder computes every key from every variable; a role calls it only when run alone, without a plan, and
# what counts here is what the role reads of the plan it is given.
PLAN_BUILDER = 'cluster_plan'


def _plugins_called(role_dir):
    """The collection's plugin files a role calls (dgxspark.cluster.<name>), with the module_utils and plugin_utils they
    import, and what those import in turn."""
    found = set()
    for path in _files([role_dir]):
        with open(path, encoding='utf-8') as handle:
            found.update(re.findall(r'dgxspark\.cluster\.([a-z0-9_]+)', handle.read()))
    found.discard(PLAN_BUILDER)
    files = set()
    for name in found:
        for kind in ('modules', 'action', 'filter'):
            candidate = os.path.join(REPO, 'plugins', kind, name + '.py')
            if os.path.isfile(candidate):
                files.add(candidate)
        yml = os.path.join(REPO, 'plugins', 'filter', name + '.yml')
        if os.path.isfile(yml):   # a filter documented on its own is defined in one of the filter modules
            for candidate in _files([os.path.join(REPO, 'plugins', 'filter')]):
                if candidate.endswith('.py') and re.search(r"['\"]%s['\"]\s*:" % name, open(candidate, encoding='utf-8').read()):
                    files.add(candidate)
    pending = list(files)
    while pending:
        with open(pending.pop(), encoding='utf-8') as handle:
            for kind, util in re.findall(r'plugins\.(module_utils|plugin_utils)(?:\.|\s+import\s+)([a-z0-9_]+)', handle.read()):
                path = os.path.join(REPO, 'plugins', kind, util + '.py')
                if path not in files and os.path.isfile(path):
                    files.add(path)
                    pending.append(path)
    return sorted(f for f in files if os.path.isfile(f))


MODEL_FREE = _model_free_roles()


def test_the_model_free_phases_are_network_os_and_firewall():
    assert MODEL_FREE == {'network': ['cx7_netplan', 'fabric_check'], 'os': ['os_hardening'],
                          'firewall': ['node_firewall']}


@pytest.mark.parametrize('role', sorted(r for roles in MODEL_FREE.values() for r in roles))
def test_a_model_free_role_reads_no_model_input(role):
    role_dir = os.path.join(REPO, 'roles', role)
    plugins = _plugins_called(role_dir)
    variable = re.compile(r'\b(%s)\b' % '|'.join(MODEL_VARIABLES))
    # a plan key read as plan.key, plan['key'] or plan.get('key') (the roles keep the plan as _<role>_plan)
    plan_key = re.compile(r"plan\w*\s*(?:\.|\[\s*['\"]|\.get\(\s*['\"])(%s)\b" % '|'.join(MODEL_PLAN_KEYS))
    hits = []
    for path in list(_files([role_dir])) + plugins:
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
        hits += ['%s: %s' % (os.path.relpath(path, REPO), m) for m in variable.findall(text) + plan_key.findall(text)]
    assert hits == [], 'a model-free phase reads a model input: mark it so in playbooks/vars/phases.yml or narrow the lists'


def test_the_check_follows_a_role_into_its_plugins_and_their_utils():
    found = [os.path.relpath(p, REPO) for p in _plugins_called(os.path.join(REPO, 'roles', 'cx7_netplan'))]
    assert 'plugins/filter/cx7_netplan_config.py' in found and 'plugins/plugin_utils/netplan.py' in found, found
    assert 'plugins/action/cluster_plan.py' not in found


# Narrower than model-free: phases whose roles read the model's profile (patches, name, memory) but not which model
# directory serves (unread), and a phase that reads another role's variables takes them all (inputs_from). A role that
# starts reading one of them must make the check below fail.
def _phases():
    return _definitions()


def _role_variables():
    """Every role's variables (its argument_specs), by role; not the cluster's (dgxspark_*: the plan, the fleet's view),
    which every phase's digest takes (plugin_utils/phase_inputs.input_names; the plan whole)."""
    found = {}
    for role in sorted(os.listdir(os.path.join(REPO, 'roles'))):
        with open(os.path.join(REPO, 'roles', role, 'meta', 'argument_specs.yml'), encoding='utf-8') as handle:
            found[role] = set(name for name in yaml.safe_load(handle)['argument_specs']['main']['options']
                              if not name.startswith('dgxspark_'))
    return found


def _read_in(role_dir, names, plugins=True):
    """The names among `names` that a role's code (not its documentation: README, argument_specs, comment lines) or, with
    plugins, the plugins it calls mention (an action plugin can read any variable; a message may name one too)."""
    pattern = re.compile(r'\b(%s)\b' % '|'.join(sorted(names, key=len, reverse=True)))
    found = set()
    for path in list(_files([role_dir])) + (_plugins_called(role_dir) if plugins else []):
        if path.endswith(os.path.join('meta', 'argument_specs.yml')):
            continue
        with open(path, encoding='utf-8') as handle:
            code = '\n'.join(line for line in handle if not line.lstrip().startswith('#'))
        found.update(pattern.findall(code))
    return found


PHASES = _phases()


def test_the_phases_that_name_what_they_read_and_leave_out():
    unread = dict((name, sorted(v['unread'])) for name, v in PHASES.items() if 'unread' in v)
    assert unread == {'ray': ['dgxspark_model'], 'supervisor': ['dgxspark_model', 'dgxspark_serving_image'],
                      'monitoring': ['dgxspark_model', 'dgxspark_serving_image']}


@pytest.mark.parametrize('phase', sorted(PHASES))
def test_a_phase_takes_every_variable_of_another_role_its_roles_read(phase):
    settings = PHASES[phase]
    taken = set(settings.get('inputs_from', settings['roles']))
    others = set().union(*(names for role, names in _role_variables().items() if role not in taken))
    read = set()
    for role in settings['roles']:
        read |= _read_in(os.path.join(REPO, 'roles', role), others, plugins=False)
    # every phase takes what it needs of another role from the plan, or takes all that role's variables
    assert sorted(read) == [], 'playbooks/vars/phases.yml: take that role\'s variables in the phase\'s inputs_from'


@pytest.mark.parametrize('phase', sorted(n for n, v in PHASES.items() if v.get('unread')))
def test_a_phase_reads_none_of_the_variables_it_leaves_out(phase):
    settings = PHASES[phase]
    unread = set(settings['unread'])
    for role in settings['roles']:
        assert _read_in(os.path.join(REPO, 'roles', role), unread) == set(), (phase, role)


@pytest.mark.parametrize('change, same', [
    # How a value came to be (the playbook's preset or the inventory) is no input: the resolved plan is.
    ({'plan': {'presets': [{'name': 'dgxspark_tensor_parallel_size', 'by': 'deploy-397b.yml'}]}}, True),
    ({'plan': {'warnings': ['The API answers on the rails only']}}, True),
    ({'vars': {'dgxspark_model_profile': 'set in the inventory, planned the same'}}, True),
    ({'plan': {'tensor_parallel_size': 2}}, False),
    ({'vars': {'dgxspark_mtu': 8000}}, False),                      # not among this plan's resolved variables
    ({'vars': {'dgxspark_api_allowed_cidrs': ['10.0.0.0/8']}}, False),
])
def test_reports_and_raw_planned_variables_are_no_inputs(change, same):
    changed = {'plan': dict(PLAN, **change.get('plan', {})), 'vars': dict(VARS, **change.get('vars', {}))}
    assert (phase_inputs_digest(changed, ['roles/os_hardening'])
            == phase_inputs_digest({'plan': PLAN, 'vars': VARS}, ['roles/os_hardening'])) is same
