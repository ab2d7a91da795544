#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sysctl_runtime
short_description: Set one kernel setting in the running kernel, and tell which value wins at boot
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Reads O(name) from C(/proc/sys) and, with O(apply=true), writes O(value) there when it differs (the drop-in that
    holds it for the next boot is written by the caller, for example with M(ansible.builtin.template)).
  - Reads C(systemd-analyze cat-config sysctl.d), the files systemd-sysctl applies at boot in its order, and returns the
    value the last of them sets (RV(boot_value)); a file read after the caller's drop-in wins at boot.
  - With O(dropin), warns (outside check mode, where the drop-in may not be written yet) when that value is not O(value),
    naming the files in the order systemd-sysctl reads them.
options:
  name:
    description: The setting, for example V(vm.swappiness).
    type: str
    required: true
  value:
    description: The value it should have; compared as the kernel prints it (fields separated by one space).
    type: str
    required: true
  apply:
    description: Write O(value) to the running kernel when it differs. V(false) where C(/proc/sys) is read-only (a
      container); RV(running) then says what was left.
    type: bool
    default: true
  dropin:
    description: The caller's drop-in that sets O(value) for the next boot, named in the warning where a file read after
      it sets another value. Unset, the module does not warn.
    type: path
  proc_sys:
    description: The root of the kernel's settings (another path for tests only).
    type: path
    default: /proc/sys
  systemd_analyze:
    description: The systemd-analyze program (default the one on the PATH). Where there is none, RV(boot_value) is null.
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode reports whether the running value would change and writes nothing.
  diff_mode:
    support: full
    details: The diff shows the running value before and after.
"""

EXAMPLES = r"""
- name: Set vm.swappiness in the running kernel too, and read what wins at boot
  dgxspark.cluster.sysctl_runtime:
    name: vm.swappiness
    value: "1"
    dropin: /etc/sysctl.d/90-dgxspark-os.conf
  register: swappiness
"""

RETURN = r"""
running:
  description: The running value before this run.
  returned: always
  type: str
  sample: "60"
boot_value:
  description: The value the last file read by systemd-sysctl sets (null when no file sets it or systemd-analyze failed).
  returned: always
  type: str
  sample: "1"
boot_files:
  description: The sysctl files systemd-sysctl reads at boot, in its order (empty when systemd-analyze failed).
  returned: always
  type: list
  elements: str
  sample: [/usr/lib/sysctl.d/50-pid-max.conf, /etc/sysctl.d/90-dgxspark-os.conf, /etc/sysctl.d/99-sysctl.conf]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.sysctl_runtime import (
    SysctlError, boot_value, normalized, proc_path, read_running, write_running)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            value=dict(type='str', required=True),
            apply=dict(type='bool', default=True),
            dropin=dict(type='path'),
            proc_sys=dict(type='path', default='/proc/sys'),
            systemd_analyze=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    value = normalized(params['value'])
    try:
        path = proc_path(params['name'], params['proc_sys'])
        running = read_running(path)
        changed = params['apply'] and running != value
        if changed and not module.check_mode:
            write_running(path, value)
    except SysctlError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=changed, running=running, boot_value=None, boot_files=[])
    if changed and module._diff:
        result['diff'] = dict(before_header=path, after_header=path, before=running + '\n', after=value + '\n')
    analyze = params['systemd_analyze'] or module.get_bin_path('systemd-analyze')
    if analyze and os.access(analyze, os.X_OK):
        rc, out, dummy = module.run_command([analyze, 'cat-config', 'sysctl.d'])
        if rc == 0:
            result['boot_value'], result['boot_files'] = boot_value(out, params['name'])
    if params['dropin'] and result['boot_value'] not in (None, value) and not module.check_mode:
        module.warn('on %s a sysctl file read after %s sets %s = %s, which wins at boot over %s. Remove that line or rename '
                    '%s to sort after it. Order read: %s.' % (os.uname()[1], params['dropin'], params['name'],
                                                              result['boot_value'], value, params['dropin'],
                                                              ', '.join(result['boot_files'])))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
