# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving groups of one inventory (plugin_utils/fleet_plan.py, issue 51): which hosts make each group, and what the
groups' plans must not share. The groups' plans come from cluster_plan.build_plan, as the plan action makes them."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import load_profiles
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import cluster_plan as cp
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import fleet_plan
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.role_networks import api_endpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILES = load_profiles([os.path.join(ROOT, 'profiles', 'models')])[0]
INT4 = {'dgxspark_model_profile': 'qwen3_5_397b_a17b_int4_autoround', 'dgxspark_tensor_parallel_size': 4,
        'dgxspark_gpu_memory_utilization': 0.78}
VL = {'dgxspark_model_profile': 'qwen3_vl_235b_a22b_awq', 'dgxspark_tensor_parallel_size': 4,
      'dgxspark_gpu_memory_utilization': 0.75, 'dgxspark_max_model_len': 32768, 'dgxspark_kv_cache_dtype': 'fp8'}
GROUPS = {'all': ['s1', 's2', 's3', 's4', 's5', 's6', 's7', 's8'], 'fleet_a': ['s1', 's2', 's3', 's4'],
          'fleet_b': ['s5', 's6', 's7', 's8']}


# ---------------------------------------------------------------- which hosts make each group

def test_without_serving_groups_the_groups_head_and_workers_make_the_one_group():
    found, problems = fleet_plan.serving_groups(None, {'head': ['a'], 'workers': ['b', 'c'], 'all': ['a', 'b', 'c']})
    assert (found, problems) == ([(None, {'head': ['a'], 'workers': ['b', 'c']})], [])


def test_each_serving_group_is_an_ansible_group_whose_first_host_is_its_head():
    found, problems = fleet_plan.serving_groups(['fleet_b', 'fleet_a'], GROUPS)
    assert problems == []
    assert found == [('fleet_b', {'head': ['s5'], 'workers': ['s6', 's7', 's8']}),
                     ('fleet_a', {'head': ['s1'], 'workers': ['s2', 's3', 's4']})]
    assert fleet_plan.address_bases(found) == {'fleet_b': 0, 'fleet_a': 4}


@pytest.mark.parametrize('declared, groups, expected', [
    ('fleet_a', GROUPS, "dgxspark_serving_groups is 'fleet_a': give a list of the inventory groups that serve"),
    ([], GROUPS, 'dgxspark_serving_groups is []: give a list'),
    (['fleet_a', 'fleet_c'], GROUPS, 'dgxspark_serving_groups names fleet_c, but the inventory has no host in group fleet_c: '
                                     'add the group (its first host is its head) or remove it from the list (groups: fleet_a, fleet_b).'),
    (['fleet_a', 'fleet_a'], GROUPS, 'dgxspark_serving_groups names fleet_a twice: name each serving group once.'),
    (['fleet_a', 'workers'], dict(GROUPS, workers=['s9']), 'dgxspark_serving_groups names workers, which cannot be a serving group'),
    (['fleet_a', 'fleet_b'], dict(GROUPS, head=['s1']), 'dgxspark_serving_groups is set, but the inventory has hosts in group head too'),
    # one node in two groups
    (['fleet_a', 'fleet_b'], dict(GROUPS, fleet_b=['s4', 's5', 's6', 's7']),
     'Host s4 is in serving groups fleet_a and fleet_b: a node serves in one group only'),
], ids=['not-a-list', 'empty', 'unknown-group', 'named-twice', 'reserved-name', 'classic-groups-too', 'node-in-two-groups'])
def test_a_wrong_serving_group_list_is_refused_naming_it(declared, groups, expected):
    problems = fleet_plan.serving_groups(declared, groups)[1]
    assert any(expected in p for p in problems), problems


# ---------------------------------------------------------------- the groups' plans

def group_plan(hosts, values, address_base=0, head_values=None, host_values=None):
    """A group's plan as the action makes it: build_plan over its hosts, with its API endpoint."""
    hostvars = dict((h, dict(copy.deepcopy(values), **(host_values or {}).get(h, {}))) for h in hosts)
    plan = cp.build_plan({'head': hosts[:1], 'workers': hosts[1:]}, hostvars, PROFILES, address_base=address_base,
                         hosts_where='group x')
    plan['api'] = api_endpoint(plan['head'], head_values or {}, plan['hf_repo'], 8000, '/keys')
    return plan


def fleet(b_values=None, b_head=None, b_hosts=None, a_base=0, b_base=4):
    """fleet_a (INT4 on s1-s4) and fleet_b (B_VALUES, else VL, on s5-s8), planned with these address bases."""
    b_values = VL if b_values is None else b_values
    return {'fleet_a': group_plan(GROUPS['fleet_a'], INT4, a_base),
            'fleet_b': group_plan(GROUPS['fleet_b'], b_values, b_base, b_head, b_hosts)}


def test_rail_addresses_run_across_the_groups_and_a_single_group_keeps_its_own():
    plans = fleet()
    rail1 = [n['rail_addresses']['rail1'] for name in ('fleet_a', 'fleet_b') for n in plans[name]['nodes']]
    assert rail1 == ['192.168.100.%d' % i for i in range(10, 18)]
    assert [n['rank'] for n in plans['fleet_b']['nodes']] == [0, 1, 2, 3]  # ranks stay the group's own
    single = group_plan(GROUPS['fleet_a'], INT4)
    assert single == dict(cp.build_plan({'head': ['s1'], 'workers': ['s2', 's3', 's4']},
                                        dict((h, dict(INT4)) for h in GROUPS['fleet_a']), PROFILES), api=single['api'])
    assert fleet_plan.fleet_problems(plans) == []


def test_each_group_meets_at_its_own_head():
    plans = fleet(b_values=dict(VL, dgxspark_executor_backend='mp'))
    assert plans['fleet_b']['mp_master'] == {'address': '192.168.100.14', 'port': 29501}
    assert plans['fleet_a']['head'] == 's1' and plans['fleet_b']['head'] == 's5'


def test_a_group_whose_shape_does_not_fit_its_nodes_is_refused_naming_the_group():
    with pytest.raises(cp.ClusterPlanError) as excinfo:
        group_plan(GROUPS['fleet_b'], dict(VL, dgxspark_tensor_parallel_size=2), 4)
    assert any('= 2 x 1 = 2 GPUs, but the inventory has 4 nodes' in p and 'change the number of hosts in group x.' in p
               for p in excinfo.value.problems), excinfo.value.problems


def test_an_address_beyond_the_rail_subnet_names_the_groups_before():
    with pytest.raises(cp.ClusterPlanError) as excinfo:
        narrow = [{'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/28', 'address_offset': 10}]
        group_plan(GROUPS['fleet_b'], dict(VL, dgxspark_rails=narrow), 4)
    assert any('+ 4 nodes of the serving groups before falls outside the rail subnet 192.168.100.0/28' in p
               for p in excinfo.value.problems), excinfo.value.problems


@pytest.mark.parametrize('plans, expected', [
    # two separately planned halves: both get 192.168.100.10-13 (what issue 51 saw)
    (lambda: fleet(b_base=0), 'Rail address 192.168.100.10 (subnet 192.168.100.0/24) is given to s1 of group fleet_a (rail rail1) '
                              'and s5 of group fleet_b (rail rail1): on a shared rail every node of the fleet needs its own address'),
    # an address given by hand that another group's node has
    (lambda: fleet(b_hosts={'s6': {'dgxspark_rail_addresses': {'rail2': '192.168.101.12'}}}),
     'Rail address 192.168.101.12 (subnet 192.168.101.0/24) is given to s3 of group fleet_a (rail rail2) and s6 of group fleet_b'),
    # both heads answer at one address and port (a shared name)
    (lambda: {'fleet_a': dict(fleet()['fleet_a'], api=api_endpoint('s1', {'ansible_host': 'vip'}, 'r', 8000, '/k')),
              'fleet_b': dict(fleet()['fleet_b'], api=api_endpoint('s5', {'ansible_host': 'vip'}, 'r2', 8000, '/k'))},
     'Serving groups fleet_a and fleet_b all serve their API at vip:8000'),
    # one served name for two models
    (lambda: fleet(b_head={'vllm_container_served_model_name': 'Intel/Qwen3.5-397B-A17B-int4-AutoRound'}),
     'Serving groups fleet_a and fleet_b serve the model name Intel/Qwen3.5-397B-A17B-int4-AutoRound for different models '
     '(fleet_a: Intel/Qwen3.5-397B-A17B-int4-AutoRound@main, fleet_b: QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ@main)'),
], ids=['same-addresses', 'address-by-hand', 'same-api-address', 'name-for-two-models'])
def test_what_the_groups_must_not_share_is_refused_naming_groups_hosts_and_values(plans, expected):
    problems = fleet_plan.fleet_problems(plans())
    assert any(expected in p for p in problems), problems


def test_the_same_name_on_the_same_model_makes_replicas():
    plans = fleet(b_values=INT4)
    assert fleet_plan.fleet_problems(plans) == []
    view = fleet_plan.fleet_view(plans, {'fleet_a': GROUPS['fleet_a'], 'fleet_b': GROUPS['fleet_b']})
    assert view['models'] == [{'served_model_name': 'Intel/Qwen3.5-397B-A17B-int4-AutoRound', 'hf_repo': 'Intel/Qwen3.5-397B-A17B-int4-AutoRound',
                               'model_revision': 'main', 'replicas': ['fleet_a', 'fleet_b']}]
    assert [g['head'] for g in view['groups']] == ['s1', 's5']
    lines = fleet_plan.fleet_lines(view)
    assert lines[0] == 'Fleet: 2 serving groups, 8 nodes, 1 model'
    assert '  model Intel/Qwen3.5-397B-A17B-int4-AutoRound (Intel/Qwen3.5-397B-A17B-int4-AutoRound@main): 2 replicas (fleet_a, fleet_b)' in lines
    assert lines[-1] == '  endpoint: ' + fleet_plan.ROUTER_PLACEHOLDER
