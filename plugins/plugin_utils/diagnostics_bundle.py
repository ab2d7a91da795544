# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's half of a diagnostics bundle (playbooks/diagnose.yml): the bundle's files from what every node
gave, the last look for a secret the controller knows, and the tarball only its owner can read.

The nodes redact what they send (plugins/module_utils/diagnostics.py); this runs on the controller only, behind the
action dgxspark.cluster.diagnostics_bundle. Pure logic, stdlib only; table-tested in tests/unit/test_diagnostics.py.
"""

from __future__ import annotations

import io
import json
import os
import tarfile

from ansible_collections.dgxspark.cluster.plugins.module_utils.diagnostics import secret_values

# What diagnose.yml registers on each node, read by node_view.
NODE_VARS = ('diagnose_node', 'diagnose_cx7', 'diagnose_image')


class SecretInBundle(ValueError):
    """A secret the controller knows is in the bundle's files: nothing is written."""


def node_view(hostvars_of_node):
    """What diagnose.yml registered on one node -> {sections, cx7, image, error} (error: why it was not read)."""
    node = hostvars_of_node.get('diagnose_node') or {}
    view = {'sections': node.get('sections'), 'cx7': hostvars_of_node.get('diagnose_cx7'),
            'image': hostvars_of_node.get('diagnose_image'), 'error': ''}
    if view['sections'] is None:
        view['error'] = node.get('msg') or ('unreachable' if node.get('unreachable') else 'not read')
    return view


def _json(value):
    return json.dumps(value, indent=2, sort_keys=True, default=str) + '\n'


def bundle_files(views, nodes, plan, status):
    """The bundle's files as [{'path', 'content'}]: plan.json, status.txt, unreachable.txt, and per node what it gave
    (its sections, cx7.json, image.txt). views: {node: node_view(...)}."""
    status = status or {}
    verdict = (['problems:'] + list(status.get('problems') or [])) if status.get('problems') else (
        ['healthy'] if status.get('ok') else [])
    files = [{'path': 'plan.json', 'content': _json(plan or {})},
             {'path': 'status.txt', 'content': '\n'.join(list(status.get('table') or ['no status table: no node could be read'])
                                                         + verdict) + '\n'},
             {'path': 'unreachable.txt',
              'content': ''.join('%s: %s\n' % (node, views[node]['error']) for node in nodes if views[node]['error'])}]
    for node in nodes:
        view = views[node]
        if view['error']:
            continue
        for name in sorted(view['sections']):
            files.append({'path': '%s/%s' % (node, name), 'content': view['sections'][name]})
        cx7 = view.get('cx7') or {}
        files.append({'path': '%s/cx7.json' % node, 'content': _json(
            dict((key, cx7[key]) for key in sorted(cx7) if not key.startswith(('invocation', '_ansible'))))})
        image = view.get('image') or {}
        files.append({'path': '%s/image.txt' % node, 'content': 'image ID: %s\nvLLM: %s\nRay: %s\n%s' % (
            image.get('image_id', ''), image.get('vllm_version', ''), image.get('ray_version', ''),
            ('error: %s\n' % image['msg']) if image.get('msg') else '')})
    return files


def secret_hits(files, secrets):
    """The paths of the files (bundle_files) in which any secret value appears: the controller's last check."""
    values = [value for value, _name in secret_values(dict(('s%d' % n, s) for n, s in enumerate(secrets or [])))]
    return sorted(set(item['path'] for item in files for value in values if value in item['content']))


def write_bundle(files, dest, top, mtime):
    """Write the bundle as one gzipped tarball at dest, readable by its owner only from its creation (0600; its
    directories 0700, its files 0600 inside), each file under top/ (the bundle's directory name); dest's directory is
    made when missing (0700). Replaces dest atomically. Returns the tarball's size in bytes. Raises ValueError for a path that would leave top/, OSError."""
    directories = set()
    for item in files:
        path = item['path']
        if path.startswith('/') or '..' in path.split('/') or not path:
            raise ValueError('a bundle file path must stay inside the bundle, not %r' % path)
        parts = path.split('/')[:-1]
        directories.update('/'.join(parts[:i]) for i in range(1, len(parts) + 1))
    # A directory made here is the owner's only; an existing one (-e diagnose_dir=/tmp) keeps its mode.
    os.makedirs(os.path.dirname(os.path.abspath(dest)), mode=0o700, exist_ok=True)
    tmp = dest + '.tmp'
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'wb') as raw:
        with tarfile.open(fileobj=raw, mode='w:gz') as bundle:
            for name in [top] + ['%s/%s' % (top, d) for d in sorted(directories)]:
                info = tarfile.TarInfo(name)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o700, mtime
                bundle.addfile(info)
            for item in files:
                data = item['content'].encode('utf-8')
                info = tarfile.TarInfo('%s/%s' % (top, item['path']))
                info.size, info.mode, info.mtime = len(data), 0o600, mtime
                bundle.addfile(info, io.BytesIO(data))
    os.rename(tmp, dest)
    return os.path.getsize(dest)


def pack(node_vars, nodes, plan, status, secrets, dest, top, mtime, write=True):
    """The whole bundle: node_vars {node: {NODE_VARS key: value}} -> its files, refused (SecretInBundle, nothing
    written) when a secret value appears in any, else written to dest (unless write is false: check mode).
    Returns {'files': count, 'unread': ['node: why', ...], 'bytes': size (0 unwritten)}."""
    views = dict((node, node_view(node_vars.get(node) or {})) for node in nodes)
    files = bundle_files(views, list(nodes), plan, status)
    hits = secret_hits(files, secrets)
    if hits:
        raise SecretInBundle('a secret was found in %s: the bundle was not written. Please report this (the file names '
                             'are enough).' % ', '.join(hits))
    size = write_bundle(files, dest, top, mtime) if write else 0
    return {'files': len(files), 'bytes': size,
            'unread': ['%s: %s' % (node, views[node]['error']) for node in nodes if views[node]['error']]}
