# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the dgxspark.cluster.cluster_plan action plugin (the code runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_plan
short_description: Plan a multi-node vLLM cluster of DGX Spark machines from the inventory
version_added: 0.1.0
description:
  - Runs on the controller only and never contacts a host.
  - Reads the inventory groups C(head) (exactly one host) and C(workers), and the C(dgxspark_*) variables of their hosts.
  - Orders the nodes (head first, then workers in inventory order), gives each a rank and an address on every RoCE rail, checks
    parallelism (TP x PP = number of nodes, one GPU per Spark), the memory fit of the model profile, the KV-cache room and the
    decode roofline.
  - Fails listing every problem found, each naming the variable (and host) and the fix.
  - Model profiles are the files C(profiles/models/<name>.yml) of the collection, plus those in O(profiles_dir).
options:
  profiles_dir:
    description:
      - A directory of additional model profiles (C(<name>.yml)); a profile here overrides a built-in one of the same name.
        Its patch files are relative to it (docs/profiles.md).
      - Default, the variable C(dgxspark_profiles_dir) (inventory or C(-e)), so that every play that plans sees the same
        profiles.
    type: path
  presets:
    description:
      - Cluster-wide inventory variables (C(dgxspark_*)) that a playbook sets where the inventory (or C(-e)) does not, such
        as the model and shape a seed playbook deploys.
      - A value the user set is kept over the preset and the plan table says so; a different C(dgxspark_model_profile) is
        refused (it is what the playbook deploys).
    type: dict
    default: {}
  presets_by:
    description:
      - The playbook that sets O(presets), as the plan table and the messages name it.
    type: str
    default: the playbook
  playbook:
    description:
      - A playbook whose presets to plan with, when O(presets) is empty (its import's C(dgxspark_plan_presets)), as a file
        name of the collection's C(playbooks/) or an absolute path. C(playbooks/plan.yml) passes C(dgxspark_plan_playbook), so
        that it prints the plan that playbook would.
    type: str
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
attributes:
  platform:
    support: full
    platforms: controller
    description: Runs on the controller only.
notes:
  - "This is an action plugin: the play's C(hosts) does not matter; use C(hosts: localhost)."
  - Requires the Python library C(netaddr) on the controller.
  - The inventory variables are documented in C(docs/inventory.md) of the collection.
author: dgxspark.cluster contributors (@dgxspark)
"""

EXAMPLES = r"""
- name: Plan the cluster from the inventory
  dgxspark.cluster.cluster_plan:
  register: dgxspark_plan

- name: Show the plan
  ansible.builtin.debug:
    msg: "{{ dgxspark_plan.table }}"

- name: Plan pipeline parallelism where the inventory sets no shape
  dgxspark.cluster.cluster_plan:
    presets:
      dgxspark_tensor_parallel_size: 1
      dgxspark_pipeline_parallel_size: 3
    presets_by: my-3node-playbook.yml
"""

RETURN = r"""
plan:
  description: The cluster plan.
  returned: success
  type: dict
  contains:
    nodes:
      description: Nodes in rank order, each with C(host), C(rank), C(role) (head or worker) and C(rail_addresses) (rail name to IPv4 address).
      type: list
      elements: dict
      sample: [{"host": "spark-alpha", "rank": 0, "role": "head", "rail_addresses": {"rail1": "192.168.100.10", "rail2": "192.168.101.10"}}]
    head:
      description: The head host.
      type: str
      sample: spark-alpha
    world_size:
      description: Number of nodes (one GPU each).
      type: int
      sample: 4
    tensor_parallel_size:
      description: vLLM tensor parallel size.
      type: int
      sample: 4
    pipeline_parallel_size:
      description: vLLM pipeline parallel size.
      type: int
      sample: 1
    rails:
      description: Rails with C(name), C(interface), C(subnet), C(prefixlen), C(address_offset).
      type: list
      elements: dict
    memory:
      description: Memory fit per node (weights in GB and GiB, overhead, budget and KV room in GiB).
      type: dict
    kv_cache:
      description: KV cache per node (dtype, bytes per token, tokens that fit, max_model_len).
      type: dict
    decode:
      description: Single-stream decode roofline (bandwidth GB/s, active weight GB, tok/s).
      type: dict
    model_revision:
      description: The revision of the profile's repository that is downloaded and served (C(dgxspark_model_revision)).
      type: str
      sample: main
    vllm_options:
      description: Model-specific vLLM options from the profile, with C(revision) when the model is served at another revision
        than C(main).
      type: dict
    variables:
      description: The resolved cluster-wide inventory variables.
      type: dict
    serving_group:
      description: The serving group's name (C(dgxspark_serving_groups)), in a fleet's group plans only; the monitoring labels
        the group's targets with it (C(group)). A one-group plan has no such key.
      returned: with serving groups
      type: str
      sample: fleet_a
table:
  description: The plan as text lines (node table and summary).
  returned: success
  type: list
  elements: str
problems:
  description: Every problem found.
  returned: failure
  type: list
  elements: str
"""
