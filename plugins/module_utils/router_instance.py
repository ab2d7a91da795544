# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which instance of the fleet's router serves its port now (issue 51): the router's own nft table redirects the
router's port to one of its two instances (roles/fleet_router, swap.yml), and that instance's unit must be running.

Read from what the swap leaves on the router's node: `nft list table inet dgxspark_router` (the redirect of each of its
two nat chains, prerouting and output), `systemctl is-active dgxspark-router@a.service dgxspark-router@b.service` (one
state a line) and the instance the last swap recorded (/var/lib/dgxspark/router/active). Used by the router_instance
module (status.yml).

Pure logic, stdlib only."""

from __future__ import annotations

import re

# A rule of the router's table, as nft lists it: `... tcp dport 4000 redirect to :4002`.
_REDIRECT_RE = re.compile(r'\btcp dport (\d+) redirect to :(\d+)\b')
_CHAIN_RE = re.compile(r'^\s*chain (\S+) \{')


def redirects(listing, port):
    """{chain: the port it redirects the router's ``port`` to} of a table's listing (None: not loaded)."""
    found, chain = {}, None
    for line in (listing or '').splitlines():
        opened = _CHAIN_RE.match(line)
        if opened:
            chain = opened.group(1)
            continue
        match = _REDIRECT_RE.search(line)
        if match and int(match.group(1)) == int(port) and chain:
            found[chain] = int(match.group(2))
    return found


def unit_states(output, names):
    """{instance: its unit's state} from `systemctl is-active UNIT...`, which prints one state a line in the units' order
    (active, inactive, failed, activating, deactivating, ...); a line it did not print is 'unknown'."""
    lines = [line.strip() for line in (output or '').splitlines() if line.strip()]
    return {name: (lines[index] if index < len(lines) else 'unknown') for index, name in enumerate(names)}


def serving_instance(listing, port, instances, states, recorded=None, table='inet dgxspark_router', unit_prefix='dgxspark-router'):
    """{'serving', 'serving_port', 'active', 'recorded', 'redirects', 'units', 'line', 'problem', 'installed'}.

    ``listing``: the table's listing (None: not loaded); ``port``: the router's port; ``instances``: {name: port};
    ``states``: {name: unit state}; ``recorded``: the instance the last swap wrote (None: no record). The serving instance
    is the one both nat chains redirect the router's port to; ``problem`` says what is wrong in a sentence, or is None.
    ``installed``: the router was ever set up here (a record, or a table or a unit running).
    """
    instances = {str(name): int(number) for name, number in (instances or {}).items()}
    by_port = {number: name for name, number in instances.items()}
    found = redirects(listing, port) if listing is not None else {}
    targets = sorted(set(found.values()))
    serving = by_port.get(targets[0]) if len(targets) == 1 else None
    active = bool(serving) and states.get(serving) == 'active'
    units = dict(states)
    installed = bool(recorded) or listing is not None or any(state == 'active' for state in units.values())
    unit = '%s@%s.service' % (unit_prefix, serving) if serving else None
    result = {'serving': serving, 'serving_port': instances.get(serving) if serving else None, 'active': active,
              'recorded': recorded or None, 'redirects': found, 'units': units, 'installed': installed, 'problem': None}
    if listing is None:
        result['problem'] = ('the router\'s nft table %s is not loaded: its port %s leads to no instance (the router\'s '
                             'watch loads it again from its file; deploy.yml --tags router rewrites it)' % (table, port))
    elif not found:
        result['problem'] = 'the router\'s nft table %s redirects its port %s nowhere' % (table, port)
    elif len(targets) > 1:
        result['problem'] = 'the router\'s nft table %s redirects its port %s to several ports (%s): %s' % (
            table, port, ', '.join('%s to %d' % (chain, number) for chain, number in sorted(found.items())),
            'a swap changed one chain only, or a hand did')
    elif serving is None:
        result['problem'] = 'the router\'s port %s is redirected to %d, which is no instance of the router (%s)' % (
            port, targets[0], ', '.join('%s on %d' % (name, number) for name, number in sorted(instances.items())))
    elif not active:
        result['problem'] = 'the router\'s port %s leads to instance %s (port %d), whose unit %s is %s, not active' % (
            port, serving, instances[serving], unit, states.get(serving, 'unknown'))
    elif recorded and recorded != serving:
        result['problem'] = 'the router\'s port %s leads to instance %s, but the last swap recorded %s' % (port, serving, recorded)
    if serving:
        result['line'] = 'router: instance %s (port %d) serves port %s, %s' % (
            serving, instances[serving], port, 'active' if active else 'NOT active (%s)' % states.get(serving, 'unknown'))
    else:
        result['line'] = 'router: no instance serves port %s' % port
    return result
