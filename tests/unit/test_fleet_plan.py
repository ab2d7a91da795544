# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving groups of one inventory (plugin_utils/fleet_plan.py, issue 51): which hosts make each group, and what the
groups' plans must not share. The groups' plans come from cluster_plan.build_plan, as the plan action makes them."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import load_profiles, port_defaults
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import api_tls, role_inputs, role_networks
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
    # the router's group label in Prometheus (monitoring_config.router_job)
    (['fleet_a', 'fleet'], dict(GROUPS, fleet=['s9']), 'dgxspark_serving_groups names fleet, which cannot be a serving group: '
                                                       '`group="fleet"` labels the router\'s metrics'),
    (['fleet_a', 'fleet_b'], dict(GROUPS, head=['s1']), 'dgxspark_serving_groups is set, but the inventory has hosts in group head too'),
    # one node in two groups
    (['fleet_a', 'fleet_b'], dict(GROUPS, fleet_b=['s4', 's5', 's6', 's7']),
     'Host s4 is in serving groups fleet_a and fleet_b: a node serves in one group only'),
], ids=['not-a-list', 'empty', 'unknown-group', 'named-twice', 'reserved-name', 'router-label-name', 'classic-groups-too', 'node-in-two-groups'])
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
    assert lines[-1] == '  endpoint: no router: clients call each group at its own address'


# ---------------------------------------------------------------- the router (issue 51 item 2)

PORTS = port_defaults(role_inputs.role_specs(ROOT))  # Ray's ports and the single ports, as the roles' specs default them
ALL_HOSTS = GROUPS['fleet_a'] + GROUPS['fleet_b']
NO_ROUTER_SETTINGS = {'host': None, 'port': None}


def served(plans, tls=None, bind=None, node_values=None):
    """The groups' plans as the action finishes them: the API with its TLS (tls: {group: api_tls.plan_tls's}, else off)
    and where vLLM binds, the monitoring's ports (Prometheus on the head); with every node's ports (node_values: the
    variables of some nodes)."""
    off = api_tls.plan_tls({'mode': 'off'}, '', [], '', '')[0]
    for name, plan in plans.items():
        plan['api'] = role_networks.api_with_tls(plan['api'], (tls or {}).get(name, off), bind)
        plan['serving'] = {'prometheus': {'host': plan['head']}, 'prometheus_port': 9090, 'node_exporter_port': 9100}
    ports = dict((h, role_networks.node_ports((node_values or {}).get(h, {}), *PORTS)) for h in ALL_HOSTS)
    return plans, ports


def generated_tls(tmp_path, plans):
    """Each group's API TLS as dgxspark_api_tls: generated plans it (one CA, a certificate a group)."""
    tls = {}
    for name, plan in plans.items():
        rails = list(plan['nodes'][0]['rail_addresses'].values())
        tls[name] = api_tls.plan_tls({'mode': 'generated'}, plan['api']['host'],
                                     api_tls.client_names(plan['api']['host'], plan['head'], rails), str(tmp_path), plan['head'],
                                     group=name)[0]
    return tls


def route(plans, ports, settings=None, addresses=None, keys=None):
    keys = keys or dict((name, 'file:/keys/vllm_api_key') for name in plans)
    return fleet_plan.router_plan(plans, dict(NO_ROUTER_SETTINGS, **(settings or {})), addresses or {}, ports, keys)


def test_the_router_runs_on_the_first_groups_head_at_4000_and_calls_each_group_on_its_heads_first_rail():
    router, problems = route(*served(fleet()))
    assert problems == []
    assert (router['host'], router['group'], router['port'], router['url']) == ('s1', 'fleet_a', 4000, 'http://s1:4000/v1')
    # its two instances behind the port, which a change of the router swaps between (roles/fleet_router)
    assert router['instances'] == {'a': 4001, 'b': 4002}
    assert router['tls']['enabled'] is False and router['tls']['upstream_ca_file'] is None
    assert [(m['served_model_name'], [(r['group'], r['api_base'], r['api_url']) for r in m['replicas']])
            for m in router['models']] == [
        ('Intel/Qwen3.5-397B-A17B-int4-AutoRound', [('fleet_a', 'http://192.168.100.10:8000/v1', 'http://s1:8000/v1')]),
        ('QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ', [('fleet_b', 'http://192.168.100.14:8000/v1', 'http://s5:8000/v1')])]
    assert (router['api_key_file'], router['api_key_given']) == ('/keys/vllm_api_key', False)
    view = fleet_plan.with_router(fleet_plan.fleet_view(*served(fleet())[:1], {'fleet_a': GROUPS['fleet_a'],
                                                                               'fleet_b': GROUPS['fleet_b']}), router)
    assert view['router'] == router and view['endpoint']['url'] == 'http://s1:4000/v1'
    lines = fleet_plan.fleet_lines(view)
    assert '  endpoint: http://s1:4000/v1 (the router on s1: every model above, plain HTTP)' in lines
    assert '  router: QuantTrio/Qwen3-VL-235B-A22B-Instruct-AWQ -> http://192.168.100.14:8000/v1 (fleet_b)' in lines


def test_two_replicas_of_one_model_are_one_model_with_two_upstreams_and_the_router_goes_where_the_inventory_says():
    router, problems = route(*served(fleet(b_values=INT4)), settings={'host': 's6', 'port': '4100'},
                             addresses={'s6': '10.0.0.16'})
    assert problems == []
    assert (router['host'], router['group'], router['address'], router['url']) == ('s6', 'fleet_b', '10.0.0.16',
                                                                                   'http://10.0.0.16:4100/v1')
    assert router['instances'] == {'a': 4101, 'b': 4102}
    assert [[r['api_base'] for r in m['replicas']] for m in router['models']] == [
        ['http://192.168.100.10:8000/v1', 'http://192.168.100.14:8000/v1']]


def test_a_group_whose_vllm_binds_one_address_is_called_there():
    router = route(*served(fleet(), bind='10.0.0.5'))[0]
    assert [m['replicas'][0]['api_base'] for m in router['models']] == ['http://10.0.0.5:8000/v1'] * 2


def test_with_tls_the_router_serves_its_heads_certificate_and_checks_the_groups_with_their_ca(tmp_path):
    plans = fleet()
    plans, ports = served(plans, tls=generated_tls(tmp_path, plans))
    router, problems = route(plans, ports, settings={'host': 's5'})
    assert problems == []
    tls = router['tls']
    assert (router['url'], router['local_url']) == ('https://s5:4000/v1', 'https://127.0.0.1:4000')
    assert (tls['server_name'], tls['cert_file'], tls['key_file'], tls['ca_file']) == (
        's5', api_tls.CERT_ON_HEAD, api_tls.KEY_ON_HEAD, api_tls.CA_ON_NODES)
    assert tls['controller']['cert_file'] == str(tmp_path / 'api_tls' / 'fleet_b' / 'api.crt')
    assert (tls['upstream_ca_file'], tls['upstream_ca_files'], tls['upstream_system_trust']) == (
        fleet_plan.ROUTER_UPSTREAM_CA, [str(tmp_path / 'api_tls' / 'ca.crt')], False)
    assert [m['replicas'][0]['api_base'] for m in router['models']] == ['https://192.168.100.10:8000/v1',
                                                                        'https://192.168.100.14:8000/v1']
    assert 'TLS with the certificate of s5' in fleet_plan.with_router(fleet_plan.fleet_view(plans, GROUPS), router)['endpoint']['note']


def test_one_group_has_no_router_and_refuses_the_routers_variables_when_set():
    one = {'fleet_a': fleet()['fleet_a']}
    assert route(*served(one)) == (None, [])
    assert fleet_plan.lone_router_problems(NO_ROUTER_SETTINGS) == []
    assert fleet_plan.lone_router_problems({'host': 's1', 'port': None}) == [
        'dgxspark_router_host is set, but the inventory has one serving group: the router stands in front of two or more '
        '(dgxspark_serving_groups), and clients call one group at its own address; remove it.']
    assert route(*served(one), settings={'host': 's1', 'port': 4000})[1] == [
        'dgxspark_router_host and dgxspark_router_port are set, but the inventory has one serving group: the router stands '
        'in front of two or more (dgxspark_serving_groups), and clients call one group at its own address; remove them.']
    view = fleet_plan.fleet_view(one, {'fleet_a': GROUPS['fleet_a']})
    assert view['router'] is None and view['endpoint']['note'] == 'one group, no router: clients call http://s1:8000/v1'


def _files_tls(tmp_path, plans):
    """fleet_b's API TLS from the user's files, a certificate for its head's name only (not its rail address)."""
    made = api_tls.generated_files(str(tmp_path / 'users'), ['s5'], 'users')
    tls = generated_tls(tmp_path, plans)
    tls['fleet_b'] = api_tls.plan_tls({'mode': 'files', 'cert_file': made['cert_file'], 'key_file': made['key_file'],
                                       'ca_file': made['ca_file']}, 's5', [], str(tmp_path), 's5')[0]
    return tls


ROUTER_REFUSALS = [
    ('not-a-node', {'host': 'spark-99'}, None, None,
     "dgxspark_router_host is 'spark-99', not a node of a serving group (s1, s2, s3, s4, s5, s6, s7, s8): name one of them "
     "(default: s1, the first group's head); the router calls the groups over the rails, which only their nodes have."),
    ('host-a-list', {'host': ['s1']}, None, None, "dgxspark_router_host is ['s1'], not a node of a serving group"),
    ('port-a-word', {'port': 'http'}, None, None, "dgxspark_router_port is 'http', not a TCP port: use 1 to 65535 (default 4000)."),
    ('port-a-bool', {'port': True}, None, None, 'dgxspark_router_port is True, not a TCP port'),
    ('port-zero', {'port': 0}, None, None, 'dgxspark_router_port is 0, not a TCP port'),
    ('port-too-big', {'port': 70000}, None, None, 'dgxspark_router_port is 70000, not a TCP port'),
    ('api-port', {'port': 8000}, None, None,
     'dgxspark_router_port is 8000, the port of vllm_container_port (the vLLM API) on s1: give the router a free port (default 4000).'),
    ('ray-gcs', {'port': 6379}, None, None, 'dgxspark_router_port is 6379, the port of ray_cluster_ports.gcs on s1'),
    ('ssh', {'port': 2222}, None, {'s1': {'ansible_port': 2222}}, 'dgxspark_router_port is 2222, the port of SSH'),
    ('prometheus', {'port': 9090}, None, None, 'dgxspark_router_port is 9090, the port of monitoring_prometheus_port (Prometheus) on s1'),
    ('node-exporter-on-a-worker', {'host': 's2', 'port': 9100}, None, None,
     'dgxspark_router_port is 9100, the port of monitoring_node_exporter_port (the node exporter) on s2'),
    ('ray-workers', {'port': 12000}, None, None,
     "dgxspark_router_port is 12000, inside Ray's worker port range 10002-19999 on s1 (ray_cluster_ports.min_worker/max_worker)"),
    # the instances' ports (the router's port + 1 and + 2) are refused like the router's own
    ('instance-a-on-the-api', {'port': 7999}, None, None,
     "dgxspark_router_port + 1 (8000, the port of the router's instance a), the port of vllm_container_port (the vLLM API) "
     'on s1: give the router a free port (default 4000).'),
    ('instance-b-on-the-api', {'port': 7998}, None, None,
     "dgxspark_router_port + 2 (8000, the port of the router's instance b), the port of vllm_container_port (the vLLM API) on s1"),
    ('instance-in-ray-workers', {'port': 10000}, None, None,
     "dgxspark_router_port + 2 (10002, the port of the router's instance b), inside Ray's worker port range 10002-19999 on s1"),
    ('instance-beyond-65535', {'port': 65535}, None, None,
     "dgxspark_router_port + 1 (65536, the port of the router's instance a), beyond 65535"),
    ('default-taken', {}, None, {'s1': {'vllm_container_port': 4000}},
     'dgxspark_router_port is 4000, the port of vllm_container_port (the vLLM API) on s1: give the router a free port'),
    ('tls-on-a-worker', {'host': 's2'}, 'generated', None,
     'dgxspark_router_host is s2, but with dgxspark_api_tls generated the router serves HTTPS with the API certificate of '
     'a head, whose key never leaves that head: name one of the heads (s1, s5), or set dgxspark_api_tls: off.'),
    ('tls-mixed', {}, 'mixed', None,
     'dgxspark_api_tls is on for fleet_a but off for fleet_b: the router serves one scheme and would carry the API key in '
     'clear to a group without TLS; set dgxspark_api_tls in group_vars/all, the same for every group.'),
    ('certificate-without-the-rail', {}, 'files', None,
     "the API certificate of serving group fleet_b is for s5, but the router calls that group at 192.168.100.14 (its head's "
     'first rail, which the firewall opens to the fleet): make a certificate whose subjectAltName includes 192.168.100.14 '
     'too, or use dgxspark_api_tls: generated, which does.'),
]


@pytest.mark.parametrize('settings, tls, node_values, expected', [c[1:] for c in ROUTER_REFUSALS], ids=[c[0] for c in ROUTER_REFUSALS])
def test_a_router_that_cannot_work_is_refused_naming_the_variable_and_the_fix(settings, tls, node_values, expected, tmp_path):
    plans = fleet()
    chosen = {None: None, 'generated': lambda: generated_tls(tmp_path, plans),
              'mixed': lambda: {'fleet_a': generated_tls(tmp_path, plans)['fleet_a']},
              'files': lambda: _files_tls(tmp_path, plans)}[tls]
    router, problems = route(*served(plans, tls=chosen() if chosen else None, node_values=node_values), settings=settings)
    assert router is None and any(expected in p for p in problems), problems


def test_groups_with_different_api_keys_are_refused_since_the_router_holds_one():
    plans, ports = served(fleet())
    router, problems = route(plans, ports, keys={'fleet_a': 'file:/keys/vllm_api_key', 'fleet_b': 'given:0f0f'})
    assert router is None and problems == [
        'the serving groups do not share one API key (fleet_a: the generated key; fleet_b: its own vllm_container_api_key): '
        'the router takes one key from clients and sends it to every group; give vllm_container_api_key in group_vars/all '
        'only, or leave it unset everywhere (the generated key in the controller\'s secrets directory).']
    assert route(plans, ports, keys={'fleet_a': 'given:0f0f', 'fleet_b': 'given:0f0f'})[1] == []


def test_the_routers_variables_are_the_fleets_one_setting_and_a_value_of_one_group_only_is_refused():
    assert fleet_plan.router_settings({'fleet_a': {'host': 's5', 'port': 4100}, 'fleet_b': {'host': 's5', 'port': 4100}}) == (
        {'host': 's5', 'port': 4100}, [])
    assert fleet_plan.router_settings({'fleet_a': NO_ROUTER_SETTINGS, 'fleet_b': NO_ROUTER_SETTINGS}) == (NO_ROUTER_SETTINGS, [])
    settings, problems = fleet_plan.router_settings({'fleet_a': {'host': None, 'port': 4100}, 'fleet_b': {'host': None, 'port': '4100'}})
    assert problems == ["dgxspark_router_port differs between the serving groups (fleet_a: 4100, fleet_b: '4100'): the fleet "
                        'has one router; set it in group_vars/all only.']
