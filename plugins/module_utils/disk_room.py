# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a node has room for what it is about to write in several places: the places that share a filesystem
add up (a spooled image and Docker's store of its layers on one root filesystem need twice the image)."""

from __future__ import annotations

import os

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import human_bytes, nearest_existing


def filesystems(needs, stat=os.statvfs, device=lambda path: os.stat(path).st_dev):
    """[{device, paths, bytes, free}] for ``needs`` ([{path, bytes}]), one entry per filesystem, in the order first
    named: what is written there in all and what is free for it."""
    found = {}
    for need in needs:
        probe = nearest_existing(need['path'])
        entry = found.setdefault(device(probe), {'paths': [], 'bytes': 0, 'free': None})
        entry['paths'].append(need['path'])
        entry['bytes'] += int(need['bytes'])
        if entry['free'] is None:
            fs = stat(probe)
            entry['free'] = fs.f_bavail * fs.f_frsize
    return [dict(entry, device=dev) for dev, entry in found.items()]


def problem(node, what, needs, filesystems_, reserve_bytes=0):
    """The message naming every filesystem without room for what goes there plus ``reserve_bytes`` ('' when all have
    room). ``needs`` name each path's bytes and role ({path, bytes, role}) for the message."""
    roles = dict((need['path'], need) for need in needs)
    short = []
    for fs in filesystems_:
        need = fs['bytes'] + reserve_bytes
        if need <= fs['free']:
            continue
        parts = ' and '.join('%s %s at %s' % (human_bytes(roles[path]['bytes']), roles[path].get('role', 'written'), path)
                             for path in fs['paths'])
        short.append('%s%s%s, %s free; free %s there'
                     % (parts, ' (one filesystem)' if len(fs['paths']) > 1 else '',
                        ' + %s kept free (distribute_reserve_bytes)' % human_bytes(reserve_bytes) if reserve_bytes else '',
                        human_bytes(fs['free']), human_bytes(need - fs['free'])))
    if not short:
        return ''
    return '%s: not enough disk for %s: %s (or lower distribute_reserve_bytes)' % (node, what, '; '.join(short))
