#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_instance
short_description: Tell which instance of the fleet's router serves its port, and whether it runs
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Read-only, on the fleet router's node. Reads the router's own nft table (C(nft list table inet dgxspark_router)),
    the port each of its nat chains redirects the router's port to, the state of each instance's unit
    (C(systemctl is-active)) and the instance the last swap recorded, as the fleet_router role's swap leaves them.
  - Returns the serving instance (the one both chains redirect to), whether its unit is active, a line for the status
    table and, when something is wrong (the table gone, a redirect to no instance, its unit not running), RV(problem).
options:
  port:
    description: The router's port (the plan's C(dgxspark_fleet.router.port)).
    type: int
    required: true
  instances:
    description: The router's instances and their ports (the plan's C(dgxspark_fleet.router.instances)), for example a on 4001 and b on 4002.
    type: dict
    required: true
  table:
    description: The router's nft table, as V(FAMILY NAME).
    type: str
    default: inet dgxspark_router
  unit_prefix:
    description: The instances' template unit, without C(@); an instance's unit is C(PREFIX@NAME.service).
    type: str
    default: dgxspark-router
  record:
    description: Where the last swap recorded the serving instance.
    type: path
    default: /var/lib/dgxspark/router/active
  nft:
    description: The nft binary.
    type: path
    default: /usr/sbin/nft
  systemctl:
    description: The systemctl program (default the one on the PATH).
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
  - dgxspark.cluster.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Read which instance of the router serves
  dgxspark.cluster.router_instance:
    port: "{{ dgxspark_fleet.router.port }}"
    instances: "{{ dgxspark_fleet.router.instances }}"
  register: router_instance
  when: inventory_hostname == dgxspark_fleet.router.host
"""

RETURN = r"""
serving:
  description: The instance the router's port leads to (null when the table is gone or its chains disagree).
  returned: always
  type: str
  sample: b
serving_port:
  description: That instance's port.
  returned: always
  type: int
  sample: 4002
active:
  description: Whether the serving instance's unit is active.
  returned: always
  type: bool
recorded:
  description: The instance the last swap recorded (null when none did).
  returned: always
  type: str
redirects:
  description: Each nat chain of the table and the port it redirects the router's port to.
  returned: always
  type: dict
  sample: {prerouting: 4002, output: 4002}
units:
  description: Each instance and its unit's state, as C(systemctl is-active) says it.
  returned: always
  type: dict
  sample: {a: inactive, b: active}
installed:
  description: Whether the router was ever set up on this node (a recorded swap, its table or a running instance).
  returned: always
  type: bool
line:
  description: One line for the status table.
  returned: always
  type: str
  sample: "router: instance b (port 4002) serves port 4000, active"
problem:
  description: What is wrong, in one sentence (null when the serving instance is the redirect's and is active).
  returned: always
  type: str
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.nft_table import module_read_table, read_record
from ansible_collections.dgxspark.cluster.plugins.module_utils.router_instance import serving_instance, unit_states


def main():
    module = AnsibleModule(
        argument_spec=dict(
            port=dict(type='int', required=True),
            instances=dict(type='dict', required=True),
            table=dict(type='str', default='inet dgxspark_router'),
            unit_prefix=dict(type='str', default='dgxspark-router'),
            record=dict(type='path', default='/var/lib/dgxspark/router/active'),
            nft=dict(type='path', default='/usr/sbin/nft'),
            systemctl=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    listing, _error = module_read_table(module, params['table'], params['nft'])
    names = sorted(params['instances'])
    systemctl = params['systemctl'] or module.get_bin_path('systemctl', required=True)
    # is-active exits non-zero when a unit is not active; its lines are the states all the same
    _rc, out, _err = module.run_command([systemctl, 'is-active'] + ['%s@%s.service' % (params['unit_prefix'], name) for name in names])
    try:
        result = serving_instance(listing, params['port'], params['instances'], unit_states(out, names),
                                  read_record(params['record']), params['table'], params['unit_prefix'])
    except (TypeError, ValueError) as exc:
        module.fail_json(msg='instances must map each instance to its port: %s' % exc)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
