#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_readiness
short_description: Whether a bandwidth test of the fabric check can run on every node, or why it is skipped
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin of the M(dgxspark.cluster.fabric_check) role; it runs on the controller, once, and reads what the role's tasks
    registered on every node of the play. Nothing is faked - a test runs on every node of the plan or on none, and a note for the
    summary says what is missing.
  - "O(test=ib_write_bw): a node is ready when it is in the play and has an RDMA device behind every rail interface (its
    C(_fabric_check_rdma_devices), set only where O(ib_write_bw_path) exists). Returns the node pairs too: every node serves the next
    one in plan order (two nodes: one pair)."
  - "O(test=nccl): a node is ready when it is in the play and read its /proc/meminfo (C(_fabric_check_meminfo), read only where the
    GPU device and the image exist). The test is sized to the least MemAvailable (the largest power-of-two size that fits
    O(memory_fraction) of it). When it can run, returns each node's C(docker run) command line: rank = plan rank, the rendezvous on
    the head's first rail address and O(port), C(NCCL_SOCKET_IFNAME) the first rail's interface, the container without Docker's
    default capabilities but C(IPC_LOCK), then O(docker_args) and O(env)."
options:
  plan:
    description: The cluster plan (C(nodes), C(rails)) from M(dgxspark.cluster.cluster_plan).
    type: dict
    required: true
  test:
    description: The test, V(ib_write_bw) between node pairs or V(nccl) over all nodes.
    type: str
    required: true
    choices: [ib_write_bw, nccl]
  ib_write_bw_path:
    description: perftest's ib_write_bw, for the note.
    type: str
    default: /usr/bin/ib_write_bw
  image:
    description: The image the NCCL test runs in.
    type: str
    default: ''
  gpu_device:
    description: The GPU device file, for the note.
    type: str
    default: /dev/nvidiactl
  collective:
    description: The collective the NCCL test measures.
    type: str
    default: all_gather
    choices: [all_gather, all_reduce]
  memory_fraction:
    description: Share of the free memory (least of all nodes) the NCCL test may use.
    type: float
    default: 0.5
  port:
    description: TCP port of the NCCL test's rendezvous on the head's first rail address.
    type: int
    default: 29533
  docker_args:
    description: C(docker run) options of the NCCL test container.
    type: list
    elements: str
    default: []
  env:
    description: Environment variables of the NCCL test container, added to or over the test's own.
    type: dict
    default: {}
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
- name: Decide whether ib_write_bw can run on every node
  dgxspark.cluster.fabric_readiness:
    plan: "{{ dgxspark_plan }}"
    test: ib_write_bw
  register: rdma
  run_once: true

- name: Decide whether the NCCL test can run, its size and each node's command
  dgxspark.cluster.fabric_readiness:
    plan: "{{ dgxspark_plan }}"
    test: nccl
    image: vllm/vllm-openai:v0.33.0
    docker_args: [--gpus=all, --network=host]
  register: nccl
  run_once: true
"""

RETURN = r"""
ready:
  description: Nodes that can run the test, in plan order.
  returned: always
  type: list
  elements: str
missing:
  description: Nodes of the plan that cannot.
  returned: always
  type: list
  elements: str
notes:
  description: The note for the summary when the test is skipped, else empty.
  returned: always
  type: list
  elements: str
pairs:
  description: The ib_write_bw pairs, each [server, client].
  returned: O(test=ib_write_bw)
  type: list
  elements: list
max_bytes:
  description: The NCCL test's largest message size, bytes; null when a node is missing or too little memory is free.
  returned: O(test=nccl)
  type: int
collective:
  description: The collective measured.
  returned: O(test=nccl)
  type: str
argv:
  description: Each node of the plan -> its C(docker run) command line of the NCCL test; empty when the test cannot run.
  returned: O(test=nccl)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        plan=dict(type='dict', required=True),
        test=dict(type='str', required=True, choices=['ib_write_bw', 'nccl']),
        ib_write_bw_path=dict(type='str', default='/usr/bin/ib_write_bw'),
        image=dict(type='str', default=''),
        gpu_device=dict(type='str', default='/dev/nvidiactl'),
        collective=dict(type='str', default='all_gather', choices=['all_gather', 'all_reduce']),
        memory_fraction=dict(type='float', default=0.5),
        port=dict(type='int', default=29533),
        docker_args=dict(type='list', elements='str', default=[]),
        env=dict(type='dict', default={}),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.fabric_readiness runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
