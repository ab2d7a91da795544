#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: distribute_survey
short_description: Find what a node has for the distribution of the serving image and the model, and its room for what it lacks
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Read-only; one call per node answers what the M(dgxspark.cluster.distribute) role needs to decide who receives what.
  - The serving image O(image) in the node's Docker (its ID and size, through the Docker CLI; the Docker SDK for Python is
    not needed), and where a received image would go - spooled in O(spool_dir), then loaded into Docker's store - with the
    free bytes of each file system there (the head's image size is known on the controller, which checks the room).
  - The model - whether O(model_dir) holds a manifest (a complete copy, see M(dgxspark.cluster.model_manifest)), and, with
    O(manifest) (the head's), the node's copy compared with it by size and mtime (hashing only files whose size matches and
    whose mtime does not), with its room for what it lacks.
  - The node's SSH host key (O(host_key)), which the node-to-node connections of the distribution pin, and whether the
    node-to-node key or its authorization is left from an older run (O(relay_key)).
  - "It never fails for lack of room: C(disk_problem) of RV(model) names the node, what does not fit, where and how much to
    free, so that the play can collect every node's answer before it stops."
options:
  image:
    description: The serving image's name; omitted, no image is looked at.
    type: str
  image_id:
    description: Fail, naming both IDs, unless the node's O(image) has this ID (the head's, after a copy).
    type: str
  spool_dir:
    description: Where the node spools a received image before it loads it.
    type: path
    default: /var/lib/dgxspark/distribute
  model_dir:
    description: The model directory (the same path on every node); needed for RV(has_manifest) and O(manifest).
    type: path
  manifest:
    description:
      - The head's manifest (RV(dgxspark.cluster.model_manifest#module:manifest) of
        O(dgxspark.cluster.model_manifest#module:state=source)); omitted, the copy is not compared.
    type: dict
  reserve_bytes:
    description: Bytes that must stay free on a file system after a copy.
    type: int
    default: 0
  node:
    description: The node's name in messages (default its host name).
    type: str
  host_key:
    description: The node's SSH host key (public).
    type: path
    default: /etc/ssh/ssh_host_ed25519_key.pub
  relay_key:
    description: The node-to-node key's path; with it, RV(relay_key_left) says whether the key or its authorization is left.
    type: path
  relay_key_user:
    description: The user whose C(~/.ssh/authorized_keys) may authorize the node-to-node key.
    type: str
    default: root
  relay_key_comment:
    description: The node-to-node key's comment, which ends the line that authorizes it.
    type: str
    default: dgxspark-distribute
  docker:
    description: The Docker CLI.
    type: str
    default: docker
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
  - dgxspark.cluster.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Look for the serving image and the model's manifest on the head
  dgxspark.cluster.distribute_survey:
    image: vllm/vllm-openai:v0.33.0
    model_dir: /data/models/qwen3.5-397b-fp8
  register: head_found
  delegate_to: spark-alpha
  run_once: true

- name: Find what each worker has and lacks, with its room
  dgxspark.cluster.distribute_survey:
    image: vllm/vllm-openai:v0.33.0
    model_dir: /data/models/qwen3.5-397b-fp8
    manifest: "{{ model_source.manifest }}"
    reserve_bytes: 10000000000
  register: found
"""

RETURN = r"""
image:
  description: The node's O(image) (C(id), C(size) in bytes); null when its Docker lacks it or no O(image) was given.
  returned: always
  type: dict
  sample: {id: "sha256:3f2a...", size: 19000000000}
image_room:
  description: Where a received image would go (C(needs) - C(path), C(role)) and each file system there (C(device),
    C(paths), C(free) bytes), as module_utils/disk_room.py counts them.
  returned: when O(image) is given
  type: dict
has_manifest:
  description: Whether O(model_dir) holds a manifest (a complete copy, described or verified before).
  returned: when O(model_dir) is given
  type: bool
model:
  description: The copy compared with O(manifest) (C(missing), C(wrong), C(restamp), C(links_to_fix), C(bytes_needed),
    C(free_bytes), C(complete), and C(disk_problem), empty when the node has room), as
    M(dgxspark.cluster.model_manifest) O(dgxspark.cluster.model_manifest#module:state=check) returns them.
  returned: when O(manifest) is given
  type: dict
relay_key_left:
  description:
    - Whether the node-to-node key (O(relay_key)) or a line of O(relay_key_user)'s C(authorized_keys) that ends with
      O(relay_key_comment) is still on the node (an older run ended before it removed them); true for an unknown user.
  returned: when O(relay_key) is given
  type: bool
host_key:
  description: The node's SSH host key as C(TYPE BASE64); empty when the file is missing.
  returned: always
  type: str
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils.distribute_survey import (
    SurveyError, docker_root, host_key, image_of, image_room, mismatch, relay_key_left)
from ansible_collections.dgxspark.cluster.plugins.module_utils.model_manifest import MANIFEST_NAME, ManifestError, check


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type='str'),
            image_id=dict(type='str'),
            spool_dir=dict(type='path', default='/var/lib/dgxspark/distribute'),
            model_dir=dict(type='path'),
            manifest=dict(type='dict'),
            reserve_bytes=dict(type='int', default=0),
            node=dict(type='str'),
            host_key=dict(type='path', default='/etc/ssh/ssh_host_ed25519_key.pub'),
            relay_key=dict(type='path', no_log=False),
            relay_key_user=dict(type='str', default='root', no_log=False),
            relay_key_comment=dict(type='str', default='dgxspark-distribute', no_log=False),
            docker=dict(type='str', default='docker'),
        ),
        required_by={'image_id': 'image', 'manifest': 'model_dir'},
        supports_check_mode=True,
    )
    params = module.params
    node = params['node'] or os.uname()[1]
    result = dict(changed=False, image=None)
    try:
        if params['image']:
            result['image'] = image_of(module.run_command, params['docker'], params['image'])
            wrong = params['image_id'] is not None and mismatch(node, params['image'], result['image'], params['image_id'])
            if wrong:
                module.fail_json(msg=wrong, **result)
            result['image_room'] = image_room(params['spool_dir'], docker_root(module.run_command, params['docker']))
        if params['model_dir']:
            result['has_manifest'] = os.path.isfile(os.path.join(params['model_dir'], MANIFEST_NAME))
        if params['manifest'] is not None:
            result['model'] = check(params['model_dir'], params['manifest'], params['reserve_bytes'], node)
    except (SurveyError, ManifestError) as exc:
        module.fail_json(msg='%s: %s' % (node, exc), **result)
    if params['relay_key']:
        try:
            authorized_keys = os.path.join(pwd.getpwnam(params['relay_key_user']).pw_dir, '.ssh', 'authorized_keys')
        except KeyError:
            authorized_keys = None
        result['relay_key_left'] = relay_key_left(params['relay_key'], authorized_keys, params['relay_key_comment'])
    try:
        with open(params['host_key']) as handle:
            result['host_key'] = host_key(handle.read())
    except OSError:
        result['host_key'] = ''
    module.exit_json(**result)


if __name__ == '__main__':
    main()
