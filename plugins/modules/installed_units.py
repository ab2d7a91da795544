#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: installed_units
short_description: Tell which of some systemd units are installed, aliases resolved
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Read-only. Asks systemd (one C(systemctl show)) about each of O(names) and returns the units it can load, each once,
    as the unit the name stands for; an alias (Debian's C(gdm3.service) for C(gdm.service)) is resolved, so that the unit
    is stopped or disabled once, under its own name.
options:
  names:
    description: Unit names, for example V(gdm3.service).
    type: list
    elements: str
    required: true
  systemctl:
    description: The systemctl program (default the one on the PATH).
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
  - dgxspark.cluster.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Find the display managers installed on the node
  dgxspark.cluster.installed_units:
    names: [gdm.service, gdm3.service, lightdm.service, sddm.service]
  register: display_managers

- name: Stop and disable them
  ansible.builtin.systemd_service:
    name: "{{ item }}"
    state: stopped
    enabled: false
  loop: "{{ display_managers.units }}"
"""

RETURN = r"""
units:
  description: The units systemd can load, each once, in the order first named.
  returned: always
  type: list
  elements: str
  sample: [gdm.service, lightdm.service]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.installed_units import installed, show_argv


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type='list', elements='str', required=True),
            systemctl=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    names = module.params['names']
    if not names:
        module.exit_json(changed=False, units=[])
    program = module.params['systemctl'] or module.get_bin_path('systemctl', required=True)
    rc, out, err = module.run_command(show_argv(program, names))
    if rc != 0:
        module.fail_json(msg='systemctl show failed (rc %d): %s' % (rc, (err or out).strip()))
    try:
        units = installed(names, out)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, units=units)


if __name__ == '__main__':
    main()
