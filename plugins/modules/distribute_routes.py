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
    reads what every node of the play found there - the image it has (C(_distribute_image_id)), whether it lacks some of the
    model (C(_distribute_needs_model)) and its comparison with the head's manifest (C(_distribute_model_copy), a
    M(dgxspark.cluster.model_manifest) result).
  - The image goes to every node whose image ID differs from the head's (none when O(image) is false or the head has no
    image), in one chain over rail 1; the model goes to every node that lacks a file or holds one wrong, in one stream per rail
    from the head. Each chain passes the nodes in rank order.
  - Only the senders - the head and every node that passes a stream on to a next one - get the node-to-node key.
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
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        plan=dict(type='dict', required=True),
        head=dict(type='str', required=True),
        image=dict(type='bool', default=True),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.distribute_routes runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
