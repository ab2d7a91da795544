#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: default_target
short_description: Make a node boot into a systemd target
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Does what C(systemctl set-default) does, as a link, so that check mode and diff show the change before it is made.
    When C(systemctl get-default) already names O(target), nothing is read or written; otherwise O(link) is pointed at
    the target's unit file (C(systemctl show --property=FragmentPath)).
  - It does not reload systemd; notify a handler when it reports changed.
options:
  target:
    description: The target unit, for example V(multi-user.target).
    type: str
    required: true
  link:
    description: The link systemd reads the default target from (another path for tests only).
    type: path
    default: /etc/systemd/system/default.target
  systemctl:
    description: The systemctl program (default the one on the PATH).
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode reports whether the link would change and changes nothing.
  diff_mode:
    support: full
    details: The diff shows where the link pointed before and after.
"""

EXAMPLES = r"""
- name: Boot into multi-user.target (no graphical session)
  dgxspark.cluster.default_target:
    target: multi-user.target
  notify: Reload systemd
"""

RETURN = r"""
previous:
  description: The target C(systemctl get-default) named before this run.
  returned: always
  type: str
  sample: graphical.target
unit_file:
  description: The unit file the link points to now (or would, in check mode); null when nothing had to change.
  returned: always
  type: str
  sample: /usr/lib/systemd/system/multi-user.target
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.default_target import (
    DefaultTargetError, make_link, read_link, systemctl, unit_file)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            target=dict(type='str', required=True),
            link=dict(type='path', default='/etc/systemd/system/default.target'),
            systemctl=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    program = params['systemctl'] or module.get_bin_path('systemctl', required=True)
    result = dict(changed=False, unit_file=None)
    try:
        result['previous'] = systemctl(module.run_command, program, 'get-default')
        if result['previous'] != params['target']:
            result['unit_file'] = unit_file(module.run_command, program, params['target'])
            result['changed'] = True
            if module._diff:
                result['diff'] = dict(before_header=params['link'], after_header=params['link'],
                                      before='-> %s\n' % (read_link(params['link']) or 'nothing'), after='-> %s\n' % result['unit_file'])
            if not module.check_mode:
                make_link(params['link'], result['unit_file'])
    except (DefaultTargetError, OSError) as exc:
        module.fail_json(msg='cannot make the node boot into %s: %s' % (params['target'], exc), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
