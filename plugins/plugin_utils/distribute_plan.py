# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the distribute role computes from the plan and the nodes' findings: the chain a distribution flows along, the
nodes that receive the image, the model files some node lacks, who lacks room, the relay's command lines, what the
node-to-node key may run and the pinned host keys."""
from __future__ import annotations

import json

from ansible_collections.dgxspark.cluster.plugins.module_utils.disk_room import problem


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


def known_hosts(plan, host_keys):
    """The pinned known_hosts file: a line per node of the plan, its rail addresses then its host key (``host_keys``:
    host to 'TYPE BASE64'). Raises ValueError naming the nodes without a key."""
    lacking = [node['host'] for node in plan['nodes'] if not host_keys.get(node['host'])]
    if lacking:
        raise ValueError('no SSH host key (/etc/ssh/ssh_host_ed25519_key.pub) on %s: the nodes pin each other\'s ed25519 '
                         'host key (ssh-keygen -A makes it)' % ', '.join(lacking))
    return ''.join('%s %s\n' % (','.join(node['rail_addresses'].values()), host_keys[node['host']]) for node in plan['nodes'])


def forced_config(plan, relay, model_dir, image_id):
    """What the node-to-node key may run on a node (the relay's --forced check reads it): the relay's receiving
    operations with the role's fixed paths (``relay``: the role's _distribute_relay), the model directory, over the rails."""
    return {
        'relay': relay['path'],
        'ssh_key': relay['ssh']['ssh_key'],
        'known_hosts': relay['ssh']['known_hosts'],
        'user': relay['ssh']['user'],
        'progress': {'image': relay['progress']['image'], 'model-recv': relay['progress']['model']},
        'entries': relay['entries'],
        'model_dirs': [model_dir],
        'rail_nets': [rail['subnet'] for rail in plan.get('rails', [])],
        'image_id': image_id,
    }


def image_room_problem(node, size, room, reserve_bytes):
    """Why ``node`` has no room for the head's image of ``size`` bytes plus ``reserve_bytes`` ('' when it has): ``room`` is
    the node's survey (distribute_survey's image_room: each place with its role, each file system with its free bytes);
    places on one file system add up."""
    needs = [dict(need, bytes=size) for need in room['needs']]
    filesystems = [dict(fs, bytes=size * len(fs['paths'])) for fs in room['filesystems']]
    return problem(node, 'the serving image', needs, filesystems, reserve_bytes)


def routes(hostvars, plan, play_hosts, head, image=True, reserve_bytes=0, relay=None, image_name='', model_dir='',
           manifest=None):
    """Who receives what, along which chain, and who sends, from what every node of the play found (the role's survey,
    ``_distribute_found``: a dgxspark.cluster.distribute_survey result; a node without one has nothing).

    Returns ``image_targets`` (none when ``image`` is false or the head has no image), ``model_targets`` (the nodes whose
    copy of the model is not complete, in play order), ``any_work``, ``senders`` (the head and every node that passes a
    stream on: the only ones that need the node-to-node key), ``image_chain`` (the image targets' rail-1 addresses, rank
    order), ``model_chain`` (the head's and the model targets' rail addresses, rank order), ``lacking`` (the model paths
    some target lacks or holds wrong) and ``problems``: every node without room for what it lacks plus ``reserve_bytes``,
    the model's first.

    With ``relay`` (the role's _distribute_relay: paths, SSH settings, connect_wait) also what the copies are made of:
    ``image_argv`` and ``model_argv`` (the relay's command lines on the head), ``model_send`` (the ``manifest`` entries
    some target lacks, manifest order), ``forced_config`` and ``known_hosts`` (when there is work: raises ValueError for
    a node without a host key).
    """
    hosts = list(play_hosts)
    found = dict((host, _hostvar(hostvars, host, '_distribute_found') or {}) for host in hosts)
    head_image = found.get(head, {}).get('image') or {}
    image_ids = dict((host, (found[host].get('image') or {}).get('id') or '') for host in hosts)
    image_to = image_targets(hosts, head, image_ids, enabled=image)
    model_to = [host for host in hosts if host != head and not (found[host].get('model') or {'complete': True})['complete']]
    first_rail = plan['rails'][0]['name'] if plan.get('rails') else None
    result = {
        'image_targets': image_to,
        'model_targets': model_to,
        'any_work': bool(image_to or model_to),
        'senders': senders(plan, head, image_to, model_to),
        'image_chain': chain(plan, image_to, rail=first_rail),
        'model_chain': chain(plan, model_to, head=head),
        'lacking': lacking_files([found[host]['model'] for host in model_to]),
    }
    result['problems'] = [p for p in [(found[h].get('model') or {}).get('disk_problem') for h in hosts] if p] + [
        p for p in [image_room_problem(h, head_image['size'], found[h]['image_room'], reserve_bytes) for h in image_to] if p]
    if relay is None:
        return result
    ssh = relay['ssh']
    lacking = set(result['lacking'])
    result.update({
        'image_argv': relay_argv('image', {
            'source': image_name, 'total': head_image.get('size', 0),
            # Each node loads what it received only when it is this image.
            'image_id': head_image.get('id', ''), 'chain': ','.join(result['image_chain']),
            'connect_wait': relay['connect_wait']}, ssh=dict(ssh, progress=relay['progress']['image'])),
        'model_argv': relay_argv('model-send', {
            'dir': model_dir, 'files': relay['send_files'], 'entries': relay['entries'],
            'chain': json.dumps(result['model_chain']), 'connect_wait': relay['connect_wait']},
            rails=[rail['name'] for rail in plan.get('rails', [])], ssh=dict(ssh, progress=relay['progress']['model'])),
        'model_send': [entry for entry in (manifest or {}).get('files') or [] if entry['path'] in lacking],
        'forced_config': forced_config(plan, relay, model_dir, head_image.get('id', '')),
        'known_hosts': known_hosts(plan, dict((h, found[h].get('host_key')) for h in hosts)) if result['any_work'] else '',
    })
    return result
