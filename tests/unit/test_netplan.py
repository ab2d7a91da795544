# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the CX-7 rail netplan configuration: rendering, input validation, preflight, drift, fabric summary, the filter."""

from __future__ import annotations

import base64
import copy
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.filter.cx7_netplan_config import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.netplan import (
    NetplanConfigError,
    connection_addresses,
    drift,
    fabric_problems,
    failed_pings,
    netplan_file_problems,
    node_config,
    observed_interfaces,
    preflight_problems,
    render_yaml,
    sysctl_key,
    validate_renderer,
    validate_routes,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAIL1, RAIL2 = 'enp1s0f1np1', 'enP2p1s0f1np1'
HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']

cx7_netplan_config = FilterModule().filters()['cx7_netplan_config']


def make_plan(hosts=None, mtu=9000):
    hosts = hosts or HOSTS
    return {
        'mtu': mtu,
        'rails': [
            {'name': 'rail1', 'interface': RAIL1, 'subnet': '192.168.100.0/24', 'prefixlen': 24, 'address_offset': 10},
            {'name': 'rail2', 'interface': RAIL2, 'subnet': '192.168.101.0/24', 'prefixlen': 24, 'address_offset': 10},
        ],
        'nodes': [{'host': h, 'rank': i, 'role': 'head' if i == 0 else 'worker',
                   'rail_addresses': {'rail1': '192.168.100.%d' % (10 + i), 'rail2': '192.168.101.%d' % (10 + i)}}
                  for i, h in enumerate(hosts)],
    }


def setup_entry(name, ipv4=None, mtu=1500, ipv6=None):
    entry = {'device': name, 'mtu': mtu, 'active': True}
    if ipv4:
        address, prefix = ipv4[0].split('/')
        entry['ipv4'] = {'address': address, 'prefix': prefix}
        entry['ipv4_secondaries'] = [{'address': a.split('/')[0], 'prefix': a.split('/')[1]} for a in ipv4[1:]]
    entry['ipv6'] = [{'address': a, 'prefix': '64', 'scope': 'link'} for a in (ipv6 or [])]
    return entry


def cx7_device(netdev, state='Up', ipv4=None, mtu=1500):
    return {'netdev': netdev, 'state': state, 'operstate': 'up' if state == 'Up' else 'lowerlayerdown', 'mtu': mtu, 'ipv4': list(ipv4 or [])}


def node_facts(rank, configured=False, rail_state=('Up', 'Up'), extra_mgmt=None, default_if='eth0'):
    """ansible_facts of a lab-like node: eth0 (management), the four CX-7 netdevs."""
    mgmt = ['172.31.240.%d/24' % (10 + rank)] + list(extra_mgmt or [])
    rails = {RAIL1: ['192.168.100.%d/24' % (10 + rank)] if configured else [],
             RAIL2: ['192.168.101.%d/24' % (10 + rank)] if configured else []}
    mtu = 9000 if configured else 1500
    facts = {'interfaces': ['lo', 'eth0', RAIL1, RAIL2, 'enp1s0f0np0', 'enP2p1s0f0np0'],
             'lo': setup_entry('lo', ['127.0.0.1/8'], 65536),
             'eth0': setup_entry('eth0', mgmt, 1500, ['fe80::1']),
             RAIL1: setup_entry(RAIL1, rails[RAIL1], mtu, [] if configured else ['fe80::2']),
             RAIL2: setup_entry(RAIL2, rails[RAIL2], mtu, [] if configured else ['fe80::3']),
             'enp1s0f0np0': setup_entry('enp1s0f0np0'),
             'enP2p1s0f0np0': setup_entry('enP2p1s0f0np0'),
             'default_ipv4': {'interface': default_if, 'address': '172.31.240.%d' % (10 + rank)},
             'cx7': {'source': 'ibdev2netdev', 'devices': [
                 cx7_device(RAIL1, rail_state[0], rails[RAIL1], mtu), cx7_device(RAIL2, rail_state[1], rails[RAIL2], mtu),
                 cx7_device('enp1s0f0np0', 'Down'), cx7_device('enP2p1s0f0np0', 'Down')]}}
    return facts


def observed_all(hosts=None, **per_host):
    hosts = hosts or HOSTS
    result = {}
    for rank, host in enumerate(hosts):
        kwargs = per_host.get(host.replace('-', '_'), {})
        result[host] = {'facts': node_facts(rank, **kwargs), 'ssh_connection': '172.31.240.1 40000 172.31.240.%d 22' % (10 + rank),
                        'ansible_host': '172.31.240.%d' % (10 + rank), 'resolved': ''}
    return result


# ----------------------------------------------------------------------------------------------- rendering

def test_render_matches_seed_000_addresses_without_the_pointless_route():
    config = node_config(make_plan(), 'spark-alpha')
    document = yaml.safe_load(config['content'])
    assert document == config['document']
    assert document == {'network': {'version': 2, 'ethernets': {
        RAIL1: {'dhcp4': False, 'dhcp6': False, 'link-local': [], 'accept-ra': False, 'addresses': ['192.168.100.10/24'],
                'mtu': 9000, 'optional': True},
        RAIL2: {'dhcp4': False, 'dhcp6': False, 'link-local': [], 'accept-ra': False, 'addresses': ['192.168.101.10/24'],
                'mtu': 9000, 'optional': True}}}}
    assert 'renderer' not in config['content']
    assert config['content'].startswith('# Managed by Ansible')
    assert list(document['network']['ethernets']) == [RAIL1, RAIL2]


@pytest.mark.parametrize('host, rail1, rail2', [
    ('spark-alpha', '192.168.100.10/24', '192.168.101.10/24'),
    ('spark-beta', '192.168.100.11/24', '192.168.101.11/24'),
    ('spark-gamma', '192.168.100.12/24', '192.168.101.12/24'),
    ('spark-delta', '192.168.100.13/24', '192.168.101.13/24'),
])
def test_addresses_per_node(host, rail1, rail2):
    config = node_config(make_plan(), host)
    assert [r['cidr'] for r in config['rails']] == [rail1, rail2]
    assert len(config['peers']) == 6 and host not in [p['host'] for p in config['peers']]
    assert all(p['address'].startswith('192.168.10%d.' % (0 if p['rail'] == 'rail1' else 1)) for p in config['peers'])


def test_addresses_from_the_real_cluster_plan():
    """The same inventory gives seed 000's addresses: .10-.13 on 192.168.100.0/24 for alpha..delta, rail 2 on its own subnet."""
    from ansible_collections.dgxspark.cluster.plugins.action.cluster_plan import BUILTIN_PROFILES_DIR, load_profiles
    from ansible_collections.dgxspark.cluster.plugins.module_utils.cluster_plan import build_plan
    with open(os.path.join(ROOT, 'inventories', 'lab', 'group_vars', 'all.yml')) as handle:
        cluster = yaml.safe_load(handle)
    cluster = dict((k, v) for k, v in cluster.items() if k.startswith('dgxspark_') and '{{' not in str(v))
    profiles, problems = load_profiles([BUILTIN_PROFILES_DIR])
    assert not problems
    wanted = ('dgxspark_model_profile', 'dgxspark_gpu_memory_utilization', 'dgxspark_rails', 'dgxspark_mtu', 'dgxspark_nccl_transport')
    hostvars = dict((h, dict((k, cluster[k]) for k in wanted if k in cluster)) for h in HOSTS)
    plan = build_plan({'head': HOSTS[:1], 'workers': HOSTS[1:]}, hostvars, profiles)
    for rank, host in enumerate(HOSTS):
        config = node_config(plan, host)
        assert [r['cidr'] for r in config['rails']] == ['192.168.100.%d/24' % (10 + rank), '192.168.101.%d/24' % (10 + rank)]
        assert config['mtu'] == 9000


@pytest.mark.parametrize('renderer', ['networkd', 'NetworkManager'])
def test_renderer_is_set_per_interface_never_globally(renderer):
    config = node_config(make_plan(), 'spark-beta', renderer=renderer)
    network = yaml.safe_load(config['content'])['network']
    assert 'renderer' not in network
    assert all(entry['renderer'] == renderer for entry in network['ethernets'].values())


@pytest.mark.parametrize('renderer', [None, ''])
def test_renderer_inherited_by_default(renderer):
    assert 'renderer' not in node_config(make_plan(), 'spark-beta', renderer=renderer)['content']


def test_routes_and_mtu_and_optional_rendered():
    routes = [{'rail': 'rail2', 'to': '10.20.0.0/16', 'via': '192.168.101.1', 'metric': 100}]
    config = node_config(make_plan(), 'spark-gamma', mtu=8000, routes=routes, optional=False)
    ethernets = yaml.safe_load(config['content'])['network']['ethernets']
    assert ethernets[RAIL2]['routes'] == [{'to': '10.20.0.0/16', 'via': '192.168.101.1', 'metric': 100}]
    assert 'routes' not in ethernets[RAIL1]
    assert ethernets[RAIL1]['mtu'] == 8000 and 'optional' not in ethernets[RAIL1]
    assert config['ping_payload'] == 7972
    assert '        - to: "10.20.0.0/16"\n          via: "192.168.101.1"\n          metric: 100\n' in config['content']


def test_mtu_defaults_to_the_plan():
    assert node_config(make_plan(), 'spark-alpha', mtu='8000')['mtu'] == 8000
    assert node_config(make_plan(mtu=9216), 'spark-alpha')['mtu'] == 9216
    assert node_config(make_plan(mtu=9216), 'spark-alpha', mtu=9000)['mtu'] == 9000


@pytest.mark.parametrize('document', [
    {'network': {'version': 2, 'ethernets': {}}},
    {'a': [{'b': 1, 'c': [True, False, None]}, [], {}], 'weird key': 'x: "y"', 'n': {'x': []}},
])
def test_render_yaml_round_trips(document):
    assert yaml.safe_load(render_yaml(document)) == document


def test_rendering_is_deterministic():
    assert node_config(make_plan(), 'spark-alpha')['content'] == node_config(copy.deepcopy(make_plan()), 'spark-alpha')['content']


@pytest.mark.parametrize('interface, key', [
    (RAIL1, 'net.ipv6.conf.enp1s0f1np1.disable_ipv6'),
    ('eth0.100', 'net/ipv6/conf/eth0.100/disable_ipv6'),
])
def test_sysctl_key(interface, key):
    assert sysctl_key(interface) == key


def test_sysctl_content_names_only_rail_interfaces():
    content = node_config(make_plan(), 'spark-alpha')['sysctl_content']
    keys = [line.split('=')[0].strip() for line in content.splitlines() if line and not line.startswith('#')]
    assert keys == ['net.ipv6.conf.%s.disable_ipv6' % RAIL1, 'net.ipv6.conf.%s.disable_ipv6' % RAIL2]
    assert 'eth0' not in content


# ----------------------------------------------------------------------------------------------- input validation

@pytest.mark.parametrize('renderer, ok', [
    ('networkd', True), ('NetworkManager', True), ('', True), (None, True),
    ('systemd-networkd', False), ('networkmanager', False), ('NM', False), ('ifupdown', False),
])
def test_validate_renderer(renderer, ok):
    problems = validate_renderer(renderer)
    assert (not problems) == ok
    if not ok:
        assert 'cx7_netplan_renderer' in problems[0] and 'networkd or NetworkManager' in problems[0]


@pytest.mark.parametrize('routes, expected', [
    ([{'rail': 'rail1', 'to': '192.168.100.0/24', 'via': '192.168.100.10'}], ['own address', 'seed 000']),
    ([{'rail': 'rail1', 'to': '192.168.100.0/24'}], ['already reaches directly']),
    ([{'rail': 'rail3', 'to': '10.0.0.0/8', 'via': '192.168.100.1'}], ['rail is \'rail3\'']),
    ([{'rail': 'rail1', 'to': '10.0.0.1', 'via': '192.168.100.1'}], ['CIDR form']),
    ([{'rail': 'rail1', 'to': '10.0.0.1/8', 'via': '192.168.100.1'}], ['host bits']),
    ([{'rail': 'rail1', 'to': '10.0.0.0/8', 'via': '10.1.1.1'}], ['outside the rail subnet']),
    ([{'rail': 'rail1', 'to': '10.0.0.0/8', 'via': 'gateway'}], ['.via is \'gateway\'']),
    ([{'rail': 'rail1', 'to': '10.0.0.0/8', 'via': '192.168.100.255'}], ['broadcast']),
    ([{'rail': 'rail1', 'to': 'default'}], ['default route without via']),
    ([{'rail': 'rail1', 'to': '10.0.0.0/8', 'metric': -1}], ['metric']),
    ([{'rail': 'rail1', 'to': '10.0.0.0/8', 'gateway': '192.168.100.1'}], ['unknown keys gateway']),
    ('10.0.0.0/8', ['give a list']),
    (['10.0.0.0/8'], ['give a mapping']),
])
def test_bad_routes(routes, expected):
    problems = validate_routes(routes, make_plan()['rails'], {'rail1': '192.168.100.10', 'rail2': '192.168.101.10'})
    text = '\n'.join(problems)
    for fragment in expected:
        assert fragment in text, (fragment, text)


@pytest.mark.parametrize('routes', [
    [], None,
    [{'rail': 'rail1', 'to': '10.0.0.0/8', 'via': '192.168.100.1', 'metric': 50}],
    [{'rail': 'rail2', 'to': 'default', 'via': '192.168.101.1'}],
    [{'rail': 'rail1', 'to': '10.9.9.0/24'}],
])
def test_good_routes(routes):
    assert validate_routes(routes, make_plan()['rails'], {'rail1': '192.168.100.10', 'rail2': '192.168.101.10'}) == []


@pytest.mark.parametrize('kwargs, host, fragment', [
    ({'mtu': 1000}, 'spark-alpha', 'cx7_netplan_mtu'),
    ({'mtu': 9217}, 'spark-alpha', '1280 to 9216'),
    ({'mtu': True}, 'spark-alpha', 'cx7_netplan_mtu'),
    ({'mtu': '9k'}, 'spark-alpha', 'cx7_netplan_mtu'),
    ({'renderer': 'systemd-networkd'}, 'spark-alpha', 'cx7_netplan_renderer'),
    ({}, 'spark-omega', 'not a node of the cluster plan'),
])
def test_node_config_rejects(kwargs, host, fragment):
    with pytest.raises(NetplanConfigError) as info:
        node_config(make_plan(), host, **kwargs)
    assert fragment in str(info.value)


def test_node_config_rejects_bad_plan_entries():
    plan = make_plan()
    plan['rails'][0]['interface'] = 'eth0; rm -rf /'
    plan['nodes'][0]['rail_addresses']['rail2'] = '10.0.0.1'
    with pytest.raises(NetplanConfigError) as info:
        node_config(plan, 'spark-alpha')
    assert len(info.value.problems) == 2
    assert 'not a Linux interface name' in str(info.value) and 'outside the rail subnet' in str(info.value)
    with pytest.raises(NetplanConfigError, match='not a cluster plan'):
        node_config({'nodes': []}, 'spark-alpha')


# ----------------------------------------------------------------------------------------------- observed state / preflight

def test_observed_interfaces_merges_setup_and_cx7():
    interfaces = observed_interfaces(node_facts(1, configured=True))
    assert interfaces[RAIL1] == {'ipv4': ['192.168.100.11/24'], 'ipv6': [], 'mtu': 9000, 'state': 'Up', 'operstate': 'up', 'cx7': True}
    assert interfaces['eth0']['cx7'] is False and interfaces['eth0']['ipv4'] == ['172.31.240.11/24']
    # The setup module's own result uses ansible_-prefixed keys.
    prefixed = dict(('ansible_' + k, v) for k, v in node_facts(1).items())
    assert observed_interfaces(prefixed)['eth0']['ipv4'] == ['172.31.240.11/24']
    assert observed_interfaces({'ansible_interfaces': ['x'], 'ansible_x': {'ipv4': {'address': '10.0.0.1', 'netmask': '255.255.0.0'}}})[
        'x']['ipv4'] == ['10.0.0.1/16']


@pytest.mark.parametrize('ssh, host, resolved, expected', [
    ('172.31.240.1 50000 172.31.240.10 22', '172.31.240.10', '', ['172.31.240.10']),
    ('', 'spark-2', '10.0.0.2        STREAM spark-2\n10.0.0.2        DGRAM\n', ['10.0.0.2']),
    ('10.1.1.1 5000 10.0.0.5 22', 'spark-2', '10.0.0.2 STREAM spark-2\n', ['10.0.0.5', '10.0.0.2']),
    (None, 'localhost', '127.0.0.1 STREAM localhost', []),
    ('garbage', None, None, []),
])
def test_connection_addresses(ssh, host, resolved, expected):
    assert connection_addresses(ssh, host, resolved) == expected


def test_preflight_clean_cluster_has_no_problem():
    observed = observed_all()
    for host in HOSTS:
        assert preflight_problems(node_config(make_plan(), host), observed) == []
    converged = observed_all(**dict((h.replace('-', '_'), {'configured': True}) for h in HOSTS))
    for host in HOSTS:
        assert preflight_problems(node_config(make_plan(), host), converged) == []


def _problems_of(host, observed, files=None):
    return '\n'.join(preflight_problems(node_config(make_plan(), host), observed, files))


def test_preflight_missing_interface():
    observed = observed_all()
    facts = observed['spark-beta']['facts']
    facts['interfaces'].remove(RAIL2)
    del facts[RAIL2]
    facts['cx7']['devices'] = [d for d in facts['cx7']['devices'] if d['netdev'] != RAIL2]
    text = _problems_of('spark-beta', observed)
    assert 'spark-beta rail rail2 (enP2p1s0f1np1): interface enP2p1s0f1np1 does not exist' in text
    assert _problems_of('spark-alpha', observed) == ''


def test_preflight_interface_down():
    observed = observed_all(spark_gamma={'rail_state': ('Up', 'Down')})
    text = _problems_of('spark-gamma', observed)
    assert 'spark-gamma rail rail2 (enP2p1s0f1np1): the link is Down (no carrier' in text
    assert 'rail1' not in text


def test_preflight_not_an_rdma_netdev():
    observed = observed_all()
    observed['spark-alpha']['facts']['cx7']['devices'] = []
    assert 'is not a ConnectX-7 RDMA netdev' in _problems_of('spark-alpha', observed)


def test_preflight_address_used_by_another_host():
    observed = observed_all(spark_alpha={'extra_mgmt': ['192.168.100.11/32']})
    text = _problems_of('spark-beta', observed)
    assert 'spark-beta rail rail1 (enp1s0f1np1): the planned address 192.168.100.11 is already in use on spark-alpha interface eth0' in text
    assert _problems_of('spark-alpha', observed) == ''


def test_preflight_address_on_another_interface_of_the_same_host():
    observed = observed_all()
    facts = observed['spark-delta']['facts']
    facts['enp1s0f0np0'] = setup_entry('enp1s0f0np0', ['192.168.101.13/24'])
    assert 'already in use on spark-delta interface enp1s0f0np0' in _problems_of('spark-delta', observed)


def test_preflight_refuses_the_interface_of_the_connection():
    observed = observed_all(spark_alpha={'configured': True})
    observed['spark-alpha']['ssh_connection'] = '192.168.100.99 40000 192.168.100.10 22'
    observed['spark-alpha']['ansible_host'] = '192.168.100.10'
    text = _problems_of('spark-alpha', observed)
    assert 'Ansible is connected to this node through 192.168.100.10, which is on enp1s0f1np1' in text
    assert 'planned rail address 192.168.100.10 is the address Ansible connects through' in text


def test_preflight_refuses_the_default_route_interface():
    observed = observed_all(spark_beta={'default_if': RAIL1})
    assert "carries this node's default route" in _problems_of('spark-beta', observed)


def test_preflight_missing_facts():
    observed = observed_all()
    del observed['spark-beta']
    assert 'no facts were gathered' in _problems_of('spark-beta', observed)


@pytest.mark.parametrize('document, flagged', [
    ({'network': {'version': 2, 'ethernets': {RAIL1: {'dhcp4': True}}}}, True),
    ({'network': {'ethernets': {'cx': {'match': {'name': RAIL2}, 'set-name': 'cx'}}}}, True),
    ({'network': {'bonds': {'bond0': {'interfaces': [RAIL1, RAIL2]}}}}, True),
    ({'network': {'vlans': {'v10': {'id': 10, 'link': RAIL1}}}}, True),
    ({'network': {'ethernets': {'enP7s7': {'dhcp4': True}}}}, False),
    ({'network': {'version': 2, 'renderer': 'NetworkManager'}}, False),
    (None, False),
    ('text', False),
])
def test_netplan_files_of_others(document, flagged):
    problems = netplan_file_problems('spark-alpha', [RAIL1, RAIL2], [{'path': '/etc/netplan/50-cloud-init.yaml', 'document': document}])
    assert bool(problems) == flagged
    if flagged:
        assert '/etc/netplan/50-cloud-init.yaml' in problems[0] and 'never edits files it does not own' in problems[0]


# ----------------------------------------------------------------------------------------------- drift and fabric check

def test_drift():
    config = node_config(make_plan(), 'spark-beta')
    assert drift(config, node_facts(1, configured=True)) == []
    before = '\n'.join(drift(config, node_facts(1)))
    assert 'address 192.168.100.11/24 is not up' in before and 'MTU is 1500, expected 9000' in before
    assert 'IPv6 addresses are still present (fe80::2)' in before
    down = '\n'.join(drift(config, node_facts(1, configured=True, rail_state=('Down', 'Up'))))
    assert 'spark-beta rail rail1 (enp1s0f1np1): the link is Down' in down
    # cx7_facts alone (the settle loop): no IPv6 information, still checks address, MTU, carrier.
    assert drift(config, {'cx7': node_facts(1, configured=True)['cx7']}) == []


def ping_result(peer, rc, stdout='', stderr=''):
    return {'item': peer, 'rc': rc, 'stdout': stdout, 'stderr': stderr, 'changed': False}


def test_fabric_problems_names_the_unreachable_node_and_rail():
    plan = make_plan()
    results = {}
    for host in HOSTS:
        config = node_config(plan, host)
        pings = []
        for peer in config['peers']:
            broken = (peer['host'] == 'spark-beta' or host == 'spark-beta') and peer['rail'] == 'rail2'
            pings.append(ping_result(peer, 1 if broken else 0, '3 packets transmitted, 0 received, 100% packet loss, time 2040ms'
                                     if broken else ''))
        results[host] = {'drift': ['spark-beta rail rail2 (enP2p1s0f1np1): the link is Down.'] if host == 'spark-beta' else [],
                         'pings': pings, 'payload': 8972}
    problems = fabric_problems(results, plan)
    assert problems[0] == 'spark-beta rail rail2: unreachable from every other node (spark-alpha, spark-delta, spark-gamma).'
    assert 'spark-beta rail rail2 (enP2p1s0f1np1): the link is Down.' in problems
    assert ('spark-alpha rail rail2 (enP2p1s0f1np1): no reply from spark-beta 192.168.101.11 to unfragmented 8972-byte pings: '
            '3 packets transmitted, 0 received, 100% packet loss, time 2040ms') in problems
    assert not [p for p in problems if 'rail1' in p]


def test_fabric_problems_clean_and_missing_nodes():
    plan = make_plan()
    ok = dict((h, {'drift': [], 'pings': [ping_result(p, 0) for p in node_config(plan, h)['peers']], 'payload': 8972}) for h in HOSTS)
    assert fabric_problems(ok, plan) == []
    del ok['spark-delta']
    assert fabric_problems(ok, plan) == ['spark-delta: no post-change check result (the node failed earlier or is unreachable).']


def test_failed_pings_skips_skipped_and_successful():
    peer = {'host': 'spark-beta', 'rail': 'rail1', 'interface': RAIL1, 'address': '192.168.100.11'}
    results = [{'skipped': True, 'item': peer}, ping_result(peer, 0),
               ping_result(peer, 1, 'PING ...\n', 'ping: local error: message too long, mtu=9000')]
    assert failed_pings(results, 9188) == [{'peer': 'spark-beta', 'rail': 'rail1', 'interface': RAIL1, 'address': '192.168.100.11',
                                            'payload': 9188, 'output': 'ping: local error: message too long, mtu=9000'}]


# ----------------------------------------------------------------------------------------------- the filter

def test_filter_full_round():
    plan = make_plan()
    observed = observed_all()
    files = [{'source': '/etc/netplan/50-other.yaml', 'encoding': 'base64',
              'content': base64.b64encode(b'network:\n  ethernets:\n    enp1s0f1np1:\n      dhcp4: true\n').decode()},
             {'item': '/etc/netplan/x.yaml', 'skipped': True}]
    result = cx7_netplan_config(plan, 'spark-alpha', observed=observed, netplan_files=files, facts=node_facts(0))
    assert result['problems'] == [
        'spark-alpha: netplan file /etc/netplan/50-other.yaml also configures rail interface enp1s0f1np1 (ethernets.enp1s0f1np1): this role '
        'owns the rails and never edits files it does not own; remove enp1s0f1np1 from /etc/netplan/50-other.yaml.']
    assert result['drift']
    assert 'fabric_problems' not in result
    assert 'problems' not in cx7_netplan_config(plan, 'spark-alpha')


def test_filter_unparseable_netplan_file():
    result = cx7_netplan_config(make_plan(), 'spark-alpha', netplan_files=[{'path': '/etc/netplan/bad.yaml', 'content': 'network: [\n'}])
    assert 'cannot be parsed' in result['problems'][0]


@pytest.mark.parametrize('kwargs, fragment', [
    ({'renderer': 'systemd'}, 'cx7_netplan_renderer is'),
    ({'netplan_files': ['x']}, 'netplan_files must be a list'),
])
def test_filter_errors(kwargs, fragment):
    with pytest.raises(AnsibleFilterError, match=fragment):
        cx7_netplan_config(make_plan(), 'spark-alpha', **kwargs)
