# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the dgxspark.cluster.inventory_draft action plugin (the code runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inventory_draft
short_description: Write a first inventory of DGX Sparks from what the nodes reported
version_added: 0.4.0
description:
  - Runs on the controller only and never contacts a host; C(playbooks/init.yml) gathers what it needs first.
  - "Drafts the rails from the CX-7 netdevs that have a link on every node (one rail a netdev, in port and twin order): the
    addresses the nodes already have when every node has one in one subnet, else 192.168.100.0/24, 192.168.101.0/24, ...
    (never a network a node already uses), offset 10."
  - Chooses the model profile (O(model_profile), else one whose weights are in the head's Hugging Face cache, else the
    preferred published profiles) and the first TP x PP shape that the cluster plan accepts, and checks the whole draft with
    the cluster plan itself.
  - Writes O(dest)/hosts.yml and O(dest)/group_vars/all/main.yml (a vault file can go beside it), each with a header holding its digest. A file whose text no
    longer matches its header was edited and is never replaced unless O(force); nothing is written when any problem is
    found.
options:
  dest:
    description: The inventory directory to write.
    type: path
    required: true
  nodes:
    description: The nodes in rank order, the head first.
    type: list
    elements: str
    required: true
  devices:
    description: Each node's C(ansible_facts.cx7.devices) (M(dgxspark.cluster.cx7_facts)).
    type: dict
    required: true
  addresses:
    description: Each node's address as the controller reaches it (its C(ansible_host)); default, its name.
    type: dict
    default: {}
  hub_configs:
    description: The paths of C(config.json) files found under the head's C(<cache>/hub), which tell the models it has.
    type: list
    elements: str
    default: []
  model_dir:
    description: The Hugging Face cache directory the nodes use, written as C(dgxspark_model_dir) when given.
    type: str
    default: ''
  head_images:
    description: The head's C(docker image ls --format '{{json .}}') output.
    type: str
    default: ''
  client_cidrs:
    description: Networks whose clients reach the API (C(dgxspark_api_allowed_cidrs)).
    type: list
    elements: str
    default: []
  model_profile:
    description: The model profile to draft; default, the first that plans.
    type: str
    default: ''
  profiles_dir:
    description: A directory of model profiles of your own, beside the collection's.
    type: path
  force:
    description: Replace a draft file that was edited since init wrote it.
    type: bool
    default: false
  user:
    description: The user the nodes were reached as, written as C(ansible_user) (with C(ansible_become) unless it is root).
    type: str
    default: ''
extends_documentation_fragment:
  - dgxspark.cluster.attributes
attributes:
  check_mode:
    support: full
    details: Check mode reports what would be written and writes nothing.
  diff_mode:
    support: full
    details: The diff shows each file before and after.
  platform:
    support: full
    platforms: controller
    description: Runs on the controller only.
notes:
  - "This is an action plugin: use it from C(hosts: localhost), as C(playbooks/init.yml) does."
author: dgxspark.cluster contributors (@dgxspark)
"""

EXAMPLES = r"""
- name: Draft the inventory from the facts the node play gathered
  dgxspark.cluster.inventory_draft:
    dest: ~/my-cluster
    nodes: [spark-01, spark-02]
    devices: "{{ dict(['spark-01', 'spark-02'] | zip(['spark-01', 'spark-02'] | map('extract', hostvars, ['ansible_facts', 'cx7', 'devices']))) }}"
    client_cidrs: [10.20.0.0/24]
"""

RETURN = r"""
files:
  description: Each file's path and what happened to it, C(written), C(unchanged) or C(kept) (edited, not replaced).
  returned: always, once the draft was made
  type: dict
  sample: {"/root/my-cluster/hosts.yml": "unchanged"}
dest:
  description: The inventory directory, absolute.
  returned: success
  type: str
notes:
  description: What init saw that the user should know (topology, MTU and speed now, links the head lacks).
  returned: success
  type: list
  elements: str
values:
  description: The cluster variables drafted.
  returned: success
  type: dict
problems:
  description: Every problem found, one a line; nothing was written.
  returned: failure
  type: str
"""
