#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_unit_file
short_description: A unit file of the collection's own, started and enabled, or stopped, disabled and removed
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - With O(state=started) writes O(content) to O(name) under O(directory) (root, mode 0644) when it differs, reloads
    systemd when it wrote, enables the unit where C(systemctl is-enabled) does not say C(enabled), starts it where it is
    not active, and restarts it where it was running with the file it had before.
  - With O(state=absent), where the file exists, stops and disables the unit (its C(ExecStop) runs), removes the file and
    reloads systemd; where it does not, nothing is done.
  - A oneshot unit needs C(RemainAfterExit=yes) to stay active once it ran; without it every run would start it again.
  - For the collection's own units only; a unit a package ships is left to M(ansible.builtin.systemd_service).
options:
  name:
    description: The unit's name, for example V(dgxspark-gpu-clocks.service).
    type: str
    required: true
  content:
    description: The unit file's text, for example from the C(ansible.builtin.template) lookup. Required with
      O(state=started).
    type: str
  state:
    description: V(started) (written, enabled, running) or V(absent) (stopped, disabled, removed).
    type: str
    choices: [started, absent]
    default: started
  directory:
    description: Where the unit file is (another path for tests only).
    type: path
    default: /etc/systemd/system
  systemctl:
    description: The systemctl program (default the one on the PATH; another for tests only).
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode asks systemctl, reports RV(steps) and runs none of them.
  diff_mode:
    support: full
    details: The diff shows the unit file before and after.
"""

EXAMPLES = r"""
- name: Lock the GPU clocks at every boot with a oneshot unit
  dgxspark.cluster.systemd_unit_file:
    name: dgxspark-gpu-clocks.service
    content: "{{ lookup('ansible.builtin.template', 'dgxspark-gpu-clocks.service.j2') }}"

- name: Remove it, running its ExecStop
  dgxspark.cluster.systemd_unit_file:
    name: dgxspark-gpu-clocks.service
    state: absent
"""

RETURN = r"""
steps:
  description: What was done (or would be, in check mode), in order; C(write) and C(remove) act on the file, the others
    are systemctl commands.
  returned: always
  type: list
  elements: str
  sample: [write, systemctl daemon-reload, systemctl enable dgxspark-gpu-clocks.service,
    systemctl start dgxspark-gpu-clocks.service]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.systemd_unit_file import check_name, steps


def read_text(path):
    try:
        with open(path, 'r') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write(module, path, content):
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.%s.' % os.path.basename(path))
    with os.fdopen(handle, 'w') as out:
        out.write(content)
    module.atomic_move(temporary, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            content=dict(type='str'),
            state=dict(type='str', choices=['started', 'absent'], default='started'),
            directory=dict(type='path', default='/etc/systemd/system'),
            systemctl=dict(type='path'),
        ),
        required_if=[('state', 'started', ['content'])],
        supports_check_mode=True,
    )
    params = module.params
    try:
        name = check_name(params['name'])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    systemctl = params['systemctl'] or module.get_bin_path('systemctl', required=True)
    path = os.path.join(params['directory'], name)
    before, content = read_text(path), params['content']
    enabled = active = None
    if params['state'] == 'started':
        enabled = module.run_command([systemctl, 'is-enabled', name])[1]
        active = module.run_command([systemctl, 'is-active', name])[1]
    planned = steps(name, params['state'], before, content, enabled, active)
    result = dict(changed=bool(planned), steps=[step if isinstance(step, str) else 'systemctl ' + ' '.join(step) for step in planned])
    if 'write' in planned or 'remove' in planned:
        if module._diff:
            result['diff'] = dict(before_header=path, after_header=path, before=before or '',
                                  after=content if params['state'] == 'started' else '')
    for step in [] if module.check_mode else planned:
        if step == 'write':
            write(module, path, content)
        elif step == 'remove':
            os.unlink(path)
        else:
            rc, out, err = module.run_command([systemctl] + step)
            if rc != 0:
                module.fail_json(msg='systemctl %s failed (rc %d): %s' % (' '.join(step), rc, (err or out).strip()), **result)
    if params['state'] == 'started' and os.path.exists(path):
        # The collection's unit: root's, readable by all (as the role's template task wrote it).
        if os.geteuid() == 0:
            result['changed'] = module.set_owner_if_different(path, 'root', result['changed'])
            result['changed'] = module.set_group_if_different(path, 'root', result['changed'])
        result['changed'] = module.set_mode_if_different(path, '0644', result['changed'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
