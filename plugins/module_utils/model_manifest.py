# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The manifest of a model directory (relative path, size, mtime, sha256 of every file; symlinks by target), and the
comparison of a node's copy with it. A symlink that leaves the directory counts as the file it points to (huggingface_hub 1.32
and later keeps a snapshot's files as links into a blob store beside it, sparkrun #299/#300): the nodes receive that
file, and the source's tar follows the link (--dereference), as rsync's --copy-unsafe-links would.

Hashing 400 GB costs minutes, so content is hashed once, at the source, and only again where the cheap facts disagree:
- at the source, a file whose size and mtime equal the previous manifest's keeps its hash (no read);
- on a node, a file with the manifest's size and mtime is taken as it is (the relay that wrote it hashed it as it
  arrived and gave it the manifest's mtime only when its sha256 matched); a file with the right size and another mtime
  is hashed, and re-stamped with the manifest's mtime when its content matches; anything else is copied again.
The files the collection keeps in the directory (MANIFEST_NAME, PARTIAL_DIR) are never part of the model.
"""

from __future__ import annotations

import hashlib
import os

MANIFEST_NAME = '.dgxspark-manifest.json'
PARTIAL_DIR = '.dgxspark-partial'  # where the relay writes a file while it arrives, before its sha256 is checked
#: In a model directory the distribution created: a release that no longer keeps it may remove it (never a user's own).
COPY_MARK = '.dgxspark-copy'
FORMAT = 1
HASH_BLOCK = 8 * 1024 * 1024


class ManifestError(Exception):
    """A model directory that cannot be described or compared; the message says what to do."""


def _is_ours(rel):
    top = rel.split('/', 1)[0]
    return top in (MANIFEST_NAME, PARTIAL_DIR, COPY_MARK)


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(HASH_BLOCK), b''):
            digest.update(block)
    return digest.hexdigest()


def _leaves(root, full):
    """Whether the symlink `full` resolves outside `root` (a Hugging Face snapshot directory's files point into the
    cache's blobs/, beside it): such a link is copied as the file it points to, since its target is not sent."""
    real_root = os.path.realpath(root)
    return os.path.commonpath([real_root, os.path.realpath(full)]) != real_root


def walk(root):
    """(files, links): files as {path: (size, mtime_ns)}, symlinks as {path: target}; paths relative, '/'-separated.
    A symlink inside the directory (a cache entry's snapshots/ into its blobs/) is kept as a link; one that leaves it is
    a file, its target's size and mtime (its content is read through the link); one that leads nowhere is refused."""
    if not os.path.isdir(root):
        raise ManifestError('the model directory %s does not exist (or is not a directory)' % root)
    files, links = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = '' if rel_dir == '.' else rel_dir.replace(os.sep, '/') + '/'
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            if _is_ours(rel_dir + name):
                dirnames.remove(name)
            elif os.path.islink(full):
                if _leaves(root, full):
                    raise ManifestError('%s in the model directory %s is a link to the directory %s, outside it: its files '
                                        'would not be copied; copy them into the model directory, or make it the '
                                        'directory that holds them' % (rel_dir + name, root, os.path.realpath(full)))
                links[rel_dir + name] = os.readlink(full)
                dirnames.remove(name)
        for name in filenames:
            rel = rel_dir + name
            if _is_ours(rel):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                if not _leaves(root, full):
                    links[rel] = os.readlink(full)
                    continue
                if not os.path.isfile(full):
                    raise ManifestError('%s in the model directory %s is a link to %s, which does not exist: the model is '
                                        'incomplete (an interrupted download, or a cache cleaned under it); download it '
                                        'again' % (rel, root, os.readlink(full)))
            stat = os.stat(full)
            files[rel] = (stat.st_size, stat.st_mtime_ns)
    return files, links


def build(root, previous=None, hasher=file_sha256):
    """The manifest of `root`, reusing the hashes of `previous` for files whose size and mtime did not change.

    Returns (manifest, hashed): `hashed` lists the files whose content was read."""
    files, links = walk(root)
    if not files:
        raise ManifestError('the model directory %s has no files' % root)
    known = dict((f['path'], f) for f in ((previous or {}).get('files') or []))
    entries, hashed = [], []
    for rel in sorted(files):
        size, mtime_ns = files[rel]
        old = known.get(rel)
        if old and old.get('size') == size and old.get('mtime_ns') == mtime_ns and old.get('sha256'):
            sha = old['sha256']
        else:
            sha = hasher(os.path.join(root, rel))
            hashed.append(rel)
        entries.append({'path': rel, 'size': size, 'mtime_ns': mtime_ns, 'sha256': sha})
    return {
        'format': FORMAT,
        'files': entries,
        'links': [{'path': rel, 'target': links[rel]} for rel in sorted(links)],
        'total_bytes': sum(e['size'] for e in entries),
    }, hashed


def validate(manifest):
    """Problems of a manifest given as input (a list of strings; empty when it is usable)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get('files'), list):
        return ['the manifest must be a mapping with a list of files (from model_manifest with role=source)']
    problems = []
    for entry in manifest['files']:
        if not isinstance(entry, dict) or not all(k in entry for k in ('path', 'size', 'mtime_ns', 'sha256')):
            problems.append('manifest entry %r lacks path, size, mtime_ns or sha256' % (entry,))
            continue
        rel = entry['path']
        if rel.startswith('/') or '..' in rel.split('/'):
            problems.append('manifest path %r leaves the model directory' % rel)
    return problems


def compare(root, manifest, hasher=file_sha256):
    """Compare a node's directory with the manifest.

    Returns a dict: missing (absent files), wrong (present, to be copied again: size or content differ), restamp (same
    content, other mtime), hashed (files read), links_to_fix, bytes_needed, and complete (nothing to do)."""
    missing, wrong, restamp, hashed = [], [], [], []
    bytes_needed = 0
    for entry in manifest['files']:
        full = os.path.join(root, entry['path'])
        try:
            stat = os.lstat(full)
        except FileNotFoundError:
            missing.append(entry['path'])
            bytes_needed += entry['size']
            continue
        if os.path.islink(full) or not os.path.isfile(full) or stat.st_size != entry['size']:
            wrong.append(entry['path'])
            bytes_needed += entry['size']
        elif stat.st_mtime_ns != entry['mtime_ns']:
            hashed.append(entry['path'])
            if hasher(full) == entry['sha256']:
                restamp.append(entry['path'])
            else:
                wrong.append(entry['path'])
                bytes_needed += entry['size']
    links_to_fix = []
    for link in manifest.get('links') or []:
        full = os.path.join(root, link['path'])
        if not os.path.islink(full) or os.readlink(full) != link['target']:
            links_to_fix.append(link['path'])
    return {
        'missing': missing,
        'wrong': wrong,
        'restamp': restamp,
        'hashed': hashed,
        'links_to_fix': links_to_fix,
        'bytes_needed': bytes_needed,
        'complete': not (missing or wrong or restamp or links_to_fix),
    }


def check(root, manifest, reserve_bytes=0, node='node'):
    """A node's copy at ``root`` compared with ``manifest`` (compare's answer), with the free bytes there and
    ``disk_problem``: why ``node`` has no room for what it lacks plus ``reserve_bytes`` ('' when it has). A directory
    that does not exist lacks everything. Raises ManifestError for a manifest that is not usable."""
    problems = validate(manifest)
    if problems:
        raise ManifestError('invalid manifest: ' + '; '.join(problems))
    diff = compare(root if os.path.isdir(root) else '/nonexistent-dgxspark-model-dir', manifest)
    free = free_bytes(root)
    return dict(diff, free_bytes=free, disk_problem=disk_problem(node, root, diff['bytes_needed'], reserve_bytes, free) or '')


def nearest_existing(path):
    """``path`` or its nearest parent that exists (a directory not made yet is written on its parent's filesystem)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return probe


def free_bytes(path):
    """Free bytes for an unprivileged-safe estimate on the filesystem that holds `path` (or its nearest parent)."""
    stat = os.statvfs(nearest_existing(path))
    return stat.f_bavail * stat.f_frsize


def disk_problem(node, root, bytes_needed, reserve_bytes, free):
    """The message for a node without room for what it lacks (None when it has room)."""
    need = bytes_needed + reserve_bytes
    if need <= free:
        return None
    return ('%s: not enough disk for the model at %s: %s to copy%s, %s free; free %s there (or lower distribute_reserve_bytes)'
            % (node, root, human_bytes(bytes_needed),
               ' + %s kept free (distribute_reserve_bytes)' % human_bytes(reserve_bytes) if reserve_bytes else '',
               human_bytes(free), human_bytes(need - free)))


def human_bytes(count):
    value = float(count)
    for unit in ('B', 'KB', 'MB', 'GB', 'TB'):
        if abs(value) < 1000 or unit == 'TB':
            return ('%d %s' % (value, unit)) if unit == 'B' else ('%.1f %s' % (value, unit))
        value /= 1000.0
    return '%d B' % count


def model_dir(hf_repo, model='', model_cache_dir='', explicit=''):
    """The model's directory on a node: ``explicit`` (distribute_model_path), else ``model`` when it is a path, else the
    Hugging Face cache layout under ``model_cache_dir`` (dgxspark_model_dir, default /root/.cache/huggingface)."""
    if explicit:
        return explicit
    if model and str(model).startswith('/'):
        return str(model)
    return '%s/hub/models--%s' % (model_cache_dir or '/root/.cache/huggingface', str(hf_repo).replace('/', '--'))
