#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnostics_bundle
short_description: Gather what every node gave into one diagnostics tarball that only its owner can read
version_added: 0.5.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin of C(playbooks/diagnose.yml); it runs on the controller, once, after every node was read, and reads what the
    playbook registered on each node of O(nodes) (C(diagnose_node), C(diagnose_cx7), C(diagnose_image)).
  - "The bundle's files: C(plan.json), C(status.txt) (the status table and its verdict), C(unreachable.txt) (each node not read and
    why), and per node what it gave: its sections (logs, versions, ...), C(cx7.json) and C(image.txt)."
  - "Before anything is written, a last look for every secret the controller knows: the files of O(secrets_dir) (public keys
    aside) and the values of O(secret_vars) on the first node. The nodes redacted what they sent; a value found anyway fails the
    task naming the files, and nothing is written."
  - "The files go into one gzipped tarball at O(dest), each under the directory O(top), in one step: mode 0600 from its creation,
    its directories 0700 and its files 0600 inside, replaced atomically."
options:
  nodes:
    description: The nodes of the bundle, in order (the head first); the first one's variables give O(secret_vars).
    type: list
    elements: str
    required: true
  plan:
    description: The cluster plan (written as C(plan.json)); empty when none could be made.
    type: dict
    default: {}
  status:
    description: The status of the cluster (C(table), C(problems), C(ok)) from C(playbooks/status.yml)'s tasks; empty when none.
    type: dict
    default: {}
  secrets_dir:
    description: The controller's directory of generated secrets (the API key, the Ray token, ...).
    type: path
    required: true
  secret_vars:
    description: Names of variables that may hold a secret (vaulted); their values are looked for, never shown.
    type: list
    elements: str
    default: []
  dest:
    description: The tarball to write; its directory is made (0700) when missing, an existing one keeps its mode.
    type: path
    required: true
  top:
    description: The directory that holds every file inside the tarball (the bundle's name).
    type: str
    required: true
extends_documentation_fragment:
  - dgxspark.cluster.attributes
attributes:
  check_mode:
    support: full
    details: Check mode gathers and checks the files, and writes nothing.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: controller
    description: Runs on the controller only.
"""

EXAMPLES = r"""
- name: Pack the bundle into one tarball, unless a secret the controller knows is in it
  dgxspark.cluster.diagnostics_bundle:
    nodes: "{{ groups['head'] + groups['workers'] }}"
    plan: "{{ dgxspark_plan | default({}) }}"
    status: "{{ dgxspark_status | default({}) }}"
    secrets_dir: ~/.config/dgxspark/4node-1a2b3c4d
    secret_vars: [vllm_container_api_key, dgxspark_hf_token]
    dest: /srv/diagnostics/dgxspark-diagnostics-20261127T101500Z.tar.gz
    top: dgxspark-diagnostics-20261127T101500Z
  register: bundle
"""

RETURN = r"""
dest:
  description: The tarball written.
  returned: always
  type: str
files:
  description: How many files the bundle holds.
  returned: always
  type: int
bytes:
  description: The tarball's size (0 in check mode).
  returned: always
  type: int
unread:
  description: "Each node that was not read, as C(node: why)."
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        nodes=dict(type='list', elements='str', required=True),
        plan=dict(type='dict', default={}),
        status=dict(type='dict', default={}),
        secrets_dir=dict(type='path', required=True, no_log=False),
        secret_vars=dict(type='list', elements='str', default=[], no_log=False),
        dest=dict(type='path', required=True),
        top=dict(type='str', required=True),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.diagnostics_bundle runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
