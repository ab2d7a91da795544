# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RoCE path MTU of each rail (issue 50): ibv_devinfo's active_mtu, parsed from recorded output
(tests/unit/fixtures/fabric/README.md), against what the rail's MTU allows, and the fabric report's failure naming the
port and the fix."""

from __future__ import annotations

import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import build_fabric_report
from ansible_collections.dgxspark.cluster.plugins.module_utils.roce_mtu import (
    CAUSE_ROCE_MTU,
    RoceMtuError,
    expected_active_mtu,
    parse_ibv_devinfo,
    port_failures,
)

from test_fabric import EXPECT, PLAN, healthy_probes

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'fabric')
RAIL = {'name': 'rail1', 'interface': 'enp1s0f1np1'}


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding='utf-8') as handle:
        return handle.read()


@pytest.mark.parametrize('name, port, expected', [
    ('ibv_devinfo_cx7_4096.txt', 1, {'state': 'PORT_DOWN (1)', 'max_mtu': 4096, 'active_mtu': 4096, 'link_layer': 'InfiniBand'}),
    ('ibv_devinfo_cx7_roce_1024_derived.txt', 1, {'state': 'PORT_ACTIVE (4)', 'max_mtu': 4096, 'active_mtu': 1024,
                                                  'link_layer': 'Ethernet'}),
])
def test_parse_ibv_devinfo(name, port, expected):
    parsed = parse_ibv_devinfo(fixture(name))
    assert parsed['hca_id'] == 'mlx5_0'
    assert parsed['ports'] == {port: expected}


def test_parse_reads_the_first_device_of_a_listing_of_several_and_spaces_as_tabs():
    text = fixture('ibv_devinfo_cx7_4096.txt').replace('\t', '        ')
    parsed = parse_ibv_devinfo(text + text.replace('mlx5_0', 'mlx5_1'))
    assert parsed['hca_id'] == 'mlx5_0' and parsed['ports'][1]['active_mtu'] == 4096


@pytest.mark.parametrize('text', ['', 'No IB devices found\n', 'hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n'])
def test_parse_refuses_an_output_without_a_port(text):
    with pytest.raises(RoceMtuError, match='no device and port'):
        parse_ibv_devinfo(text)


# iboe_get_mtu (include/rdma/ib_addr.h): the netdev MTU less 96 bytes of RoCE v2 headers, rounded down to an IB MTU.
@pytest.mark.parametrize('netdev_mtu, active', [
    (9000, 4096), (4200, 4096), (4192, 4096), (4191, 2048), (2200, 2048), (1500, 1024), (1120, 1024), (1119, 512), (300, None),
])
def test_expected_active_mtu(netdev_mtu, active):
    assert expected_active_mtu(netdev_mtu) == active


def test_a_port_left_at_1024_under_a_9000_byte_rail_is_named_with_the_fix():
    [failure] = port_failures('spark-beta', RAIL, 'rocep1s0f1', fixture('ibv_devinfo_cx7_roce_1024_derived.txt'), 9000)
    assert (failure['host'], failure['rail'], failure['interface'], failure['cause']) == (
        'spark-beta', 'rail1', 'enp1s0f1np1', CAUSE_ROCE_MTU)
    assert failure['detail'].startswith('rocep1s0f1 port 1 uses a path MTU of 1024 bytes (active_mtu), but MTU 9000 on '
                                        'enp1s0f1np1 allows 4096: RDMA sends 4 times as many packets')
    assert 'set MTU 9000 on the one `ibdev2netdev` shows for rocep1s0f1' in failure['detail']


@pytest.mark.parametrize('name, netdev_mtu, failed', [
    ('ibv_devinfo_cx7_4096.txt', 9000, False),
    ('ibv_devinfo_cx7_roce_1024_derived.txt', 1500, False),  # a 1500-byte rail allows 1024 only: what it asked for
    ('ibv_devinfo_cx7_4096.txt', 1500, False),  # more than the rail allows is not a slowdown
])
def test_a_port_at_what_its_rail_allows_passes(name, netdev_mtu, failed):
    assert bool(port_failures('spark-beta', RAIL, 'mlx5_0', fixture(name), netdev_mtu)) is failed


def test_a_port_that_cannot_be_read_is_a_failure_too():
    [unreadable] = port_failures('spark-beta', RAIL, 'mlx5_9', 'exit 255: Failed to get IB devices list', 9000)
    assert 'ibv_devinfo -d mlx5_9 -i 1 could not be read' in unreadable['detail']
    [no_port] = port_failures('spark-beta', RAIL, 'mlx5_0', fixture('ibv_devinfo_cx7_4096.txt'), 9000, port=2)
    assert no_port['detail'] == 'ibv_devinfo -d mlx5_0 shows no port 2.'


def registered(rail, text, rc=0, device='rocep1s0f1'):
    """One result of the role's loop over the plan's rails, as Ansible registers a command's."""
    return {'item': rail, 'rc': rc, 'stdout': text if rc == 0 else '', 'stderr': '' if rc == 0 else text,
            'cmd': ['/usr/bin/ibv_devinfo', '-d', device, '-i', '1'], 'changed': False}


def test_the_fabric_report_fails_on_the_port_left_at_1024_and_passes_the_others():
    good, slow = fixture('ibv_devinfo_cx7_4096.txt'), fixture('ibv_devinfo_cx7_roce_1024_derived.txt')
    roce = dict((host, [registered(rail, good) for rail in PLAN['rails']]) for host in ('spark-alpha', 'spark-gamma'))
    roce['spark-beta'] = [registered(PLAN['rails'][0], slow), registered(PLAN['rails'][1], good, device='rocep1s0f0'),
                          {'item': {'name': 'x'}, 'skipped': True}]
    report = build_fabric_report(PLAN, healthy_probes(), EXPECT, roce=roce)
    assert not report['ok']
    assert [line.split(': ', 1)[0] for line in report['failure_lines']] == ['spark-beta rail1 (enp1s0f1np1)']
    assert '[RoCE path MTU] rocep1s0f1 port 1 uses a path MTU of 1024 bytes' in report['failure_lines'][0]
    assert build_fabric_report(PLAN, healthy_probes(), EXPECT, roce={})['ok']  # no ibv_devinfo anywhere: not checked
