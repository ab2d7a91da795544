# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""cx7_netplan's check after a change: what every node's fabric_probe saw, as problems naming node, rail, interface and peer.

The netplan document, its rendering and the preflight are in netplan.py.
"""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import SMALL_PING_PAYLOAD, ping_ok
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan import (
    by_host,
    generate_rejections,
    parse_netplan_files,
    preflight_problems,
    preflight_summary,
)


# --------------------------------------------------------------------------------------------- post-change fabric check

def _ping_reached(ping):
    """A fabric_probe ping entry reached its peer: at least one reply (the parsed output), else exit status 0."""
    if not isinstance(ping, dict):
        return False
    if isinstance(ping.get('parsed'), dict):
        return ping_ok(ping['parsed'])
    return ping.get('rc') == 0


def _ping_evidence(pings):
    """The telling lines of failed ping outputs (statistics, "ping:" errors), without repeats."""
    picked = []
    for ping in pings:
        lines = [line.strip() for line in str(ping.get('output') or '').splitlines() if line.strip()]
        for line in [line for line in lines if 'packet loss' in line or 'ping:' in line or 'error' in line.lower()] or lines[-1:]:
            if line not in picked:
                picked.append(line)
    return '; '.join(picked)


def _jumbo_cause(host, interface, peer, jumbo, frame):
    """Why DF jumbo pings fail while small ones pass, from what ping said."""
    parsed = {}
    for ping in jumbo:
        parsed = ping.get('parsed') or parsed
    if parsed.get('local_mtu'):
        return ('the MTU of %s on %s is %s, smaller than the %s-byte frame: the rail MTU is not live on this node' % (
            interface, host, parsed['local_mtu'], frame))
    if parsed.get('frag_needed_mtu'):
        return 'a hop on the path answered "Frag needed" with MTU %s: a switch or router of the rail has a smaller MTU' % parsed['frag_needed_mtu']
    return ('a smaller MTU on the path drops the jumbo frames: a switch port of the rail (set MTU %s on every switch port of the rail) '
            'or %s\'s %s' % (frame if frame == 9216 else '%s (or 9216)' % frame, peer, interface))


def _unanswered_cause(host, interface, peer, address, parsed):
    error = str(parsed.get('error') or '')
    if 'Network is unreachable' in error:
        return '%s has no route to %s on %s: its own rail address is missing or in another subnet' % (host, address, interface)
    if parsed.get('unreachable') or 'No route to host' in error:
        return ('no ARP reply from %s: its address %s is not up on the rail, or the cable or switch port between the nodes is down' % (
            peer, address))
    if error:
        return 'ping could not run (%s)' % error
    return ('%s does not answer: its rail address is not up, the two addresses are not in one subnet, or the link drops the traffic '
            '(cabling, switch port)' % peer)


def probe_failures(host, probe):
    """The peers a node could not reach, from its fabric_probe ``rails`` result (rail name -> {interface, pings}).

    One entry per peer and rail where the small or the don't-fragment jumbo ping got no reply: ``peer``, ``rail``, ``interface``,
    ``address``, ``payload`` (of the jumbo ping), ``small`` / ``jumbo`` (reached or not) and ``problem``, the line for the report
    (node, rail, interface, peer, what failed, likely cause, what ping said).
    """
    failures = []
    for rail_name, rail in (probe or {}).items():
        if not isinstance(rail, dict):
            continue
        interface = rail.get('interface')
        peers = []
        pings = {}
        for ping in rail.get('pings') or []:
            if not isinstance(ping, dict):
                continue
            key = (ping.get('peer'), ping.get('address'))
            if key not in pings:
                peers.append(key)
                pings[key] = {}
            pings[key].setdefault(ping.get('kind'), []).append(ping)
        for peer, address in peers:
            small, jumbo = pings[(peer, address)].get('small') or [], pings[(peer, address)].get('jumbo') or []
            small_ok = bool(small) and all(_ping_reached(p) for p in small)
            jumbo_ok = bool(jumbo) and all(_ping_reached(p) for p in jumbo)
            if small_ok and jumbo_ok:
                continue
            small_payload = next((p.get('payload') for p in small if p.get('payload')), SMALL_PING_PAYLOAD)
            payload = next((p.get('payload') for p in jumbo if p.get('payload')), None)
            frame = (payload + 28) if isinstance(payload, int) else '?'
            if small_ok:
                what = 'unfragmented %s-byte pings (small %s-byte pings pass)' % (payload, small_payload)
                cause = _jumbo_cause(host, interface, peer, jumbo, frame)
            elif jumbo_ok:
                what = 'small %s-byte pings (unfragmented %s-byte pings pass)' % (small_payload, payload)
                cause = 'small pings are lost while jumbo pings pass: packet loss on the link (cable, transceiver or switch port)'
            else:
                what = 'small %s-byte pings or unfragmented %s-byte pings' % (small_payload, payload)
                cause = _unanswered_cause(host, interface, peer, address, next((p.get('parsed') or {} for p in small + jumbo), {}))
            evidence = _ping_evidence([p for p in (jumbo if small_ok else small) if not _ping_reached(p)])
            failures.append({
                'peer': peer, 'rail': rail_name, 'interface': interface, 'address': address, 'payload': payload,
                'small': small_ok, 'jumbo': jumbo_ok,
                'problem': '%s rail %s (%s): no reply from %s %s to %s; likely cause: %s%s' % (
                    host, rail_name, interface, peer, address, what, cause, (' [ping: %s]' % evidence) if evidence else ''),
            })
    return failures


def probe_errors(host, probe):
    """Rails a node's fabric_probe could not read (``probe_error``), as report lines."""
    return ['%s rail %s (%s): the fabric probe could not read the interface: %s' % (host, name, rail.get('interface'), rail['probe_error'])
            for name, rail in (probe or {}).items() if isinstance(rail, dict) and rail.get('probe_error')]


def fabric_problems(results, plan):
    """Summary of the post-change check of every node.

    ``results``: host -> {drift: [...], probe: the ``rails`` result of dgxspark.cluster.fabric_probe (null when the fabric was
    not probed)}. Returns the problems, each naming the node and the rail, first the (node, rail) pairs that no peer could
    reach, then every drift, probe error and unreachable peer.
    """
    results = results or {}
    hosts = [n['host'] for n in plan.get('nodes', [])]
    problems = []
    failures = {}
    errors = []
    for host in hosts:
        if host not in results:
            problems.append('%s: no post-change check result (the node failed earlier or is unreachable).' % host)
            continue
        result = results.get(host) or {}
        failures[host] = probe_failures(host, result.get('probe'))
        errors.extend(probe_errors(host, result.get('probe')))
    unreachable = {}
    for host, items in failures.items():
        for failure in items:
            unreachable.setdefault((failure.get('peer'), failure.get('rail')), set()).add(host)
    for (peer, rail), sources in sorted(unreachable.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        expected = set(h for h in failures if h != peer)
        if expected and sources >= expected:
            problems.append('%s rail %s: unreachable from every other node (%s).' % (peer, rail, ', '.join(sorted(sources))))
    pairs = set((h, r) for h in failures for r in set(f.get('rail') for items in failures.values() for f in items))
    if len(failures) > 1 and pairs and pairs <= set(unreachable) and not any((results.get(h) or {}).get('drift') for h in hosts):
        payloads = [f['payload'] for h in hosts for f in failures.get(h, []) if isinstance(f.get('payload'), int)]
        mtu = (' (MTU %s)' % (payloads[0] + 28)) if payloads else ''
        problems.append('No node reaches any other over the failing rails although every address and MTU is up: check the cabling and the switch, '
                        'and that the switch ports carry unfragmented frames of the rail MTU%s ("message too long" or lost jumbo pings mean a '
                        'smaller MTU on the path).' % mtu)
    for host in hosts:
        problems.extend((results.get(host) or {}).get('drift') or [])
    problems.extend(errors)
    for host in hosts:
        problems.extend(failure['problem'] for failure in failures.get(host, []))
    return problems


# ------------------------------------------------------------------- the role's three cluster-wide verdicts
# What the cx7_netplan role's tasks register on every node, which its action cx7_netplan_verdict reads.
CONFIG_VAR = '_cx7_netplan_config'
OBSERVED_VAR = '_cx7_netplan_observed'
# The node's read (dgxspark.cluster.cx7_netplan_files, state=read): its other netplan files and its netplan generate.
CURRENT_VAR = '_cx7_netplan_current'
RESULT_VAR = '_cx7_netplan_result'
VERDICTS = ('preflight', 'generate', 'fabric')


def verdict(check, hostvars, play_hosts, plan):
    """Every problem one of the role's checks found on any node of the play, and the message that stops every node.

    ``preflight``: each node's configuration (``_cx7_netplan_config``) against what every node reports
    (``_cx7_netplan_observed``) and its other netplan files (``others`` of ``_cx7_netplan_current``, what the module
    cx7_netplan_files read), the nodes of the plan missing from the play first; ``generate``: every node whose
    ``netplan generate`` rejected its candidate (``generate`` of ``_cx7_netplan_current``); ``fabric``: the post-change
    check of every node (``_cx7_netplan_result``).
    Returns ``problems`` and ``msg`` (None when there is none).
    """
    current = by_host(hostvars, play_hosts, CURRENT_VAR)
    if check == 'preflight':
        observed = by_host(hostvars, play_hosts, OBSERVED_VAR)
        problems_by_host = {}
        for host, config in by_host(hostvars, play_hosts, CONFIG_VAR).items():
            files = (current.get(host) or {}).get('others')
            problems_by_host[host] = preflight_problems(config, observed, parse_netplan_files(files))
        problems = preflight_summary(problems_by_host, plan)
        header = 'The CX-7 rails were not configured: %d problem(s) found; nothing was changed on any node.' % len(problems)
    elif check == 'generate':
        problems = generate_rejections(dict((host, (read or {}).get('generate')) for host, read in current.items()))
        header = 'netplan generate rejected the candidate rail configuration; nothing was changed on any node.'
    elif check == 'fabric':
        problems = fabric_problems(by_host(hostvars, play_hosts, RESULT_VAR), plan)
        header = 'The check after configuring the CX-7 rails failed (%d problem(s)):' % len(problems)
    else:
        raise ValueError('check must be one of %s, not %r' % (', '.join(VERDICTS), check))
    return {'problems': problems, 'msg': '\n'.join([header] + ['- %s' % problem for problem in problems]) if problems else None}
