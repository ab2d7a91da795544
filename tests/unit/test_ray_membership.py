# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the Ray membership check over ray.nodes() of ray 2.60.0 (fixtures/ray_membership/README.md)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.filter.ray_membership import FilterModule
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.ray_membership import RayMembershipError, load_ray_nodes, ray_membership

FIXTURES = pathlib.Path(__file__).parent / 'fixtures' / 'ray_membership'
HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']


def fixture(name):
    return json.loads((FIXTURES / name).read_text(encoding='utf-8'))


def plan(count=4, base=10):
    return {
        'head': HOSTS[0],
        'nodes': [{'host': HOSTS[i], 'rank': i, 'role': 'head' if i == 0 else 'worker',
                   'rail_addresses': {'rail1': '192.168.100.%d' % (base + i), 'rail2': '192.168.101.%d' % (base + i)}} for i in range(count)],
        'rails': [{'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24', 'prefixlen': 24},
                  {'name': 'rail2', 'interface': 'enP2p1s0f1np1', 'subnet': '192.168.101.0/24', 'prefixlen': 24}],
    }


@pytest.mark.parametrize('name, ok, alive, missing, dead, unexpected, gpu_problems, total, summary', [
    ('four_alive.json', True, HOSTS, [], [], [], [], 4, '4/4 nodes alive, 4 GPUs'),
    ('delta_dead.json', False, HOSTS[:3], ['spark-delta'], [('spark-delta', '192.168.100.13')], [], [], 3,
     '3/4 nodes alive, 3 GPUs; missing: spark-delta (192.168.100.13)'),
    ('delta_rejoined.json', True, HOSTS, [], [], [], [], 4, '4/4 nodes alive, 4 GPUs'),
    ('delta_never_joined.json', False, HOSTS[:3], ['spark-delta'], [], [], [], 3, '3/4 nodes alive, 3 GPUs; missing: spark-delta (192.168.100.13)'),
    ('beta_management_port.json', False, ['spark-alpha', 'spark-gamma', 'spark-delta'], ['spark-beta'], [], [('10.20.0.11', 'spark-beta')], [],
     4, '3/4 nodes alive, 4 GPUs; missing: spark-beta (192.168.100.11); unexpected: 10.20.0.11'),
    ('gamma_no_gpu.json', False, HOSTS, [], [], [], ['spark-gamma'], 3, '4/4 nodes alive, 3 GPUs; wrong GPU count: spark-gamma'),
])
def test_membership(name, ok, alive, missing, dead, unexpected, gpu_problems, total, summary):
    result = ray_membership(fixture(name), plan())
    assert result['ok'] is ok
    assert result['expected'] == 4
    assert [a['host'] for a in result['alive']] == alive
    assert [m['host'] for m in result['missing']] == missing
    assert [(d['host'], d['address']) for d in result['dead']] == dead
    assert [(u['address'], u['hostname']) for u in result['unexpected']] == unexpected
    assert [g['host'] for g in result['gpu_problems']] == gpu_problems
    assert result['total_gpus'] == total
    assert result['summary'] == summary
    assert bool(result['problems']) is not ok


def test_alive_entries_carry_address_and_gpus():
    result = ray_membership(fixture('four_alive.json'), plan())
    assert result['alive'][1] == {'host': 'spark-beta', 'address': '192.168.100.11', 'gpus': 1}
    assert result['missing'] == []


@pytest.mark.parametrize('name, phrases', [
    ('delta_dead.json', ['spark-delta (rank 3, 192.168.100.13) left the Ray cluster', 'health check failed due to missing too many heartbeats',
                         'docker logs', 'restart its Ray container']),
    ('delta_never_joined.json', ['spark-delta (rank 3, 192.168.100.13) is not in the Ray cluster', 'rail1 (enp1s0f1np1)', '6379',
                                 'pings the head on rail1']),
    ('beta_management_port.json', ['Ray node spark-beta joined with address 10.20.0.11, which is no rail1 (enp1s0f1np1) address of the plan',
                                   'It is probably spark-beta, whose rail1 address is 192.168.100.11', '--node-ip-address',
                                   'spark-beta (rank 1, 192.168.100.11) is not in the Ray cluster']),
    ('gamma_no_gpu.json', ['spark-gamma (192.168.100.12) offers 0 GPU(s) to Ray, expected 1', '--num-gpus 1', 'nvidia-smi']),
])
def test_problems_name_node_address_and_fix(name, phrases):
    problems = ' '.join(ray_membership(fixture(name), plan())['problems'])
    for phrase in phrases:
        assert phrase in problems, phrase


def test_real_local_captures():
    """The verbatim ray 2.60.0 captures against a 2-node plan on the loopback addresses the worker used."""
    two = {'nodes': [{'host': 'head', 'rank': 0, 'rail_addresses': {'rail1': '127.0.0.1'}},
                     {'host': 'worker', 'rank': 1, 'rail_addresses': {'rail1': '127.0.0.2'}}],
           'rails': [{'name': 'rail1', 'interface': 'lo'}]}
    alive = ray_membership(fixture('ray2.60_local_two_alive.json'), two)
    # The head bound to the machine's own address instead of 127.0.0.1.
    assert [a['host'] for a in alive['alive']] == ['worker']
    assert [m['host'] for m in alive['missing']] == ['head']
    assert [u['address'] for u in alive['unexpected']] == ['192.0.2.2']
    dead = ray_membership(fixture('ray2.60_local_worker_dead.json'), two)
    assert [(d['host'], d['reason']) for d in dead['dead']] == [('worker', 'health check failed due to missing too many heartbeats')]
    rejoined = ray_membership(fixture('ray2.60_local_rejoined.json'), two)
    assert [a['host'] for a in rejoined['alive']] == ['worker'] and rejoined['dead'] == []


def test_json_text_and_gpu_check_off():
    text = json.dumps(fixture('gamma_no_gpu.json'))
    assert ray_membership(text, plan(), gpus_per_node=None)['ok'] is True
    assert ray_membership(text.encode(), plan(), gpus_per_node=0)['gpu_problems'][0]['host'] == 'spark-alpha'


def test_dead_node_outside_the_plan_is_listed_but_no_problem():
    nodes = fixture('four_alive.json') + [dict(fixture('delta_dead.json')[3], NodeManagerAddress='192.168.100.99', NodeName='192.168.100.99')]
    result = ray_membership(nodes, plan())
    assert result['ok'] is True
    assert result['dead'] == [{'host': None, 'address': '192.168.100.99', 'node_id': nodes[-1]['NodeID'],
                               'reason': 'health check failed due to missing too many heartbeats'}]


def test_address_from_the_node_resource():
    node = dict(fixture('four_alive.json')[0])
    node.pop('NodeManagerAddress')
    node.pop('NodeName')
    result = ray_membership([node], plan(count=1))
    assert result['alive'] == [{'host': 'spark-alpha', 'address': '192.168.100.10', 'gpus': 1}]


@pytest.mark.parametrize('nodes, the_plan, gpus, match', [
    ('{not json', plan(), 1, 'not JSON'),
    ({'nodes': []}, plan(), 1, 'list of mappings'),
    ([1, 2], plan(), 1, 'list of mappings'),
    ([], {'nodes': []}, 1, 'cluster plan'),
    ([], {'nodes': [{'host': 'a'}], 'rails': [{'name': 'rail1'}]}, 1, 'rail_addresses.rail1'),
    ([], plan(), -1, 'gpus_per_node'),
    ([], plan(), 'one', 'gpus_per_node'),
])
def test_rejects(nodes, the_plan, gpus, match):
    with pytest.raises(RayMembershipError, match=match):
        ray_membership(nodes, the_plan, gpus_per_node=gpus)


def test_load_ray_nodes_passes_lists():
    assert load_ray_nodes([]) == []


def test_filter():
    membership = FilterModule().filters()['ray_membership']
    assert membership(fixture('four_alive.json'), plan(), gpus_per_node=1)['ok'] is True
    with pytest.raises(AnsibleFilterError, match='^ray_membership: '):
        membership('{not json', plan())
