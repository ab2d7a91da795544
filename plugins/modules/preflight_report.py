#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_report
short_description: Check every node's preflight readings against the cluster plan, all problems at once
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Runs on the controller (action plugin) after M(dgxspark.cluster.preflight_facts), M(dgxspark.cluster.serving_image_versions)
    and M(dgxspark.cluster.cx7_facts) ran on every node with C(ignore_unreachable) and C(ignore_errors), their results
    registered as O(facts_var), O(image_var) and O(cx7_var).
  - "Checks, per node: SSH and privilege escalation; the GPU (name, the same driver on every node, CUDA reported); memory
    (MemTotal against C(dgxspark_node_memory_gib), MemAvailable against the plan's budget with the largest consumers named,
    swap); Docker (running, the NVIDIA runtime or CDI specs when the GPU is passed); the serving image (the head's image ID on
    every node, or to be distributed; C(ray --version) and C(vllm --version) answer); the model (the head's files and sizes and
    safetensors index on every node, or to be distributed with room for it); the rails (present, up, at the expected speed);
    the Ray and vLLM ports (free or held by this collection's containers); the clock skew between nodes; OS and kernel
    differences (warnings)."
  - Returns the node-by-check table and fails, before any host is changed, with every problem, each naming the node, what was
    found, what was expected and the fix. An unreachable node is a problem like the others; it never proceeds on a subset.
options:
  plan:
    description: The cluster plan (M(dgxspark.cluster.cluster_plan)).
    type: dict
    required: true
  expect:
    description:
      - Overrides of the expectations, which otherwise come from the head's variables (C(dgxspark_expected_gpu_name), default
        C(NVIDIA GB10); C(dgxspark_preflight_max_clock_skew_s), default 5; C(dgxspark_serving_docker_gpus);
        C(dgxspark_distribute_image); C(dgxspark_distribute_model); C(dgxspark_model_download);
        C(dgxspark_expected_link_speed_mbps); C(ray_cluster_ports); C(vllm_container_port)) and the plan.
    type: dict
    default: {}
  facts_var:
    description: The variable that holds each node's M(dgxspark.cluster.preflight_facts) result.
    type: str
    default: _preflight_facts
  image_var:
    description: The variable that holds each node's M(dgxspark.cluster.serving_image_versions) result.
    type: str
    default: _preflight_image
  cx7_var:
    description: The variable that holds each node's M(dgxspark.cluster.cx7_facts) result.
    type: str
    default: _preflight_cx7
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
- name: Check every node against the plan
  dgxspark.cluster.preflight_report:
    plan: "{{ dgxspark_plan }}"
  run_once: true
  delegate_to: localhost
  register: preflight
"""

RETURN = r"""
report:
  description: C(checks), C(rows) (each C(node) and a cell per check), C(problems), C(warnings), C(ok).
  returned: when every check passed
  type: dict
table:
  description: The node-by-check table, then the problems and warnings, as lines.
  returned: always
  type: list
  elements: str
problems:
  description: Every problem, each naming the node, what was found, what was expected and the fix.
  returned: when a check failed
  type: list
  elements: str
checks:
  description: The number of checks made (nodes x checks).
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        plan=dict(type='dict', required=True),
        expect=dict(type='dict', default={}),
        facts_var=dict(type='str', default='_preflight_facts'),
        image_var=dict(type='str', default='_preflight_image'),
        cx7_var=dict(type='str', default='_preflight_cx7'),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.preflight_report runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
