# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The chain of nodes a distribution flows along (the distribute role's relay argv), from the cluster plan."""
from __future__ import annotations


def chain(plan, targets, head=None, rail=None):
    """The nodes the stream passes, in rank order: ``head`` first when given, then every host of ``targets``.

    Each entry is the node's rail addresses ({rail name: address}), or, with ``rail``, its address on that rail.
    Raises ValueError naming a target or head that is not a node of the plan, or an unknown rail.
    """
    nodes = dict((node['host'], node) for node in plan['nodes'])
    unknown = sorted(set(list(targets) + ([head] if head else [])) - set(nodes))
    if unknown:
        raise ValueError('not nodes of the plan: %s' % ', '.join(unknown))
    rails = [r['name'] for r in plan.get('rails', [])]
    if rail is not None and rail not in rails:
        raise ValueError('rail %r is not a rail of the plan (%s)' % (rail, ', '.join(rails)))
    wanted = set(targets)
    order = ([nodes[head]] if head else []) + [n for n in plan['nodes'] if n['host'] in wanted and n['host'] != head]
    return [dict(n['rail_addresses']) if rail is None else n['rail_addresses'][rail] for n in order]
