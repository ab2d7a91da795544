# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Releases of the serving group: what each node's serving containers are (image by ID, entrypoint, command,
environment, mounts, labels: everything that makes Docker recreate them), one digest per node and one id per cluster,
and each node's history of proven releases (newest first), from which a failed release or rollback.yml puts the
containers back exactly as they were.

A container's spec is written in community.docker.docker_container's own vocabulary, so that putting it back is one
task with the spec's values. The serving containers hold no secret in their definition (the collection mounts them as
0600 files), so a spec can be kept on the node; the history file is 0600 all the same."""

from __future__ import annotations

import hashlib
import json
import os

#: The spec's keys, in docker_container's vocabulary; the digest covers all of them.
SPEC_KEYS = ('name', 'image', 'entrypoint', 'command', 'env', 'volumes', 'network_mode', 'ipc_mode', 'pid_mode', 'init',
             'tty', 'device_requests', 'devices', 'ulimits', 'cap_drop', 'capabilities', 'security_opts',
             'restart_policy', 'labels')
#: The label of the collection's serving containers that says which role runs them.
ROLE_LABEL = 'dgxspark.cluster/role'
SERVED_NAME_LABEL = 'dgxspark.cluster/served-model-name'
#: Order in which a group is put back: Ray's head, then its workers, then the engine.
RESTORE_ORDER = ('ray_cluster', 'vllm_container')
#: The tag that keeps a kept release's image on the node (pruned with the release).
IMAGE_TAG_REPOSITORY = 'dgxspark-release'


class ReleaseError(Exception):
    """A record or an inspect output that cannot be read; the message says which and why."""


def _device_request(request):
    return {
        'driver': request.get('Driver') or None,
        'count': request.get('Count'),
        'device_ids': request.get('DeviceIDs') or None,
        'capabilities': request.get('Capabilities') or None,
        'options': request.get('Options') or None,
    }


def container_spec(inspect):
    """One element of `docker inspect` -> the container's spec (docker_container's parameters)."""
    try:
        config, host = inspect['Config'], inspect['HostConfig']
        env = {}
        for item in config.get('Env') or []:
            key, _sep, value = item.partition('=')
            env[key] = value
        return {
            'name': inspect['Name'].lstrip('/'),
            'image': inspect['Image'],
            'image_name': config.get('Image') or '',
            'entrypoint': list(config.get('Entrypoint') or []),
            'command': list(config.get('Cmd') or []),
            'env': env,
            'volumes': list(host.get('Binds') or []),
            'network_mode': host.get('NetworkMode') or None,
            'ipc_mode': host.get('IpcMode') or None,
            'pid_mode': host.get('PidMode') or None,
            'init': bool(host.get('Init')),
            'tty': bool(config.get('Tty')),
            'device_requests': [_device_request(r) for r in host.get('DeviceRequests') or []],
            'devices': ['%s:%s:%s' % (d['PathOnHost'], d['PathInContainer'], d['CgroupPermissions'])
                        for d in host.get('Devices') or []],
            'ulimits': ['%s:%s:%s' % (u['Name'], u['Soft'], u['Hard']) for u in host.get('Ulimits') or []],
            'cap_drop': list(host.get('CapDrop') or []),
            'capabilities': list(host.get('CapAdd') or []),
            'security_opts': list(host.get('SecurityOpt') or []),
            'restart_policy': (host.get('RestartPolicy') or {}).get('Name') or 'no',
            'labels': dict(config.get('Labels') or {}),
            # Not docker_container's: which of the collection's roles runs it (ray_cluster, vllm_container).
            'role': (config.get('Labels') or {}).get(ROLE_LABEL, ''),
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReleaseError('a docker inspect record without %s' % exc) from exc


def named_namespaces(specs, inspects):
    """The specs with a namespace Docker records as `container:<ID>` (the head's vLLM container joins its Ray container's
    PID namespace) named `container:<name>` where the ID is one of ``inspects``: a release is the same whatever ID its Ray
    container got, and putting it back joins the container of that name, not one long gone."""
    names = dict((i.get('Id'), i.get('Name', '').lstrip('/')) for i in inspects)
    for spec in specs:
        for key in ('network_mode', 'ipc_mode', 'pid_mode'):
            mode = spec.get(key) or ''
            if mode.startswith('container:') and mode[len('container:'):] in names:
                spec[key] = 'container:' + names[mode[len('container:'):]]
    return specs


def canonical(data):
    return json.dumps(data, sort_keys=True, separators=(',', ':'))


def spec_digest(spec):
    return hashlib.sha256(canonical(dict((k, spec.get(k)) for k in SPEC_KEYS)).encode('utf-8')).hexdigest()


def node_digest(specs):
    """One digest of a node's serving containers (order-free); the empty node has one too."""
    return hashlib.sha256(canonical(sorted(spec_digest(s) for s in specs)).encode('utf-8')).hexdigest()


def release_id(node_digests):
    """{host: node digest} -> the cluster's release id (12 hex digits). Raises ReleaseError when a node has none."""
    if not node_digests:
        raise ReleaseError('no node of the serving group was read')
    missing = sorted(h for h, d in node_digests.items() if not d)
    if missing:
        raise ReleaseError('no serving containers read on %s' % ', '.join(missing))
    return hashlib.sha256(canonical(node_digests).encode('utf-8')).hexdigest()[:12]


def restore_order(specs):
    """The specs in the order a group is put back (Ray before the engine); a container of no known role comes last."""
    def rank(spec):
        role = spec.get('role')
        return (RESTORE_ORDER.index(role) if role in RESTORE_ORDER else len(RESTORE_ORDER), spec['name'])
    return sorted(specs, key=rank)


def summary(specs):
    """What a release is, read from a node's specs: its images (tag and short ID) and the model the engine serves."""
    images = sorted(set('%s (%s)' % (s.get('image_name') or '?', s['image'].split(':')[-1][:12]) for s in specs))
    served = sorted(set(s['labels'][SERVED_NAME_LABEL] for s in specs if SERVED_NAME_LABEL in s.get('labels', {})))
    return {'images': images, 'served_model_name': served[0] if served else None}


def _option(command, name):
    """The value of --name in an argv (as `--name V` or `--name=V`), or None."""
    for index, arg in enumerate(command):
        if arg == name and index + 1 < len(command):
            return command[index + 1]
        if arg.startswith(name + '='):
            return arg.split('=', 1)[1]
    return None


def engine(specs):
    """The engine container of a node's specs: {container, url (from the head itself), served_model_name}, or None (a
    Ray worker; a headless rank of mp, which serves no API). The url is https when the engine serves TLS (its
    --ssl-certfile): a release is put back as it served, whatever the inventory asks for now."""
    for spec in specs:
        if spec.get('role') == 'vllm_container' and '--headless' not in spec['command']:
            host = _option(spec['command'], '--host') or '0.0.0.0'
            host = '127.0.0.1' if host in ('0.0.0.0', '::', '') else host
            port = _option(spec['command'], '--port') or '8000'
            scheme = 'https' if _option(spec['command'], '--ssl-certfile') else 'http'
            return {'container': spec['name'], 'url': '%s://%s:%s' % (scheme, host, port),
                    'served_model_name': spec['labels'].get(SERVED_NAME_LABEL)}
    return None


def backend(release):
    """The executor backend a recorded release ran with: 'ray' when Ray's container is part of it (with Ray every node
    runs one), else 'mp' (vLLM's own multi-node backend: vLLM's container on every node, no Ray)."""
    if not isinstance(release, dict) or not isinstance(release.get('containers'), list):
        raise ReleaseError('a release record without its list of containers')
    return 'ray' if any(spec.get('role') == 'ray_cluster' for spec in release['containers']) else 'mp'


def make_release(rid, specs, now, model_dir=None):
    release = {'id': rid, 'deployed_at': now, 'node_digest': node_digest(specs), 'summary': summary(specs),
               'engine': engine(specs), 'containers': restore_order(specs)}
    if model_dir:
        release['model_dir'] = model_dir
    return release


def validate_history(data, path):
    """The history file's content -> {'releases': [...], 'rolled_back': ...}; an absent file is an empty history."""
    if data is None:
        return {'releases': [], 'rolled_back': None}
    if not isinstance(data, dict) or not isinstance(data.get('releases'), list):
        raise ReleaseError('%s is not a release history (no list of releases)' % path)
    for release in data['releases']:
        if not isinstance(release, dict) or not {'id', 'node_digest', 'containers'} <= set(release):
            raise ReleaseError('%s holds a release without id, node_digest or containers' % path)
    return {'releases': data['releases'], 'rolled_back': data.get('rolled_back')}


def record(history, rid, specs, now, keep, model_dir=None):
    """The history after the release `rid` (serving the model in model_dir) proved itself on this node: it becomes the
    newest (keeping its first deployed_at when it is already the newest), the rest follow, `keep` in all. Returns
    (history, dropped releases)."""
    if keep < 2:
        raise ReleaseError('keep must be at least 2 (the current release and the previous one), not %s' % keep)
    releases = history['releases']
    digest = node_digest(specs)
    if releases and releases[0]['id'] == rid and releases[0]['node_digest'] == digest:
        return history, []
    new = make_release(rid, specs, now, model_dir)
    rest = [r for r in releases if r['id'] != rid]
    kept = [new] + rest[:keep - 1]
    dropped = rest[keep - 1:]
    return {'releases': kept, 'rolled_back': None}, dropped


def rollback_target(history):
    """The release that rollback.yml puts back: the one before the newest. Returns (release or None, why not)."""
    releases = history['releases']
    if history.get('rolled_back') and releases:
        return None, ('release %s serves already: rollback.yml put it back in place of %s at %s' % (
            releases[0]['id'], history['rolled_back']['id'], history['rolled_back']['at']))
    if len(releases) < 2:
        return None, 'no previous release is recorded on this node (a rollback needs two deployed releases)'
    return releases[1], ''


def after_rollback(history, now):
    """The history once the release before the newest serves again: the newest is dropped and named as rolled back."""
    releases = history['releases']
    rolled_back = {'id': releases[0]['id'], 'at': now}
    if releases[0].get('model_dir'):
        rolled_back['model_dir'] = releases[0]['model_dir']
    return {'releases': releases[1:], 'rolled_back': rolled_back}


def model_dirs_to_prune(before, after, dropped):
    """The model directories that the releases leaving the history (dropped for age, or the one a rollback replaced)
    served and no kept release serves, nor one inside or around them: what the node may remove where the distribution
    made the copy. Nothing while a kept release does not say its model (recorded before releases did): it could be any."""
    kept = [r.get('model_dir') for r in after['releases']]
    if not all(kept):
        return []
    kept = [os.path.normpath(k) for k in kept]
    leaving = [r.get('model_dir') for r in dropped]
    if after.get('rolled_back') is None:
        leaving.append((before.get('rolled_back') or {}).get('model_dir'))
    prune = []
    for path in leaving:
        if not path or not os.path.isabs(path):
            continue
        path = os.path.normpath(path)
        if path != '/' and path not in prune and not any(path == k or k.startswith(path + '/') or path.startswith(k + '/') for k in kept):
            prune.append(path)
    return prune


def image_tag(release):
    return '%s:%s' % (IMAGE_TAG_REPOSITORY, release['id'])


def dumps(history):
    return json.dumps(history, indent=1, sort_keys=True) + '\n'


def status_line(observed):
    """The status table's line of the release, from the head's serving_release result (None: not read, no line)."""
    if not isinstance(observed, dict) or 'current' not in observed:
        return None
    current = observed['current']
    if not current:
        return 'release: none recorded yet (deploy.yml records the release once it serves)'
    summary = current.get('summary') or {}
    images = ', '.join(summary.get('images') or []) or '?'
    served = summary.get('served_model_name') or '?'
    line = 'release: %s deployed %s (%s, serving %s)' % (current['id'], current.get('deployed_at', '?'), images, served)
    rolled_back = observed.get('rolled_back')
    target = observed.get('rollback_target')
    if rolled_back:
        line += '; put back by rollback.yml at %s in place of %s' % (rolled_back['at'], rolled_back['id'])
    elif target:
        line += '; previous %s deployed %s (rollback.yml puts it back)' % (target['id'], target.get('deployed_at', '?'))
    if not observed.get('running_is_current'):
        line += '; the containers running now are not this release (a deploy under way or failed without rollback, or a ' \
                'change by hand)'
    return line
