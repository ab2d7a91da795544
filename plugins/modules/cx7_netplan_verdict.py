#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cx7_netplan_verdict
short_description: Stop every node when one of the CX-7 rail checks found a problem on any node
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin of the M(dgxspark.cluster.cx7_netplan) role; it runs on the controller and reads what the role's tasks
    registered on every node of the play. It fails listing every problem of the cluster at once, or passes.
  - "O(check=preflight), before any change: each node's rail configuration (C(_cx7_netplan_config)) against what every node
    reports (C(_cx7_netplan_observed)) - a missing or Down rail interface, an interface that carries the connection or the
    default route, a planned address already used on another interface or node - and against the node's other netplan files
    (C(others) of C(_cx7_netplan_current), what M(dgxspark.cluster.cx7_netplan_files) read: a rail configured by a file this
    role does not own). The nodes of the plan missing from the play come first: addresses can only be checked across every
    node."
  - "O(check=generate): every node whose C(netplan generate) in a scratch root rejected the candidate (C(generate) of
    C(_cx7_netplan_current)), with what netplan said."
  - "O(check=fabric), after a change: every node's post-change check (C(_cx7_netplan_result): its drift and its
    M(dgxspark.cluster.fabric_probe)) - first the node and rail that no peer could reach, then every drift, probe error and
    unreachable peer with the pings that failed and the likely cause."
options:
  check:
    description: Which of the role's checks.
    type: str
    required: true
    choices: [preflight, generate, fabric]
  plan:
    description: The cluster plan (C(nodes), C(rails)) from M(dgxspark.cluster.cluster_plan).
    type: dict
    required: true
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
attributes:
  platform:
    support: full
    platforms: controller
    description: Runs on the controller only.
notes:
  - Run it with C(run_once) and C(any_errors_fatal) to stop every node before any change; without C(run_once) every node fails
    with the same message (the role's post-change check, whose failure rolls each node back).
"""

EXAMPLES = r"""
- name: Stop on every node when any node has a problem (nothing has been changed)
  dgxspark.cluster.cx7_netplan_verdict:
    check: preflight
    plan: "{{ dgxspark_plan }}"
  run_once: true
  any_errors_fatal: true
"""

RETURN = r"""
problems:
  description: Every problem found, each naming the node (and the rail, where there is one).
  returned: always
  type: list
  elements: str
msg:
  description: What failed and every problem, one a line; or that there was none.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        check=dict(type='str', required=True, choices=['preflight', 'generate', 'fabric']),
        plan=dict(type='dict', required=True),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.cx7_netplan_verdict runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
