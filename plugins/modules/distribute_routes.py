#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: distribute_routes
short_description: Decide which nodes receive the image and the model, along which chains, and which nodes send
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin of the M(dgxspark.cluster.distribute) role; it runs on the controller, once, after the role's survey, and
    reads what every node of the play found there (C(_distribute_found), a M(dgxspark.cluster.distribute_survey) result) -
    the image it has, its copy of the model compared with the head's manifest, its room for what it lacks, its host key.
  - It fails, naming every node and what it lacks room for, when any node lacks room (nothing was changed on any node).
  - The image goes to every node whose image ID differs from the head's (none when O(image) is false or the head has no
    image), in one chain over rail 1; the model goes to every node that lacks a file or holds one wrong, in one stream per rail
    from the head. Each chain passes the nodes in rank order.
  - Only the senders - the head and every node that passes a stream on to a next one - get the node-to-node key.
  - With O(relay) it also returns what the copies are made of - the relay's command lines on the head, the list of files
    the head sends, what the node-to-node key may run on a node, and the pinned host keys.
options:
  plan:
    description: The cluster plan (C(nodes) with their C(rail_addresses), C(rails)) from M(dgxspark.cluster.cluster_plan).
    type: dict
    required: true
  head:
    description: The head, the source of both copies.
    type: str
    required: true
  image:
    description: Whether the image is distributed (C(distribute_image)).
    type: bool
    default: true
  reserve_bytes:
    description: Bytes that must stay free on a node's file system after the image is copied (C(distribute_reserve_bytes)).
    type: int
    default: 0
  relay:
    description:
      - The relay's fixed paths and connection (the role's C(_distribute_relay)) - C(path), C(ssh) (C(ssh_key),
        C(known_hosts), C(user), C(ssh_port), C(cipher)), C(progress) (C(image), C(model)), C(entries), C(send_files),
        C(connect_wait).
      - Omitted, only the routes are returned.
    type: dict
  image_name:
    description: The serving image's name, which the head's relay saves.
    type: str
    default: ""
  model_dir:
    description: The model directory (the same path on every node).
    type: str
    default: ""
  manifest:
    description: The head's manifest (M(dgxspark.cluster.model_manifest)), for RV(model_send).
    type: dict
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
attributes:
  platform:
    support: full
    platforms: controller
    description: Runs on the controller only.
"""

EXAMPLES = r"""
- name: Decide which nodes receive what, along which chains, and which nodes send
  dgxspark.cluster.distribute_routes:
    plan: "{{ dgxspark_plan }}"
    head: "{{ dgxspark_plan.head }}"
    relay: "{{ _distribute_relay }}"
    image_name: vllm/vllm-openai:v0.33.0
    model_dir: /data/models/qwen3.5-397b-fp8
    manifest: "{{ model_source.manifest }}"
  register: routes
  run_once: true
"""

RETURN = r"""
image_targets:
  description: The nodes that receive the image, in play order.
  returned: always
  type: list
  elements: str
model_targets:
  description: The nodes that lack some of the model, in play order.
  returned: always
  type: list
  elements: str
any_work:
  description: Whether any node receives anything.
  returned: always
  type: bool
senders:
  description: The nodes that send (the head, and every node that passes a stream on), which need the node-to-node key.
  returned: always
  type: list
  elements: str
image_chain:
  description: The image targets' rail-1 addresses, in rank order.
  returned: always
  type: list
  elements: str
model_chain:
  description: The head's and then the model targets' rail addresses (rail name to address), in rank order.
  returned: always
  type: list
  elements: dict
lacking:
  description: The model paths at least one target lacks or holds wrong, first seen first, each once.
  returned: always
  type: list
  elements: str
problems:
  description: Every node without room for what it lacks (the model's first); the task fails when there is one.
  returned: always
  type: list
  elements: str
image_argv:
  description: The relay's command line on the head that starts the image chain.
  returned: when O(relay) is given
  type: list
  elements: str
model_argv:
  description: The relay's command line on the head that starts the model streams, one per rail.
  returned: when O(relay) is given
  type: list
  elements: str
model_send:
  description: The entries of O(manifest) that some target lacks, in the manifest's order (what the head sends).
  returned: when O(relay) is given
  type: list
  elements: dict
forced_config:
  description: What the node-to-node key may run on a node - the relay's receiving operations with these paths only.
  returned: when O(relay) is given
  type: dict
known_hosts:
  description: Every node's host key pinned at its rail addresses, a line per node; empty when there is no work.
  returned: when O(relay) is given
  type: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        plan=dict(type='dict', required=True),
        head=dict(type='str', required=True),
        image=dict(type='bool', default=True),
        reserve_bytes=dict(type='int', default=0),
        relay=dict(type='dict'),
        image_name=dict(type='str', default=''),
        model_dir=dict(type='str', default=''),
        manifest=dict(type='dict'),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.distribute_routes runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
