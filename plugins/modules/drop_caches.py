#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drop_caches
short_description: Drop a node's page cache and report the memory it freed
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Flushes dirty pages (C(sync)), then writes O(mode) to C(/proc/sys/vm/drop_caches), and reads C(MemAvailable) and
    C(Cached) from C(/proc/meminfo) before and after.
  - Dropping is a real change every time, so the module always reports changed; run it right before the serving engine
    starts, never in a play that should converge to no change.
  - Where C(/proc/sys/vm/drop_caches) is not writable (a container) it fails and says so; it never pretends.
options:
  mode:
    description: V(1) drops the page cache, V(2) dentries and inodes, V(3) both.
    type: int
    choices: [1, 2, 3]
    default: 3
  node:
    description: The node's name in RV(msg) (default its host name).
    type: str
  drop_caches_path:
    description: The file the mode is written to (another path for tests only).
    type: path
    default: /proc/sys/vm/drop_caches
  meminfo_path:
    description: The file the memory is read from (another path for tests only).
    type: path
    default: /proc/meminfo
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode reads C(/proc/meminfo), reports changed and drops nothing.
  diff_mode:
    support: none
    details: The kernel's caches have no text to diff; RV(msg) says what changed.
"""

EXAMPLES = r"""
- name: Drop the page cache right before the engine starts
  dgxspark.cluster.drop_caches:
    mode: 3
    node: "{{ inventory_hostname }}"
  register: dropped

- name: Report the memory freed
  ansible.builtin.debug:
    msg: "{{ dropped.msg }}"
"""

RETURN = r"""
before:
  description: C(MemAvailable) and C(Cached) in KiB before the drop.
  returned: always
  type: dict
  sample: {MemAvailable: 98765432, Cached: 40123456}
after:
  description: C(MemAvailable) and C(Cached) in KiB after the drop (null in check mode, where nothing was dropped).
  returned: always
  type: dict
  sample: {MemAvailable: 121234567, Cached: 1234567}
msg:
  description: The memory before and after in GiB, in one line.
  returned: always
  type: str
  sample: "spark-alpha: MemAvailable 94.19 -> 115.62 GiB (+21.43 GiB); Cached 38.26 -> 1.18 GiB."
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.drop_caches import DropCachesError, drop, read_meminfo, summary


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type='int', choices=[1, 2, 3], default=3),
            node=dict(type='str'),
            drop_caches_path=dict(type='path', default='/proc/sys/vm/drop_caches'),
            meminfo_path=dict(type='path', default='/proc/meminfo'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    node = params['node'] or os.uname()[1]
    try:
        before = read_meminfo(params['meminfo_path'])
        after = None
        if not module.check_mode:
            drop(params['mode'], params['drop_caches_path'])
            after = read_meminfo(params['meminfo_path'])
    except DropCachesError as exc:
        module.fail_json(msg='%s: %s' % (node, exc))
    module.exit_json(changed=True, before=before, after=after, msg=summary(node, before, after))


if __name__ == '__main__':
    main()
