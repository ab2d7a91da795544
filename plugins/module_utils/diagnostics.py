# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redaction for diagnostics bundles (playbooks/diagnose.yml, the node_diagnostics module): every secret the collection
knows, by value (the contents of its secret files) and by shape (a bearer header, an --api-key argument, a Hugging Face
token, a variable whose name says it holds a secret), replaced before anything leaves the node.

Pure logic, stdlib only; table-tested in tests/unit/test_diagnostics.py.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile

# Environment variables whose value is a secret whatever it looks like.
SECRET_NAME = re.compile(r'(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL|_KEY$)', re.IGNORECASE)
# Variables that tell how the serving processes talk (the NCCL/Gloo/UCX/vLLM/Ray environment of a container).
SERVING_ENV = re.compile(r'^(NCCL_|GLOO_|UCX_|VLLM_|RAY_|TORCH_|CUDA_|NVIDIA_|HF_|OMP_|PYTORCH_|TRITON_|MASTER_|'
                         r'DGXSPARK_|LD_LIBRARY_PATH|PYTHONPATH)')
_SHAPES = (
    (re.compile(r'(Authorization:\s*Bearer\s+)(?!<redacted)[^\s"\']+', re.IGNORECASE), r'\1<redacted>'),
    (re.compile(r'(--api-key[= ]\s*)(?!<redacted)[^\s"\']+'), r'\1<redacted>'),
    (re.compile(r'\bhf_[A-Za-z0-9]{20,}\b'), '<redacted:hf-token>'),
    (re.compile(r'-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----', re.DOTALL),
     '<redacted:private-key>'),
)
# A secret shorter than this is not looked for by value (it would match ordinary text); its shape still is.
MIN_SECRET_LENGTH = 8


def secret_values(named):
    """{name: content} of secret files -> [(value, name)], longest first (a secret inside another is replaced after it),
    each value also without its trailing newline; empty and short values left out."""
    values = []
    for name, content in sorted((named or {}).items()):
        for value in set([content or '', (content or '').strip()]):
            if len(value.strip()) >= MIN_SECRET_LENGTH:
                values.append((value, name))
    return sorted(values, key=lambda item: (-len(item[0]), item[1]))


def redact(text, secrets):
    """text with every known secret value and every secret-shaped string replaced. secrets: secret_values(...)."""
    for value, name in secrets:
        text = text.replace(value, '<redacted:%s>' % name)
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text


def redact_env(env, secrets):
    """Docker's Config.Env (['NAME=value', ...]) -> the serving variables only, sorted, each secret value redacted."""
    lines = []
    for item in env or []:
        name, _sep, value = item.partition('=')
        if not SERVING_ENV.match(name):
            continue
        if SECRET_NAME.search(name) and not name.endswith(('_FILE', '_PATH')):
            value = '<redacted>'
        lines.append('%s=%s' % (name, redact(value, secrets)))
    return sorted(lines)


def tail(text, lines):
    """The last `lines` lines of text."""
    kept = (text or '').splitlines()[-lines:] if lines > 0 else []
    return '\n'.join(kept) + ('\n' if kept else '')


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
