# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the distribute role computes from the plan and the nodes' findings: the chain a distribution flows along, the
nodes that receive the image, the model files some node lacks, and the relay's command line."""
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


def senders(plan, head, *target_lists):
    """The hosts that send in the chains from ``head`` to each list of targets: the head (when any list is not empty)
    and every target but the last of its chain in rank order. Only these need the node-to-node key."""
    ranked = [node['host'] for node in plan['nodes']]
    unknown = sorted(set(h for targets in target_lists for h in targets) - set(ranked))
    if unknown:
        raise ValueError('not nodes of the plan: %s' % ', '.join(unknown))
    found = []
    for targets in target_lists:
        chained = [host for host in ranked if host in set(targets) and host != head]
        for host in ([head] if chained else []) + chained[:-1]:
            if host not in found:
                found.append(host)
    return found


# The relay the distribute role installs on every node (files/distribute_relay.py).
RELAY = ['python3', '/usr/local/lib/dgxspark/distribute_relay.py']


def image_targets(hosts, head, image_ids, enabled=True):
    """The hosts that must receive the serving image: every host but ``head`` whose image ID (``image_ids``: host to
    ID, '' or absent when the node lacks the image) differs from the head's, in the order of ``hosts``. None when
    ``enabled`` is false or the head itself has no image (there is nothing to send)."""
    head_id = image_ids.get(head) or ''
    if not enabled or not head_id:
        return []
    return [host for host in hosts if host != head and (image_ids.get(host) or '') != head_id]


def lacking_files(comparisons):
    """The model paths at least one receiving node lacks or holds wrong, first seen first, each once: ``comparisons``
    are the nodes' model_manifest results (``missing`` and ``wrong`` path lists)."""
    paths = []
    for comparison in comparisons:
        for path in list(comparison.get('missing') or []) + list(comparison.get('wrong') or []):
            if path not in paths:
                paths.append(path)
    return paths


def relay_argv(command, options, rails=(), ssh=None):
    """The relay's command line: ``command``, then ``--name value`` for each of ``options`` in order, ``--rail=NAME``
    for each rail, then the connection's options (``ssh``: progress, ssh_key, known_hosts, user, ssh_port, cipher).
    Values become strings; an option that is None is left out."""
    argv = RELAY + [command]
    for name, value in options.items():
        if value is not None:
            argv += ['--' + name.replace('_', '-'), str(value)]
    argv += ['--rail=%s' % rail for rail in rails]
    for name in ('progress', 'ssh_key', 'known_hosts', 'user', 'ssh_port', 'cipher'):
        if (ssh or {}).get(name) is not None:
            argv += ['--' + name.replace('_', '-'), str(ssh[name])]
    return argv


def _hostvar(hostvars, host, name):
    """Variable ``name`` of ``host``, or None when the host or the variable is unknown."""
    if host not in hostvars or name not in hostvars[host]:
        return None
    return hostvars[host][name]


def routes(hostvars, plan, play_hosts, head, image=True):
    """Who receives what, along which chain, and who sends, from what every node of the play found (the role's survey):
    ``_distribute_image_id`` (the image it has, '' for none), ``_distribute_needs_model`` and ``_distribute_model_copy``
    (its model_manifest comparison with the head's).

    Returns ``image_targets`` (image_targets; none when ``image`` is false), ``model_targets`` (the nodes that lack some of
    the model, in play order), ``any_work``, ``senders`` (the head and every node that passes a stream on: the only ones that
    need the node-to-node key), ``image_chain`` (the image targets' rail-1 addresses, rank order), ``model_chain`` (the head's
    and the model targets' rail addresses, rank order) and ``lacking`` (the model paths some target lacks or holds wrong).
    """
    hosts = list(play_hosts)
    image_ids = dict((host, _hostvar(hostvars, host, '_distribute_image_id') or '') for host in hosts)
    image_to = image_targets(hosts, head, image_ids, enabled=image)
    model_to = [host for host in hosts if _hostvar(hostvars, host, '_distribute_needs_model')]
    first_rail = plan['rails'][0]['name'] if plan.get('rails') else None
    return {
        'image_targets': image_to,
        'model_targets': model_to,
        'any_work': bool(image_to or model_to),
        'senders': senders(plan, head, image_to, model_to),
        'image_chain': chain(plan, image_to, rail=first_rail),
        'model_chain': chain(plan, model_to, head=head),
        'lacking': lacking_files([_hostvar(hostvars, host, '_distribute_model_copy') or {} for host in model_to]),
    }
