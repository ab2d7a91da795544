# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ray cluster membership against the cluster plan: which planned nodes are alive in Ray, with how
many GPUs, which are missing or dead, and which Ray nodes joined on an address the plan does not have.

Pure logic, stdlib only. Input is what ``ray.nodes()`` returns in Ray 2.x (a list of dicts with
``NodeID``, ``Alive``, ``NodeManagerAddress``, ``NodeManagerHostname``, ``NodeName``, ``Resources``
{"GPU": 1.0, "node:<ip>": 1.0, ...}, ``DeathReasonMessage``); a node that died stays in the list with
``Alive`` false and empty ``Resources``; a node that rejoined shows once alive and once dead with the
same address (alive wins). Ray binds to the first rail of the plan: every node's address must be its
rail-1 address.
"""

from __future__ import annotations

import json


class RayMembershipError(ValueError):
    """The inputs (ray.nodes() list, plan, gpus_per_node) are of the wrong shape."""


def _address(node):
    address = node.get('NodeManagerAddress') or node.get('NodeName')
    if not address:
        for key in node.get('Resources') or {}:
            if key.startswith('node:') and key != 'node:__internal_head__':
                return key[len('node:'):]
    return address


def _gpus(node):
    value = (node.get('Resources') or {}).get('GPU')
    if value is None:
        return 0
    return int(value) if float(value) == int(value) else float(value)


def _alive(node):
    value = node.get('Alive', node.get('alive'))
    return value is True or (isinstance(value, str) and value.lower() == 'true')


def load_ray_nodes(ray_nodes):
    """The ray.nodes() list, from the list itself or its JSON text."""
    data = ray_nodes
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise RayMembershipError('the Ray node list is not JSON (%s): print it with '
                                     '`python3 -c "import ray, json; ray.init(address=\'auto\'); print(json.dumps(ray.nodes()))"` '
                                     'in the head\'s Ray container. It begins: %r' % (exc, data[:200]))
    if not isinstance(data, list) or not all(isinstance(n, dict) for n in data):
        raise RayMembershipError('the Ray node list must be the list of mappings ray.nodes() returns, got %s' % type(data).__name__)
    return data


def _planned(plan):
    if not isinstance(plan, dict) or not isinstance(plan.get('nodes'), list) or not isinstance(plan.get('rails'), list) or not plan['rails']:
        raise RayMembershipError('the cluster plan must be a mapping with lists "nodes" and "rails" (the plan of '
                                 'dgxspark.cluster.cluster_plan); got %s' % type(plan).__name__)
    rail = plan['rails'][0]
    name = rail.get('name') if isinstance(rail, dict) else None
    if not name:
        raise RayMembershipError('the first rail of the cluster plan has no name: give the plan of dgxspark.cluster.cluster_plan.')
    nodes = []
    for index, node in enumerate(plan['nodes']):
        address = (node.get('rail_addresses') or {}).get(name) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not node.get('host') or not address:
            raise RayMembershipError('node %d of the cluster plan needs host and rail_addresses.%s (the address Ray binds to); got %r' % (
                index, name, node))
        nodes.append({'host': node['host'], 'rank': node.get('rank', index), 'address': address})
    return nodes, rail


def ray_membership(ray_nodes, plan, gpus_per_node=1):
    """Compare the Ray nodes with the plan.

    Returns ``ok``, ``expected`` (planned node count), ``alive`` [{host, address, gpus}], ``missing``
    [{host, rank, address}] (planned nodes not alive in Ray, dead ones included), ``dead`` [{host,
    address, node_id, reason}] (dead entries without an alive twin; host null when the address is not
    planned), ``unexpected`` [{address, hostname}] (alive nodes on an address that is no planned rail-1
    address), ``gpu_problems`` [{host, address, gpus, expected}], ``total_gpus`` (alive nodes),
    ``summary`` (one line) and ``problems`` (sentences). ``gpus_per_node`` None skips the GPU check.
    """
    entries = load_ray_nodes(ray_nodes)
    planned, rail = _planned(plan)
    if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, (int, float)) or gpus_per_node < 0):
        raise RayMembershipError('gpus_per_node must be a number of GPUs (1 on a DGX Spark), got %r' % (gpus_per_node,))
    by_address = dict((p['address'], p) for p in planned)
    alive_at = {}
    for entry in entries:
        if _alive(entry):
            alive_at.setdefault(_address(entry), entry)
    rail_text = '%s (%s)' % (rail['name'], rail.get('interface') or 'first rail')

    alive, missing, dead, unexpected, gpu_problems, problems = [], [], [], [], [], []
    for node in planned:
        entry = alive_at.get(node['address'])
        if entry is None:
            missing.append({'host': node['host'], 'rank': node['rank'], 'address': node['address']})
            continue
        gpus = _gpus(entry)
        alive.append({'host': node['host'], 'address': node['address'], 'gpus': gpus})
        if gpus_per_node is not None and gpus != gpus_per_node:
            gpu_problems.append({'host': node['host'], 'address': node['address'], 'gpus': gpus, 'expected': gpus_per_node})

    seen_dead = set()
    for entry in entries:
        address = _address(entry)
        if _alive(entry) or address in alive_at or address in seen_dead:
            continue
        seen_dead.add(address)
        host = by_address[address]['host'] if address in by_address else None
        dead.append({'host': host, 'address': address, 'node_id': entry.get('NodeID'), 'reason': entry.get('DeathReasonMessage') or None})
    dead_at = dict((d['address'], d) for d in dead)

    planned_hosts = dict((p['host'].split('.')[0].lower(), p) for p in planned)
    for address, entry in alive_at.items():
        if address in by_address:
            continue
        hostname = entry.get('NodeManagerHostname')
        unexpected.append({'address': address, 'hostname': hostname})
        guess = planned_hosts.get((hostname or '').split('.')[0].lower())
        problems.append(
            'Ray node %s joined with address %s, which is no %s address of the plan: Ray bound to another interface (the management '
            'port?). %sStart Ray on that node with --node-ip-address set to its %s address (and VLLM_HOST_IP the same), then restart the '
            'Ray container.' % (hostname or '?', address, rail_text,
                                ('It is probably %s, whose %s address is %s. ' % (guess['host'], rail['name'], guess['address'])) if guess else '',
                                rail['name']))

    for node in missing:
        gone = dead_at.get(node['address'])
        if gone:
            problems.append(
                '%s (rank %d, %s) left the Ray cluster: Ray lists it as dead%s. Look at its Ray container (`docker ps -a`, `docker logs`) '
                'on %s, check that it reaches the head on %s, and restart its Ray container.' % (
                    node['host'], node['rank'], node['address'], (' (%s)' % gone['reason']) if gone['reason'] else '', node['host'],
                    rail['name']))
        else:
            problems.append(
                '%s (rank %d, %s) is not in the Ray cluster: its Ray container is not running or cannot reach the head on %s (GCS port '
                '6379), or it joined on another address. Check its Ray container (`docker ps -a`, `docker logs`) on %s and that it '
                'pings the head on %s.' % (node['host'], node['rank'], node['address'], rail_text, node['host'], rail['name']))

    for item in gpu_problems:
        problems.append(
            '%s (%s) offers %s GPU(s) to Ray, expected %s: start Ray with --num-gpus %s and give the container the GPU (--gpus all, '
            'the NVIDIA container runtime); check `nvidia-smi` in the container on %s.' % (
                item['host'], item['address'], item['gpus'], item['expected'], item['expected'], item['host']))

    total_gpus = sum(_gpus(entry) for entry in alive_at.values())
    summary = '%d/%d nodes alive, %s GPU%s' % (len(alive), len(planned), total_gpus, '' if total_gpus == 1 else 's')
    if missing:
        summary += '; missing: %s' % ', '.join('%s (%s)' % (m['host'], m['address']) for m in missing)
    if unexpected:
        summary += '; unexpected: %s' % ', '.join(u['address'] for u in unexpected)
    if gpu_problems:
        summary += '; wrong GPU count: %s' % ', '.join(g['host'] for g in gpu_problems)
    return {
        'ok': not problems,
        'expected': len(planned),
        'alive': alive,
        'missing': missing,
        'dead': dead,
        'unexpected': unexpected,
        'gpu_problems': gpu_problems,
        'total_gpus': total_gpus,
        'summary': summary,
        'problems': problems,
    }
