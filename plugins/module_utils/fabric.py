# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric validation of a DGX Spark cluster: parsers for ping, ethtool, ``ip -j addr``, perftest
``ib_write_bw`` and nccl-tests output, and the summary table with the diagnosis of every failure.

Pure logic, no Ansible objects, stdlib only: the fabric_probe module runs the commands on a node
and the fabric_report action turns what every node saw into one table and one list of failures.

Diagnosis (per node and rail, then per unreachable peer):
  interface missing      -> wrong interface name in dgxspark_rails, or the CX-7 driver is not loaded
  link down (no carrier) -> cabling / link down (cable, transceiver, switch port)
  address missing        -> subnet/address (the network role did not configure the rail)
  MTU differs            -> MTU (node), the DF jumbo pings to and from it fail as a consequence
  speed below expected   -> speed negotiated 100G (switch auto-negotiation) or a degraded link
  small pings fail       -> subnet/address (or the switch/VLAN) between two healthy ends
  DF jumbo pings fail, small pings pass, both ends at the right MTU -> switch MTU
"""

from __future__ import annotations

import json
import re

from ansible_collections.dgxspark.cluster.plugins.module_utils.nccl_identity import failures as nccl_build_failures
from ansible_collections.dgxspark.cluster.plugins.module_utils.roce_mtu import port_failures

# IPv4 (20 bytes) + ICMP (8 bytes) headers: the largest DF payload that fits a frame of MTU m is m - 28.
ICMP_IPV4_OVERHEAD = 28
SMALL_PING_PAYLOAD = 56

DEFAULT_EXPECTED_SPEED_MBPS = 200000
DEFAULT_IB_MIN_GBPS_PER_TWIN = 85.0
DEFAULT_NCCL_MIN_BUSBW_GBS = 21.875

CAUSE_INTERFACE = 'interface missing'
CAUSE_LINK = 'cabling / link down'
CAUSE_ADDRESS = 'subnet/address'
CAUSE_MTU = 'MTU'
CAUSE_SWITCH_MTU = 'switch MTU'
CAUSE_SPEED_100G = 'speed negotiated 100G'
CAUSE_SPEED = 'link speed'
CAUSE_BANDWIDTH = 'RDMA bandwidth'
CAUSE_NCCL = 'NCCL bandwidth'
CAUSE_PROBE = 'probe error'


class FabricParseError(ValueError):
    """Command output that does not have the shape the parser knows."""


class FabricInputError(ValueError):
    """The inputs of the report (plan, probes, expectations) are incomplete or of the wrong type."""


# --------------------------------------------------------------------------------------- ping

_PING_STATS = re.compile(
    r"^(?P<tx>\d+) packets transmitted, (?P<rx>\d+) (?:packets )?received"
    r"(?:, \+(?P<dup>\d+) duplicates)?(?:, \+(?P<corrupt>\d+) corrupted)?(?:, \+(?P<errors>\d+) errors)?"
    r", (?P<loss>[\d.]+)% packet loss", re.MULTILINE)
_PING_RTT = re.compile(r"^(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev))? = [\d.]+/(?P<avg>[\d.]+)/", re.MULTILINE)
# A reply line; counted when ping printed no statistics (it was stopped before its summary).
_PING_REPLY = re.compile(r"^\d+ bytes from \S+: icmp_seq=(?P<seq>\d+)", re.MULTILINE)
_PING_LOCAL_MTU = re.compile(r"local error: [Mm]essage too long, mtu[=:]\s*(?P<mtu>\d+)")
_PING_FRAG_NEEDED = re.compile(r"Frag(?:mentation)? needed and DF set \(mtu = (?P<mtu>\d+)\)")
_PING_UNREACHABLE = re.compile(r"Destination (?:Host|Net) Unreachable")
_PING_ERROR_LINE = re.compile(r"^ping: (?P<msg>.+)$", re.MULTILINE)


def ping_payload(mtu):
    """The ICMP payload (``ping -s``) of a don't-fragment ping that exactly fills a frame of ``mtu``."""
    if not isinstance(mtu, int) or isinstance(mtu, bool) or mtu < 68:
        raise FabricInputError('MTU must be an integer of at least 68, got %r: set dgxspark_mtu.' % (mtu,))
    return mtu - ICMP_IPV4_OVERHEAD


def parse_ping(text):
    """Parse iputils ``ping`` output (stdout and stderr together).

    Returns ``transmitted``, ``received``, ``loss_pct``, ``rtt_avg_ms``, ``errors`` (count of ICMP
    errors), ``local_mtu`` (the MTU in "local error: message too long, mtu=N": the sending interface
    is too small), ``frag_needed_mtu`` (a router on the path answered "Frag needed"), ``unreachable``
    and ``error`` (the first "ping: ..." line, e.g. "connect: Network is unreachable").
    A run that printed no statistics is counted from its reply lines (sent: the highest icmp_seq), or as 0 sent, 0
    received when there is none (ping could not even send).
    """
    if not isinstance(text, str):
        raise FabricParseError('ping output must be text, got %r' % type(text).__name__)
    result = {
        'transmitted': 0, 'received': 0, 'loss_pct': 100.0, 'rtt_avg_ms': None, 'errors': 0,
        'local_mtu': None, 'frag_needed_mtu': None, 'unreachable': bool(_PING_UNREACHABLE.search(text)),
        'error': None,
    }
    stats = _PING_STATS.search(text)
    if stats:
        result['transmitted'] = int(stats.group('tx'))
        result['received'] = int(stats.group('rx'))
        result['errors'] = int(stats.group('errors') or 0)
        result['loss_pct'] = float(stats.group('loss'))
    else:
        # No summary (ping stopped early): the replies it printed still came back.
        seqs = [int(m.group('seq')) for m in _PING_REPLY.finditer(text)]
        if seqs:
            result['transmitted'], result['received'] = max(seqs), len(set(seqs))
            result['loss_pct'] = 100.0 * (max(seqs) - len(set(seqs))) / max(seqs)
    rtt = _PING_RTT.search(text)
    if rtt:
        result['rtt_avg_ms'] = float(rtt.group('avg'))
    local = _PING_LOCAL_MTU.search(text)
    if local:
        result['local_mtu'] = int(local.group('mtu'))
    frag = _PING_FRAG_NEEDED.search(text)
    if frag:
        result['frag_needed_mtu'] = int(frag.group('mtu'))
    err = _PING_ERROR_LINE.search(text)
    if err:
        result['error'] = err.group('msg').strip()
    if not stats and not err and not result['received'] and text.strip():
        raise FabricParseError('ping output has neither a statistics line, a reply nor a "ping:" error line; '
                               'is this iputils ping? Output begins: %r' % text.strip()[:200])
    return result


def ping_ok(parsed):
    """A ping run counts as reaching the peer when at least one reply came back."""
    return bool(parsed) and parsed.get('received', 0) > 0


# ------------------------------------------------------------------------------------ ethtool

_ETHTOOL_SPEED = re.compile(r"^\s*Speed:\s*(?P<speed>\S.*?)\s*$", re.MULTILINE)
_ETHTOOL_LINK = re.compile(r"^\s*Link detected:\s*(?P<link>\w+)", re.MULTILINE)
_ETHTOOL_DUPLEX = re.compile(r"^\s*Duplex:\s*(?P<duplex>\S.*?)\s*$", re.MULTILINE)
_SPEED_MBPS = re.compile(r"^(?P<n>\d+)\s*Mb/s$")


def parse_ethtool(text):
    """Parse ``ethtool <if>``: ``speed_mbps`` (int, or None for "Unknown!"), ``speed_raw``,
    ``link_detected`` (bool or None), ``duplex``."""
    if not isinstance(text, str):
        raise FabricParseError('ethtool output must be text, got %r' % type(text).__name__)
    speed = _ETHTOOL_SPEED.search(text)
    link = _ETHTOOL_LINK.search(text)
    if not speed and not link:
        raise FabricParseError('ethtool output has neither "Speed:" nor "Link detected:"; '
                               'run `ethtool <interface>` (no options). Output begins: %r' % text.strip()[:200])
    result = {'speed_mbps': None, 'speed_raw': None, 'link_detected': None, 'duplex': None}
    if speed:
        raw = speed.group('speed')
        result['speed_raw'] = raw
        number = _SPEED_MBPS.match(raw)
        if number and int(number.group('n')) > 0:
            result['speed_mbps'] = int(number.group('n'))
    if link:
        result['link_detected'] = link.group('link').lower() == 'yes'
    duplex = _ETHTOOL_DUPLEX.search(text)
    if duplex:
        result['duplex'] = duplex.group('duplex')
    return result


# ------------------------------------------------------------------------------------ ip addr

def parse_ip_addr_json(text, interface):
    """Parse ``ip -j addr show dev <interface>``: ``present``, ``operstate``, ``carrier``, ``mtu``,
    ``ipv4`` (CIDR strings), ``ipv6`` (addresses, link-local included). An empty JSON list (or no output)
    means the interface does not exist."""
    if not text or not text.strip():
        return {'present': False, 'operstate': None, 'carrier': None, 'mtu': None, 'ipv4': [], 'ipv6': []}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise FabricParseError('`ip -j addr show dev %s` did not print JSON (%s); iproute2 4.14 or later is needed.' % (interface, exc))
    if not isinstance(data, list):
        raise FabricParseError('`ip -j addr show dev %s` printed %s, not a list.' % (interface, type(data).__name__))
    entries = [e for e in data if isinstance(e, dict) and e.get('ifname') == interface]
    if not entries:
        return {'present': False, 'operstate': None, 'carrier': None, 'mtu': None, 'ipv4': [], 'ipv6': []}
    entry = entries[0]
    flags = entry.get('flags') or []
    return {
        'present': True,
        'operstate': entry.get('operstate'),
        'carrier': 'NO-CARRIER' not in flags and ('LOWER_UP' in flags or entry.get('operstate') == 'UP'),
        'admin_up': 'UP' in flags,
        'mtu': entry.get('mtu'),
        'ipv4': ['%s/%s' % (a.get('local'), a.get('prefixlen')) for a in entry.get('addr_info') or []
                 if a.get('family') == 'inet' and a.get('local')],
        'ipv6': [a.get('local') for a in entry.get('addr_info') or [] if a.get('family') == 'inet6' and a.get('local')],
    }


# ------------------------------------------------------------------------------ ib_write_bw

_IB_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[GM]b?B?/sec)\]\s+BW average\[(?P=unit)\]")
_IB_ROW = re.compile(r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+(?P<avg>[\d.]+)(?:\s+(?P<rate>[\d.]+))?\s*$")
# perftest's MB is 2**20 bytes; --report_gbits reports 10**9 bits.
_MB_PER_SEC_TO_GBPS = 1048576 * 8 / 1e9


def parse_ib_write_bw(text):
    """Parse perftest bandwidth output (``ib_write_bw`` and friends).

    Rows are the lines after the ``#bytes #iterations BW peak[..] BW average[..]`` header that
    consist of numbers only (warnings such as "Conflicting CPU frequency values detected" that
    perftest prints in between are skipped). ``bw_average_gbps`` is the mean BW average of the rows
    with the largest message size (one row for ``-s``/``-D`` runs, several for ``--run_infinitely``,
    the largest size for ``-a`` sweeps), in Gb/s whatever the unit printed.
    """
    if not isinstance(text, str):
        raise FabricParseError('ib_write_bw output must be text, got %r' % type(text).__name__)
    lines = text.splitlines()
    header_at = None
    unit = None
    for index, line in enumerate(lines):
        match = _IB_HEADER.search(line)
        if match:
            header_at = index
            unit = match.group('unit')
    if header_at is None:
        raise FabricParseError('ib_write_bw output has no "#bytes #iterations BW peak[...] BW average[...]" table: the test did not run '
                               '(server not reachable, wrong RDMA device or GID?). Output ends: %r' % text.strip()[-300:])
    factor = 1.0 if unit.startswith('Gb') else _MB_PER_SEC_TO_GBPS
    rows = []
    for line in lines[header_at + 1:]:
        match = _IB_ROW.match(line)
        if match:
            rows.append({
                'bytes': int(match.group('bytes')), 'iterations': int(match.group('iters')),
                'bw_peak_gbps': round(float(match.group('peak')) * factor, 4),
                'bw_average_gbps': round(float(match.group('avg')) * factor, 4),
                'msg_rate_mpps': float(match.group('rate')) if match.group('rate') else None,
            })
        elif line.strip().startswith('---') and rows:
            break
    if not rows:
        raise FabricParseError('ib_write_bw printed its result header but no result row: the test was interrupted. '
                               'Output ends: %r' % text.strip()[-300:])
    largest = max(r['bytes'] for r in rows)
    chosen = [r['bw_average_gbps'] for r in rows if r['bytes'] == largest]
    return {'unit': unit, 'rows': rows, 'bytes': largest, 'bw_average_gbps': round(sum(chosen) / len(chosen), 2)}


# ------------------------------------------------------------------------------- nccl-tests

_NCCL_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>[\d.eE+-]+|nan|inf)\s*(?P<check>OK|FAILED)?", re.MULTILINE)
_NCCL_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<status>OK|FAILED)", re.MULTILINE)
_NCCL_ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+(?P<rest>.+)$")
_NCCL_NAME = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(?P<name>\S+)", re.MULTILINE)


def _float_or_none(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def parse_nccl_tests(text):
    """Parse nccl-tests output (``all_gather_perf``, ``all_reduce_perf``...).

    Returns ``avg_busbw_gbs`` (the "# Avg bus bandwidth" line, GB/s), ``max_busbw_gbs`` (the best
    out-of-place or in-place busbw of any size), ``largest_size_busbw_gbs``, ``wrong`` (sum of the
    #wrong columns that are numbers), ``out_of_bounds_ok``, ``collective`` and ``rows``.
    """
    if not isinstance(text, str):
        raise FabricParseError('nccl-tests output must be text, got %r' % type(text).__name__)
    avg = _NCCL_AVG.search(text)
    if not avg:
        raise FabricParseError('nccl-tests output has no "# Avg bus bandwidth" line: the test did not finish. '
                               'Output ends: %r' % text.strip()[-300:])
    rows = []
    wrong = 0
    for line in text.splitlines():
        match = _NCCL_ROW.match(line)
        if not match:
            continue
        rest = match.group('rest').split()
        if len(rest) < 4:
            continue
        row = {'size': int(match.group('size')), 'type': match.group('type'), 'redop': match.group('redop'),
               'oop_time_us': _float_or_none(rest[0]), 'oop_algbw_gbs': _float_or_none(rest[1]),
               'oop_busbw_gbs': _float_or_none(rest[2]), 'ip_busbw_gbs': _float_or_none(rest[6]) if len(rest) >= 8 else None}
        for column in (rest[3:4] + (rest[7:8] if len(rest) >= 8 else [])):
            if column.isdigit():
                wrong += int(column)
        rows.append(row)
    busbws = [b for r in rows for b in (r['oop_busbw_gbs'], r['ip_busbw_gbs']) if b is not None]
    largest = rows[-1] if rows else None
    oob = _NCCL_OOB.search(text)
    name = _NCCL_NAME.search(text)
    return {
        'avg_busbw_gbs': float(avg.group('bw')),
        'max_busbw_gbs': max(busbws) if busbws else None,
        'largest_size_busbw_gbs': max(b for b in (largest['oop_busbw_gbs'], largest['ip_busbw_gbs']) if b is not None)
        if largest and (largest['oop_busbw_gbs'] is not None or largest['ip_busbw_gbs'] is not None) else None,
        'wrong': wrong,
        'out_of_bounds_ok': (oob.group('status') == 'OK') if oob else None,
        'collective': name.group('name') if name else None,
        'rows': rows,
    }


def nccl_test_max_bytes(free_bytes, nodes, collective='all_gather', fraction=0.5, cap_bytes=16 * 1024 ** 3, floor_bytes=64 * 1024 ** 2):
    """Largest power-of-two message size (bytes) for an nccl-tests run that fits the free memory.

    all_gather_perf -e S allocates a receive buffer of S and a send buffer of S/nodes per rank (and
    all_reduce S + S), so a run needs about 2 x S of (unified) memory per node: a 16 GB all_gather
    froze a Spark with less than 32 GB free (field notes). Only ``fraction`` of the free memory is
    used. Returns None when even ``floor_bytes`` does not fit: the test is then skipped, and says so.
    """
    if not isinstance(free_bytes, int) or isinstance(free_bytes, bool) or free_bytes < 0:
        raise FabricInputError('free memory must be a non-negative integer of bytes, got %r' % (free_bytes,))
    if not isinstance(nodes, int) or nodes < 2:
        raise FabricInputError('an NCCL test needs at least 2 nodes, got %r' % (nodes,))
    per_size = 2.0 if collective == 'all_reduce' else 1.0 + 1.0 / nodes
    budget = free_bytes * fraction / per_size
    size = floor_bytes
    if budget < floor_bytes:
        return None
    while size * 2 <= budget and size * 2 <= cap_bytes:
        size *= 2
    return size


# ------------------------------------------------------------------------------ the report

def node_order(plan):
    if not isinstance(plan, dict) or not isinstance(plan.get('nodes'), list) or not isinstance(plan.get('rails'), list):
        raise FabricInputError('the cluster plan must be a mapping with lists "nodes" and "rails" '
                               '(the plan of dgxspark.cluster.cluster_plan); got %r' % (type(plan).__name__,))
    return [n['host'] for n in plan['nodes']]


def _speed_text(mbps):
    if mbps is None:
        return '-'
    if mbps % 1000 == 0:
        return '%dG' % (mbps // 1000)
    return '%dM' % mbps


def _diagnose_rail(host, rail, expected_address, prefixlen, obs, expectations):
    """State of one node's rail: ('ok'|'down'|..., failures)."""
    interface = rail['interface']
    failures = []
    if obs is None:
        failures.append(_failure(host, rail, CAUSE_PROBE, 'the fabric probe did not run on this node (unreachable or failed earlier); '
                                 'fix the node and run the check again.'))
        return 'unknown', failures
    if obs.get('probe_error'):
        failures.append(_failure(host, rail, CAUSE_PROBE, obs['probe_error']))
        return 'unknown', failures
    link = obs.get('link') or {}
    if not link.get('present'):
        failures.append(_failure(host, rail, CAUSE_INTERFACE, 'interface %s does not exist on %s: check the interface name of rail %s in '
                                 'dgxspark_rails and that the CX-7 driver (mlx5_core) is loaded (`ibdev2netdev`).' % (interface, host, rail['name'])))
        return 'missing', failures
    ethtool = obs.get('ethtool') or {}
    link_down = link.get('carrier') is False or ethtool.get('link_detected') is False or (link.get('operstate') or '').upper() == 'DOWN'
    if link_down:
        if link.get('admin_up') is False:
            detail = 'interface %s on %s is administratively down (`ip link set %s up`, or run the network role).' % (interface, host, interface)
        else:
            detail = ('no link on %s of %s (no carrier, ethtool "Link detected: no"): the cable is unplugged or faulty, the transceiver '
                      'is not seated, or the switch port is down; cable the same QSFP port on every node.' % (interface, host))
        failures.append(_failure(host, rail, CAUSE_LINK, detail))
    state = 'down' if link_down else 'up'
    addresses = link.get('ipv4') or []
    wanted = '%s/%s' % (expected_address, prefixlen)
    if wanted not in addresses:
        have = ', '.join(addresses) or 'none'
        failures.append(_failure(host, rail, CAUSE_ADDRESS, '%s on %s has IPv4 %s, expected %s from the cluster plan: run the network role '
                                 '(cx7_netplan), or fix dgxspark_rail_addresses / the rail subnet.' % (interface, host, have, wanted)))
        if state == 'up':
            state = 'noaddr'
    mtu = link.get('mtu')
    if mtu != expectations['mtu']:
        failures.append(_failure(host, rail, CAUSE_MTU, 'MTU of %s on %s is %s, expected %d (dgxspark_mtu): DF jumbo pings to and from this '
                                 'node fail; run the network role (cx7_netplan) so every node uses MTU %d.' % (
                                     interface, host, mtu, expectations['mtu'], expectations['mtu'])))
        if state == 'up':
            state = 'mtu'
    expected_speed = expectations.get('speed_mbps')
    speed = ethtool.get('speed_mbps')
    if expected_speed and not link_down:
        if speed is None:
            detail = '`ethtool %s` on %s reports speed %r: the link speed cannot be checked against %s; check the link with `ethtool %s`.' % (
                interface, host, ethtool.get('speed_raw') or 'nothing', _speed_text(expected_speed), interface)
            failures.append(_failure(host, rail, CAUSE_SPEED, detail))
        elif speed < expected_speed:
            if speed == 100000 and expected_speed == 200000:
                failures.append(_failure(host, rail, CAUSE_SPEED_100G, '%s on %s negotiated 100G, expected 200G: the switch port auto-negotiated '
                                         '100G; set the switch port to 200G (e.g. 200G-baseCR4) with auto-negotiation off, or check the '
                                         'cable is a 200G QSFP56/QSFP112 one.' % (interface, host)))
            else:
                failures.append(_failure(host, rail, CAUSE_SPEED, '%s on %s runs at %s, expected %s (fabric_check_expected_speed_mbps): check the '
                                         'cable and the switch port speed.' % (interface, host, _speed_text(speed), _speed_text(expected_speed))))
    return state, failures


def _failure(host, rail, cause, detail, peer=None):
    return {'host': host, 'rail': rail['name'] if isinstance(rail, dict) else rail,
            'interface': rail['interface'] if isinstance(rail, dict) else None,
            'peer': peer, 'cause': cause, 'detail': detail}


def _check_expectations(expectations):
    if not isinstance(expectations, dict):
        raise FabricInputError('expectations must be a mapping, got %r' % type(expectations).__name__)
    out = {
        'mtu': expectations.get('mtu'),
        'speed_mbps': expectations.get('speed_mbps', DEFAULT_EXPECTED_SPEED_MBPS),
        'ib_min_gbps': expectations.get('ib_min_gbps', DEFAULT_IB_MIN_GBPS_PER_TWIN),
        'nccl_min_busbw_gbs': expectations.get('nccl_min_busbw_gbs', DEFAULT_NCCL_MIN_BUSBW_GBS),
    }
    if not isinstance(out['mtu'], int) or isinstance(out['mtu'], bool):
        raise FabricInputError('expectations.mtu must be an integer (dgxspark_mtu), got %r' % (out['mtu'],))
    if out['speed_mbps'] is not None and (not isinstance(out['speed_mbps'], int) or out['speed_mbps'] < 0):
        raise FabricInputError('expectations.speed_mbps (fabric_check_expected_speed_mbps) must be a non-negative integer '
                               '(0 skips the check), got %r' % (out['speed_mbps'],))
    return out


def _normalise_probe(probe):
    """Parse the raw outputs of one node's probe of one rail (as the fabric_probe module returns it)."""
    if probe is None:
        return None
    if probe.get('probe_error'):
        return {'probe_error': probe['probe_error']}
    out = {'link': probe.get('link'), 'ethtool': probe.get('ethtool'), 'pings': {}}
    if out['link'] is None and 'ip_json' in probe:
        out['link'] = parse_ip_addr_json(probe.get('ip_json') or '', probe.get('interface'))
    if out['ethtool'] is None and probe.get('ethtool_output'):
        try:
            out['ethtool'] = parse_ethtool(probe['ethtool_output'])
        except FabricParseError:
            out['ethtool'] = None
    for ping in probe.get('pings') or []:
        parsed = ping.get('parsed')
        if parsed is None:
            parsed = parse_ping(ping.get('output') or '')
        out['pings'].setdefault(ping['peer'], {})[ping['kind']] = parsed
    return out


def build_fabric_report(plan, probes, expectations, bandwidth=None, nccl=None, notes=None, roce=None, nccl_ranks=None):
    """Summary table and diagnosis of a fabric check.

    plan: the cluster plan (``nodes`` with ``host``/``rail_addresses``, ``rails`` with ``name``,
      ``interface``, ``prefixlen``).
    probes: host -> rail name -> what fabric_probe returned for that rail (``link``, ``ethtool``,
      ``pings`` [{peer, kind: small|jumbo, parsed|output}]) or None when the node was not probed.
    expectations: ``mtu``, ``speed_mbps`` (0/None: not checked), ``ib_min_gbps`` per twin,
      ``nccl_min_busbw_gbs``.
    bandwidth: list of ib_write_bw runs {rail, server, client, output|gbps, rc, error}; None = not measured.
    nccl: {output|avg_busbw_gbs, error, collective, max_bytes} or None = not measured.
    notes: lines to print under the table (what was skipped and why).
    roce: host -> the registered results of ibv_devinfo over the plan's rails (each: item = the rail, stdout, rc);
      a port whose active MTU is below what expectations' mtu allows is a failure (roce_mtu.port_failures).
    nccl_ranks: host -> that node's NCCL test output (NCCL's version line, the libraries it mapped): the build must be
      one and the same everywhere (nccl_identity.failures).

    Returns ``rows``, ``failures`` (each: host, rail, interface, peer, cause, detail), ``table``
    (text lines), ``failure_lines``, ``ok``.
    """
    order = node_order(plan)
    exp = _check_expectations(expectations)
    probes = probes or {}
    rails = plan['rails']
    addresses = dict((n['host'], n.get('rail_addresses') or {}) for n in plan['nodes'])
    failures = []
    rows = []
    states = {}
    observed = {}
    for host in order:
        host_probe = probes.get(host)
        for rail in rails:
            obs = _normalise_probe(host_probe.get(rail['name'])) if isinstance(host_probe, dict) else None
            if isinstance(host_probe, dict) and rail['name'] not in host_probe:
                obs = None
            observed[(host, rail['name'])] = obs
            state, rail_failures = _diagnose_rail(host, rail, addresses[host].get(rail['name']), rail.get('prefixlen'), obs, exp)
            states[(host, rail['name'])] = state
            failures.extend(rail_failures)

    # Pairwise reachability: explained by an end's own failure, or a path problem between two healthy ends.
    for rail in rails:
        for host in order:
            obs = observed[(host, rail['name'])]
            peers = [p for p in order if p != host]
            reached = 0
            for peer in peers:
                result = (obs or {}).get('pings', {}).get(peer, {})
                small, jumbo = result.get('small'), result.get('jumbo')
                if ping_ok(small) and ping_ok(jumbo):
                    reached += 1
                    continue
                if states[(host, rail['name'])] != 'up' or states[(peer, rail['name'])] not in ('up',):
                    continue  # the failure of this end or of the peer is already listed and explains it
                if small is None or jumbo is None:
                    failures.append(_failure(host, rail, CAUSE_PROBE, 'no ping result from %s to %s on %s.' % (host, peer, rail['name']), peer))
                elif not ping_ok(small):
                    failures.append(_failure(host, rail, CAUSE_ADDRESS, '%s cannot reach %s (%s) on %s even with small pings, although both ends '
                                             'are up and addressed: check that both rail addresses are in subnet %s, that the cable goes to the '
                                             'same switch/VLAN (or straight to the peer), and that no firewall drops ICMP.%s' % (
                                                 host, peer, addresses[peer].get(rail['name']), rail['interface'], rail.get('subnet', '?'),
                                                 _ping_error_text(small)), peer))
                else:
                    failures.append(_failure(host, rail, CAUSE_SWITCH_MTU, '%s reaches %s (%s) on %s with small pings but DF pings of %d bytes '
                                             '(MTU %d) fail while both nodes have MTU %d: a switch port on the path has a smaller MTU; set MTU '
                                             '%d (or 9216) on every switch port of the rail.%s' % (
                                                 host, peer, addresses[peer].get(rail['name']), rail['interface'], ping_payload(exp['mtu']),
                                                 exp['mtu'], exp['mtu'], exp['mtu'], _ping_error_text(jumbo)), peer))
            obs_link = (obs or {}).get('link') or {}
            ethtool = (obs or {}).get('ethtool') or {}
            rows.append({
                'host': host, 'rail': rail['name'], 'interface': rail['interface'],
                'address': addresses[host].get(rail['name']), 'state': states[(host, rail['name'])],
                'mtu': obs_link.get('mtu'), 'speed_mbps': ethtool.get('speed_mbps'),
                'speed_raw': ethtool.get('speed_raw'), 'peers_reached': reached if obs else None, 'peers': len(peers),
                'bandwidth_gbps': None,
            })

    for host in order:
        for result in (roce or {}).get(host) or []:
            if result.get('skipped') or not isinstance(result.get('item'), dict):
                continue
            rail = result['item']
            device = (result.get('cmd') or [None, None, '?'])[2]
            text = result.get('stdout', '') if result.get('rc', 1) == 0 else 'exit %s: %s' % (result.get('rc'), result.get('stderr', ''))
            failures.extend(port_failures(host, rail, device, text, exp['mtu']))
    bw_lines = _bandwidth(rails, rows, bandwidth, exp, failures)
    nccl_line = _nccl(nccl, exp, failures, order)
    build_line, build_failures = nccl_build_failures(nccl_ranks or {}, order)
    failures.extend(build_failures)
    table = render_table(rows, exp)
    if bw_lines:
        table.extend(bw_lines)
    if nccl_line:
        table.append(nccl_line)
    if build_line:
        table.append(build_line)
    for note in notes or []:
        table.append('note: %s' % note)
    failure_lines = [
        '%s %s (%s)%s: [%s] %s' % (f['host'], f['rail'] or '-', f['interface'] or '-', (' -> %s' % f['peer']) if f['peer'] else '', f['cause'], f['detail'])
        for f in failures]
    return {'rows': rows, 'failures': failures, 'failure_lines': failure_lines, 'table': table, 'ok': not failures}


def _ping_error_text(parsed):
    if not parsed:
        return ''
    if parsed.get('local_mtu'):
        return ' (ping: local error, mtu=%d)' % parsed['local_mtu']
    if parsed.get('frag_needed_mtu'):
        return ' (a router answered "Frag needed", mtu=%d)' % parsed['frag_needed_mtu']
    if parsed.get('error'):
        return ' (ping: %s)' % parsed['error']
    if parsed.get('unreachable'):
        return ' (Destination Host Unreachable: no ARP reply)'
    return ' (%d sent, %d received)' % (parsed.get('transmitted', 0), parsed.get('received', 0))


def _bandwidth(rails, rows, bandwidth, exp, failures):
    if bandwidth is None:
        return []
    lines = []
    by_rail = dict((r['name'], r) for r in rails)
    for run in bandwidth:
        rail = by_rail.get(run.get('rail'), {'name': run.get('rail'), 'interface': None})
        gbps = run.get('gbps')
        error = run.get('error')
        if gbps is None and not error:
            try:
                gbps = parse_ib_write_bw(run.get('output') or '')['bw_average_gbps']
            except FabricParseError as exc:
                error = str(exc)
        label = 'ib_write_bw %s %s -> %s (%s)' % (rail['name'], run.get('client'), run.get('server'), run.get('device') or '-')
        if error:
            failures.append(_failure(run.get('client'), rail, CAUSE_BANDWIDTH, 'ib_write_bw from %s to %s on %s failed: %s' % (
                run.get('client'), run.get('server'), rail['name'], error), run.get('server')))
            lines.append('%s: failed' % label)
            continue
        for row in rows:
            if row['rail'] == rail['name'] and row['host'] in (run.get('client'), run.get('server')):
                row['bandwidth_gbps'] = gbps if row['bandwidth_gbps'] is None else min(row['bandwidth_gbps'], gbps)
        lines.append('%s: %.2f Gb/s (minimum %.1f)' % (label, gbps, exp['ib_min_gbps']))
        if gbps < exp['ib_min_gbps']:
            if gbps <= 25:
                why = ('8 to 25 Gb/s per rail is the signature of a ConnectX-7 left in a degraded initialization state (NVIDIA '
                       'connect-two-sparks guide): reboot both nodes with the final cabling, then power-cycle them if it stays')
            elif gbps <= exp['ib_min_gbps'] * 0.6:
                why = 'about half the expected figure: the link runs at 100G, or the RoCE MTU/PFC settings limit it; check ethtool speed and MTU'
            else:
                why = 'check the link speed, MTU and that nothing else loads the rail'
            failures.append(_failure(run.get('client'), rail, CAUSE_BANDWIDTH, 'ib_write_bw from %s to %s on %s measured %.2f Gb/s, below %.1f '
                                     '(fabric_check_ib_min_gbps): %s.' % (run.get('client'), run.get('server'), rail['name'], gbps,
                                                                          exp['ib_min_gbps'], why), run.get('server')))
    return lines


def _nccl(nccl, exp, failures, order):
    if nccl is None:
        return None
    everyone = ','.join(order)
    if nccl.get('error'):
        failures.append({'host': everyone, 'rail': None, 'interface': None, 'peer': None, 'cause': CAUSE_NCCL,
                         'detail': 'the NCCL bandwidth test failed: %s' % nccl['error']})
        return 'NCCL %s: failed' % (nccl.get('collective') or 'test')
    busbw = nccl.get('avg_busbw_gbs')
    if busbw is None:
        try:
            busbw = parse_nccl_tests(nccl.get('output') or '')['avg_busbw_gbs']
        except FabricParseError as exc:
            failures.append({'host': everyone, 'rail': None, 'interface': None, 'peer': None, 'cause': CAUSE_NCCL, 'detail': str(exc)})
            return 'NCCL %s: no result' % (nccl.get('collective') or 'test')
    line = 'NCCL %s over %d nodes (max %s bytes): avg busbw %.2f GB/s (minimum %.3f)' % (
        nccl.get('collective') or 'test', len(order), nccl.get('max_bytes') or '?', busbw, exp['nccl_min_busbw_gbs'])
    if busbw < exp['nccl_min_busbw_gbs']:
        if busbw < 8:
            why = ('a few GB/s means NCCL is not using RDMA on both twins: look for NET/Socket instead of NET/IB with NCCL_DEBUG=INFO, '
                   'check NCCL_IB_HCA names both RoCE devices, and MTU 9000 everywhere')
        else:
            why = 'check that both twins of the port carry traffic (NCCL_IB_HCA), the link speed, and that nothing else loads the fabric'
        failures.append({'host': everyone, 'rail': None, 'interface': None, 'peer': None, 'cause': CAUSE_NCCL,
                         'detail': 'NCCL average bus bandwidth %.2f GB/s is below %.3f GB/s (fabric_check_nccl_min_busbw_gbs): %s.' % (
                             busbw, exp['nccl_min_busbw_gbs'], why)})
    return line


def render_table(rows, exp=None):
    """The summary table: one line per node and rail."""
    header = ('node', 'rail', 'interface', 'address', 'state', 'MTU', 'speed', 'peers', 'RDMA Gb/s')
    body = []
    for row in rows:
        body.append((
            row['host'], row['rail'], row['interface'], row['address'] or '-', row['state'],
            '-' if row['mtu'] is None else str(row['mtu']),
            _speed_text(row['speed_mbps']) if row['speed_mbps'] is not None else (row.get('speed_raw') or '-'),
            '-' if row['peers_reached'] is None else '%d/%d' % (row['peers_reached'], row['peers']),
            '-' if row['bandwidth_gbps'] is None else '%.1f' % row['bandwidth_gbps'],
        ))
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    fmt = '  '.join('%%-%ds' % w for w in widths)
    lines = [(fmt % header).rstrip(), (fmt % tuple('-' * w for w in widths)).rstrip()]
    lines.extend((fmt % r).rstrip() for r in body)
    if exp:
        lines.append('expected: MTU %d on every node and rail, speed %s, DF ping payload %d bytes' % (
            exp['mtu'], _speed_text(exp['speed_mbps']) if exp.get('speed_mbps') else 'not checked', ping_payload(exp['mtu'])))
    return lines


def ring_pairs(hosts):
    """ib_write_bw pairs (server, client): every node serves the next one in rank order (2 nodes: one pair)."""
    if len(hosts) < 2:
        return []
    if len(hosts) == 2:
        return [(hosts[0], hosts[1])]
    return [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]
