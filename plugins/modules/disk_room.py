#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: disk_room
short_description: Check that a node has room for what it is about to write in one or more places
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - "Read-only. Sums the bytes of O(needs) per filesystem (places on one filesystem add up: a spooled image and Docker's
    store of its layers on one root filesystem need twice the image) and compares each sum plus O(reserve_bytes) with
    the space free there."
  - A path that does not exist yet counts on the filesystem of its nearest existing parent.
  - "It never fails for lack of room: RV(problem) names the node, what does not fit, where, and how much to free, so that
    a play can collect every node's answer before it stops."
options:
  needs:
    description: What will be written where.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: The directory that will receive the bytes.
        type: path
        required: true
      bytes:
        description: How many bytes will be written there.
        type: int
        required: true
      role:
        description: How the bytes are named in the message (for example V(spooled), V(loaded into Docker)).
        type: str
        default: written
  what:
    description: What is written, for the message (for example V(the serving image)).
    type: str
    required: true
  reserve_bytes:
    description: Bytes that must stay free on each filesystem afterwards.
    type: int
    default: 0
  node:
    description: The node's name in the message (default its host name).
    type: str
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Check the room for the serving image (the spool and Docker's store)
  dgxspark.cluster.disk_room:
    what: the serving image
    needs:
      - {path: /var/lib/dgxspark/distribute, bytes: 19000000000, role: spooled}
      - {path: /var/lib/docker, bytes: 19000000000, role: loaded into Docker}
    reserve_bytes: 10000000000
  register: room
"""

RETURN = r"""
filesystems:
  description: One entry per filesystem, in the order first named.
  returned: always
  type: list
  elements: dict
  contains:
    device: {description: The filesystem's device number., type: int}
    paths: {description: The paths of O(needs) on it., type: list, elements: str}
    bytes: {description: The bytes to be written there in all., type: int}
    free: {description: The bytes free there now., type: int}
problem:
  description: The message naming every filesystem without room (each with its shortfall), or an empty string.
  returned: always
  type: str
  sample: "spark-delta: not enough disk for the serving image: 19.0 GB spooled at /var/lib/dgxspark/distribute and 19.0 GB
    loaded into Docker at /var/lib/docker (one filesystem), 25.0 GB free; free 13.0 GB there (or lower distribute_reserve_bytes)"
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.disk_room import filesystems, problem


def main():
    module = AnsibleModule(
        argument_spec=dict(
            needs=dict(type='list', elements='dict', required=True, options=dict(
                path=dict(type='path', required=True),
                bytes=dict(type='int', required=True),
                role=dict(type='str', default='written'),
            )),
            what=dict(type='str', required=True),
            reserve_bytes=dict(type='int', default=0),
            node=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    needs = module.params['needs']
    found = filesystems(needs)
    module.exit_json(changed=False, filesystems=found,
                     problem=problem(module.params['node'] or os.uname()[1], module.params['what'], needs, found,
                                     module.params['reserve_bytes']))


if __name__ == '__main__':
    main()
