# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests of the cluster plan (plugin_utils/cluster_plan.py) and the inventory schema."""

from __future__ import annotations

import copy
import os
import re

import pytest

from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import load_profiles
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import cluster_plan as cp
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import inventory_schema as schema
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.profile_schema import PROFILE_FIELDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILES_DIR = os.path.join(ROOT, 'profiles', 'models')


PROFILES = load_profiles([PROFILES_DIR])[0]  # the plan action's own loader (it records each profile's directory)
SEED000_HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']
SEED000_VARS = {
    'dgxspark_model_profile': 'qwen3_5_397b_a17b_fp8',
    'dgxspark_tensor_parallel_size': 4,
    'dgxspark_gpu_memory_utilization': 0.85,
}


def cluster(hosts=None, **cluster_vars):
    """groups and hostvars for hosts (first = head) sharing the same cluster vars."""
    hosts = list(SEED000_HOSTS if hosts is None else hosts)
    values = dict(SEED000_VARS)
    values.update(cluster_vars)
    values = dict((k, v) for k, v in values.items() if v is not None)
    groups = {'head': hosts[:1], 'workers': hosts[1:]}
    hostvars = dict((h, copy.deepcopy(values)) for h in hosts)
    return groups, hostvars


def plan_problems(groups, hostvars, profiles=None, presets=None):
    with pytest.raises(cp.ClusterPlanError) as excinfo:
        cp.build_plan(groups, hostvars, PROFILES if profiles is None else profiles, presets=presets, presets_by='deploy-x.yml')
    assert str(excinfo.value) == '\n'.join(excinfo.value.problems)
    assert isinstance(excinfo.value, ValueError)
    return excinfo.value.problems


def seed000_plan():
    groups, hostvars = cluster()
    return cp.build_plan(groups, hostvars, PROFILES)


# ---------------------------------------------------------------- seed 000 plan figures

@pytest.mark.parametrize('rank, host, role, rail1, rail2, runs', [
    (0, 'spark-alpha', 'head', '192.168.100.10', '192.168.101.10', ['ray', 'vllm']),
    (1, 'spark-beta', 'worker', '192.168.100.11', '192.168.101.11', ['ray']),
    (2, 'spark-gamma', 'worker', '192.168.100.12', '192.168.101.12', ['ray']),
    (3, 'spark-delta', 'worker', '192.168.100.13', '192.168.101.13', ['ray']),
])
def test_seed000_nodes(rank, host, role, rail1, rail2, runs):
    node = seed000_plan()['nodes'][rank]
    assert node == {'host': host, 'rank': rank, 'role': role, 'rail_addresses': {'rail1': rail1, 'rail2': rail2}, 'runs': runs}


@pytest.mark.parametrize('backend, head, worker, mp_master', [
    # Ray's container on every node, vLLM's engine on the head; no rendezvous of vLLM's own.
    ('ray', ['ray', 'vllm'], ['ray'], None),
    # vLLM's own multi-node backend: a vLLM rank on every node, meeting rank 0 at the head's rail-1 address.
    ('mp', ['vllm'], ['vllm'], {'address': '192.168.100.10', 'port': 29501}),
])
def test_the_backend_decides_which_containers_each_node_runs(backend, head, worker, mp_master):
    groups, hostvars = cluster(dgxspark_executor_backend=backend)
    plan = cp.build_plan(groups, hostvars, PROFILES)
    assert [node['runs'] for node in plan['nodes']] == [head, worker, worker, worker]
    assert plan['mp_master'] == mp_master


def test_seed000_summary():
    plan = seed000_plan()
    profile = PROFILES['qwen3_5_397b_a17b_fp8']
    assert (plan['world_size'], plan['tensor_parallel_size'], plan['pipeline_parallel_size'], plan['gpus']) == (4, 4, 1, 4)
    assert plan['head'] == 'spark-alpha'
    mem = plan['memory']
    assert mem['weights_per_node_gb'] == pytest.approx(profile['weight_size_gb'] / 4.0, abs=1e-3)
    assert mem['weights_per_node_gib'] == pytest.approx(profile['weight_size_gb'] * 1e9 / 4 / 2 ** 30, abs=1e-3)
    assert mem['budget_gib'] == pytest.approx(0.85 * 121.7, abs=1e-3)
    assert mem['kv_room_gib'] == pytest.approx(mem['budget_gib'] - mem['weights_per_node_gib'] - 6.0, abs=1e-2)
    # 2 (K,V) x max(1, 2 kv heads / TP 4) x 256 head_dim x 15 full-attention layers x 2 bytes (auto = bf16)
    assert plan['kv_cache']['bytes_per_token_per_node'] == 2 * 1 * 256 * 15 * 2
    assert plan['kv_cache']['tokens'] == pytest.approx(mem['kv_room_gib'] * 2 ** 30 / 15360, abs=100)
    assert plan['kv_cache']['tokens'] > plan['max_model_len'] == 131072


def test_seed000_roofline_matches_field_notes():
    plan = seed000_plan()
    profile = PROFILES['qwen3_5_397b_a17b_fp8']
    expected = 273.0 / (profile['active_params_b'] * profile['weight_size_gb'] / profile['total_params_b'] / 4)
    assert plan['decode']['roofline_tok_s'] == pytest.approx(expected, abs=0.1)
    assert plan['decode']['roofline_tok_s'] == pytest.approx(273.0 / (17.0 / 4), rel=0.03)  # field notes: ~64 tok/s


def test_pipeline_parallel_does_not_raise_roofline():
    groups, hostvars = cluster(['a', 'b', 'c'], dgxspark_model_profile='qwen3_5_397b_a17b_int4_autoround',
                               dgxspark_tensor_parallel_size=1, dgxspark_pipeline_parallel_size=3)
    plan = cp.build_plan(groups, hostvars, PROFILES)
    profile = PROFILES['qwen3_5_397b_a17b_int4_autoround']
    assert plan['decode']['roofline_tok_s'] == pytest.approx(273.0 / (17 * 226.0 / 397), abs=0.1)
    assert plan['kv_cache']['kv_layers_per_pp_stage'] == 5
    assert plan['kv_cache']['kv_heads_per_gpu'] == 2
    assert plan['memory']['weights_per_node_gb'] == pytest.approx(profile['weight_size_gb'] / 3, abs=1e-3)


def test_render_plan_table_lines():
    lines = cp.render_plan_table(seed000_plan())
    text = '\n'.join(lines)
    assert all(isinstance(line, str) for line in lines)
    assert lines[0].startswith('Cluster plan: qwen3_5_397b_a17b_fp8')
    assert '0     spark-alpha  head    192.168.100.10' in text
    assert '3     spark-delta  worker  192.168.100.13' in text
    for label in ('TP 4 x PP 1', 'Weights per node:', 'GiB', 'Runtime overhead', 'Budget per node', 'KV cache room', 'tokens', 'tok/s'):
        assert label in text


def test_tp_defaults_to_node_count_and_profile_defaults():
    groups, hostvars = cluster(dgxspark_tensor_parallel_size=None, dgxspark_gpu_memory_utilization=None)
    plan = cp.build_plan(groups, hostvars, PROFILES)
    assert plan['tensor_parallel_size'] == 4
    assert plan['gpu_memory_utilization'] == 0.85
    assert plan['max_model_len'] == PROFILES['qwen3_5_397b_a17b_fp8']['default_max_model_len']
    assert plan['kv_cache_dtype'] == 'auto'
    assert plan['memory']['runtime_overhead_gib'] == 6.0


def test_per_host_address_override():
    groups, hostvars = cluster()
    hostvars['spark-gamma']['dgxspark_rail_addresses'] = {'rail1': '192.168.100.50'}
    plan = cp.build_plan(groups, hostvars, PROFILES)
    assert plan['nodes'][2]['rail_addresses'] == {'rail1': '192.168.100.50', 'rail2': '192.168.101.12'}


INT4 = 'qwen3_5_397b_a17b_int4_autoround'
# deploy_397b_int4.yml's presets
SHAPE_4X1 = {'dgxspark_model_profile': INT4, 'dgxspark_tensor_parallel_size': 4, 'dgxspark_pipeline_parallel_size': 1,
             'dgxspark_gpu_memory_utilization': 0.78}


def four_nodes(**values):
    """groups and hostvars of four nodes whose inventory sets exactly ``values``."""
    hosts = ['a', 'b', 'c', 'd']
    return {'head': hosts[:1], 'workers': hosts[1:]}, dict((h, dict(values)) for h in hosts)


@pytest.mark.parametrize('inventory, expected_shape, applied, kept', [
    # The inventory sets no shape: the playbook's presets give it, and the table names them.
    ({}, (4, 1, 0.78), sorted(SHAPE_4X1), []),
    # Equal values need no word.
    (dict(SHAPE_4X1), (4, 1, 0.78), [], []),
    # The user's utilization (-e dgxspark_gpu_memory_utilization=0.7 planned 0.78 before) beats the preset, reported.
    ({'dgxspark_gpu_memory_utilization': 0.7}, (4, 1, 0.7),
     ['dgxspark_model_profile', 'dgxspark_pipeline_parallel_size', 'dgxspark_tensor_parallel_size'],
     [{'name': 'dgxspark_gpu_memory_utilization', 'yours': 0.7, 'preset': 0.78}]),
    # The user's own shape, 2 x 2 over the preset 4 x 1.
    ({'dgxspark_tensor_parallel_size': 2, 'dgxspark_pipeline_parallel_size': 2}, (2, 2, 0.78),
     ['dgxspark_gpu_memory_utilization', 'dgxspark_model_profile'],
     [{'name': 'dgxspark_tensor_parallel_size', 'yours': 2, 'preset': 4},
      {'name': 'dgxspark_pipeline_parallel_size', 'yours': 2, 'preset': 1}]),
], ids=['presets-fill-the-gaps', 'equal-values', 'yours-beats-a-preset', 'your-shape-beats-the-presets'])
def test_a_playbooks_presets_fill_what_the_inventory_leaves_and_never_replace_a_users_value(inventory, expected_shape, applied, kept):
    groups, hostvars = four_nodes(**inventory)
    plan = cp.build_plan(groups, hostvars, PROFILES, presets=SHAPE_4X1, presets_by='deploy-x.yml')
    assert (plan['tensor_parallel_size'], plan['pipeline_parallel_size'], plan['gpu_memory_utilization']) == expected_shape
    assert sorted(plan['presets']['applied']) == applied
    assert sorted(plan['presets']['kept'], key=str) == sorted(kept, key=str)
    table = '\n'.join(cp.render_plan_table(plan))
    assert ('Preset by deploy-x.yml (the inventory does not set them): ' in table) == bool(applied)
    for item in kept:
        assert '%s=%s (preset %s)' % (item['name'], item['yours'], item['preset']) in table
    assert ('Yours over the presets of deploy-x.yml (inventory or -e): ' in table) == bool(kept)


def test_another_model_profile_than_the_playbook_deploys_is_refused_with_both_fixes():
    groups, hostvars = four_nodes(dgxspark_model_profile='qwen3_5_397b_a17b_fp8')
    problems = plan_problems(groups, hostvars, presets=SHAPE_4X1)
    assert ('deploy-x.yml deploys the model profile %s, but the inventory (or -e) sets dgxspark_model_profile to '
            'qwen3_5_397b_a17b_fp8: run playbooks/deploy.yml to serve qwen3_5_397b_a17b_fp8, or remove '
            'dgxspark_model_profile to serve %s.' % (INT4, INT4)) in problems, problems


def test_the_users_values_kept_over_presets_are_named_beside_the_problems_they_cause():
    """Seed 001's values (TP 4 x PP 3, 0.95) under a playbook that presets 4 x 1: refused for the user's own values, and
    the refusal says they are the user's, kept over the playbook's presets."""
    groups, hostvars = four_nodes(dgxspark_tensor_parallel_size=4, dgxspark_pipeline_parallel_size=3,
                                  dgxspark_gpu_memory_utilization=0.95)
    with pytest.raises(cp.ClusterPlanError) as excinfo:
        cp.build_plan(groups, hostvars, PROFILES, presets=SHAPE_4X1, presets_by='deploy-x.yml')
    assert any('4 x 3 = 12 GPUs' in p for p in excinfo.value.problems), excinfo.value.problems
    assert excinfo.value.notes == [
        'Preset by deploy-x.yml (the inventory does not set them): dgxspark_model_profile=%s' % INT4,
        'Yours over the presets of deploy-x.yml (inventory or -e): dgxspark_pipeline_parallel_size=3 (preset 1), '
        'dgxspark_gpu_memory_utilization=0.95 (preset 0.78)']


@pytest.mark.parametrize('presets, expected', [
    ({'dgxspark_tp': 4}, 'deploy-x.yml presets dgxspark_tp, which is not a cluster variable: fix the playbook'),
    ({'dgxspark_tensor_parallel_size': 'four'}, 'deploy-x.yml presets a wrong value: dgxspark_tensor_parallel_size'),
], ids=['unknown-name', 'wrong-value'])
def test_a_wrong_preset_is_refused_naming_the_playbook(presets, expected):
    groups, hostvars = cluster()
    problems = plan_problems(groups, hostvars, presets=presets)
    assert any(p.startswith(expected) for p in problems), problems


# ---------------------------------------------------------------- rejections

def rails(*subnets, **kwargs):
    return [{'name': 'rail%d' % (i + 1), 'interface': 'if%d' % i, 'subnet': s, 'address_offset': kwargs.get('offset', 10)}
            for i, s in enumerate(subnets)]


REJECTIONS = [
    # (id, cluster vars, expected words in one problem)
    ('tp_string', {'dgxspark_tensor_parallel_size': '4'}, ['dgxspark_tensor_parallel_size', 'must be an integer']),
    ('tp_bool', {'dgxspark_tensor_parallel_size': True}, ['dgxspark_tensor_parallel_size', 'must be an integer']),
    ('util_above_ceiling', {'dgxspark_gpu_memory_utilization': 0.9}, ['dgxspark_gpu_memory_utilization', '0.85',
                                                                      'dgxspark_allow_gpu_memory_utilization_above_ceiling']),
    ('util_zero', {'dgxspark_gpu_memory_utilization': 0.0}, ['dgxspark_gpu_memory_utilization', 'greater than']),
    ('util_above_one_even_allowed', {'dgxspark_gpu_memory_utilization': 1.2, 'dgxspark_allow_gpu_memory_utilization_above_ceiling': True},
     ['dgxspark_gpu_memory_utilization', 'at most 1']),
    ('tp_x_pp_not_nodes', {'dgxspark_tensor_parallel_size': 4, 'dgxspark_pipeline_parallel_size': 3},
     ['dgxspark_tensor_parallel_size x dgxspark_pipeline_parallel_size', '12 GPUs', 'one GPU']),
    ('mtu_low', {'dgxspark_mtu': 1000}, ['dgxspark_mtu', 'at least 1280']),
    ('mtu_high', {'dgxspark_mtu': 9500}, ['dgxspark_mtu', 'at most 9216']),
    ('kv_dtype', {'dgxspark_kv_cache_dtype': 'int8'}, ['dgxspark_kv_cache_dtype', 'auto, fp8']),
    ('transport', {'dgxspark_nccl_transport': 'ib'}, ['dgxspark_nccl_transport', 'rdma, socket']),
    ('release_keep_one', {'dgxspark_release_keep': 1}, ['dgxspark_release_keep', 'at least 2']),
    ('backend_misspelled', {'dgxspark_executor_backend': 'rya'}, ["dgxspark_executor_backend is 'rya' (did you mean ray?)", 'ray, mp']),
    ('backend_unknown', {'dgxspark_executor_backend': 'slurm'}, ["dgxspark_executor_backend is 'slurm'; it must be one of: ray, mp"]),
    ('master_port_privileged', {'dgxspark_mp_master_port': 80}, ['dgxspark_mp_master_port', 'at least 1024']),
    ('master_port_string', {'dgxspark_mp_master_port': '29501'}, ['dgxspark_mp_master_port', 'must be an integer']),
    ('release_rollback_string', {'dgxspark_release_rollback': 'false'}, ['dgxspark_release_rollback', 'must be a boolean']),
    ('unknown_profile', {'dgxspark_model_profile': 'llama'},
     ['dgxspark_model_profile', 'unknown', 'qwen3_5_397b_a17b_fp8', 'qwen3_vl_235b_a22b_awq']),
    ('max_model_len_above_model', {'dgxspark_max_model_len': 300000}, ['dgxspark_max_model_len', '262144']),
    ('max_model_len_no_kv_room', {'dgxspark_max_model_len': 262144, 'dgxspark_runtime_overhead_gib': 9.0},
     ['dgxspark_max_model_len', 'no room for one sequence', 'dgxspark_kv_cache_dtype: fp8']),
    ('expert_parallel_fp8', {'dgxspark_enable_expert_parallel': True},
     ['dgxspark_enable_expert_parallel', 'FP8 MoE', 'dgxspark_allow_expert_parallel_with_fp8_moe']),
    ('bare_subnet', {'dgxspark_rails': rails('192.168.100.0', '192.168.101.0/24')}, ['dgxspark_rails[0]', 'bare address', 'prefix']),
    ('invalid_subnet', {'dgxspark_rails': rails('192.168.300.0/24', '192.168.101.0/24')}, ['dgxspark_rails[0]', 'not a valid']),
    ('shared_subnet', {'dgxspark_rails': rails('192.168.100.0/24', '192.168.100.0/24')}, ['dgxspark_rails', 'share the subnet']),
    ('overlapping_subnet', {'dgxspark_rails': rails('192.168.100.0/24', '192.168.100.128/25')}, ['dgxspark_rails', 'overlap']),
    ('host_bits', {'dgxspark_rails': rails('192.168.100.5/24', '192.168.101.0/24')}, ['dgxspark_rails[0]', 'host bits', '192.168.100.0/24']),
    ('offset_outside', {'dgxspark_rails': rails('192.168.100.0/29', '192.168.101.0/29', offset=5)},
     ['address_offset', 'outside the rail subnet']),
    ('offset_broadcast', {'dgxspark_rails': rails('192.168.100.0/29', '192.168.101.0/29', offset=4)},
     ['address_offset', 'broadcast address']),
    ('offset_network', {'dgxspark_rails': rails('192.168.100.0/24', '192.168.101.0/24', offset=0)}, ['address_offset', 'network address']),
    ('rail_missing_subnet', {'dgxspark_rails': [{'name': 'rail1', 'interface': 'x'}]}, ['dgxspark_rails[0].subnet', 'missing']),
    ('link_local', {'dgxspark_rails': rails('169.254.10.0/24')}, ['dgxspark_rails[0]', 'link-local']),
]


@pytest.mark.parametrize('cluster_vars, expected', [r[1:] for r in REJECTIONS], ids=[r[0] for r in REJECTIONS])
def test_rejection_names_variable(cluster_vars, expected):
    groups, hostvars = cluster(**cluster_vars)
    problems = plan_problems(groups, hostvars)
    assert any(all(word in p for word in expected) for p in problems), problems


def test_tp_must_divide_heads():
    groups, hostvars = cluster(['a', 'b', 'c'], dgxspark_tensor_parallel_size=3)
    problems = plan_problems(groups, hostvars)
    assert any('dgxspark_tensor_parallel_size=3 does not divide the 32 attention heads' in p for p in problems), problems


def test_seed001_rejected_with_reasons():
    groups, hostvars = cluster(['spark-01', 'spark-02', 'spark-03'], dgxspark_model_profile='qwen3_5_379b_nvfp4',
                               dgxspark_tensor_parallel_size=4, dgxspark_pipeline_parallel_size=3,
                               dgxspark_gpu_memory_utilization=0.95)
    problems = plan_problems(groups, hostvars)
    assert len(problems) == 3
    assert '12 GPUs' in problems[0] and '3 nodes' in problems[0] and 'TP=1, PP=3' in problems[0]
    assert 'dgxspark_gpu_memory_utilization is 0.95' in problems[1]
    # seed 001 ran --trust-remote-code from whatever its repository's main held
    assert "dgxspark_model_revision is 'main', but profile qwen3_5_379b_nvfp4 sets trust_remote_code" in problems[2]


COMMIT = '0123456789abcdef0123456789abcdef01234567'


def profiles_with(**changes):
    """The built-in profiles, seed 000's changed (vllm_options merged; None removes a field)."""
    profile = copy.deepcopy(PROFILES['qwen3_5_397b_a17b_fp8'])
    profile['vllm_options'] = dict(profile['vllm_options'], **changes.pop('vllm_options', {}))
    profile.update(changes)
    return dict(PROFILES, qwen3_5_397b_a17b_fp8=dict((k, v) for k, v in profile.items() if v is not None))


@pytest.mark.parametrize('revision', [None, 'main', 'v1.0', COMMIT.upper(), COMMIT[:12], COMMIT + '0'])
def test_remote_code_is_served_only_from_a_commit(revision):
    groups, hostvars = cluster(dgxspark_model_revision=revision)
    problems = plan_problems(groups, hostvars, profiles_with(vllm_options={'trust_remote_code': True}))
    assert problems == ["dgxspark_model_revision is %r, but profile qwen3_5_397b_a17b_fp8 sets trust_remote_code: vLLM runs the "
                        "Python files of Qwen/Qwen3.5-397B-A17B-FP8 as root in every serving container, so a branch or tag "
                        "would run whatever is pushed there next. Review the repository's code at one commit and set "
                        "dgxspark_model_revision to that commit (40 hex digits, from "
                        "https://huggingface.co/Qwen/Qwen3.5-397B-A17B-FP8/commits/main), or give the profile a revision."
                        % (revision or 'main')]


@pytest.mark.parametrize('profile_changes, inventory_revision, served, option', [
    # (profile changes, dgxspark_model_revision, the plan's model_revision, vLLM's --revision)
    ({}, None, 'main', None),
    ({}, 'v2', 'v2', 'v2'),
    ({'revision': COMMIT}, None, COMMIT, COMMIT),
    ({'revision': COMMIT, 'vllm_options': {'trust_remote_code': True}}, None, COMMIT, COMMIT),
    ({'vllm_options': {'trust_remote_code': True}}, COMMIT, COMMIT, COMMIT),
    ({'revision': COMMIT}, 'f' * 40, 'f' * 40, 'f' * 40),
])
def test_the_revision_comes_from_the_inventory_then_the_profile(profile_changes, inventory_revision, served, option):
    groups, hostvars = cluster(dgxspark_model_revision=inventory_revision)
    plan = cp.build_plan(groups, hostvars, profiles_with(**copy.deepcopy(profile_changes)))
    assert plan['model_revision'] == served
    assert plan['vllm_options'].get('revision') == option
    assert 'Model revision: %s' % served in cp.render_plan_table(plan)


@pytest.mark.parametrize('revision', ['main', COMMIT[:7], 1234])
def test_a_profile_revision_must_be_a_commit(revision):
    groups, hostvars = cluster()
    problems = plan_problems(groups, hostvars, profiles_with(revision=revision))
    assert any('model profile qwen3_5_397b_a17b_fp8: revision %r is not a commit' % revision in p for p in problems), problems


def test_no_built_in_profile_that_can_be_served_runs_unpinned_remote_code():
    for name, profile in PROFILES.items():
        if profile.get('published', True) and (profile.get('vllm_options') or {}).get('trust_remote_code'):
            assert cp.COMMIT.match(profile.get('revision', '')), name


def test_seed004_tp2_weights_do_not_fit():
    groups, hostvars = cluster(['spark-1', 'spark-2'], dgxspark_model_profile='qwen3_5_397b_a17b_int4_autoround',
                               dgxspark_tensor_parallel_size=2, dgxspark_gpu_memory_utilization=0.78)
    problems = plan_problems(groups, hostvars)
    assert len(problems) == 1
    assert 'Weights do not fit' in problems[0] and '113.0 GB' in problems[0] and 'dgxspark_model_profile' in problems[0]


def test_above_ceiling_allowed_with_flag():
    groups, hostvars = cluster(dgxspark_gpu_memory_utilization=0.9, dgxspark_allow_gpu_memory_utilization_above_ceiling=True)
    assert cp.build_plan(groups, hostvars, PROFILES)['gpu_memory_utilization'] == 0.9


def test_expert_parallel_fp8_allowed_with_flag():
    groups, hostvars = cluster(dgxspark_enable_expert_parallel=True, dgxspark_allow_expert_parallel_with_fp8_moe=True)
    assert cp.build_plan(groups, hostvars, PROFILES)['enable_expert_parallel'] is True


GROUP_REJECTIONS = [
    ('no_head', {'head': [], 'workers': ['a', 'b']}, ["group 'head'", 'exactly one']),
    ('missing_head_group', {'workers': ['a']}, ["group 'head'"]),
    ('two_heads', {'head': ['a', 'b'], 'workers': ['c', 'd']}, ["group 'head' has 2 hosts", 'a, b']),
    ('head_in_workers', {'head': ['a'], 'workers': ['a', 'b', 'c', 'd']}, ['Host a is in both group head and group workers']),
    ('duplicate_worker', {'head': ['a'], 'workers': ['b', 'b', 'c', 'd']}, ['Host b is listed twice']),
]


@pytest.mark.parametrize('groups, expected', [r[1:] for r in GROUP_REJECTIONS], ids=[r[0] for r in GROUP_REJECTIONS])
def test_group_rejections(groups, expected):
    hosts = sorted(set((groups.get('head') or []) + (groups.get('workers') or [])))
    hostvars = dict((h, dict(SEED000_VARS)) for h in hosts)
    problems = plan_problems(groups, hostvars)
    assert any(all(word in p for word in expected) for p in problems), problems


ADDRESS_REJECTIONS = [
    ('duplicate', {'spark-beta': {'rail1': '192.168.100.10'}}, ['Rail rail1', '192.168.100.10', 'spark-alpha and spark-beta']),
    ('outside', {'spark-beta': {'rail1': '10.0.0.1'}}, ['dgxspark_rail_addresses[rail1] (host spark-beta)', 'outside the rail subnet']),
    ('network', {'spark-beta': {'rail2': '192.168.101.0'}}, ['dgxspark_rail_addresses[rail2] (host spark-beta)', 'network address']),
    ('broadcast', {'spark-beta': {'rail2': '192.168.101.255'}}, ['(host spark-beta)', 'broadcast address']),
    ('invalid', {'spark-gamma': {'rail1': '192.168.100.999'}}, ['(host spark-gamma)', 'not a valid IPv4 address']),
    ('with_prefix', {'spark-gamma': {'rail1': '192.168.100.20/24'}}, ['(host spark-gamma)', 'without prefix']),
    ('unknown_rail', {'spark-gamma': {'rail9': '192.168.100.20'}}, ['dgxspark_rail_addresses (host spark-gamma)', 'rail9']),
    ('not_a_dict', {'spark-gamma': ['192.168.100.20']}, ['dgxspark_rail_addresses (host spark-gamma)', 'must be a mapping']),
]


@pytest.mark.parametrize('per_host, expected', [r[1:] for r in ADDRESS_REJECTIONS], ids=[r[0] for r in ADDRESS_REJECTIONS])
def test_address_rejections(per_host, expected):
    groups, hostvars = cluster()
    for host, addresses in per_host.items():
        hostvars[host]['dgxspark_rail_addresses'] = addresses
    problems = plan_problems(groups, hostvars)
    assert any(all(word in p for word in expected) for p in problems), problems


def test_cluster_var_must_match_on_every_node():
    groups, hostvars = cluster()
    hostvars['spark-delta']['dgxspark_tensor_parallel_size'] = 2
    problems = plan_problems(groups, hostvars)
    assert any('dgxspark_tensor_parallel_size must be the same on every node' in p and 'spark-delta has 2' in p for p in problems)


def test_missing_profile_variable():
    groups, hostvars = cluster(dgxspark_model_profile=None)
    problems = plan_problems(groups, hostvars)
    assert any(p.startswith('dgxspark_model_profile is not set') for p in problems)


def test_kv_heads_incompatible_with_tp():
    profiles = copy.deepcopy(PROFILES)
    profiles['odd'] = dict(profiles['qwen3_5_397b_a17b_fp8'], num_key_value_heads=3, num_attention_heads=24)
    groups, hostvars = cluster(['a', 'b'], dgxspark_model_profile='odd', dgxspark_tensor_parallel_size=2)
    problems = plan_problems(groups, hostvars, profiles=profiles)
    assert any('dgxspark_tensor_parallel_size=2 and the 3 KV heads' in p for p in problems), problems


def test_broken_profile_reported():
    profiles = {'broken': {'hf_repo': 'x/y'}}
    groups, hostvars = cluster(dgxspark_model_profile='broken')
    problems = plan_problems(groups, hostvars, profiles=profiles)
    assert any('model profile broken: field weight_size_gb is missing' in p for p in problems)


def test_many_problems_reported_at_once():
    groups = {'head': ['a', 'b'], 'workers': ['a', 'c']}
    values = {'dgxspark_model_profile': 'nope', 'dgxspark_tensor_parallel_size': 'four', 'dgxspark_gpu_memory_utilization': 0.95,
              'dgxspark_mtu': 100, 'dgxspark_kv_cache_dtype': 'int4', 'dgxspark_nccl_transport': 'ib',
              'dgxspark_rails': rails('192.168.100.0', '10.0.0.0/8', '10.1.0.0/16')}
    hostvars = dict((h, dict(values)) for h in 'abc')
    problems = plan_problems(groups, hostvars)
    for word in ("group 'head' has 2 hosts", 'Host a is in both', 'dgxspark_model_profile is', 'dgxspark_tensor_parallel_size must be an integer',
                 'dgxspark_gpu_memory_utilization is 0.95', 'dgxspark_mtu', 'dgxspark_kv_cache_dtype', 'dgxspark_nccl_transport',
                 'bare address', 'overlap'):
        assert any(word in p for p in problems), (word, problems)
    assert len(problems) >= 10


# ---------------------------------------------------------------- schema

def test_schema_defaults():
    resolved, problems = schema.validate_cluster_vars({'dgxspark_model_profile': 'x'})
    assert problems == []
    assert resolved['dgxspark_pipeline_parallel_size'] == 1
    assert resolved['dgxspark_gpu_memory_utilization'] == 0.85
    assert resolved['dgxspark_allow_gpu_memory_utilization_above_ceiling'] is False
    assert resolved['dgxspark_mtu'] == 9000
    assert resolved['dgxspark_nccl_transport'] == 'rdma'
    assert resolved['dgxspark_executor_backend'] == 'ray'
    assert resolved['dgxspark_mp_master_port'] == 29501
    assert resolved['dgxspark_node_memory_gib'] == 121.7
    assert resolved['dgxspark_node_memory_bandwidth_gbs'] == 273.0
    assert resolved['dgxspark_tensor_parallel_size'] == schema.DEFAULT_NODE_COUNT
    assert resolved['dgxspark_max_model_len'] == schema.DEFAULT_FROM_PROFILE
    assert [r['subnet'] for r in resolved['dgxspark_rails']] == ['192.168.100.0/24', '192.168.101.0/24']
    assert [r['interface'] for r in resolved['dgxspark_rails']] == ['enp1s0f1np1', 'enP2p1s0f1np1']
    resolved['dgxspark_rails'][0]['subnet'] = 'changed'
    assert schema.DEFAULT_RAILS[0]['subnet'] == '192.168.100.0/24'


def test_schema_collects_all_problems():
    _resolved, problems = schema.validate_cluster_vars({'dgxspark_mtu': 'big', 'dgxspark_pipeline_parallel_size': 0,
                                                        'dgxspark_enable_expert_parallel': 'yes'})
    assert len(problems) == 4
    assert problems[0].startswith('dgxspark_model_profile is not set')


def test_schema_int_accepted_as_float():
    resolved, problems = schema.validate_cluster_vars({'dgxspark_model_profile': 'x', 'dgxspark_node_memory_gib': 120})
    assert problems == [] and resolved['dgxspark_node_memory_gib'] == 120.0 and isinstance(resolved['dgxspark_node_memory_gib'], float)


def test_schema_rail_offset_default():
    resolved, problems = schema.validate_cluster_vars({'dgxspark_model_profile': 'x', 'dgxspark_rails': [
        {'name': 'r', 'interface': 'i', 'subnet': '10.0.0.0/24'}]})
    assert problems == [] and resolved['dgxspark_rails'][0]['address_offset'] == 10


def test_schema_documents_every_design_variable():
    names = set(schema.cluster_variable_names()) | set(schema.host_variable_names())
    with open(os.path.join(ROOT, 'docs', 'design.md'), encoding='utf-8') as handle:
        design = handle.read()
    section = design.split('## Inventory variables', 1)[1].split('\n## ', 1)[0]
    documented = set(re.findall(r'`(dgxspark_[a-z0-9_]+)', section))
    assert documented == names
    assert all(row[3] for row in schema.documentation_rows())


# ---------------------------------------------------------------- profiles

@pytest.mark.parametrize('name', sorted(PROFILES))
def test_profile_valid_and_sourced(name):
    profile = PROFILES[name]
    assert cp.validate_profile(name, profile) == []
    for field in (f[0] for f in PROFILE_FIELDS if f[2] and f[0] != "sources"):
        assert field in profile['sources'] or field in ('is_moe',), (name, field)
    assert profile['flag_checks'] and profile['vllm_checked_against']
    for forbidden in ('tensor_parallel_size', 'pipeline_parallel_size', 'gpu_memory_utilization', 'max_model_len'):
        assert forbidden not in profile['vllm_options']


def test_profiles_cover_seed_models():
    assert set(PROFILES) >= {'qwen3_5_397b_a17b_fp8', 'qwen3_5_379b_nvfp4', 'qwen3_vl_235b_a22b_awq', 'qwen3_5_397b_a17b_int4_autoround'}
    assert PROFILES['qwen3_5_379b_nvfp4']['published'] is False
    assert 'quantization' not in PROFILES['qwen3_5_379b_nvfp4']['vllm_options']


@pytest.mark.parametrize('backend, port, master, line', [
    ('ray', 29501, None, 'Executor: ray (a Ray container on every node; vLLM on the head, --distributed-executor-backend ray)'),
    ('mp', 29501, {'address': '192.168.100.10', 'port': 29501},
     "Executor: mp (vLLM's own multi-node backend: vLLM on every node, rank 0 serving the API, the others --headless), "
     "rendezvous 192.168.100.10:29501"),
    ('mp', 31000, {'address': '192.168.100.10', 'port': 31000}, 'rendezvous 192.168.100.10:31000'),
])
def test_with_mp_every_rank_meets_the_head_at_its_rail_1_address(backend, port, master, line):
    groups, hostvars = cluster(dgxspark_executor_backend=backend, dgxspark_mp_master_port=port)
    plan = cp.build_plan(groups, hostvars, PROFILES)
    assert plan['executor_backend'] == backend and plan['mp_master'] == master
    assert any(line in text for text in cp.render_plan_table(plan)), cp.render_plan_table(plan)
