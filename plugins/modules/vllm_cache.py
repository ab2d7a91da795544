#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_cache
short_description: Empty a node's vLLM compile cache when another serving release starts
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Reads the cache directories (C(VLLM_CACHE_ROOT)) that the serving containers O(containers) mount, and in each a
    marker file (C(.dgxspark-release)) naming the release whose engine wrote it.
  - Where the marker names another release (or none), empties the directory (every entry but the marker) and writes
    O(release) into the marker. A rollback must not load artefacts that the failed release wrote, since vLLM's own cache
    key covers its version and configuration, not who wrote the files. The same release keeps its cache.
  - Changed only when it emptied a directory. A missing directory is left alone (Docker creates it when it mounts it).
  - Run it on every node before the new release's engine starts (the Ray workers compile into the same directory).
options:
  containers:
    description:
      - The node's serving containers as the plan or a recorded release has them (each a dict with C(env)); null entries
        (a node without that container) are skipped.
    type: list
    elements: raw
    required: true
  release:
    description: The release that starts and that the cache belongs to from now on.
    type: str
    required: true
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode reports which directories would be emptied and removes nothing.
  diff_mode:
    support: full
    details: The diff shows each directory's release and the entries that go.
"""

EXAMPLES = r"""
- name: Empty vLLM's compile cache for the release put back
  dgxspark.cluster.vllm_cache:
    containers: "{{ release.containers }}"
    release: "{{ release.id }}"
"""

RETURN = r"""
caches:
  description: Per cache directory, the release its marker named (V('') none, null no directory), what became of it
    (V(kept), V(emptied), V(missing)) and the entries removed.
  returned: always
  type: dict
  sample: {/var/cache/dgxspark/vllm: {previous: 3f2a1c9e0b7d, outcome: emptied, removed: [modelinfos, torch_compile_cache]}}
msg:
  description: One line saying what was done.
  returned: always
  type: str
  sample: "vLLM's cache emptied for release 5b0e7a41c2d9: /var/cache/dgxspark/vllm (release 3f2a1c9e0b7d, 2 entries)"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_cache import VllmCacheError, apply, cache_dirs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type='list', elements='raw', required=True),
            release=dict(type='str', required=True),
        ),
        supports_check_mode=True,
    )
    release = module.params['release']
    try:
        caches = apply(cache_dirs(module.params['containers']), release, check_mode=module.check_mode)
    except VllmCacheError as exc:
        module.fail_json(msg="vLLM's cache: %s" % exc)
    emptied = dict((path, found) for path, found in caches.items() if found['outcome'] == 'emptied')
    if emptied:
        msg = "vLLM's cache emptied for release %s: %s" % (release, ', '.join(
            '%s (release %s, %d entries)' % (path, found['previous'] or 'unknown', len(found['removed']))
            for path, found in sorted(emptied.items())))
    else:
        msg = "vLLM's cache kept: %s" % (', '.join('%s %s' % (path, found['outcome']) for path, found in sorted(caches.items()))
                                         or 'no cache directory mounted')
    result = dict(changed=bool(emptied), caches=caches, msg=msg)
    if module._diff:
        result['diff'] = [dict(before_header=path, after_header=path,
                               before='release: %s\n%s' % (found['previous'] or '', ''.join(n + '\n' for n in found['removed'])),
                               after='release: %s\n' % release) for path, found in sorted(emptied.items())]
    module.exit_json(**result)


if __name__ == '__main__':
    main()
