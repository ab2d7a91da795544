# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the fabric check: parsers over real command output (fixtures/fabric/README.md), the report and its diagnosis, and the
fabric_check role's actions (fabric_readiness, fabric_report) and filter (fabric_probe_reusable) over what its tasks register."""

from __future__ import annotations

import base64
import pathlib
from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail, AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.action import fabric_readiness as readiness_action
from ansible_collections.dgxspark.cluster.plugins.action import fabric_report as report_action
from ansible_collections.dgxspark.cluster.plugins.filter.fabric_probe_reusable import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import (
    CAUSE_ADDRESS,
    CAUSE_BANDWIDTH,
    CAUSE_INTERFACE,
    CAUSE_LINK,
    CAUSE_MTU,
    CAUSE_NCCL,
    CAUSE_PROBE,
    CAUSE_SPEED,
    CAUSE_SPEED_100G,
    CAUSE_SWITCH_MTU,
    FabricInputError,
    FabricParseError,
    build_fabric_report,
    nccl_test_max_bytes,
    parse_ethtool,
    parse_ib_write_bw,
    parse_ip_addr_json,
    parse_nccl_tests,
    parse_ping,
    ping_payload,
    ring_pairs,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.fabric_role import (
    NCCL_CONTAINER_NAME,
    collect_probes,
    ib_runs,
    ib_write_bw_readiness,
    meminfo_available_kib,
    nccl_argv,
    nccl_readiness,
    nccl_result,
    nccl_test_readiness,
    probe_reusable,
    rdma_readiness,
    report_inputs,
)

FIXTURES = pathlib.Path(__file__).parent / 'fixtures' / 'fabric'


def fixture(name):
    return (FIXTURES / name).read_text(encoding='utf-8')


# ----------------------------------------------------------------------------------- parsers

@pytest.mark.parametrize('name, transmitted, received, errors, local_mtu, unreachable, error', [
    ('ping_jumbo_ok_lab.txt', 3, 2, 0, None, False, None),
    ('ping_small_ok_lab.txt', 3, 3, 0, None, False, None),
    ('ping_local_mtu_error_lab.txt', 2, 0, 2, 1500, False, 'Warning: source address might be selected on device other than: enP2p1s0f1np1'),
    ('ping_host_unreachable_lab.txt', 3, 0, 2, None, True, 'sendmsg: No route to host'),
    ('ping_network_unreachable_lab.txt', 0, 0, 0, None, False, 'connect: Network is unreachable'),
    # Stopped before its summary after the second reply (the first request was lost): one of two came back.
    ('ping_cut_short_lab.txt', 2, 1, 0, None, False, None),
])
def test_parse_ping(name, transmitted, received, errors, local_mtu, unreachable, error):
    parsed = parse_ping(fixture(name))
    assert (parsed['transmitted'], parsed['received'], parsed['errors']) == (transmitted, received, errors)
    assert parsed['local_mtu'] == local_mtu
    assert parsed['unreachable'] is unreachable
    assert parsed['error'] == error


def test_parse_ping_loss_and_rtt():
    parsed = parse_ping(fixture('ping_jumbo_ok_lab.txt'))
    assert parsed['loss_pct'] == pytest.approx(33.3333)
    assert parsed['rtt_avg_ms'] == pytest.approx(908.2)


@pytest.mark.parametrize('text', ['something else entirely\n', 42])
def test_parse_ping_rejects_unknown(text):
    with pytest.raises(FabricParseError):
        parse_ping(text)


def test_parse_ping_frag_needed():
    # iputils prints this line when a router on the path answers ICMP "fragmentation needed".
    text = ('From 192.168.100.1 icmp_seq=1 Frag needed and DF set (mtu = 1500)\n\n--- 192.168.100.11 ping statistics ---\n'
            '1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms\n')
    assert parse_ping(text)['frag_needed_mtu'] == 1500


@pytest.mark.parametrize('mtu, payload', [(9000, 8972), (1500, 1472), (9216, 9188)])
def test_ping_payload(mtu, payload):
    assert ping_payload(mtu) == payload


@pytest.mark.parametrize('mtu', [None, 'x', 10, True])
def test_ping_payload_rejects(mtu):
    with pytest.raises(FabricInputError):
        ping_payload(mtu)


@pytest.mark.parametrize('name, speed, raw, link', [
    ('ethtool_veth_up_lab.txt', 10000, '10000Mb/s', True),
    ('ethtool_veth_nolink_lab.txt', 10000, '10000Mb/s', False),
    ('ethtool_bond_200g.txt', 200000, '200000Mb/s', True),
    ('ethtool_spark_200g_grep.txt', 200000, '200000Mb/s', None),
    ('ethtool_spark_100g_grep.txt', 100000, '100000Mb/s', None),
    ('ethtool_speed_unknown_nolink.txt', None, 'Unknown!', False),
    ('ethtool_speed_unknown_65535.txt', None, 'Unknown! (65535)', False),
])
def test_parse_ethtool(name, speed, raw, link):
    parsed = parse_ethtool(fixture(name))
    assert parsed['speed_mbps'] == speed
    assert parsed['speed_raw'] == raw
    assert parsed['link_detected'] is link


def test_parse_ethtool_rejects():
    with pytest.raises(FabricParseError, match='Speed'):
        parse_ethtool('netlink error: No such device\n')


@pytest.mark.parametrize('name, gbps, rows, size', [
    ('ib_write_bw_spark_run_infinitely.txt', 92.57, 5, 65536),
    ('ib_write_bw_spark_twin_b.txt', 97.28, 6, 65536),
    ('ib_write_bw_cpufreq_warning_bidir.txt', 98.02, 1, 65536),
    ('ib_write_bw_sweep_roce.txt', 204.59, 23, 8388608),
    ('ib_write_bw_compliance_example.txt', 51.04, 1, 65536),
])
def test_parse_ib_write_bw(name, gbps, rows, size):
    parsed = parse_ib_write_bw(fixture(name))
    assert parsed['bw_average_gbps'] == pytest.approx(gbps, abs=0.01)
    assert len(parsed['rows']) == rows
    assert parsed['bytes'] == size


def test_parse_ib_write_bw_mb_per_sec():
    text = (' #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n'
            ' 65536      664644           0.00               11076.63            0.177226\n')
    assert parse_ib_write_bw(text)['bw_average_gbps'] == pytest.approx(92.92, abs=0.01)


@pytest.mark.parametrize('text, match', [
    (fixture('ib_write_bw_server_waiting_only.txt'), 'no "#bytes'),
    (' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n', 'no result row'),
])
def test_parse_ib_write_bw_rejects(text, match):
    with pytest.raises(FabricParseError, match=match):
        parse_ib_write_bw(text)


@pytest.mark.parametrize('name, avg, best, largest, collective, rows', [
    ('nccl_all_gather_spark_ok.txt', 21.4033, 22.46, 22.46, 'all_gather_perf', 3),
    ('nccl_all_gather_spark_degraded.txt', 2.82151, 2.83, 2.83, 'all_gather_perf', 3),
    ('nccl_all_reduce_h100_2node.txt', 70.742, 338.82, 338.82, None, 8),
])
def test_parse_nccl_tests(name, avg, best, largest, collective, rows):
    parsed = parse_nccl_tests(fixture(name))
    assert parsed['avg_busbw_gbs'] == pytest.approx(avg)
    assert parsed['max_busbw_gbs'] == pytest.approx(best)
    assert parsed['largest_size_busbw_gbs'] == pytest.approx(largest)
    assert parsed['collective'] == collective
    assert parsed['out_of_bounds_ok'] is True
    assert parsed['wrong'] == 0
    assert len(parsed['rows']) == rows


def test_parse_nccl_tests_check_word_and_missing():
    assert parse_nccl_tests('# Avg bus bandwidth    : 22.44 OK\n')['avg_busbw_gbs'] == pytest.approx(22.44)
    with pytest.raises(FabricParseError, match='Avg bus bandwidth'):
        parse_nccl_tests('# nThread 1 nGpus 1\nNCCL WARN Call to ibv_modify_qp failed\n')


@pytest.mark.parametrize('free_gib, nodes, collective, expected_gib', [
    (100, 2, 'all_gather', 16),      # 50 GiB / 1.5 = 33 GiB: capped at 16 GiB
    (40, 2, 'all_gather', 8),
    (40, 4, 'all_reduce', 8),
    (0.1, 2, 'all_gather', None),
])
def test_nccl_test_max_bytes(free_gib, nodes, collective, expected_gib):
    size = nccl_test_max_bytes(int(free_gib * 1024 ** 3), nodes, collective)
    if expected_gib is None:
        assert size is None
    else:
        assert size == min(expected_gib, 16) * 1024 ** 3


def test_parse_ip_addr_json():
    text = ('[{"ifindex":2,"ifname":"enp1s0f1np1","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":9000,"operstate":"UP",'
            '"addr_info":[{"family":"inet","local":"192.168.100.10","prefixlen":24},{"family":"inet6","local":"fe80::1","prefixlen":64}]}]')
    link = parse_ip_addr_json(text, 'enp1s0f1np1')
    assert link == {'present': True, 'operstate': 'UP', 'carrier': True, 'admin_up': True, 'mtu': 9000, 'ipv4': ['192.168.100.10/24'],
                    'ipv6': ['fe80::1']}
    down = parse_ip_addr_json('[{"ifname":"x","flags":["NO-CARRIER","BROADCAST","MULTICAST","UP"],"mtu":1500,"operstate":"DOWN"}]', 'x')
    assert down['carrier'] is False and down['admin_up'] is True
    assert parse_ip_addr_json('', 'x')['present'] is False
    assert parse_ip_addr_json('[]', 'x')['ipv6'] == []
    with pytest.raises(FabricParseError):
        parse_ip_addr_json('not json', 'x')


@pytest.mark.parametrize('hosts, pairs', [
    (['a'], []),
    (['a', 'b'], [('a', 'b')]),
    (['a', 'b', 'c'], [('a', 'b'), ('b', 'c'), ('c', 'a')]),
])
def test_ring_pairs(hosts, pairs):
    assert ring_pairs(hosts) == pairs


# ------------------------------------------------------------------------------------ report

HOSTS = ['spark-alpha', 'spark-beta', 'spark-gamma']
PLAN = {
    'nodes': [{'host': h, 'rank': i, 'rail_addresses': {'rail1': '192.168.100.%d' % (10 + i), 'rail2': '192.168.101.%d' % (10 + i)}}
              for i, h in enumerate(HOSTS)],
    'rails': [{'name': 'rail1', 'interface': 'enp1s0f1np1', 'subnet': '192.168.100.0/24', 'prefixlen': 24},
              {'name': 'rail2', 'interface': 'enP2p1s0f1np1', 'subnet': '192.168.101.0/24', 'prefixlen': 24}],
}
EXPECT = {'mtu': 9000, 'speed_mbps': 200000}
OK_PING = {'transmitted': 3, 'received': 3, 'errors': 0}
LOST_PING = {'transmitted': 3, 'received': 0, 'errors': 0}
MTU_PING = {'transmitted': 3, 'received': 0, 'errors': 3, 'local_mtu': 1500}


def healthy_probes():
    probes = {}
    for i, host in enumerate(HOSTS):
        probes[host] = {}
        for rail in PLAN['rails']:
            third = '100' if rail['name'] == 'rail1' else '101'
            probes[host][rail['name']] = {
                'interface': rail['interface'],
                'link': {'present': True, 'operstate': 'UP', 'carrier': True, 'admin_up': True, 'mtu': 9000,
                         'ipv4': ['192.168.%s.%d/24' % (third, 10 + i)]},
                'ethtool': {'speed_mbps': 200000, 'speed_raw': '200000Mb/s', 'link_detected': True},
                'pings': [{'peer': p, 'kind': k, 'parsed': dict(OK_PING)} for p in HOSTS if p != host for k in ('small', 'jumbo')],
            }
    return probes


def set_pings(probes, host, rail, peer, small=None, jumbo=None):
    for ping in probes[host][rail]['pings']:
        if ping['peer'] == peer and ping['kind'] == 'small' and small is not None:
            ping['parsed'] = dict(small)
        if ping['peer'] == peer and ping['kind'] == 'jumbo' and jumbo is not None:
            ping['parsed'] = dict(jumbo)


def causes(report):
    return sorted((f['host'], f['rail'], f['cause']) for f in report['failures'])


def test_report_healthy():
    report = build_fabric_report(PLAN, healthy_probes(), EXPECT)
    assert report['ok'] is True
    assert report['failures'] == []
    assert [r['peers_reached'] for r in report['rows']] == [2] * 6
    assert report['table'][0].split() == ['node', 'rail', 'interface', 'address', 'state', 'MTU', 'speed', 'peers', 'RDMA', 'Gb/s']
    assert 'spark-beta   rail2  enP2p1s0f1np1  192.168.101.11  up     9000  200G   2/2    -' in report['table']


def test_report_rail_down_names_node_rail_and_cabling():
    probes = healthy_probes()
    link = probes['spark-beta']['rail1']['link']
    link.update(carrier=False, operstate='DOWN')
    probes['spark-beta']['rail1']['ethtool'].update(link_detected=False, speed_mbps=None, speed_raw='Unknown!')
    for host in ('spark-alpha', 'spark-gamma'):
        set_pings(probes, host, 'rail1', 'spark-beta', small=LOST_PING, jumbo=LOST_PING)
    for peer in ('spark-alpha', 'spark-gamma'):
        set_pings(probes, 'spark-beta', 'rail1', peer, small=LOST_PING, jumbo=LOST_PING)
    report = build_fabric_report(PLAN, probes, EXPECT)
    assert causes(report) == [('spark-beta', 'rail1', CAUSE_LINK)]
    assert 'enp1s0f1np1' in report['failure_lines'][0] and 'cable' in report['failure_lines'][0]
    reached = dict(((r['host'], r['rail']), r['peers_reached']) for r in report['rows'])
    assert reached[('spark-alpha', 'rail1')] == 1 and reached[('spark-beta', 'rail1')] == 0 and reached[('spark-beta', 'rail2')] == 2


def test_report_mtu_mismatch_on_one_node():
    probes = healthy_probes()
    probes['spark-gamma']['rail2']['link']['mtu'] = 1500
    for host in ('spark-alpha', 'spark-beta'):
        set_pings(probes, host, 'rail2', 'spark-gamma', jumbo=LOST_PING)
    for peer in ('spark-alpha', 'spark-beta'):
        set_pings(probes, 'spark-gamma', 'rail2', peer, jumbo=MTU_PING)
    report = build_fabric_report(PLAN, probes, EXPECT)
    assert causes(report) == [('spark-gamma', 'rail2', CAUSE_MTU)]
    assert 'MTU of enP2p1s0f1np1 on spark-gamma is 1500, expected 9000' in report['failures'][0]['detail']


def test_report_switch_mtu_when_both_ends_are_right():
    probes = healthy_probes()
    set_pings(probes, 'spark-alpha', 'rail1', 'spark-beta', jumbo=LOST_PING)
    report = build_fabric_report(PLAN, probes, EXPECT)
    assert causes(report) == [('spark-alpha', 'rail1', CAUSE_SWITCH_MTU)]
    assert report['failures'][0]['peer'] == 'spark-beta'
    assert 'DF pings of 8972 bytes' in report['failures'][0]['detail']


def test_report_subnet_when_small_pings_fail():
    probes = healthy_probes()
    set_pings(probes, 'spark-alpha', 'rail2', 'spark-gamma', small=LOST_PING, jumbo=LOST_PING)
    report = build_fabric_report(PLAN, probes, EXPECT)
    assert causes(report) == [('spark-alpha', 'rail2', CAUSE_ADDRESS)]


def test_report_missing_address_and_interface():
    probes = healthy_probes()
    probes['spark-alpha']['rail1']['link']['ipv4'] = []
    probes['spark-beta']['rail2'] = {'interface': 'enP2p1s0f1np1', 'link': {'present': False}, 'pings': []}
    report = build_fabric_report(PLAN, probes, EXPECT)
    assert causes(report) == [('spark-alpha', 'rail1', CAUSE_ADDRESS), ('spark-beta', 'rail2', CAUSE_INTERFACE)]
    assert 'expected 192.168.100.10/24' in report['failures'][0]['detail']


@pytest.mark.parametrize('speed, raw, expected, cause', [
    (100000, '100000Mb/s', 200000, CAUSE_SPEED_100G),
    (50000, '50000Mb/s', 200000, CAUSE_SPEED),
    (None, 'Unknown!', 200000, CAUSE_SPEED),
    (10000, '10000Mb/s', 10000, None),
    (10000, '10000Mb/s', 0, None),
])
def test_report_speed(speed, raw, expected, cause):
    probes = healthy_probes()
    probes['spark-gamma']['rail1']['ethtool'].update(speed_mbps=speed, speed_raw=raw)
    for host in HOSTS:
        for rail in ('rail1', 'rail2'):
            if expected == 10000 and probes[host][rail]['ethtool']['speed_mbps'] == 200000:
                probes[host][rail]['ethtool'].update(speed_mbps=10000, speed_raw='10000Mb/s')
    report = build_fabric_report(PLAN, probes, dict(EXPECT, speed_mbps=expected))
    assert causes(report) == ([('spark-gamma', 'rail1', cause)] if cause else [])
    if cause == CAUSE_SPEED_100G:
        assert 'negotiated 100G' in report['failure_lines'][0]


def test_report_unprobed_node():
    probes = healthy_probes()
    del probes['spark-gamma']
    report = build_fabric_report(PLAN, probes, EXPECT)
    assert causes(report) == [('spark-gamma', 'rail1', CAUSE_PROBE), ('spark-gamma', 'rail2', CAUSE_PROBE)]


def test_report_parses_raw_outputs():
    probes = healthy_probes()
    raw = probes['spark-alpha']['rail1']
    raw['ethtool'] = None
    raw['ethtool_output'] = fixture('ethtool_spark_100g_grep.txt')
    for ping in raw['pings']:
        ping['output'] = fixture('ping_small_ok_lab.txt')
        del ping['parsed']
    report = build_fabric_report(PLAN, probes, EXPECT)
    assert causes(report) == [('spark-alpha', 'rail1', CAUSE_SPEED_100G)]


def test_report_bandwidth_and_nccl():
    bandwidth = [
        {'rail': 'rail1', 'server': 'spark-alpha', 'client': 'spark-beta', 'device': 'rocep1s0f1', 'output': fixture('ib_write_bw_spark_run_infinitely.txt')},
        {'rail': 'rail2', 'server': 'spark-alpha', 'client': 'spark-beta', 'device': 'roceP2p1s0f1', 'output': fixture('ib_write_bw_spark_twin_b.txt')},
        {'rail': 'rail1', 'server': 'spark-beta', 'client': 'spark-gamma', 'device': 'rocep1s0f1', 'gbps': 12.5},
        {'rail': 'rail2', 'server': 'spark-beta', 'client': 'spark-gamma', 'device': 'roceP2p1s0f1',
         'output': fixture('ib_write_bw_server_waiting_only.txt')},
    ]
    nccl = {'collective': 'all_gather', 'output': fixture('nccl_all_gather_spark_degraded.txt'), 'max_bytes': 4294967296}
    report = build_fabric_report(PLAN, healthy_probes(), EXPECT, bandwidth=bandwidth, nccl=nccl, notes=['a note'])
    assert causes(report) == [('spark-alpha,spark-beta,spark-gamma', None, CAUSE_NCCL),
                              ('spark-gamma', 'rail1', CAUSE_BANDWIDTH), ('spark-gamma', 'rail2', CAUSE_BANDWIDTH)]
    details = ' '.join(f['detail'] for f in report['failures'])
    assert 'degraded initialization' in details and 'NET/Socket' in details
    assert 'ib_write_bw rail1 spark-beta -> spark-alpha (rocep1s0f1): 92.57 Gb/s (minimum 85.0)' in report['table']
    assert report['table'][-1] == 'note: a note'
    alpha = [r for r in report['rows'] if r['host'] == 'spark-alpha']
    assert [r['bandwidth_gbps'] for r in alpha] == [92.57, 97.28]


def test_report_nccl_ok():
    nccl = {'collective': 'all_gather', 'output': fixture('nccl_all_gather_spark_ok.txt')}
    report = build_fabric_report(PLAN, healthy_probes(), dict(EXPECT, nccl_min_busbw_gbs=21.0), nccl=nccl)
    assert report['ok'] is True


@pytest.mark.parametrize('plan, expect', [
    ({'nodes': 'x'}, EXPECT),
    (PLAN, {'speed_mbps': 1}),
    (PLAN, {'mtu': 9000, 'speed_mbps': -1}),
])
def test_report_rejects_bad_inputs(plan, expect):
    with pytest.raises(FabricInputError):
        build_fabric_report(plan, {}, expect)


def test_the_filter_is_the_probe_condition_alone():
    assert list(FilterModule().filters()) == ['fabric_probe_reusable']  # the report and readiness are actions (issue 47)


# ------------------------------------------------------------------------------ the fabric_check role's data

FILTERS = FilterModule().filters()
EXPECT_ALL = dict(EXPECT, ib_min_gbps=85.0, nccl_min_busbw_gbs=21.0)


def kept(host='spark-alpha', mtu=9000):
    """The fact cx7_netplan_fabric_probe cx7_netplan keeps for ``host``: {mtu, rails}."""
    return {'mtu': mtu, 'rails': healthy_probes()[host]}


def without(probe, rail, peer, kind):
    probe['rails'][rail]['pings'] = [p for p in probe['rails'][rail]['pings'] if not (p['peer'] == peer and p['kind'] == kind)]
    return probe


def renamed(probe, rail, interface):
    probe['rails'][rail]['interface'] = interface
    return probe


def absent(probe, rail):
    probe['rails'][rail].update(link={'present': False}, pings=[])
    return probe


@pytest.mark.parametrize('probe, mtu, host, reusable', [
    (kept(), 9000, 'spark-alpha', True),
    (kept(), '9000', 'spark-alpha', True),
    (kept(), 9216, 'spark-alpha', False),                                     # other DF payload
    (kept(mtu='x'), 9000, 'spark-alpha', False),
    (None, 9000, 'spark-alpha', False),                                       # cx7_netplan changed nothing: the fact is null
    ({'mtu': 9000}, 9000, 'spark-alpha', False),
    ({'mtu': 9000, 'rails': {'rail1': kept()['rails']['rail1']}}, 9000, 'spark-alpha', False),   # a rail missing
    (renamed(kept(), 'rail2', 'eth9'), 9000, 'spark-alpha', False),           # another interface
    (without(kept(), 'rail1', 'spark-beta', 'small'), 9000, 'spark-alpha', False),   # a peer not pinged
    (kept(), 9000, 'spark-beta', False),                                      # pings of another node
    (absent(kept(), 'rail2'), 9000, 'spark-alpha', True),                     # interface missing: reported as such, no pings
])
def test_probe_reusable(probe, mtu, host, reusable):
    assert probe_reusable(probe, PLAN, mtu, host) is reusable


def hostvars_with(probes=None, skipped=(), kept_probes=None):
    hostvars = {}
    for host in HOSTS:
        variables = {}
        if host in (probes or {}):
            variables['_fabric_check_probe'] = {'changed': False, 'rails': probes[host]}
        if host in skipped:
            variables['_fabric_check_probe'] = {'changed': False, 'skipped': True}
        if host in (kept_probes or {}):
            variables['cx7_netplan_fabric_probe'] = kept_probes[host]
        hostvars[host] = variables
    return hostvars


@pytest.mark.parametrize('hostvars, rails, reused', [
    # fabric_check probed every node itself (no change in this run)
    (hostvars_with(probes=healthy_probes(), kept_probes={'spark-alpha': None}), healthy_probes(), []),
    # cx7_netplan probed every node after its change: reused everywhere
    (hostvars_with(skipped=HOSTS, kept_probes=dict((h, {'mtu': 9000, 'rails': healthy_probes()[h]}) for h in HOSTS)), healthy_probes(), HOSTS),
    # mixed, and a node that was never reached (not in the play)
    (hostvars_with(probes={'spark-alpha': healthy_probes()['spark-alpha']}, skipped=['spark-beta'],
                   kept_probes={'spark-beta': {'mtu': 9000, 'rails': healthy_probes()['spark-beta']}}),
     {'spark-alpha': healthy_probes()['spark-alpha'], 'spark-beta': healthy_probes()['spark-beta'], 'spark-gamma': None}, ['spark-beta']),
    # skipped without a kept probe (not a node of the plan, or failed): not probed
    (hostvars_with(skipped=HOSTS), dict((h, None) for h in HOSTS), []),
    # a kept probe is never read where the node ran its own probe
    (hostvars_with(probes=healthy_probes(), kept_probes=dict((h, {'mtu': 9000, 'rails': {}}) for h in HOSTS)), healthy_probes(), []),
])
def test_collect_probes(hostvars, rails, reused):
    collected = collect_probes(hostvars, PLAN, '_fabric_check_probe', 'cx7_netplan_fabric_probe')
    assert collected['rails'] == rails
    assert collected['reused'] == reused
    assert collected['notes'] == ([('links and pings of %s: measured by the check cx7_netplan ran after changing the rails in this run '
                                    '(cx7_netplan_fabric_probe), not measured again') % ', '.join(reused)] if reused else [])


def test_report_from_a_reused_probe_is_the_same():
    hostvars = hostvars_with(skipped=HOSTS, kept_probes=dict((h, {'mtu': 9000, 'rails': healthy_probes()[h]}) for h in HOSTS))
    collected = collect_probes(hostvars, PLAN, '_fabric_check_probe', 'cx7_netplan_fabric_probe')
    reused = build_fabric_report(PLAN, collected['rails'], EXPECT, notes=collected['notes'])
    own = build_fabric_report(PLAN, healthy_probes(), EXPECT)
    assert reused['rows'] == own['rows'] and reused['ok'] and reused['table'][:-1] == own['table']


DEVICES = {'enp1s0f1np1': 'rocep1s0f1', 'enP2p1s0f1np1': 'roceP2p1s0f1', 'enp1s0f0np0': 'rocep1s0f0'}
IB = '/usr/bin/ib_write_bw'
RDMA_NOTE = ('RDMA bandwidth not measured (skipped): %s lacks /usr/bin/ib_write_bw or an RDMA device behind every rail interface '
             '(enp1s0f1np1, enP2p1s0f1np1)')


@pytest.mark.parametrize('devices, play_hosts, missing', [
    (dict((h, DEVICES) for h in HOSTS), HOSTS, []),
    ({'spark-alpha': DEVICES, 'spark-beta': DEVICES}, HOSTS, ['spark-gamma']),                      # no ib_write_bw there
    (dict((h, DEVICES) for h in HOSTS), HOSTS[:2], ['spark-gamma']),                                # not in the play
    (dict((h, {'enp1s0f1np1': 'rocep1s0f1'}) for h in HOSTS), HOSTS, HOSTS),                         # rail 2 without a device
    ({}, HOSTS, HOSTS),
])
def test_rdma_readiness(devices, play_hosts, missing):
    hostvars = dict((h, {'rdma': devices[h]} if h in devices else {}) for h in HOSTS)
    readiness = rdma_readiness(hostvars, PLAN, play_hosts, 'rdma', IB)
    assert readiness['missing'] == missing
    assert readiness['ready'] == [h for h in HOSTS if h not in missing]
    assert readiness['notes'] == ([RDMA_NOTE % ', '.join(missing)] if missing else [])


def client_result(rail, rc=0, stdout='', stderr='', msg=None):
    result = {'item': {'item': rail, 'ansible_job_id': 'j1'}, 'finished': 1, 'stdout': stdout, 'stderr': stderr}
    if rc is not None:
        result['rc'] = rc
    if msg:
        result['msg'] = msg
    return result


def test_ib_runs():
    rail1, rail2 = PLAN['rails']
    results = [client_result(rail1, stdout=fixture('ib_write_bw_spark_twin_b.txt')),
               client_result(rail2, rc=1, stdout='', stderr=' Couldn\'t connect to 192.168.101.10:18516\n' + 'x' * 400),
               client_result(rail1, rc=None, stdout='', stderr='', msg='async task did not complete within the requested time')]
    runs = ib_runs(results, ['spark-alpha', 'spark-beta'], DEVICES)
    assert [(r['rail'], r['server'], r['client'], r['device']) for r in runs] == [
        ('rail1', 'spark-alpha', 'spark-beta', 'rocep1s0f1'), ('rail2', 'spark-alpha', 'spark-beta', 'roceP2p1s0f1'),
        ('rail1', 'spark-alpha', 'spark-beta', 'rocep1s0f1')]
    assert runs[0]['error'] is None and runs[0]['output'] == fixture('ib_write_bw_spark_twin_b.txt') + '\n'
    assert runs[1]['error'] == 'client exited 1: ' + ('Couldn\'t connect to 192.168.101.10:18516\n' + 'x' * 400)[-300:]
    assert runs[2]['error'] == 'client exited ?: async task did not complete within the requested time'
    report = build_fabric_report(PLAN, healthy_probes(), EXPECT, bandwidth=runs[:2])
    assert causes(report) == [('spark-beta', 'rail2', CAUSE_BANDWIDTH)]


@pytest.mark.parametrize('text, kib', [
    ('MemTotal:       124485016 kB\nMemFree:         1873740 kB\nMemAvailable:   98765432 kB\n', 98765432),
    ('MemTotal:       124485016 kB\n', 0),
    ('', 0),
    (None, 0),
])
def test_meminfo_available_kib(text, kib):
    assert meminfo_available_kib(text) == kib


def meminfo(kib):
    return {'changed': False, 'encoding': 'base64', 'source': '/proc/meminfo',
            'content': base64.b64encode(('MemTotal:       124485016 kB\nMemAvailable:   %d kB\n' % kib).encode()).decode()}


NCCL_MISSING = "NCCL bandwidth not measured (skipped): %s lacks a GPU (/dev/nvidiactl) or the image %s"


@pytest.mark.parametrize('free, play_hosts, image, missing, max_bytes, note', [
    ({'spark-alpha': 40, 'spark-beta': 100, 'spark-gamma': 60}, HOSTS, 'vllm:x', [], 8 * 1024 ** 3, None),           # least: 40 GiB
    ({'spark-alpha': 100, 'spark-beta': 100, 'spark-gamma': 100}, HOSTS, 'vllm:x', [], 16 * 1024 ** 3, None),
    ({'spark-alpha': 40, 'spark-beta': 40}, HOSTS, 'vllm:x', ['spark-gamma'], None, NCCL_MISSING % ('spark-gamma', "'vllm:x'")),
    ({'spark-alpha': 40, 'spark-beta': 40, 'spark-gamma': 40}, HOSTS[:2], '', ['spark-gamma'], None,
     NCCL_MISSING % ('spark-gamma', "'(fabric_check_nccl_image not set)'")),
    ({}, HOSTS, None, HOSTS, None, NCCL_MISSING % (', '.join(HOSTS), "'(fabric_check_nccl_image not set)'")),
    ({'spark-alpha': 0.1, 'spark-beta': 40, 'spark-gamma': 40}, HOSTS, 'vllm:x', [], None,
     'NCCL bandwidth not measured (skipped): less than 64 MiB x 2 free per node (MemAvailable)'),
])
def test_nccl_readiness(free, play_hosts, image, missing, max_bytes, note):
    hostvars = dict((h, {'meminfo': meminfo(int(free[h] * 1024 ** 2))} if h in free else {'meminfo': {'skipped': True}}) for h in HOSTS)
    readiness = nccl_readiness(hostvars, PLAN, play_hosts, 'meminfo', 'all_gather', 0.5, '/dev/nvidiactl', image)
    assert readiness['missing'] == missing
    assert readiness['max_bytes'] == max_bytes
    assert readiness['notes'] == ([note] if note else [])


def test_nccl_readiness_needs_two_nodes():
    plan = {'nodes': PLAN['nodes'][:1], 'rails': PLAN['rails']}
    with pytest.raises(FabricInputError, match='at least 2 nodes'):
        nccl_readiness({'spark-alpha': {'meminfo': meminfo(40 * 1024 ** 2)}}, plan, HOSTS, 'meminfo')


@pytest.mark.parametrize('host, env, expected_env', [
    ('spark-beta', {}, ['NCCL_SOCKET_IFNAME=enp1s0f1np1', 'MASTER_ADDR=192.168.100.10', 'MASTER_PORT=29533', 'RANK=1', 'WORLD_SIZE=3',
                        'FABRIC_CHECK_COLLECTIVE=all_gather', 'FABRIC_CHECK_MAX_BYTES=8589934592', 'NCCL_DEBUG=VERSION']),
    ('spark-alpha', {'NCCL_SOCKET_IFNAME': 'eth9', 'NCCL_IB_DISABLE': 1, 'NCCL_DEBUG': True},
     ['NCCL_SOCKET_IFNAME=eth9', 'MASTER_ADDR=192.168.100.10', 'MASTER_PORT=29533', 'RANK=0', 'WORLD_SIZE=3',
      'FABRIC_CHECK_COLLECTIVE=all_gather', 'FABRIC_CHECK_MAX_BYTES=8589934592', 'NCCL_DEBUG=True', 'NCCL_IB_DISABLE=1']),
])
def test_nccl_argv(host, env, expected_env):
    argv = nccl_argv(PLAN, host, 'vllm:x', ['--gpus=all', '--network=host'], 29533, 'all_gather', 8589934592, env=env)
    # issue 49: the helper is hardened as the serving containers are, whatever docker_args the inventory gives
    assert argv == (['docker', 'run', '--rm', '-i', '--name', NCCL_CONTAINER_NAME, '--cap-drop=ALL', '--cap-add=IPC_LOCK',
                     '--security-opt=no-new-privileges', '--gpus=all', '--network=host']
                    + ['--env=' + e for e in expected_env] + ['vllm:x', 'python3', '-'])


@pytest.mark.parametrize('host, match', [('spark-omega', 'not a node of the cluster plan')])
def test_nccl_argv_rejects(host, match):
    with pytest.raises(FabricInputError, match=match):
        nccl_argv(PLAN, host, 'vllm:x', [], 29533, 'all_gather', 1)


@pytest.mark.parametrize('run, error', [
    ({'rc': 0, 'stdout': fixture('nccl_all_gather_spark_ok.txt'), 'stderr': 'noise'}, None),
    ({'rc': 1, 'stdout': '', 'stderr': 'x' * 500 + 'NCCL WARN connect failed\n'},
     'rank 0 on spark-alpha exited 1: ' + ('x' * 500 + 'NCCL WARN connect failed')[-400:]),
    ({}, 'rank 0 on spark-alpha exited ?: '),
])
def test_nccl_result(run, error):
    result = nccl_result(run, 'spark-alpha', 'all_gather', 8589934592)
    assert result == {'collective': 'all_gather', 'max_bytes': 8589934592, 'output': run.get('stdout', ''), 'error': error}
    report = build_fabric_report(PLAN, healthy_probes(), dict(EXPECT, nccl_min_busbw_gbs=21.0), nccl=result)
    assert report['ok'] is (error is None)


def test_the_probe_filter():
    assert FILTERS['fabric_probe_reusable'](kept(), PLAN, 9000, 'spark-alpha') is True
    with pytest.raises(AnsibleFilterError, match='^fabric_probe_reusable: '):
        FILTERS['fabric_probe_reusable'](kept(), {'nodes': 'x'}, 9000)


# ------------------------------------------------------------------------------ the role's actions

def run_action(module, args, task_vars):
    """An action plugin's run() as the role's task runs it (run_once on the first host of the play)."""
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = module.ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars=dict({'inventory_hostname': HOSTS[0], 'ansible_play_batch': list(HOSTS)}, **task_vars))


@pytest.mark.parametrize('hosts, pairs', [
    (HOSTS, [['spark-alpha', 'spark-beta'], ['spark-beta', 'spark-gamma'], ['spark-gamma', 'spark-alpha']]),
    (HOSTS[:2], [['spark-alpha', 'spark-beta']]),
])
def test_ib_write_bw_readiness_gives_the_pairs(hosts, pairs):
    plan = dict(PLAN, nodes=[n for n in PLAN['nodes'] if n['host'] in hosts])
    hostvars = dict((h, {'_fabric_check_rdma_devices': DEVICES}) for h in hosts)
    readiness = ib_write_bw_readiness(hostvars, plan, hosts, IB)
    assert readiness == {'ready': hosts, 'missing': [], 'notes': [], 'pairs': pairs}


def test_nccl_test_readiness_gives_every_node_its_command_or_none():
    hostvars = dict((h, {'_fabric_check_meminfo': meminfo(40 * 1024 ** 2)}) for h in HOSTS)
    readiness = nccl_test_readiness(hostvars, PLAN, HOSTS, 'vllm:x', ['--gpus=all'], 29533, env={'NCCL_IB_DISABLE': 1})
    assert readiness['max_bytes'] == 8 * 1024 ** 3 and readiness['collective'] == 'all_gather'
    assert readiness['argv'] == dict((h, nccl_argv(PLAN, h, 'vllm:x', ['--gpus=all'], 29533, 'all_gather', 8 * 1024 ** 3,
                                                   env={'NCCL_IB_DISABLE': 1})) for h in HOSTS)
    hostvars['spark-gamma'] = {'_fabric_check_meminfo': {'skipped': True}}
    readiness = nccl_test_readiness(hostvars, PLAN, HOSTS, 'vllm:x', ['--gpus=all'], 29533)
    assert readiness['missing'] == ['spark-gamma'] and readiness['argv'] == {} and readiness['max_bytes'] is None


@pytest.mark.parametrize('args, hostvars, expected', [
    ({'test': 'ib_write_bw'}, dict((h, {'_fabric_check_rdma_devices': DEVICES}) for h in HOSTS),
     {'missing': [], 'notes': [], 'pairs': [['spark-alpha', 'spark-beta'], ['spark-beta', 'spark-gamma'], ['spark-gamma', 'spark-alpha']]}),
    ({'test': 'ib_write_bw', 'ib_write_bw_path': IB}, {'spark-alpha': {'_fabric_check_rdma_devices': DEVICES}},
     {'missing': ['spark-beta', 'spark-gamma'], 'notes': [RDMA_NOTE % 'spark-beta, spark-gamma']}),
    ({'test': 'nccl', 'image': 'vllm:x', 'port': '29533', 'memory_fraction': '0.5', 'docker_args': ['--gpus=all']},
     dict((h, {'_fabric_check_meminfo': meminfo(40 * 1024 ** 2)}) for h in HOSTS),
     {'missing': [], 'notes': [], 'max_bytes': 8 * 1024 ** 3, 'collective': 'all_gather',
      'argv': dict((h, nccl_argv(PLAN, h, 'vllm:x', ['--gpus=all'], 29533, 'all_gather', 8 * 1024 ** 3)) for h in HOSTS)}),
    ({'test': 'nccl', 'collective': 'all_reduce'}, {},
     {'missing': HOSTS, 'max_bytes': None, 'argv': {}, 'collective': 'all_reduce',
      'notes': [NCCL_MISSING % (', '.join(HOSTS), "'(fabric_check_nccl_image not set)'")]}),
])
def test_the_readiness_action(args, hostvars, expected):
    result = run_action(readiness_action, dict(args, plan=PLAN), {'hostvars': hostvars})
    assert result['changed'] is False and not result.get('failed')
    assert dict((key, result[key]) for key in expected) == expected


def test_the_readiness_action_names_itself_on_a_bad_plan():
    with pytest.raises(AnsibleActionFail, match='^fabric_readiness: the cluster plan must be a mapping'):
        run_action(readiness_action, {'test': 'ib_write_bw', 'plan': {'nodes': 1}}, {'hostvars': {}})


def role_hostvars(probes=None, roce=None, nccl_runs=None, devices=None):
    """Every node's variables as the role's tasks register them."""
    hostvars = dict((h, {}) for h in HOSTS)
    for host in HOSTS:
        if probes is not None:
            hostvars[host]['_fabric_check_probe'] = {'changed': False, 'rails': probes[host]}
        if roce is not None:
            hostvars[host]['_fabric_check_roce_ports'] = {'results': roce.get(host, [])}
        if nccl_runs is not None:
            hostvars[host]['_fabric_check_nccl_run'] = nccl_runs.get(host, {'skipped': True})
        if devices is not None:
            hostvars[host]['_fabric_check_rdma_devices'] = devices
    return hostvars


NCCL_READY = {'ready': HOSTS, 'missing': [], 'notes': [], 'max_bytes': 8589934592, 'collective': 'all_gather', 'argv': {}}
NCCL_OK = {'rc': 0, 'stdout': fixture('nccl_all_gather_spark_ok.txt'), 'stderr': ''}


@pytest.mark.parametrize('hostvars, rdma, nccl, ib_results, expected', [
    # probes only, nothing else measured: no bandwidth, no NCCL, an empty RDMA port and NCCL build for every node
    (role_hostvars(probes=healthy_probes()), None, None, None,
     {'bandwidth': None, 'nccl': None, 'notes': [], 'roce': dict((h, []) for h in HOSTS), 'nccl_ranks': dict((h, '') for h in HOSTS)}),
    # skipped measurements: the readiness notes, ib_write_bw's first
    (role_hostvars(probes=healthy_probes()), {'notes': ['rdma skipped']}, dict(NCCL_READY, missing=['spark-gamma'], notes=['nccl skipped']),
     None, {'bandwidth': None, 'nccl': None, 'notes': ['rdma skipped', 'nccl skipped']}),
    # the NCCL test ran: rank 0's result, every rank's output
    (role_hostvars(probes=healthy_probes(), nccl_runs=dict((h, NCCL_OK) for h in HOSTS)), None, NCCL_READY, None,
     {'nccl': nccl_result(NCCL_OK, 'spark-alpha', 'all_gather', 8589934592), 'nccl_ranks': dict((h, NCCL_OK['stdout']) for h in HOSTS)}),
    # rank 0's run skipped although the test was to run: its failure
    (role_hostvars(probes=healthy_probes(), nccl_runs={}), None, NCCL_READY, None,
     {'nccl': nccl_result({'skipped': True}, 'spark-alpha', 'all_gather', 8589934592)}),
    # ib_write_bw pairs: each client's runs with the client's RDMA devices
    (role_hostvars(probes=healthy_probes(), devices=DEVICES), None, None,
     [{'pair': ['spark-alpha', 'spark-beta'], 'clients': [client_result(PLAN['rails'][0], stdout=fixture('ib_write_bw_spark_twin_b.txt'))]},
      {'pair': ['spark-beta', 'spark-gamma'], 'clients': [client_result(PLAN['rails'][1], rc=1, stderr='refused')]}],
     {'bandwidth': ib_runs([client_result(PLAN['rails'][0], stdout=fixture('ib_write_bw_spark_twin_b.txt'))], ['spark-alpha', 'spark-beta'],
                           DEVICES) + ib_runs([client_result(PLAN['rails'][1], rc=1, stderr='refused')], ['spark-beta', 'spark-gamma'], DEVICES)}),
    # the RDMA ports' readings, per node of the play
    (role_hostvars(probes=healthy_probes(), roce={'spark-beta': [{'item': PLAN['rails'][0], 'rc': 0, 'stdout': 'x'}]}), None, None, None,
     {'roce': {'spark-alpha': [], 'spark-beta': [{'item': PLAN['rails'][0], 'rc': 0, 'stdout': 'x'}], 'spark-gamma': []}}),
])
def test_report_inputs(hostvars, rdma, nccl, ib_results, expected):
    inputs = report_inputs(hostvars, PLAN, HOSTS, rdma=rdma, nccl=nccl, ib_results=ib_results)
    assert inputs['probes'] == healthy_probes()
    assert dict((key, inputs[key]) for key in expected) == expected


def test_the_report_action_reads_what_the_role_registered():
    hostvars = hostvars_with(skipped=HOSTS, kept_probes=dict((h, {'mtu': 9000, 'rails': healthy_probes()[h]}) for h in HOSTS))
    for host in HOSTS:
        hostvars[host].update(_fabric_check_nccl_run=NCCL_OK, _fabric_check_rdma_devices=DEVICES)
    task_vars = {'hostvars': hostvars, '_fabric_check_nccl_ready': NCCL_READY, '_fabric_check_rdma': {'skipped': True},
                 '_fabric_check_ib_results': [{'pair': ['spark-alpha', 'spark-beta'], 'clients': [
                     client_result(PLAN['rails'][0], stdout=fixture('ib_write_bw_spark_twin_b.txt'))]}]}
    expect = {'mtu': '9000', 'speed_mbps': '200000', 'ib_min_gbps': '85', 'nccl_min_busbw_gbs': '21'}
    result = run_action(report_action, {'plan': PLAN, 'expect': expect}, task_vars)
    inputs = report_inputs(hostvars, PLAN, HOSTS, nccl=NCCL_READY, ib_results=task_vars['_fabric_check_ib_results'])
    report = build_fabric_report(PLAN, inputs['probes'], EXPECT_ALL, bandwidth=inputs['bandwidth'], nccl=inputs['nccl'], notes=inputs['notes'],
                                 roce=inputs['roce'], nccl_ranks=inputs['nccl_ranks'])
    assert result['changed'] is False and not result.get('failed')
    assert dict((key, result[key]) for key in report) == report
    assert report['ok'] and any('cx7_netplan_fabric_probe' in line for line in report['table'])
    assert any(row['bandwidth_gbps'] for row in report['rows'])


def test_the_report_action_names_itself_on_a_bad_plan():
    with pytest.raises(AnsibleActionFail, match='^fabric_report: the cluster plan must be a mapping'):
        run_action(report_action, {'plan': {'nodes': 1}, 'expect': dict(EXPECT_ALL)}, {'hostvars': {}})
