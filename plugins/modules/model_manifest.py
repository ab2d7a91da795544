#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_manifest
short_description: Describe a model directory once at its source, and compare or repair a node's copy against that description
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - "The manifest lists every file of a model directory with its relative path, size, mtime and sha256, and every symlink with
    its target (a Hugging Face cache's snapshots are symlinks to its blobs). It lives in the directory as C(.dgxspark-manifest.json)."
  - With O(state=source) (on the node that has the model) it builds the manifest and writes it when it changed. A file whose
    size and mtime equal the previous manifest's keeps its hash, so a re-run reads no model content.
  - With O(state=check) (read-only, on a node that receives the model) it compares the node's directory with O(manifest)
    by size and mtime, hashing only files whose size matches but whose mtime does not, and reports what the node lacks,
    the bytes to copy and the free space there.
  - With O(state=prepared) it makes the directory ready to receive what it lacks. A file whose size or content is wrong is
    removed (it is copied again whole), what an interrupted copy left in C(.dgxspark-partial) is removed, the symlinks are
    made, and a file with the right content but another mtime gets the manifest's mtime. A directory it creates gets the
    mark C(.dgxspark-copy), by which M(dgxspark.cluster.serving_release) knows it may remove the copy once no kept release
    uses it (a directory that existed before is never marked).
  - With O(state=verified) (after the copy) it fails, naming the files, unless the directory matches the manifest, then
    writes the manifest into the directory.
options:
  path:
    description: The model directory (the same path on every node).
    type: path
    required: true
  state:
    description: What to do; see the description.
    type: str
    choices: [source, check, prepared, verified]
    default: check
  manifest:
    description: The source's manifest (RV(manifest) of O(state=source)); required unless O(state=source).
    type: dict
  reserve_bytes:
    description: Bytes that must stay free on the node's filesystem after the copy (O(state=check) reports the shortfall).
    type: int
    default: 0
  node:
    description: The node's name in messages (default its host name).
    type: str
  entries:
    description:
      - With O(state=prepared), also write the manifest's entries (path, size, mtime, sha256) of the files the node lacks or
        holds wrong to this file, mode 0600 - what the relay of the M(dgxspark.cluster.distribute) role receives and checks
        as each arrives.
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Nothing is written, moved or re-stamped in check mode; the result says what would be.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Describe the model on the head (hashes only new or changed files)
  dgxspark.cluster.model_manifest:
    path: /data/models/qwen3.5-397b-fp8
    state: source
  register: model_source

- name: Compare a worker's copy with the head's (read-only)
  dgxspark.cluster.model_manifest:
    path: /data/models/qwen3.5-397b-fp8
    manifest: "{{ model_source.manifest }}"
    reserve_bytes: 10000000000
  register: model_copy

- name: Make a worker's copy ready to receive what it lacks, and list what it lacks for the relay
  dgxspark.cluster.model_manifest:
    path: /data/models/qwen3.5-397b-fp8
    manifest: "{{ model_source.manifest }}"
    state: prepared
    entries: /run/dgxspark/distribute/model-entries.json
"""

RETURN = r"""
manifest:
  description: The manifest (O(state=source)).
  returned: state is source
  type: dict
hashed:
  description: The files whose content was read in this run.
  returned: always
  type: list
  elements: str
missing:
  description: Files the node lacks.
  returned: state is not source
  type: list
  elements: str
wrong:
  description: Files present with the wrong size or content (copied again).
  returned: state is not source
  type: list
  elements: str
bytes_needed:
  description: Bytes the node must receive.
  returned: state is not source
  type: int
free_bytes:
  description: Free bytes on the filesystem of O(path) (or its nearest existing parent).
  returned: state is not source
  type: int
disk_problem:
  description: Why the node has no room for what it lacks; empty when it has.
  returned: state is check
  type: str
complete:
  description: Whether the node's directory matches the manifest.
  returned: state is not source
  type: bool
"""

import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import (
    COPY_MARK,
    MANIFEST_NAME,
    PARTIAL_DIR,
    ManifestError,
    build,
    check,
)


def _read_manifest(path):
    try:
        with open(os.path.join(path, MANIFEST_NAME)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write_manifest(module, path, manifest):
    """Write the manifest when its content differs; returns whether it did (or would, in check mode)."""
    if _read_manifest(path) == manifest:
        return False
    if not module.check_mode:
        target = os.path.join(path, MANIFEST_NAME)
        with open(target + '.tmp', 'w') as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
        os.chmod(target + '.tmp', 0o644)
        os.rename(target + '.tmp', target)
    return True


def _source(module, path):
    manifest, hashed = build(path, _read_manifest(path))
    changed = _write_manifest(module, path, manifest)
    module.exit_json(changed=changed, manifest=manifest, hashed=hashed, total_bytes=manifest['total_bytes'],
                     files=len(manifest['files']))


def _by_path(manifest):
    return dict((entry['path'], entry) for entry in manifest['files'])


def _prepare(module, path, manifest, diff):
    """Remove wrong files (they come again whole) and what an interrupted copy left, make the links, re-stamp files whose
    content is right."""
    entries = _by_path(manifest)
    links = dict((link['path'], link['target']) for link in manifest.get('links') or [])
    partial = os.path.join(path, PARTIAL_DIR)
    actions = (len(diff['wrong']) + len(diff['restamp']) + len(diff['links_to_fix']) + (0 if os.path.isdir(path) else 1)
               + (1 if os.path.lexists(partial) else 0))
    if module.check_mode or not actions:
        return bool(actions)
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o755)
        # The collection made this copy: serving_release may remove it once no kept release uses it.
        with open(os.path.join(path, COPY_MARK), 'w') as handle:
            handle.write('Made by the dgxspark.cluster distribution; removed when no kept release uses it.\n')
    if os.path.lexists(partial):
        shutil.rmtree(partial)
    for rel in diff['wrong']:
        target = os.path.join(path, rel)
        if os.path.isdir(target) and not os.path.islink(target):
            module.fail_json(msg='%s is a directory where the model has the file %s: remove it' % (target, rel))
        os.unlink(target)
    for rel in diff['restamp']:
        mtime_ns = entries[rel]['mtime_ns']
        os.utime(os.path.join(path, rel), ns=(mtime_ns, mtime_ns))
    for rel in diff['links_to_fix']:
        link = os.path.join(path, rel)
        if os.path.lexists(link) and (os.path.islink(link) or not os.path.isdir(link)):
            os.unlink(link)
        os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
        os.symlink(links[rel], link)
    return True


def _write_entries(module, target, manifest, diff):
    """Write the entries of the files the node lacks or holds wrong (manifest order) when they differ from the file's;
    returns whether it did (or would, in check mode)."""
    lacking = set(diff['missing'] + diff['wrong'])
    content = json.dumps([entry for entry in manifest['files'] if entry['path'] in lacking])
    try:
        with open(target) as handle:
            if handle.read() == content:
                return False
    except OSError:
        pass
    if not module.check_mode:
        with open(target + '.tmp', 'w') as handle:
            os.chmod(target + '.tmp', 0o600)
            handle.write(content)
        os.rename(target + '.tmp', target)
    return True


def _verify(module, path, manifest, diff):
    problems = ['%s missing' % rel for rel in diff['missing']] + ['%s differs from the source' % rel for rel in diff['wrong']]
    problems += ['symlink %s missing or pointing elsewhere' % rel for rel in diff['links_to_fix']]
    if problems:
        module.fail_json(msg='the model at %s does not match the source after the copy: %s' % (path, '; '.join(problems[:10])),
                         problems=problems)
    changed = bool(diff['restamp'])
    if changed and not module.check_mode:
        entries = _by_path(manifest)
        for rel in diff['restamp']:
            os.utime(os.path.join(path, rel), ns=(entries[rel]['mtime_ns'],) * 2)
    changed = _write_manifest(module, path, manifest) or changed
    return changed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            state=dict(type='str', choices=['source', 'check', 'prepared', 'verified'], default='check'),
            manifest=dict(type='dict'),
            reserve_bytes=dict(type='int', default=0),
            node=dict(type='str'),
            entries=dict(type='path'),
        ),
        required_if=[('state', 'check', ['manifest']), ('state', 'prepared', ['manifest']), ('state', 'verified', ['manifest'])],
        supports_check_mode=True,
    )
    path, state, manifest = module.params['path'], module.params['state'], module.params['manifest']
    try:
        if state == 'source':
            _source(module, path)
        diff = check(path, manifest, module.params['reserve_bytes'], module.params['node'] or os.uname()[1])
    except ManifestError as exc:
        module.fail_json(msg=str(exc))
    result = dict(diff, path=path)
    if state == 'check':
        module.exit_json(changed=False, **result)
    del result['disk_problem']
    if state == 'prepared':
        changed = bool(module.params['entries']) and _write_entries(module, module.params['entries'], manifest, diff)
        module.exit_json(changed=_prepare(module, path, manifest, diff) or changed, **result)
    module.exit_json(changed=_verify(module, path, manifest, diff), **result)


if __name__ == '__main__':
    main()
