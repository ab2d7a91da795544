# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RoCE path MTU of each rail: what `ibv_devinfo -d DEV -i PORT` says the port uses (active_mtu), against what the
rail's netdev MTU allows. A port left at 1024 while the netdev has 9000 roughly halved prefill on a Spark cluster
(0xSero/local-ai-registry #55): every RDMA message is cut into four times as many packets, and nothing else shows it.

The kernel gives a RoCE port the largest InfiniBand MTU (256, 512, 1024, 2048, 4096) that fits in the netdev's MTU
less the RoCE v2 headers (iboe_get_mtu in include/rdma/ib_addr.h: GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4:
96 bytes): 9000 and 4200 give 4096, 1500 gives 1024. The port follows the netdev it is bound to: a lower active_mtu
means that netdev kept a smaller MTU (on a Spark each CX-7 port has two netdevs and two RDMA devices; one left at 1500
gives its device 1024).
"""

from __future__ import annotations

import re

IB_MTUS = (4096, 2048, 1024, 512, 256)
ROCE_HEADER_BYTES = 96
CAUSE_ROCE_MTU = 'RoCE path MTU'

_PORT = re.compile(r'^\s*port:\s*(\d+)\s*$')
_FIELD = re.compile(r'^\s*([a-z_]+):\s*(.*?)\s*$')
_MTU_VALUE = re.compile(r'^(\d+)\s*\(\d+\)$')


class RoceMtuError(Exception):
    """An ibv_devinfo output that does not describe a port."""


def parse_ibv_devinfo(text):
    """{'hca_id', 'ports': {port number: {'state', 'max_mtu', 'active_mtu', 'link_layer'}}} from `ibv_devinfo [-d DEV]
    [-i PORT]` (rdma-core's format: tab-indented `name: value` lines, a port's under its `port: N` line)."""
    device, ports, port = None, {}, None
    for line in (text or '').splitlines():
        if line.startswith('hca_id:'):
            if device is not None:
                break  # one device: `-d` names it
            device = line.split(':', 1)[1].strip()
            continue
        found = _PORT.match(line)
        if found:
            port = ports.setdefault(int(found.group(1)), {})
            continue
        field = _FIELD.match(line)
        if port is None or not field:
            continue
        name, value = field.groups()
        if name in ('max_mtu', 'active_mtu'):
            mtu = _MTU_VALUE.match(value)
            port[name] = int(mtu.group(1)) if mtu else None
        elif name in ('state', 'link_layer'):
            port[name] = value
    if device is None or not ports:
        raise RoceMtuError('no device and port in the ibv_devinfo output (%r)' % (text or '')[:200])
    return {'hca_id': device, 'ports': ports}


def expected_active_mtu(netdev_mtu):
    """The active_mtu the kernel gives a RoCE port whose netdev has `netdev_mtu` (None below the smallest)."""
    room = int(netdev_mtu) - ROCE_HEADER_BYTES
    return next((mtu for mtu in IB_MTUS if mtu <= room), None)


def port_failures(host, rail, device, text, netdev_mtu, port=1):
    """The fabric report's failures for one rail's RDMA port: its active MTU below what the netdev MTU gives, or a
    port that cannot be read. Each: host, rail, interface, peer, cause, detail."""
    def failure(detail):
        return {'host': host, 'rail': rail['name'], 'interface': rail['interface'], 'peer': None, 'cause': CAUSE_ROCE_MTU,
                'detail': detail}

    try:
        info = parse_ibv_devinfo(text).get('ports', {}).get(port)
    except RoceMtuError as exc:
        return [failure('ibv_devinfo -d %s -i %d could not be read: %s.' % (device, port, exc))]
    if info is None:
        return [failure('ibv_devinfo -d %s shows no port %d.' % (device, port))]
    expected, active = expected_active_mtu(netdev_mtu), info.get('active_mtu')
    if expected is None or active is None or active >= expected:
        return []
    return [failure('%s port %d uses a path MTU of %d bytes (active_mtu), but MTU %d on %s allows %d: RDMA sends %d '
                    'times as many packets (a port left at 1024 roughly halved prefill). The port follows the MTU of the '
                    'netdev it is bound to: set MTU %d on the one `ibdev2netdev` shows for %s (on a Spark each CX-7 port '
                    'has two netdevs, enp1s0f*np* and enP2p1s0f*np*, and NCCL uses both), then run the fabric check again.' % (
                        device, port, active, netdev_mtu, rail['interface'], expected, expected // active, netdev_mtu,
                        device)) if active else
            failure('%s port %d reports no active MTU.' % (device, port))]
