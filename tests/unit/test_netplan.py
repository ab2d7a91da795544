# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the CX-7 rail netplan configuration: rendering, input validation, preflight, drift, fabric summary, the filters and
the action that checks every node at once (cx7_netplan_verdict). The role's files on a node (cx7_netplan_files) are
tests/unit/test_cx7_netplan_files.py."""

from __future__ import annotations

import copy
import os

from unittest import mock

import pytest
import yaml

import jinja2
from ansible.errors import AnsibleActionFail, AnsibleFilterError
from ansible.plugins.test.core import changed as changed_test
from ansible_collections.dgxspark.cluster.plugins.action import cx7_netplan_verdict as verdict_action
from ansible_collections.dgxspark.cluster.plugins.filter.cx7_netplan_config import FilterModule
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan import (
    NetplanConfigError,
    by_host,
    connection_addresses,
    drift,
    generate_rejections,
    netplan_file_problems,
    node_config,
    observed_interfaces,
    parse_netplan_files,
    preflight_problems,
    preflight_summary,
    render_yaml,
    sysctl_key,
    validate_renderer,
    validate_routes,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan_check import (
    fabric_problems,
    probe_errors,
    probe_failures,
    verdict,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAIL1, RAIL2 = 'enp1s0f1np1', 'enP2p1s0f1np1'
HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma', 'spark-delta']

FILTERS = FilterModule().filters()
cx7_netplan_config = FILTERS['cx7_netplan_config']


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
    from ansible_collections.dgxspark.cluster.plugins.plugin_utils.cluster_plan import build_plan
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


PING_LOST = '3 packets transmitted, 0 received, 100% packet loss, time 2040ms'


def probe_link(rank, rail, configured=True, mtu=9000, ipv6=None, present=True):
    """The link part of a fabric_probe rail result (ip -j addr) of a lab-like node."""
    third = '100' if rail == 'rail1' else '101'
    return {'present': present, 'operstate': 'UP' if present else None, 'carrier': True if present else None, 'admin_up': present,
            'mtu': mtu if present else None, 'ipv4': ['192.168.%s.%d/24' % (third, 10 + rank)] if configured and present else [],
            'ipv6': list(ipv6 or [])}


def probe_of(plan, host, broken=(), payload=8972):
    """A fabric_probe ``rails`` result of ``host``: every ping answered except the (peer, rail, kind) in ``broken``."""
    rank = [n['host'] for n in plan['nodes']].index(host)
    rails = {}
    for rail in plan['rails']:
        pings = []
        for node in plan['nodes']:
            if node['host'] == host:
                continue
            for kind, size in (('small', 56), ('jumbo', payload)):
                lost = (node['host'], rail['name'], kind) in broken or (node['host'], rail['name'], '*') in broken
                stats = PING_LOST if lost else '3 packets transmitted, 3 received, 0% packet loss, time 400ms'
                pings.append({'peer': node['host'], 'address': node['rail_addresses'][rail['name']], 'kind': kind, 'payload': size,
                              'rc': 1 if lost else 0, 'output': 'PING x\n--- x ping statistics ---\n' + stats,
                              'parsed': {'transmitted': 3, 'received': 0 if lost else 3, 'errors': 0, 'local_mtu': None,
                                         'frag_needed_mtu': None, 'unreachable': False, 'error': None}})
        rails[rail['name']] = {'interface': rail['interface'], 'link': probe_link(rank, rail['name']), 'pings': pings}
    return rails


@pytest.mark.parametrize('link, expected', [
    ({}, []),
    ({'mtu': 1500}, ['spark-beta rail rail1 (enp1s0f1np1): MTU is 1500, expected 9000.']),
    ({'configured': False}, ['spark-beta rail rail1 (enp1s0f1np1): address 192.168.100.11/24 is not up (addresses: none).']),
    ({'ipv6': ['fe80::2']}, ['spark-beta rail rail1 (enp1s0f1np1): IPv6 addresses are still present (fe80::2).']),
    ({'present': False}, ['spark-beta rail rail1 (enp1s0f1np1): the interface is gone.']),
])
def test_drift_after_the_change_reads_the_probe(link, expected):
    """After a change: cx7_facts of the settle loop and the probe's ip -j addr, never the preflight's (stale) setup facts."""
    config = node_config(make_plan(), 'spark-beta')
    probe = probe_of(make_plan(), 'spark-beta')
    probe['rail1']['link'] = probe_link(1, 'rail1', **link)
    # cx7_facts still shows the address and MTU: the probe, read last, wins.
    assert drift(config, {'cx7': node_facts(1, configured=True)['cx7']}, probe) == expected


def test_drift_probe_error_falls_back_to_cx7_facts():
    config = node_config(make_plan(), 'spark-beta')
    probe = {'rail1': {'interface': RAIL1, 'probe_error': '`ip -j addr show dev enp1s0f1np1` failed (rc 1): boom'}}
    assert drift(config, {'cx7': node_facts(1, configured=True)['cx7']}, probe) == []
    assert observed_interfaces({}, probe) == {}


@pytest.mark.parametrize('broken, fragments', [
    # small pass, DF jumbo lost: a smaller MTU on the path
    ([('spark-beta', 'rail2', 'jumbo')],
     ['spark-alpha rail rail2 (enP2p1s0f1np1): no reply from spark-beta 192.168.101.11 to unfragmented 8972-byte pings '
      '(small 56-byte pings pass); likely cause: a smaller MTU on the path drops the jumbo frames: a switch port of the rail '
      "(set MTU 9000 (or 9216) on every switch port of the rail) or spark-beta's enP2p1s0f1np1 [ping: " + PING_LOST + ']']),
    # both lost: the peer does not answer
    ([('spark-gamma', 'rail1', '*')],
     ['spark-alpha rail rail1 (enp1s0f1np1): no reply from spark-gamma 192.168.100.12 to small 56-byte pings or unfragmented '
      '8972-byte pings; likely cause: spark-gamma does not answer: its rail address is not up, the two addresses are not in one '
      'subnet, or the link drops the traffic (cabling, switch port) [ping: ' + PING_LOST + ']']),
    # small lost, jumbo passes: loss on the link
    ([('spark-delta', 'rail2', 'small')],
     ['spark-alpha rail rail2 (enP2p1s0f1np1): no reply from spark-delta 192.168.101.13 to small 56-byte pings (unfragmented '
      '8972-byte pings pass); likely cause: small pings are lost while jumbo pings pass: packet loss on the link']),
    ([], []),
])
def test_probe_failures(broken, fragments):
    failures = probe_failures('spark-alpha', probe_of(make_plan(), 'spark-alpha', broken))
    assert len(failures) == len(fragments)
    for failure, fragment in zip(failures, fragments):
        assert failure['problem'].startswith(fragment), (failure['problem'], fragment)
        assert failure['peer'] in failure['problem'] and failure['interface'] in failure['problem']


@pytest.mark.parametrize('parsed, cause', [
    ({'local_mtu': 1500}, 'the MTU of enp1s0f1np1 on spark-alpha is 1500, smaller than the 9000-byte frame'),
    ({'frag_needed_mtu': 1500}, 'a hop on the path answered "Frag needed" with MTU 1500'),
])
def test_probe_failures_jumbo_cause_from_what_ping_said(parsed, cause):
    probe = probe_of(make_plan(), 'spark-alpha', [('spark-beta', 'rail1', 'jumbo')])
    for ping in probe['rail1']['pings']:
        if ping['peer'] == 'spark-beta' and ping['kind'] == 'jumbo':
            ping['parsed'].update(parsed)
    assert 'likely cause: ' + cause in probe_failures('spark-alpha', probe)[0]['problem']


@pytest.mark.parametrize('parsed, cause', [
    ({'error': 'connect: Network is unreachable'}, 'spark-alpha has no route to 192.168.100.11 on enp1s0f1np1: its own rail address is missing'),
    ({'unreachable': True, 'error': 'sendmsg: No route to host'}, 'no ARP reply from spark-beta: its address 192.168.100.11 is not up'),
    ({'error': 'bind: Cannot assign requested address'}, 'ping could not run (bind: Cannot assign requested address)'),
])
def test_probe_failures_unanswered_cause_from_what_ping_said(parsed, cause):
    probe = probe_of(make_plan(), 'spark-alpha', [('spark-beta', 'rail1', '*')])
    for ping in probe['rail1']['pings']:
        if ping['peer'] == 'spark-beta':
            ping['parsed'].update(parsed)
    assert 'likely cause: ' + cause in probe_failures('spark-alpha', probe)[0]['problem']


def test_probe_failures_without_parsed_output_use_the_exit_status():
    probe = probe_of(make_plan(), 'spark-alpha', [('spark-beta', 'rail1', 'jumbo')])
    for rail in probe.values():
        for ping in rail['pings']:
            del ping['parsed']
    assert [(f['peer'], f['rail'], f['small'], f['jumbo']) for f in probe_failures('spark-alpha', probe)] == [('spark-beta', 'rail1', True, False)]


def test_fabric_problems_names_the_unreachable_node_and_rail():
    plan = make_plan()
    results = {}
    for host in HOSTS:
        broken = [('spark-beta', 'rail2', '*')] if host != 'spark-beta' else [(p, 'rail2', '*') for p in HOSTS]
        results[host] = {'drift': ['spark-beta rail rail2 (enP2p1s0f1np1): the link is Down.'] if host == 'spark-beta' else [],
                         'probe': probe_of(plan, host, broken)}
    problems = fabric_problems(results, plan)
    assert problems[0] == 'spark-beta rail rail2: unreachable from every other node (spark-alpha, spark-delta, spark-gamma).'
    assert 'spark-beta rail rail2 (enP2p1s0f1np1): the link is Down.' in problems
    assert any(p.startswith('spark-alpha rail rail2 (enP2p1s0f1np1): no reply from spark-beta 192.168.101.11 to small 56-byte pings or '
                            'unfragmented 8972-byte pings; likely cause: ') and p.endswith('[ping: %s]' % PING_LOST) for p in problems)
    assert not [p for p in problems if 'rail1' in p]
    # drift before the ping failures, the unreachable summary first
    assert problems.index('spark-beta rail rail2 (enP2p1s0f1np1): the link is Down.') < min(
        i for i, p in enumerate(problems) if 'no reply' in p)


def test_fabric_problems_switch_mtu_everywhere():
    """The lab's fault test: MTU 9216 on the nodes, 9000 on the switch: every jumbo ping fails, no drift."""
    plan = make_plan()
    results = dict((h, {'drift': [], 'probe': probe_of(plan, h, [(p, r, 'jumbo') for p in HOSTS for r in ('rail1', 'rail2')], payload=9188)})
                   for h in HOSTS)
    problems = fabric_problems(results, plan)
    assert len([p for p in problems if 'unreachable from every other node' in p]) == 8
    assert any(p.startswith('No node reaches any other over the failing rails') and '(MTU 9216)' in p for p in problems)
    failed = [p for p in problems if 'no reply from' in p]
    assert len(failed) == 24 and all('to unfragmented 9188-byte pings (small 56-byte pings pass)' in p for p in failed)
    assert "set MTU 9216 on every switch port" in failed[0]


def test_fabric_problems_clean_missing_nodes_and_no_probe():
    plan = make_plan()
    ok = dict((h, {'drift': [], 'probe': probe_of(plan, h)}) for h in HOSTS)
    assert fabric_problems(ok, plan) == []
    ok['spark-gamma']['probe'] = None  # cx7_netplan_check_fabric: false
    assert fabric_problems(ok, plan) == []
    del ok['spark-delta']
    assert fabric_problems(ok, plan) == ['spark-delta: no post-change check result (the node failed earlier or is unreachable).']


def test_fabric_problems_probe_error():
    plan = make_plan()
    results = dict((h, {'drift': [], 'probe': probe_of(plan, h)}) for h in HOSTS)
    results['spark-beta']['probe']['rail1'] = {'interface': RAIL1, 'link': None, 'pings': [],
                                               'probe_error': '`ip -j addr show dev enp1s0f1np1` failed (rc 1): boom'}
    assert probe_errors('spark-beta', results['spark-beta']['probe']) == [
        'spark-beta rail rail1 (enp1s0f1np1): the fabric probe could not read the interface: `ip -j addr show dev enp1s0f1np1` failed (rc 1): boom']
    assert fabric_problems(results, plan) == probe_errors('spark-beta', results['spark-beta']['probe'])


# ----------------------------------------------------------------------------------------------- the role's data across nodes

HOSTVARS = {
    'spark-alpha': {'seen': {'a': 1}, 'written': {'changed': False}, 'sysctl': {'changed': False}},
    'spark-beta': {'seen': {'b': 2}, 'written': {'changed': True}, 'sysctl': {'changed': False}},
    'spark-gamma': {'written': {'changed': False, 'skipped': True}, 'sysctl': {'changed': True}},
    'spark-delta': {'seen': None},
}


@pytest.mark.parametrize('hosts, name, expected', [
    (HOSTS, 'seen', {'spark-alpha': {'a': 1}, 'spark-beta': {'b': 2}, 'spark-delta': None}),
    (['spark-beta', 'spark-alpha'], 'seen', {'spark-beta': {'b': 2}, 'spark-alpha': {'a': 1}}),
    (['spark-omega', 'spark-gamma'], 'seen', {}),
    ([], 'seen', {}),
])
def test_by_host(hosts, name, expected):
    result = by_host(HOSTVARS, hosts, name)
    assert result == expected and list(result) == list(expected)


def apply_check_condition():
    """The condition on which apply.yml runs the post-change check on every node: whether this run changed a file on any node."""
    with open(os.path.join(ROOT, 'roles', 'cx7_netplan', 'tasks', 'apply.yml'), encoding='utf-8') as handle:
        block = yaml.safe_load(handle)[0]
    task = [t for t in block['block'] if t['name'] == 'Check the rails and the fabric after a change'][0]
    assert task['when'][0] == 'not ansible_check_mode'
    return task['when'][1], task['vars']['_cx7_netplan_nodes']


@pytest.mark.parametrize('written, checks', [
    ({'spark-beta': {'changed': True, 'netplan': {'changed': True}}}, True),
    ({'spark-gamma': {'changed': True, 'sysctl': {'changed': True}}}, True),
    ({'spark-alpha': {'changed': False}, 'spark-gamma': {'changed': False, 'skipped': True}}, False),
    ({}, False),                                                              # no node wrote (e.g. every one failed earlier)
])
def test_the_check_after_a_change_runs_where_any_node_changed_a_file(written, checks):
    condition, nodes = apply_check_condition()
    assert nodes == "{{ ansible_play_batch | map('extract', hostvars) | list }}"
    variables = dict((h, dict([('_cx7_netplan_written', written[h])] if h in written else [])) for h in HOSTS)
    environment = jinja2.Environment()
    environment.tests['changed'] = changed_test
    assert environment.compile_expression(condition)(_cx7_netplan_nodes=[variables[h] for h in HOSTS]) is checks


MISSING = ': not in this play or unreachable: run the network play on every node of the cluster at once (no --limit)'


@pytest.mark.parametrize('problems, expected', [
    (dict((h, []) for h in HOSTS), []),
    ({'spark-beta': ['b1', 'b2'], 'spark-alpha': ['a1'], 'spark-gamma': [], 'spark-delta': None}, ['b1', 'b2', 'a1']),
    ({'spark-alpha': ['a1'], 'spark-beta': []}, ['spark-gamma' + MISSING, 'spark-delta' + MISSING, 'a1']),
    ({}, [h + MISSING for h in HOSTS]),
])
def test_preflight_summary(problems, expected):
    summary = preflight_summary(problems, make_plan())
    assert len(summary) == len(expected)
    for line, start in zip(summary, expected):
        assert line.startswith(start), (line, start)


@pytest.mark.parametrize('results, expected', [
    ({'spark-alpha': {'rc': 0, 'stderr': ''}, 'spark-beta': {'skipped': True}}, []),
    ({'spark-alpha': {'rc': 1, 'stderr': ' Error in network definition: bad address\n'}, 'spark-beta': {'rc': 0}},
     ['spark-alpha: Error in network definition: bad address']),
    ({'spark-gamma': {'rc': 2, 'stderr': '', 'msg': '[Errno 2] No such file or directory: netplan'}, 'spark-beta': {'rc': 1}},
     ['spark-gamma: [Errno 2] No such file or directory: netplan', 'spark-beta: ']),
    ({}, []),
])
def test_generate_rejections(results, expected):
    assert generate_rejections(results) == expected


# ----------------------------------------------------------------------------------------------- the filter

def test_the_other_netplan_files_are_parsed():
    files = [{'path': '/etc/netplan/50-other.yaml', 'content': 'network:\n  ethernets:\n    enp1s0f1np1:\n      dhcp4: true\n'},
             {'path': '/etc/netplan/bad.yaml', 'content': 'network: [\n'}]
    parsed = parse_netplan_files(files)
    assert parsed[0] == {'path': '/etc/netplan/50-other.yaml', 'document': {'network': {'ethernets': {'enp1s0f1np1': {'dhcp4': True}}}}}
    assert [p['path'] for p in parsed] == ['/etc/netplan/50-other.yaml', '/etc/netplan/bad.yaml'] and parsed[1]['document'] is None
    assert 'cannot be parsed' in preflight_problems(node_config(make_plan(), 'spark-alpha'), None, parsed[1:])[0]
    with pytest.raises(NetplanConfigError, match='netplan_files must be a list'):
        parse_netplan_files(['x'])


@pytest.mark.parametrize('kwargs, fragment', [
    ({'renderer': 'systemd'}, '^cx7_netplan_config: .*cx7_netplan_renderer is'),
    ({'mtu': 99999}, '^cx7_netplan_config: '),
])
def test_filter_errors(kwargs, fragment):
    with pytest.raises(AnsibleFilterError, match=fragment):
        cx7_netplan_config(make_plan(), 'spark-alpha', **kwargs)


def test_filter_drift():
    plan = make_plan()
    probe = probe_of(plan, 'spark-beta')
    probe['rail2']['link'] = probe_link(1, 'rail2', mtu=1500)
    result = cx7_netplan_config(plan, 'spark-beta', facts={'cx7': node_facts(1, configured=True)['cx7']}, probe=probe)
    assert result['drift'] == ['spark-beta rail rail2 (enP2p1s0f1np1): MTU is 1500, expected 9000.']
    assert cx7_netplan_config(plan, 'spark-beta', probe=probe)['drift'] == result['drift']
    assert 'drift' not in cx7_netplan_config(plan, 'spark-beta')
    # the checks across nodes are an action, the role's files on a node a module (issue 47)
    assert list(FILTERS) == ['cx7_netplan_config']


# ------------------------------------------------------------------------------- the checks across nodes (the action)

OTHER_FILE = {'path': '/etc/netplan/50-other.yaml', 'content': 'network:\n  ethernets:\n    enp1s0f1np1:\n      dhcp4: true\n'}
OTHER_FILE_PROBLEM = ('spark-alpha: netplan file /etc/netplan/50-other.yaml also configures rail interface enp1s0f1np1 '
                      '(ethernets.enp1s0f1np1): this role owns the rails and never edits files it does not own; remove enp1s0f1np1 '
                      'from /etc/netplan/50-other.yaml.')


def preflight_hostvars(plan, hosts=None, files=None):
    """Every node's variables at the preflight verdict: its configuration, what it reports, its other netplan files (as
    cx7_netplan_files read them)."""
    hosts = hosts or HOSTS
    observed = observed_all()
    return dict((h, {'_cx7_netplan_config': node_config(plan, h), '_cx7_netplan_observed': observed[h],
                     '_cx7_netplan_current': {'others': (files or {}).get(h, []), 'generate': None}}) for h in hosts)


@pytest.mark.parametrize('check, hostvars, play_hosts, problems, header', [
    ('preflight', preflight_hostvars(make_plan()), HOSTS, [], None),
    ('preflight', preflight_hostvars(make_plan(), files={'spark-alpha': [OTHER_FILE]}), HOSTS, [OTHER_FILE_PROBLEM],
     'The CX-7 rails were not configured: 1 problem(s) found; nothing was changed on any node.'),
    # a node of the plan missing from the play comes first
    ('preflight', preflight_hostvars(make_plan(), files={'spark-alpha': [OTHER_FILE]}), HOSTS[:3],
     ['spark-delta' + MISSING + ', so that addresses can be checked across nodes and peers pinged.', OTHER_FILE_PROBLEM],
     'The CX-7 rails were not configured: 2 problem(s) found; nothing was changed on any node.'),
    ('generate', {'spark-alpha': {'_cx7_netplan_current': {'generate': {'rc': 0, 'stderr': ''}}}, 'spark-beta': {}}, HOSTS, [], None),
    ('generate', {'spark-alpha': {'_cx7_netplan_current': {'generate': None}},     # the candidate was the file: not run
                  'spark-beta': {'_cx7_netplan_current': {'generate': {'rc': 1, 'stderr': 'Error in network definition\n'}}}}, HOSTS,
     ['spark-beta: Error in network definition'],
     'netplan generate rejected the candidate rail configuration; nothing was changed on any node.'),
    ('fabric', dict((h, {'_cx7_netplan_result': {'drift': [], 'probe': probe_of(make_plan(), h)}}) for h in HOSTS), HOSTS, [], None),
    ('fabric', dict((h, {'_cx7_netplan_result': {'drift': [], 'probe': probe_of(make_plan(), h)}}) for h in HOSTS[1:]), HOSTS[1:],
     ['spark-alpha: no post-change check result (the node failed earlier or is unreachable).'],
     'The check after configuring the CX-7 rails failed (1 problem(s)):'),
])
def test_verdict(check, hostvars, play_hosts, problems, header):
    found = verdict(check, hostvars, play_hosts, make_plan())
    assert found['problems'] == problems
    assert found['msg'] == ('\n'.join([header] + ['- ' + p for p in problems]) if problems else None)
    result = run_verdict(check, hostvars, play_hosts)
    assert result['changed'] is False and result['problems'] == problems
    assert result.get('failed', False) is bool(problems) and result['msg'] == (found['msg'] or 'No %s problem on any node.' % check)


def run_verdict(check, hostvars, play_hosts, plan=None):
    task = mock.MagicMock()
    task.args = {'check': check, 'plan': plan or make_plan()}
    task.async_val = 0
    task.check_mode = False
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = verdict_action.ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars={'hostvars': hostvars, 'ansible_play_batch': list(play_hosts), 'inventory_hostname': play_hosts[0]})


def test_the_verdict_names_itself_on_inputs_that_are_not_the_roles():
    with pytest.raises(AnsibleActionFail, match='^cx7_netplan_verdict: netplan_files must be a list'):
        run_verdict('preflight', preflight_hostvars(make_plan(), files={'spark-alpha': ['x']}), HOSTS)
