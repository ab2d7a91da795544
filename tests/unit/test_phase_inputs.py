"""Which variables are a deployment phase's inputs and their digest (plugin_utils/phase_inputs.py), over the real phase
definitions (playbooks/vars/phases.yml) and variable names the lab inventory defines."""
import os

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.module_utils.phase_state import PhaseStateError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.phase_inputs import (
    definition_problems, input_names, phase_checks, phases_from)

REPO = os.path.join(os.path.dirname(__file__), '..', '..')
with open(os.path.join(REPO, 'playbooks', 'vars', 'phases.yml'), encoding='utf-8') as _handle:
    DEFINITIONS = yaml.safe_load(_handle)['dgxspark_phase_definitions']
# Names a play of deploy.yml sees: the inventory's, the play's own bookkeeping, facts roles set, other roles' variables.
NAMES = ['dgxspark_rails', 'dgxspark_mtu', 'dgxspark_model', 'dgxspark_serving_image', 'dgxspark_plan', 'dgxspark_phase',
         'dgxspark_phase_definitions', 'dgxspark_phase_run_anyway', 'dgxspark_release_keep', 'dgxspark_plan_presets',
         'dgxspark_status', 'os_hardening_swappiness', 'ray_cluster_num_gpus', 'ray_cluster_changed',
         'vllm_container_port', 'vllm_container_ready', 'serving_env_from_node', 'serving_env_ucx_tls',
         'cx7_netplan_fabric_probe', 'node_firewall_file', 'supervisor_interval_s', '_dgxspark_phase_states',
         'monitoring_prometheus_port', 'inventory_hostname', 'ansible_host']


@pytest.mark.parametrize('phase, expected', [
    ('network', ['dgxspark_model', 'dgxspark_mtu', 'dgxspark_rails', 'dgxspark_serving_image']),
    ('os', ['dgxspark_model', 'dgxspark_mtu', 'dgxspark_rails', 'dgxspark_serving_image', 'os_hardening_swappiness']),
    ('firewall', ['dgxspark_model', 'dgxspark_mtu', 'dgxspark_rails', 'dgxspark_serving_image', 'node_firewall_file']),
    ('ray', ['dgxspark_mtu', 'dgxspark_rails', 'dgxspark_serving_image', 'ray_cluster_num_gpus', 'serving_env_ucx_tls']),
    ('vllm', ['dgxspark_model', 'dgxspark_mtu', 'dgxspark_rails', 'dgxspark_serving_image', 'serving_env_ucx_tls',
              'vllm_container_port']),
    ('supervisor', ['dgxspark_mtu', 'dgxspark_rails', 'supervisor_interval_s']),
    ('monitoring', ['dgxspark_mtu', 'dgxspark_rails', 'monitoring_prometheus_port']),
])
def test_a_phase_takes_the_cluster_s_and_its_roles_variables_not_run_facts_or_bookkeeping(phase, expected):
    assert input_names(NAMES, DEFINITIONS[phase]) == expected


def test_the_phases_are_defined_in_deploy_order_and_well_formed():
    assert list(DEFINITIONS) == ['network', 'os', 'firewall', 'ray', 'vllm', 'supervisor', 'monitoring']
    assert [p for name, d in DEFINITIONS.items() for p in definition_problems(name, d)] == []
    with open(os.path.join(REPO, 'playbooks', 'deploy.yml'), encoding='utf-8') as handle:
        played = [phase for play in yaml.safe_load(handle) for phase in phases_played(play)]
    assert played == list(DEFINITIONS)


def phases_played(item):
    """The phases a play (its vars) or its tasks (an include's vars, within blocks) run, in order."""
    own = (item.get('vars') or {}).get('dgxspark_phase')
    found = [own] if own else []
    for key in ('tasks', 'block', 'rescue', 'always'):
        for task in item.get(key) or []:
            found.extend(phases_played(task))
    return found


@pytest.mark.parametrize('definition, message', [
    (None, 'phase x has no definition'),
    ({'roles': [], 'watch': {}}, 'roles must list the roles it runs'),
    ({'roles': ['os_hardening'], 'reads': ['a']}, 'unknown key reads'),
])
def test_a_bad_definition_is_named(definition, message):
    with pytest.raises(PhaseStateError, match=message):
        phase_checks(['x'], {'x': definition}, NAMES, lambda name: None)


def test_each_phase_s_digest_follows_its_own_inputs_only():
    values = dict((name, 1) for name in NAMES)
    values['dgxspark_plan'] = {'head': 'spark-alpha', 'max_model_len': 32768}

    def digests(changes):
        merged = dict(values, **changes)
        checks = phase_checks(list(DEFINITIONS), DEFINITIONS, list(merged), merged.get)
        return dict((c['phase'], c['inputs_digest']) for c in checks)

    base = digests({})
    assert [c['watch'] for c in phase_checks(['os'], DEFINITIONS, NAMES, values.get)] == [DEFINITIONS['os']['watch']]
    changed = digests({'os_hardening_swappiness': 2})
    assert [p for p in base if base[p] != changed[p]] == ['os']
    changed = digests({'vllm_container_port': 8001})
    assert [p for p in base if base[p] != changed[p]] == ['vllm']
    # the model is no input of the model-free phases, nor of those that leave it unread
    changed = digests({'dgxspark_model': 'other'})
    assert [p for p in base if base[p] != changed[p]] == ['vllm']
    # the phase running, a fact a role sets, a release's bookkeeping: no input of any phase
    assert digests({'dgxspark_phase': 'os', 'ray_cluster_changed': True, 'dgxspark_release_keep': 9}) == base
    changed = digests({'dgxspark_plan': dict(values['dgxspark_plan'], max_model_len=8192)})
    # a model key of the plan: every phase but the model-free ones
    assert [p for p in base if base[p] != changed[p]] == ['ray', 'vllm', 'supervisor', 'monitoring']


def test_a_phase_s_check_reads_it_and_the_later_phases():
    assert phases_from('ray', DEFINITIONS) == ['ray', 'vllm', 'supervisor', 'monitoring']
    assert phases_from('network', DEFINITIONS) == list(DEFINITIONS)
    with pytest.raises(PhaseStateError, match='phase rays has no definition'):
        phases_from('rays', DEFINITIONS)


def serving_play():
    with open(os.path.join(REPO, 'playbooks', 'deploy.yml'), encoding='utf-8') as handle:
        plays = yaml.safe_load(handle)
    return next(p for p in plays if p.get('name', '').startswith('Serve each serving group in turn'))


@pytest.mark.parametrize('task_name, tags', [
    ('Take the group out of the fleet\'s router while its ray or vllm phase changes it', ['ray', 'vllm']),
    ('Run the ray phase unless it converged before', ['ray']),
    ('Run the vllm phase unless it converged before', ['vllm']),
    ('Record the serving release that proved itself on every node of the group', ['ray', 'vllm', 'release']),
    ('Run the supervisor phase unless it converged before', ['supervisor', 'ray', 'vllm']),
    ('Put the group back into the fleet\'s router (its release proved itself; a group out since a failed run too)', ['ray', 'vllm']),
])
def test_each_step_of_the_roll_keeps_its_phase_tags_on_the_include_and_on_what_it_includes(task_name, tags):
    """A tag on an include selects the include alone: its tasks need the same tags through apply, or --tags vllm would
    run the include and skip everything in it."""
    block = serving_play()['tasks'][0]['block']
    task = next(t for t in block if t['name'] == task_name)
    include = task.get('ansible.builtin.include_tasks') or task.get('ansible.builtin.include_role')
    assert task['tags'] == tags and include['apply']['tags'] == tags


def test_the_rolls_rescue_runs_whatever_the_tags_and_fails_the_play():
    """A rescue task that the run's tags leave out is skipped, and a block whose rescue was all skipped counts as
    rescued: --tags vllm would hide a failed release. Every rescue task is tagged always; the last one fails."""
    play = serving_play()
    assert play['serial'] == '{{ _dgxspark_serving_batches }}' and play['any_errors_fatal'] is True
    rescue = play['tasks'][0]['rescue']
    assert all('always' in task['tags'] for task in rescue)
    assert 'ansible.builtin.fail' in rescue[-1] and 'when' not in rescue[-1]
    back = next(t for t in rescue if 'ansible.builtin.include_role' in t)
    assert back['ansible.builtin.include_role']['apply']['tags'] == ['always']
