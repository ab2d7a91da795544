# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compute the NCCL / Gloo / UCX / Ray environment of one DGX Spark node.

Pure computation over the CX-7 device records that ``cx7_facts`` returns (see
docs/design.md). Nothing here touches the host. Every problem is raised as
:class:`NcclEnvError` with a message naming the node, the interface or option and
what to do about it.
"""

from __future__ import annotations

import ipaddress
import json
import re

from collections.abc import Mapping


TRANSPORTS = ('rdma', 'socket')

#: MTU below which a rail is reported (jumbo frames are required on the fabric).
MIN_MTU = 9000

#: Settings for GB10, which has no GPUDirect RDMA: NCCL stages through host memory.
HOST_STAGED_ENV = {
    'NCCL_NET_GDR_LEVEL': 'LOC',
    'NCCL_DMABUF_ENABLE': '0',
    'NCCL_NET_GDR_C2C': '0',
    'NCCL_NET_PLUGIN': 'none',
}

#: Socket transport tuning used by working setups.
SOCKET_TUNING_ENV = {
    'NCCL_SOCKET_NTHREADS': '4',
    'NCCL_NSOCKS_PERTHREAD': '4',
}

#: Variables that carry the bootstrap interface name (plain name unless noted).
BOOTSTRAP_IF_KEYS = (
    'NCCL_SOCKET_IFNAME',  # value is "=<if>": exact match
    'GLOO_SOCKET_IFNAME',
    'TP_SOCKET_IFNAME',
    'UCX_NET_DEVICES',
    'OMPI_MCA_btl_tcp_if_include',
)

ENV_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_DIGITS_RE = re.compile(r'^[0-9]+$')


class NcclEnvError(ValueError):
    """A problem with the inputs of the NCCL environment computation."""


def _where(node):
    return 'node %s' % node if node else 'this node'


def validate_transport(transport, node=None):
    """Return the transport, or raise NcclEnvError for anything but rdma/socket."""
    if transport is None:
        return 'rdma'
    if not isinstance(transport, str) or transport not in TRANSPORTS:
        raise NcclEnvError(
            'nccl_env on %s: unknown transport %r; use "rdma" (RoCE through the CX-7 RDMA devices, the default) '
            'or "socket" (TCP fallback) in dgxspark_nccl_transport.' % (_where(node), transport))
    return transport


def validate_gid_index(gid_index, node=None):
    """Return the GID index as int (or None when not given).

    Accepts a non-negative int or a string of ASCII digits; bool and everything else is rejected.
    """
    if gid_index is None:
        return None
    if isinstance(gid_index, bool):
        raise NcclEnvError(
            'nccl_env on %s: gid_index must be a non-negative integer, got the boolean %r; '
            'leave gid_index unset to let NCCL pick the RoCE v2 GID, or give a number such as 3.' % (_where(node), gid_index))
    if isinstance(gid_index, int):
        value = int(gid_index)
    elif isinstance(gid_index, str) and _DIGITS_RE.match(gid_index):
        value = int(gid_index)
    else:
        raise NcclEnvError(
            'nccl_env on %s: gid_index must be a non-negative integer or a string of digits, got %r (%s); '
            'leave gid_index unset to let NCCL pick the RoCE v2 GID, or give a number such as 3.'
            % (_where(node), gid_index, type(gid_index).__name__))
    if value < 0:
        raise NcclEnvError(
            'nccl_env on %s: gid_index must be a non-negative integer, got %d; '
            'leave gid_index unset to let NCCL pick the RoCE v2 GID, or give a number such as 3.' % (_where(node), value))
    return value


def validate_rails(rails, node=None):
    """Return the rails as a list of str; reject empty, non-string and duplicate entries."""
    if rails is None or isinstance(rails, (str, bytes)) or not isinstance(rails, (list, tuple)):
        raise NcclEnvError(
            'nccl_env on %s: rails must be a list of interface names, bootstrap rail first '
            '(for example [enp1s0f1np1, enP2p1s0f1np1]), got %r.' % (_where(node), rails))
    if not rails:
        raise NcclEnvError(
            'nccl_env on %s: rails is empty; give at least one CX-7 interface name, bootstrap rail first '
            '(for example [enp1s0f1np1, enP2p1s0f1np1]), as in the interface fields of dgxspark_rails.' % _where(node))
    seen = []
    for rail in rails:
        if not isinstance(rail, str) or not rail:
            raise NcclEnvError(
                'nccl_env on %s: every rail must be a non-empty interface name, got %r in rails %r.' % (_where(node), rail, list(rails)))
        if rail in seen:
            raise NcclEnvError(
                'nccl_env on %s: interface %s is listed twice in rails %r; list each CX-7 interface once '
                '(each twin is its own rail with its own subnet).' % (_where(node), rail, list(rails)))
        seen.append(rail)
    return seen


def _validate_devices(devices, node):
    if devices is None:
        devices = []
    if isinstance(devices, (str, bytes)) or not isinstance(devices, (list, tuple)):
        raise NcclEnvError(
            'nccl_env on %s: devices must be the list of CX-7 device records (ansible_facts.cx7.devices from '
            'dgxspark.cluster.cx7_facts), got %s.' % (_where(node), type(devices).__name__))
    for index, device in enumerate(devices):
        if not isinstance(device, Mapping):
            raise NcclEnvError(
                'nccl_env on %s: devices[%d] is a %s, not a device record (mapping); pass '
                'ansible_facts.cx7.devices from dgxspark.cluster.cx7_facts.' % (_where(node), index, type(device).__name__))
        if not isinstance(device.get('netdev'), str) or not device.get('netdev'):
            raise NcclEnvError(
                'nccl_env on %s: devices[%d] has no netdev name (%r); pass ansible_facts.cx7.devices from '
                'dgxspark.cluster.cx7_facts.' % (_where(node), index, dict(device)))
    return list(devices)


def _port_of(device, node):
    port = device.get('port', 1)
    if port is None:
        port = 1
    if isinstance(port, bool) or not (isinstance(port, int) or (isinstance(port, str) and _DIGITS_RE.match(port))):
        raise NcclEnvError(
            'nccl_env on %s: RDMA device %s (interface %s) has port %r, which is not a port number; '
            're-gather the facts with dgxspark.cluster.cx7_facts.' % (_where(node), device.get('rdma_device'), device.get('netdev'), port))
    return int(port)


def _is_link_up(device):
    state = device.get('state')
    if state is None:
        return str(device.get('operstate') or '').lower() == 'up'
    return str(state).strip().lower() == 'up'


def _is_rdma_usable(device):
    """An RDMA device counts when its netdev is Up and its port is ACTIVE (when the port state is known)."""
    if not device.get('rdma_device'):
        return False
    if not _is_link_up(device):
        return False
    port_state = device.get('port_state')
    if port_state is None or str(port_state).strip() == '':
        return True
    return str(port_state).strip().upper() == 'ACTIVE'


def _describe(device):
    return '%s port %s (state %s, port_state %s)' % (
        device.get('rdma_device') or '<no RDMA device>', device.get('port', 1), device.get('state'), device.get('port_state'))


def _rail_interfaces(rail, rail_devices, node):
    """Return the list of ipaddress.IPv4Interface of a rail, in order, or raise."""
    addresses = []
    for device in rail_devices:
        cidrs = device.get('ipv4') or []
        if isinstance(cidrs, str):
            cidrs = [cidrs]
        for cidr in cidrs:
            try:
                iface = ipaddress.ip_interface(str(cidr))
            except ValueError:
                raise NcclEnvError(
                    'nccl_env on %s: interface %s has the address %r, which is not an IPv4 CIDR such as '
                    '192.168.100.10/24; re-gather the facts with dgxspark.cluster.cx7_facts.' % (_where(node), rail, cidr)) from None
            if iface.version != 4:
                continue
            if iface not in addresses:
                addresses.append(iface)
    if not addresses:
        raise NcclEnvError(
            'nccl_env on %s: rail interface %s has no IPv4 address; configure the rails first '
            '(dgxspark_rails / dgxspark_rail_addresses, applied by the network role) and re-gather the facts.' % (_where(node), rail))
    return addresses


def _check_subnets(rails, rail_addresses, node):
    for i, rail_a in enumerate(rails):
        for rail_b in rails[i + 1:]:
            for addr_a in rail_addresses[rail_a]:
                for addr_b in rail_addresses[rail_b]:
                    if addr_a.network.overlaps(addr_b.network):
                        subnet = addr_a.network if addr_a.network.prefixlen <= addr_b.network.prefixlen else addr_b.network
                        raise NcclEnvError(
                            'nccl_env on %s: rails %s (%s) and %s (%s) are on the same subnet %s; give each rail its own subnet '
                            '(for example 192.168.100.0/24 and 192.168.101.0/24 in dgxspark_rails): same-subnet twins cause '
                            'routing ambiguity and silent NCCL hangs.' % (_where(node), rail_a, addr_a, rail_b, addr_b, subnet))


def _stringify_extra(key, value, node):
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return str(value)
    raise NcclEnvError(
        'nccl_env on %s: extra_env[%s] is a %s; give a string, number or boolean (null removes the variable).'
        % (_where(node), key, type(value).__name__))


#: What the plan shows for a value only the node knows (its RDMA devices, read from its sysfs).
NODE_VALUE = '<from the node>'
#: The variables whose value only the node knows.
NODE_KEYS = ('NCCL_IB_HCA',)


def _planned(rails, host_ip, transport, gid, gpudirect):
    """(env, per-host keys) of a node from what the plan knows: its bootstrap rail and rail-1 address, the transport;
    NCCL_IB_HCA (rdma) is NODE_VALUE."""
    bootstrap = rails[0]
    env = dict((key, bootstrap) for key in BOOTSTRAP_IF_KEYS)
    env['NCCL_SOCKET_IFNAME'] = '=' + bootstrap  # exact match: a prefix would take enp1s0f0np0 for enp1s0f0np01
    env['VLLM_HOST_IP'] = host_ip
    env['RAY_memory_monitor_refresh_ms'] = '0'
    per_host = set(BOOTSTRAP_IF_KEYS) | {'VLLM_HOST_IP'}
    if transport == 'rdma':
        env['NCCL_IB_HCA'] = NODE_VALUE
        env['NCCL_IB_DISABLE'] = '0'
        per_host.add('NCCL_IB_HCA')
        if gid is not None:
            env['NCCL_IB_GID_INDEX'] = str(gid)
            per_host.add('NCCL_IB_GID_INDEX')
        if not gpudirect:
            env.update(HOST_STAGED_ENV)
    else:
        env['NCCL_IB_DISABLE'] = '1'
        env.update(SOCKET_TUNING_ENV)
    return env, per_host


def planned_nccl_env(rails, host_ip, transport='rdma', gid_index=None, gpudirect=False):
    """A node's NCCL environment as the plan knows it before any node is read: every value but the node's RDMA devices
    (NCCL_IB_HCA is NODE_VALUE). compute_nccl_env gives the same on the node, NCCL_IB_HCA filled in.

    :returns: (env, per_host_keys sorted, node_keys: the keys only the node can fill)."""
    transport = validate_transport(transport)
    rails = validate_rails(rails)
    env, per_host = _planned(rails, str(host_ip), transport, validate_gid_index(gid_index), gpudirect)
    return env, sorted(per_host), [key for key in NODE_KEYS if key in env]


def compute_nccl_env(devices, rails, transport='rdma', gid_index=None, extra_env=None, node=None, gpudirect=False):
    """Compute the environment of one node.

    :arg devices: the CX-7 device records of the node (``ansible_facts.cx7.devices``).
    :arg rails: interface names, bootstrap rail first.
    :arg transport: ``rdma`` (default) or ``socket``.
    :arg gid_index: optional RoCE GID index (int or digits); unset lets NCCL choose.
    :arg extra_env: optional mapping merged last; values are stringified (bool -> 1/0), ``None`` removes a variable.
    :arg node: the node's name, for messages.
    :arg gpudirect: when false (GB10), emit the host-staged NCCL settings.
    :returns: dict with ``env`` (str -> str), ``per_host_keys`` (sorted list) and ``warnings`` (list of str).
    """
    where = _where(node)
    transport = validate_transport(transport, node)
    rails = validate_rails(rails, node)
    gid = validate_gid_index(gid_index, node)
    devices = _validate_devices(devices, node)
    if extra_env is not None and not isinstance(extra_env, Mapping):
        raise NcclEnvError(
            'nccl_env on %s: extra_env must be a mapping of environment variable names to values, got %s.' % (where, type(extra_env).__name__))

    warnings = []
    known = []
    for device in devices:
        if device['netdev'] not in known:
            known.append(device['netdev'])

    rail_devices = {}
    for rail in rails:
        matching = [d for d in devices if d['netdev'] == rail]
        if not matching:
            raise NcclEnvError(
                'nccl_env on %s: rail interface %s is not among the CX-7 devices found there (%s); fix the interface names in '
                'dgxspark_rails or check the cabling and re-gather the facts with dgxspark.cluster.cx7_facts.'
                % (where, rail, ', '.join(known) if known else 'none found'))
        rail_devices[rail] = matching

    rail_addresses = {}
    for rail in rails:
        rail_addresses[rail] = _rail_interfaces(rail, rail_devices[rail], node)
    _check_subnets(rails, rail_addresses, node)

    for rail in rails:
        for addr in rail_addresses[rail]:
            if addr.ip in ipaddress.ip_network('169.254.0.0/16'):
                warnings.append(
                    '%s: interface %s has the link-local address %s; link-local addresses on rails have caused NCCL '
                    'ibv_modify_qp errors, use static addresses.' % (where, rail, addr))
        mtus = [d.get('mtu') for d in rail_devices[rail] if isinstance(d.get('mtu'), int) and not isinstance(d.get('mtu'), bool)]
        if mtus and min(mtus) < MIN_MTU:
            warnings.append(
                '%s: interface %s has MTU %d, below %d; set dgxspark_mtu to 9000 on every CX-7 interface and on the switch '
                '(MTU 1500 gives about 3 GB/s instead of ~22 GB/s).' % (where, rail, min(mtus), MIN_MTU))

    env, per_host = _planned(rails, str(rail_addresses[rails[0]][0].ip), transport, gid, gpudirect)
    bootstrap = rails[0]
    if transport == 'rdma':
        hca = []
        for rail in rails:
            usable = [d for d in rail_devices[rail] if _is_rdma_usable(d)]
            if not usable:
                raise NcclEnvError(
                    'nccl_env on %s: rail interface %s has no Up RDMA device (%s); check the cable and the link '
                    '(ibdev2netdev, ethtool %s), drop the rail from dgxspark_rails, or set dgxspark_nccl_transport to socket.'
                    % (where, rail, '; '.join(_describe(d) for d in rail_devices[rail]), rail))
            for device in sorted(usable, key=lambda d: (str(d['rdma_device']), _port_of(d, node))):
                entry = '%s:%d' % (device['rdma_device'], _port_of(device, node))
                if entry not in hca:
                    hca.append(entry)
                link_layer = device.get('link_layer')
                if link_layer is not None and str(link_layer).strip().lower() != 'ethernet':
                    warnings.append(
                        '%s: RDMA device %s (interface %s) has link layer %s, not Ethernet; DGX Spark CX-7 ports are RoCE v2 '
                        '(Ethernet) only, check that the right interface is named in dgxspark_rails.'
                        % (where, device['rdma_device'], rail, link_layer))
                if gid is not None:
                    indexes = device.get('roce_v2_ipv4_gid_indexes')
                    if isinstance(indexes, (list, tuple)) and gid not in indexes:
                        warnings.append(
                            '%s: NCCL_IB_GID_INDEX=%d is not a RoCE v2 IPv4 GID of %s (interface %s), which has %s; '
                            'leave gid_index unset so NCCL picks the RoCE v2 GID per device.'
                            % (where, gid, device['rdma_device'], rail, list(indexes) or 'none'))
        env['NCCL_IB_HCA'] = '=' + ','.join(hca)
    else:
        warnings.append(
            '%s: transport socket: NCCL runs over TCP on %s and does not use RDMA; expect 4-6 GB/s instead of ~22 GB/s '
            'over RoCE (set dgxspark_nccl_transport to rdma when the RoCE devices are Up).' % (where, bootstrap))
        if not any(_is_link_up(d) for d in rail_devices[bootstrap]):
            warnings.append('%s: bootstrap interface %s is not Up; NCCL and Ray cannot reach the other nodes through it.' % (where, bootstrap))
        if gid is not None:
            warnings.append('%s: gid_index %d is ignored with transport socket.' % (where, gid))

    for key in sorted(extra_env or {}):
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise NcclEnvError(
                'nccl_env on %s: extra_env key %r is not a valid environment variable name (letters, digits and _, '
                'not starting with a digit).' % (where, key))
        value = extra_env[key]
        if value is None:
            env.pop(key, None)
            per_host.discard(key)
            continue
        env[key] = _stringify_extra(key, value, node)

    return {
        'env': env,
        'per_host_keys': sorted(k for k in per_host if k in env),
        'warnings': warnings,
    }


#: The variable the serving containers' start script turns into vLLM's ray_non_carry_over_env_vars.json.
NON_CARRY_OVER_KEY = 'DGXSPARK_RAY_NON_CARRY_OVER'


def serving_container_env(layers, non_carry_over=None):
    """The environment of a node's serving containers: the layers merged in order (a later one wins, a value ``None``
    removes the variable, so a user's extra environment can drop a default), and, with ``non_carry_over``,
    NON_CARRY_OVER_KEY naming, as a JSON list, the variables vLLM's Ray executor must not copy from the driver to the
    other nodes' workers.

    :arg layers: list of mappings (the node's NCCL environment first, the user's extra environment last).
    :arg non_carry_over: names (per-host keys and secrets), deduplicated and sorted in the result; None: no such key
        (a layer that already holds it, ray_cluster's node environment for vllm_container, keeps its value).
    :raises NcclEnvError: on a layer that is not a mapping, or a name that is not a string.
    """
    if not isinstance(layers, (list, tuple)):
        raise NcclEnvError('serving_container_env: the layers must be a list of mappings, got %s.' % type(layers).__name__)
    env = {}
    if non_carry_over is not None:
        names = list(non_carry_over)
        if not all(isinstance(name, str) for name in names):
            raise NcclEnvError('serving_container_env: non_carry_over must be a list of variable names, got %r.' % (names,))
        env[NON_CARRY_OVER_KEY] = json.dumps(sorted(set(names)))
    for index, layer in enumerate(layers):
        if not isinstance(layer, Mapping):
            raise NcclEnvError('serving_container_env: layer %d must be a mapping of variable names to values, got %s.'
                               % (index, type(layer).__name__))
        env.update(layer)
    return {key: value for key, value in env.items() if value is not None}
