#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fabric_probe
short_description: Probe a node's RoCE rails (link, MTU, addresses, speed) and ping every peer with small and DF jumbo pings
version_added: 0.1.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - For every rail, reads the interface with C(ip -j addr show dev <interface>) (existence, carrier, MTU, IPv4 addresses) and
    C(ethtool <interface>) (C(Speed), C(Link detected)).
  - Pings every peer address on the rail twice, out of the rail interface (C(ping -I)); a small ping (56 bytes) and a
    don't-fragment ping whose payload fills a frame of O(mtu) (C(ping -M do -s <mtu - 28>)), so that a jumbo frame that does
    not fit somewhere on the path fails while small pings pass.
  - All pings run concurrently. The module only reads and sends ICMP echo requests; it changes nothing.
  - Returns the raw outputs and their parsed form; the M(dgxspark.cluster.fabric_report) action turns the results of every node into
    the summary table and the diagnosis.
options:
  rails:
    description:
      - The rails to probe, each a dict with C(name) and C(interface) (the C(rails) of the cluster plan; other keys are ignored).
    type: list
    elements: dict
    required: true
  peers:
    description:
      - The other nodes, each a dict with C(host) and C(rail_addresses) (rail name to IPv4 address), as in the C(nodes) of the cluster
        plan; other keys are ignored. An entry whose C(host) is O(host) is skipped.
      - Without peers only the interfaces are read (and C(ping) is not needed).
    type: list
    elements: dict
    default: []
  host:
    description: This node's inventory name, to skip it in O(peers).
    type: str
  mtu:
    description: The expected MTU; the DF ping payload is O(mtu) - 28.
    type: int
    required: true
  count:
    description: Echo requests per ping run.
    type: int
    default: 3
  timeout:
    description: Seconds C(ping -W) waits for each reply.
    type: int
    default: 1
  interval:
    description: Seconds between echo requests (C(ping -i)); below 0.2 needs root.
    type: float
    default: 0.2
  ping_path:
    description: Path of iputils C(ping); default is the one found in E(PATH) and the sbin directories.
    type: path
  ethtool_path:
    description: Path of C(ethtool); default is the one found in E(PATH) and the sbin directories. Without ethtool the speed is not reported.
    type: path
  ip_path:
    description: Path of iproute2 C(ip); default is the one found in E(PATH) and the sbin directories.
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
  - dgxspark.cluster.attributes.POSIX
notes:
  - Needs iputils C(ping) (C(-M do) is not supported by busybox ping) when there are peers to ping, and iproute2 with JSON output.
seealso:
  - module: dgxspark.cluster.fabric_report
"""

EXAMPLES = r"""
- name: Probe both rails of this node
  dgxspark.cluster.fabric_probe:
    mtu: 9000
    rails:
      - name: rail1
        interface: enp1s0f1np1
      - name: rail2
        interface: enP2p1s0f1np1
    peers:
      - host: spark-beta
        rail_addresses: {rail1: 192.168.100.11, rail2: 192.168.101.11}
  register: probe

- name: Probe with the cluster plan
  dgxspark.cluster.fabric_probe:
    mtu: "{{ dgxspark_mtu }}"
    rails: "{{ dgxspark_plan.rails }}"
    peers: "{{ dgxspark_plan.nodes }}"
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
rails:
  description: One entry per rail name.
  returned: always
  type: dict
  contains:
    interface:
      description: The rail's interface.
      type: str
    link:
      description:
        - C(present), C(operstate), C(carrier), C(admin_up), C(mtu), C(ipv4) (CIDR strings) and C(ipv6) (addresses, link-local
          included) from C(ip -j addr).
      type: dict
    ethtool:
      description: C(speed_mbps) (null when unknown), C(speed_raw), C(link_detected), C(duplex); null when ethtool is missing or failed.
      type: dict
    ethtool_output:
      description: Raw C(ethtool) output (stdout and stderr).
      type: str
    pings:
      description: One entry per peer and kind (C(small), C(jumbo)) with C(peer), C(address), C(kind), C(payload), C(rc), C(output) and C(parsed).
      type: list
      elements: dict
  sample:
    rail1:
      interface: enp1s0f1np1
      link: {present: true, operstate: UP, carrier: true, admin_up: true, mtu: 9000, ipv4: ["192.168.100.10/24"], ipv6: []}
      ethtool: {speed_mbps: 200000, speed_raw: "200000Mb/s", link_detected: true, duplex: Full}
      pings:
        - {peer: spark-beta, address: 192.168.100.11, kind: jumbo, payload: 8972, rc: 0, parsed: {transmitted: 3, received: 3}}
"""

import threading

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import (
    FabricParseError,
    SMALL_PING_PAYLOAD,
    parse_ethtool,
    parse_ip_addr_json,
    parse_ping,
    ping_payload,
)

SBIN = ['/usr/sbin', '/sbin', '/usr/local/sbin']


def _run(module, argv):
    rc, out, err = module.run_command(argv, environ_update={'LC_ALL': 'C', 'LANG': 'C'})
    return rc, (out or '') + (err or '')


def probe_rail(module, rail, tools, mtu):
    interface = rail['interface']
    result = {'interface': interface, 'link': None, 'ethtool': None, 'ethtool_output': None, 'pings': []}
    rc, out, err = module.run_command([tools['ip'], '-j', 'addr', 'show', 'dev', interface], environ_update={'LC_ALL': 'C'})
    if rc != 0 and ('does not exist' in (err or '') or 'Cannot find device' in (err or '')):
        out = '[]'
    elif rc != 0:
        result['probe_error'] = '`ip -j addr show dev %s` failed (rc %d): %s' % (interface, rc, (err or out).strip())
        return result
    try:
        result['link'] = parse_ip_addr_json(out, interface)
    except FabricParseError as exc:
        result['probe_error'] = str(exc)
        return result
    if not result['link']['present']:
        return result
    if tools.get('ethtool'):
        rc, text = _run(module, [tools['ethtool'], interface])
        result['ethtool_output'] = text
        try:
            result['ethtool'] = parse_ethtool(text)
        except FabricParseError:
            result['ethtool'] = None
    jobs = []
    for peer in rail.get('peers') or []:
        for kind, argv in (
            ('small', ['-s', str(SMALL_PING_PAYLOAD)]),
            ('jumbo', ['-M', 'do', '-s', str(ping_payload(mtu))]),
        ):
            cmd = [tools['ping'], '-n'] + argv + [
                '-c', str(module.params['count']), '-i', str(module.params['interval']), '-W', str(module.params['timeout']),
                '-I', interface, peer['address']]
            jobs.append({'peer': peer['host'], 'address': peer['address'], 'kind': kind, 'payload': int(argv[-1]), 'cmd': cmd})

    def worker(job):
        rc, text = _run(module, job.pop('cmd'))
        job['rc'] = rc
        job['output'] = text
        try:
            job['parsed'] = parse_ping(text)
        except FabricParseError as exc:
            job['parsed'] = {'transmitted': 0, 'received': 0, 'loss_pct': 100.0, 'rtt_avg_ms': None, 'errors': 0, 'local_mtu': None,
                             'frag_needed_mtu': None, 'unreachable': False, 'error': str(exc)}

    threads = [threading.Thread(target=worker, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result['pings'] = jobs
    return result


def build_rails(module):
    """Rails with their peers' addresses, from the plan-shaped options; fails naming what is missing."""
    rails = []
    for index, rail in enumerate(module.params['rails']):
        if not isinstance(rail.get('name'), str) or not isinstance(rail.get('interface'), str):
            module.fail_json(msg='rails[%d] needs a name and an interface (the rails of the cluster plan), got %r' % (index, rail))
        peers = []
        for peer in module.params['peers']:
            host = peer.get('host')
            if host == module.params['host']:
                continue
            address = (peer.get('rail_addresses') or {}).get(rail['name'])
            if not isinstance(host, str) or not isinstance(address, str):
                module.fail_json(msg='peer %r has no address on rail %s: give every peer host and rail_addresses.%s '
                                     '(the nodes of the cluster plan)' % (host, rail['name'], rail['name']))
            peers.append({'host': host, 'address': address})
        rails.append({'name': rail['name'], 'interface': rail['interface'], 'peers': peers})
    return rails


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rails=dict(type='list', elements='dict', required=True),
            peers=dict(type='list', elements='dict', default=[]),
            host=dict(type='str'),
            mtu=dict(type='int', required=True),
            count=dict(type='int', default=3),
            timeout=dict(type='int', default=1),
            interval=dict(type='float', default=0.2),
            ping_path=dict(type='path'),
            ethtool_path=dict(type='path'),
            ip_path=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    try:
        ping_payload(module.params['mtu'])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    wanted = build_rails(module)
    tools = {
        'ping': module.params['ping_path'] or module.get_bin_path('ping', required=any(r['peers'] for r in wanted), opt_dirs=SBIN),
        'ip': module.params['ip_path'] or module.get_bin_path('ip', required=True, opt_dirs=SBIN),
        'ethtool': module.params['ethtool_path'] or module.get_bin_path('ethtool', opt_dirs=SBIN),
    }
    rails = {}
    for rail in wanted:
        rails[rail['name']] = probe_rail(module, rail, tools, module.params['mtu'])
    module.exit_json(changed=False, rails=rails, ethtool_found=bool(tools['ethtool']))


if __name__ == '__main__':
    main()
