# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/nccl_env.py and the nccl_env module."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_env import (
    HOST_STAGED_ENV,
    NcclEnvError,
    compute_nccl_env,
)

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
COLLECTIONS_PATH = os.path.join(REPO_ROOT, '.build', 'collections')

RAIL1 = 'enp1s0f1np1'
RAIL2 = 'enP2p1s0f1np1'
RAILS = [RAIL1, RAIL2]


def _dev(rdma, netdev, state='Up', port_state='ACTIVE', ipv4=None, mtu=9000, link_layer='Ethernet', gids=None,
         physical_port=None, twin=None, port=1):
    return {
        'rdma_device': rdma,
        'port': port,
        'netdev': netdev,
        'state': state,
        'port_state': port_state,
        'link_layer': link_layer,
        'operstate': 'up' if state == 'Up' else 'down',
        'mtu': mtu,
        'ipv4': list(ipv4 or []),
        'speed_mbps': 200000 if state == 'Up' else None,
        'roce_v2_ipv4_gid_indexes': [3] if gids is None else gids,
        'physical_port': physical_port,
        'twin': twin,
    }


def gb10(ip1='192.168.100.10/24', ip2='192.168.101.10/24', **overrides):
    """A GB10 with port 1 cabled (both twins Up) and port 0 empty, in the order NVIDIA's docs print them."""
    devices = [
        _dev('roceP2p1s0f0', 'enP2p1s0f0np0', state='Down', port_state='DOWN', physical_port=0, twin='b'),
        _dev('roceP2p1s0f1', RAIL2, ipv4=[ip2], physical_port=1, twin='b'),
        _dev('rocep1s0f0', 'enp1s0f0np0', state='Down', port_state='DOWN', physical_port=0, twin='a'),
        _dev('rocep1s0f1', RAIL1, ipv4=[ip1], physical_port=1, twin='a'),
    ]
    for netdev, changes in overrides.items():
        for device in devices:
            if device['netdev'] == netdev:
                device.update(changes)
    return devices


def single_rail():
    """A GB10 cabled on one twin only; the other twin carries no address."""
    return [
        _dev('rocep1s0f1', RAIL1, ipv4=['10.0.0.5/24'], physical_port=1, twin='a'),
        _dev('roceP2p1s0f1', RAIL2, state='Down', port_state='DOWN', physical_port=1, twin='b'),
    ]


def mlx5_machine():
    """A non-GB10 host: mlx5 names, unknown GID table, unknown MTU."""
    return [
        _dev('mlx5_0', 'ens6', ipv4=['172.16.0.2/16', '172.16.1.2/16'], mtu=None, gids=None, port_state=None),
        _dev('mlx5_1', 'ens7', ipv4=['172.17.0.2/16'], gids=[]),
    ]


def _mlx5_unknown_gids():
    devices = mlx5_machine()
    devices[0]['roce_v2_ipv4_gid_indexes'] = None
    return devices


# --- success tables ---------------------------------------------------------------------------------------------------

RDMA_CASES = [
    pytest.param(
        gb10(), RAILS,
        {'NCCL_IB_HCA': '=rocep1s0f1:1,roceP2p1s0f1:1', 'NCCL_SOCKET_IFNAME': '=' + RAIL1, 'VLLM_HOST_IP': '192.168.100.10'},
        id='gb10-two-twins'),
    pytest.param(
        gb10(), [RAIL2, RAIL1],
        {'NCCL_IB_HCA': '=roceP2p1s0f1:1,rocep1s0f1:1', 'NCCL_SOCKET_IFNAME': '=' + RAIL2, 'VLLM_HOST_IP': '192.168.101.10'},
        id='gb10-rail-order-follows-rails'),
    pytest.param(
        single_rail(), [RAIL1],
        {'NCCL_IB_HCA': '=rocep1s0f1:1', 'NCCL_SOCKET_IFNAME': '=' + RAIL1, 'VLLM_HOST_IP': '10.0.0.5'},
        id='single-rail'),
    pytest.param(
        mlx5_machine(), ['ens6', 'ens7'],
        {'NCCL_IB_HCA': '=mlx5_0:1,mlx5_1:1', 'NCCL_SOCKET_IFNAME': '=ens6', 'VLLM_HOST_IP': '172.16.0.2'},
        id='mlx5'),
]


@pytest.mark.parametrize('devices, rails, expected', RDMA_CASES)
def test_rdma_env(devices, rails, expected):
    result = compute_nccl_env(devices, rails, node='spark-1')
    env = result['env']
    for key, value in expected.items():
        assert env[key] == value
    bootstrap = rails[0]
    for key in ('GLOO_SOCKET_IFNAME', 'TP_SOCKET_IFNAME', 'UCX_NET_DEVICES', 'OMPI_MCA_btl_tcp_if_include'):
        assert env[key] == bootstrap
    assert env['NCCL_IB_DISABLE'] == '0'
    assert env['RAY_memory_monitor_refresh_ms'] == '0'
    for key, value in HOST_STAGED_ENV.items():
        assert env[key] == value
    assert 'NCCL_IB_GID_INDEX' not in env
    assert 'NCCL_SOCKET_NTHREADS' not in env
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    assert result['per_host_keys'] == sorted([
        'GLOO_SOCKET_IFNAME', 'NCCL_IB_HCA', 'NCCL_SOCKET_IFNAME', 'OMPI_MCA_btl_tcp_if_include',
        'TP_SOCKET_IFNAME', 'UCX_NET_DEVICES', 'VLLM_HOST_IP'])


def test_gb10_full_env_exact():
    result = compute_nccl_env(gb10(), RAILS, node='spark-1')
    assert result == {
        'env': {
            'NCCL_IB_HCA': '=rocep1s0f1:1,roceP2p1s0f1:1',
            'NCCL_IB_DISABLE': '0',
            'NCCL_SOCKET_IFNAME': '=enp1s0f1np1',
            'GLOO_SOCKET_IFNAME': 'enp1s0f1np1',
            'TP_SOCKET_IFNAME': 'enp1s0f1np1',
            'UCX_NET_DEVICES': 'enp1s0f1np1',
            'OMPI_MCA_btl_tcp_if_include': 'enp1s0f1np1',
            'VLLM_HOST_IP': '192.168.100.10',
            'RAY_memory_monitor_refresh_ms': '0',
            'NCCL_NET_GDR_LEVEL': 'LOC',
            'NCCL_DMABUF_ENABLE': '0',
            'NCCL_NET_GDR_C2C': '0',
            'NCCL_NET_PLUGIN': 'none',
        },
        'per_host_keys': ['GLOO_SOCKET_IFNAME', 'NCCL_IB_HCA', 'NCCL_SOCKET_IFNAME', 'OMPI_MCA_btl_tcp_if_include',
                          'TP_SOCKET_IFNAME', 'UCX_NET_DEVICES', 'VLLM_HOST_IP'],
        'warnings': [],
    }


def test_inputs_not_mutated():
    devices = gb10()
    before = copy.deepcopy(devices)
    rails = list(RAILS)
    compute_nccl_env(devices, rails, extra_env={'NCCL_DEBUG': 'INFO'})
    assert devices == before
    assert rails == RAILS


def test_gpudirect_true_drops_host_staged():
    env = compute_nccl_env(gb10(), RAILS, gpudirect=True)['env']
    for key in HOST_STAGED_ENV:
        assert key not in env
    assert env['NCCL_IB_HCA'] == '=rocep1s0f1:1,roceP2p1s0f1:1'


@pytest.mark.parametrize('port_state, state, included', [
    pytest.param('ACTIVE', 'Up', True, id='active-up'),
    pytest.param(None, 'Up', True, id='port-state-unknown'),
    pytest.param('  ACTIVE ', 'Up', True, id='padded'),
    pytest.param('INIT', 'Up', False, id='init'),
    pytest.param('DOWN', 'Up', False, id='port-down'),
    pytest.param('ACTIVE', 'Down', False, id='netdev-down'),
])
def test_up_device_selection(port_state, state, included):
    devices = gb10(**{RAIL2: {'port_state': port_state, 'state': state}})
    if included:
        env = compute_nccl_env(devices, RAILS)['env']
        assert 'roceP2p1s0f1:1' in env['NCCL_IB_HCA']
    else:
        with pytest.raises(NcclEnvError) as exc:
            compute_nccl_env(devices, RAILS, node='spark-2')
        assert 'no Up RDMA device' in str(exc.value)
        assert RAIL2 in str(exc.value)


def test_two_rdma_devices_on_one_netdev_sorted_and_deduplicated():
    devices = [
        _dev('mlx5_1', 'ib0', ipv4=['10.1.0.1/24'], port=2),
        _dev('mlx5_1', 'ib0', ipv4=['10.1.0.1/24'], port=1),
        _dev('mlx5_1', 'ib0', ipv4=['10.1.0.1/24'], port=1),
    ]
    env = compute_nccl_env(devices, ['ib0'])['env']
    assert env['NCCL_IB_HCA'] == '=mlx5_1:1,mlx5_1:2'


def test_state_missing_falls_back_to_operstate():
    devices = single_rail()
    devices[0]['state'] = None
    assert compute_nccl_env(devices, [RAIL1])['env']['NCCL_IB_HCA'] == '=rocep1s0f1:1'
    devices[0]['operstate'] = 'down'
    with pytest.raises(NcclEnvError, match='no Up RDMA device'):
        compute_nccl_env(devices, [RAIL1])


# --- socket -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('devices, rails, host_ip', [
    pytest.param(gb10(), RAILS, '192.168.100.10', id='gb10'),
    pytest.param(single_rail(), [RAIL1], '10.0.0.5', id='single-rail'),
    # socket needs no Up RDMA device on the second rail
    pytest.param(gb10(**{RAIL2: {'state': 'Down', 'port_state': 'DOWN'}}), RAILS, '192.168.100.10', id='second-twin-down'),
])
def test_socket_env(devices, rails, host_ip):
    result = compute_nccl_env(devices, rails, transport='socket', node='spark-1')
    env = result['env']
    assert env['NCCL_IB_DISABLE'] == '1'
    assert 'NCCL_IB_HCA' not in env
    assert env['NCCL_SOCKET_NTHREADS'] == '4'
    assert env['NCCL_NSOCKS_PERTHREAD'] == '4'
    assert env['NCCL_SOCKET_IFNAME'] == '=' + rails[0]
    assert env['GLOO_SOCKET_IFNAME'] == rails[0]
    assert env['VLLM_HOST_IP'] == host_ip
    assert env['RAY_memory_monitor_refresh_ms'] == '0'
    for key in HOST_STAGED_ENV:
        assert key not in env
    assert 'NCCL_IB_HCA' not in result['per_host_keys']
    assert 'NCCL_SOCKET_IFNAME' in result['per_host_keys']
    assert any('RDMA' in w and '4-6 GB/s' in w and '22 GB/s' in w for w in result['warnings'])


def test_socket_ignores_gid_index_with_warning():
    result = compute_nccl_env(gb10(), RAILS, transport='socket', gid_index=3)
    assert 'NCCL_IB_GID_INDEX' not in result['env']
    assert any('gid_index 3 is ignored' in w for w in result['warnings'])


def test_socket_bootstrap_down_warns():
    devices = gb10(**{RAIL1: {'state': 'Down', 'port_state': 'DOWN', 'operstate': 'down'}})
    result = compute_nccl_env(devices, RAILS, transport='socket')
    assert any('bootstrap interface %s is not Up' % RAIL1 in w for w in result['warnings'])


# --- gid_index --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('gid_index, expected, warns', [
    pytest.param(None, None, False, id='unset'),
    pytest.param(0, '0', True, id='int-0-not-roce-v2'),
    pytest.param(3, '3', False, id='int-3'),
    pytest.param('3', '3', False, id='str-3'),
    pytest.param('03', '3', False, id='str-leading-zero'),
    pytest.param('4', '4', True, id='str-4-drifted'),
])
def test_gid_index_valid(gid_index, expected, warns):
    result = compute_nccl_env(gb10(), RAILS, gid_index=gid_index, node='spark-3')
    if expected is None:
        assert 'NCCL_IB_GID_INDEX' not in result['env']
        assert 'NCCL_IB_GID_INDEX' not in result['per_host_keys']
    else:
        assert result['env']['NCCL_IB_GID_INDEX'] == expected
        assert 'NCCL_IB_GID_INDEX' in result['per_host_keys']
    gid_warnings = [w for w in result['warnings'] if 'NCCL_IB_GID_INDEX' in w]
    if warns:
        assert len(gid_warnings) == 2  # one per twin
        assert 'spark-3' in gid_warnings[0] and 'rocep1s0f1' in ' '.join(gid_warnings) and '[3]' in gid_warnings[0]
    else:
        assert not gid_warnings


def test_gid_index_unknown_table_does_not_warn_but_empty_table_does():
    result = compute_nccl_env(_mlx5_unknown_gids(), ['ens6', 'ens7'], gid_index=1)
    gid_warnings = [w for w in result['warnings'] if 'NCCL_IB_GID_INDEX' in w]
    assert len(gid_warnings) == 1
    assert 'mlx5_1' in gid_warnings[0] and 'none' in gid_warnings[0]


@pytest.mark.parametrize('gid_index, fragment', [
    pytest.param(-1, 'got -1', id='negative'),
    pytest.param('x', "got 'x' (str)", id='letters'),
    pytest.param(True, 'boolean True', id='bool-true'),
    pytest.param(False, 'boolean False', id='bool-false'),
    pytest.param('-1', "got '-1' (str)", id='negative-str'),
    pytest.param(' 3', "got ' 3' (str)", id='space'),
    pytest.param(3.0, 'got 3.0 (float)', id='float'),
    pytest.param('', "got '' (str)", id='empty-str'),
    pytest.param([3], 'got [3] (list)', id='list'),
])
def test_gid_index_invalid(gid_index, fragment):
    with pytest.raises(NcclEnvError) as exc:
        compute_nccl_env(gb10(), RAILS, gid_index=gid_index, node='spark-4')
    message = str(exc.value)
    assert 'spark-4' in message
    assert 'gid_index' in message
    assert 'non-negative integer' in message
    assert fragment in message
    assert 'leave gid_index unset' in message


# --- warnings ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('changes, transport, fragments', [
    pytest.param({'mtu': 1500}, 'rdma', ['MTU 1500', RAIL2, 'below 9000'], id='mtu-rdma'),
    pytest.param({'mtu': 1500}, 'socket', ['MTU 1500', RAIL2], id='mtu-socket'),
    pytest.param({'link_layer': 'InfiniBand'}, 'rdma', ['link layer InfiniBand', 'roceP2p1s0f1', RAIL2], id='link-layer'),
    pytest.param({'ipv4': ['169.254.3.4/16']}, 'rdma', ['link-local', '169.254.3.4/16', RAIL2], id='link-local'),
])
def test_warnings(changes, transport, fragments):
    result = compute_nccl_env(gb10(**{RAIL2: changes}), RAILS, transport=transport, node='spark-1')
    matching = [w for w in result['warnings'] if all(f in w for f in fragments)]
    assert len(matching) == 1, result['warnings']
    assert matching[0].startswith('node spark-1:')


@pytest.mark.parametrize('changes', [
    pytest.param({'mtu': 9000}, id='mtu-9000'),
    pytest.param({'mtu': 9216}, id='mtu-9216'),
    pytest.param({'mtu': None}, id='mtu-unknown'),
    pytest.param({'link_layer': None}, id='link-layer-unknown'),
    pytest.param({'link_layer': 'Ethernet'}, id='ethernet'),
])
def test_no_warnings(changes):
    assert compute_nccl_env(gb10(**{RAIL2: changes}), RAILS)['warnings'] == []


def test_link_layer_warning_ignores_down_devices_off_rail():
    devices = gb10(**{'enp1s0f0np0': {'link_layer': 'InfiniBand', 'mtu': 1500}})
    assert compute_nccl_env(devices, RAILS)['warnings'] == []


# --- extra_env --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('extra_env, expected, absent', [
    pytest.param({'NCCL_DEBUG': 'INFO'}, {'NCCL_DEBUG': 'INFO'}, [], id='add'),
    pytest.param({'NCCL_NET_PLUGIN': 'ib'}, {'NCCL_NET_PLUGIN': 'ib'}, [], id='override'),
    pytest.param({'NCCL_IB_TIMEOUT': 22, 'NCCL_X_FLOAT': 0.5}, {'NCCL_IB_TIMEOUT': '22', 'NCCL_X_FLOAT': '0.5'}, [], id='numbers'),
    pytest.param({'NCCL_IB_MERGE_NICS': False, 'NCCL_IB_SUBNET_AWARE_ROUTING': True},
                 {'NCCL_IB_MERGE_NICS': '0', 'NCCL_IB_SUBNET_AWARE_ROUTING': '1'}, [], id='bools'),
    pytest.param({'NCCL_NET_PLUGIN': None}, {}, ['NCCL_NET_PLUGIN'], id='null-removes'),
    pytest.param({'VLLM_HOST_IP': '192.168.100.99'}, {'VLLM_HOST_IP': '192.168.100.99'}, [], id='override-host-ip'),
    pytest.param({}, {}, [], id='empty'),
    pytest.param(None, {}, [], id='none'),
])
def test_extra_env(extra_env, expected, absent):
    env = compute_nccl_env(gb10(), RAILS, extra_env=extra_env)['env']
    for key, value in expected.items():
        assert env[key] == value
    for key in absent:
        assert key not in env
    assert env['NCCL_IB_HCA'] == '=rocep1s0f1:1,roceP2p1s0f1:1'


def test_extra_env_null_removes_per_host_key():
    result = compute_nccl_env(gb10(), RAILS, extra_env={'UCX_NET_DEVICES': None})
    assert 'UCX_NET_DEVICES' not in result['env']
    assert 'UCX_NET_DEVICES' not in result['per_host_keys']
    assert 'GLOO_SOCKET_IFNAME' in result['per_host_keys']


@pytest.mark.parametrize('extra_env, fragment', [
    pytest.param({'1BAD': 'x'}, "'1BAD' is not a valid environment variable name", id='leading-digit'),
    pytest.param({'BAD-NAME': 'x'}, "'BAD-NAME' is not a valid environment variable name", id='dash'),
    pytest.param({'': 'x'}, "'' is not a valid environment variable name", id='empty'),
    pytest.param({'A B': 'x'}, "'A B' is not a valid", id='space'),
    pytest.param({'NCCL_X': ['a']}, 'extra_env[NCCL_X] is a list', id='list-value'),
    pytest.param({'NCCL_X': {'a': 1}}, 'extra_env[NCCL_X] is a dict', id='dict-value'),
    pytest.param(['NCCL_X=1'], 'extra_env must be a mapping', id='not-mapping'),
])
def test_extra_env_invalid(extra_env, fragment):
    with pytest.raises(NcclEnvError) as exc:
        compute_nccl_env(gb10(), RAILS, extra_env=extra_env, node='spark-1')
    assert fragment in str(exc.value)
    assert 'spark-1' in str(exc.value)


# --- errors -----------------------------------------------------------------------------------------------------------

def _both_twins_same_subnet():
    return gb10(ip2='192.168.100.20/24')


def _overlapping_subnets():
    return gb10(ip1='10.0.0.1/16', ip2='10.0.5.1/24')


ERROR_CASES = [
    pytest.param(
        gb10(**{RAIL2: {'state': 'Down', 'port_state': 'DOWN'}}), RAILS, {},
        ['spark-1', RAIL2, 'no Up RDMA device', 'roceP2p1s0f1 port 1 (state Down, port_state DOWN)', 'ibdev2netdev', 'socket'],
        id='rail-down-rdma'),
    pytest.param(
        gb10(), [RAIL1, 'enp1s0f0np9'], {},
        ['spark-1', 'enp1s0f0np9', 'not among the CX-7 devices', 'enP2p1s0f0np0, enP2p1s0f1np1, enp1s0f0np0, enp1s0f1np1',
         'dgxspark_rails'],
        id='unknown-interface'),
    pytest.param(
        [], [RAIL1], {},
        ['spark-1', RAIL1, 'none found', 'cx7_facts'],
        id='no-devices'),
    pytest.param(
        gb10(**{RAIL2: {'ipv4': []}}), RAILS, {},
        ['spark-1', RAIL2, 'no IPv4 address', 'dgxspark_rail_addresses'],
        id='no-ipv4'),
    pytest.param(
        single_rail(), RAILS, {'transport': 'socket'},
        ['spark-1', RAIL2, 'no IPv4 address'],
        id='no-ipv4-socket'),
    pytest.param(
        gb10(**{RAIL2: {'ipv4': ['not-an-ip']}}), RAILS, {},
        ['spark-1', RAIL2, "'not-an-ip'", 'not an IPv4 CIDR'],
        id='bad-cidr'),
    pytest.param(
        _both_twins_same_subnet(), RAILS, {},
        ['spark-1', RAIL1, RAIL2, 'same subnet 192.168.100.0/24', 'own subnet'],
        id='same-subnet'),
    pytest.param(
        _both_twins_same_subnet(), RAILS, {'transport': 'socket'},
        ['spark-1', RAIL1, RAIL2, 'same subnet 192.168.100.0/24'],
        id='same-subnet-socket'),
    pytest.param(
        _overlapping_subnets(), RAILS, {},
        [RAIL1, RAIL2, 'same subnet 10.0.0.0/16'],
        id='overlapping-subnets'),
    pytest.param(
        gb10(), [], {},
        ['spark-1', 'rails is empty', 'enp1s0f1np1'],
        id='empty-rails'),
    pytest.param(
        gb10(), [RAIL1, RAIL2, RAIL1], {},
        ['spark-1', 'interface enp1s0f1np1 is listed twice', 'each CX-7 interface once'],
        id='duplicate-rails'),
    pytest.param(
        gb10(), RAIL1, {},
        ['spark-1', 'rails must be a list'],
        id='rails-is-string'),
    pytest.param(
        gb10(), [RAIL1, ''], {},
        ['spark-1', 'non-empty interface name'],
        id='rails-empty-name'),
    pytest.param(
        gb10(), RAILS, {'transport': 'ib'},
        ['spark-1', "unknown transport 'ib'", 'rdma', 'socket', 'dgxspark_nccl_transport'],
        id='unknown-transport'),
    pytest.param(
        gb10(), RAILS, {'transport': 'RDMA'},
        ["unknown transport 'RDMA'"],
        id='transport-case'),
    pytest.param(
        gb10(), RAILS, {'transport': 1},
        ['unknown transport 1'],
        id='transport-not-str'),
    pytest.param(
        ['rocep1s0f1'], RAILS, {},
        ['spark-1', 'devices[0] is a str', 'cx7_facts'],
        id='device-not-mapping'),
    pytest.param(
        [{'rdma_device': 'rocep1s0f1'}], RAILS, {},
        ['spark-1', 'devices[0] has no netdev'],
        id='device-without-netdev'),
    pytest.param(
        gb10(**{RAIL1: {'port': 'one'}}), RAILS, {},
        ['spark-1', 'rocep1s0f1', "port 'one'"],
        id='bad-port'),
]


@pytest.mark.parametrize('devices, rails, kwargs, fragments', ERROR_CASES)
def test_errors(devices, rails, kwargs, fragments):
    with pytest.raises(NcclEnvError) as exc:
        compute_nccl_env(devices, rails, node='spark-1', **kwargs)
    message = str(exc.value)
    for fragment in fragments:
        assert fragment in message, message
    assert isinstance(exc.value, ValueError)


def test_error_without_node_name_says_this_node():
    with pytest.raises(NcclEnvError, match='on this node'):
        compute_nccl_env(gb10(), [])


def test_transport_default_when_none():
    assert compute_nccl_env(gb10(), RAILS, transport=None)['env']['NCCL_IB_DISABLE'] == '0'


def test_ipv6_addresses_ignored_first_ipv4_used():
    devices = gb10(**{RAIL1: {'ipv4': ['fd00::1/64', '192.168.100.10/24', '192.168.100.11/24']}})
    assert compute_nccl_env(devices, RAILS)['env']['VLLM_HOST_IP'] == '192.168.100.10'


# --- the module, run the way Ansible runs it ---------------------------------------------------------------------------

def _run_module(tmp_path, args):
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    env = dict(os.environ)
    env['PYTHONPATH'] = COLLECTIONS_PATH + os.pathsep + env.get('PYTHONPATH', '')
    proc = subprocess.run(
        [sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.nccl_env', str(args_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(tmp_path), timeout=120, check=False)
    stdout = proc.stdout.decode('utf-8')
    # The JSON result is the last line that parses as an object.
    result = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith('{'):
            result = json.loads(line)
    assert result is not None, 'no JSON result; stdout=%r stderr=%r' % (stdout, proc.stderr)
    return proc.returncode, result


def test_module_success(tmp_path):
    devices = gb10(**{RAIL2: {'mtu': 1500}})
    rc, result = _run_module(tmp_path, {
        'devices': devices,
        'rails': RAILS,
        'node': 'spark-1',
        'gid_index': '3',
        'extra_env': {'NCCL_DEBUG': 'INFO', 'NCCL_IB_MERGE_NICS': False},
        '_ansible_check_mode': True,
    })
    assert rc == 0, result
    assert result['changed'] is False
    assert 'failed' not in result
    assert result['env']['NCCL_IB_HCA'] == '=rocep1s0f1:1,roceP2p1s0f1:1'
    assert result['env']['NCCL_IB_GID_INDEX'] == '3'
    assert result['env']['NCCL_DEBUG'] == 'INFO'
    assert result['env']['NCCL_IB_MERGE_NICS'] == '0'
    assert 'NCCL_IB_GID_INDEX' in result['per_host_keys']
    assert result['per_host_keys'] == sorted(result['per_host_keys'])
    assert len(result['nccl_warnings']) == 1 and 'MTU 1500' in result['nccl_warnings'][0]
    assert any('MTU 1500' in str(w) for w in result.get('warnings', []))


def test_module_failure(tmp_path):
    rc, result = _run_module(tmp_path, {
        'devices': gb10(),
        'rails': [RAIL1, 'enp1s0f0np9'],
        'node': 'spark-2',
    })
    assert rc != 0
    assert result['failed'] is True
    assert 'spark-2' in result['msg']
    assert 'enp1s0f0np9' in result['msg']
    assert 'not among the CX-7 devices' in result['msg']


def test_module_rejects_unknown_transport(tmp_path):
    rc, result = _run_module(tmp_path, {'devices': gb10(), 'rails': RAILS, 'transport': 'infiniband'})
    assert rc != 0
    assert "unknown transport 'infiniband'" in result['msg']
