#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: logind_remove_ipc
short_description: Keep or drop systemd-logind's RemoveIPC=no drop-in, and restart logind when it runs otherwise
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - With O(keep_ipc=true) writes O(path) (root, mode 0644, in a directory of mode 0755) setting C(RemoveIPC=no), so that
    logind keeps the POSIX semaphores and shared memory of a regular user whose last session ends. With
    O(keep_ipc=false) removes O(path), so that systemd's default (C(RemoveIPC=yes)) holds.
  - Reads the running logind's value over D-Bus (C(busctl get-property)) and restarts C(systemd-logind.service) when it
    differs from what the files now set, whether or not the file changed in this run; logind keeps its sessions across a
    restart (they are recorded under C(/run/systemd)), SSH sessions included.
  - Where C(busctl) cannot ask logind (no logind, no D-Bus) only the file is managed.
  - Reports changed only when the file changed or logind was restarted.
options:
  keep_ipc:
    description: V(true) writes the drop-in (C(RemoveIPC=no)); V(false) removes it.
    type: bool
    default: true
  path:
    description: The drop-in.
    type: path
    default: /etc/systemd/logind.conf.d/90-dgxspark.conf
  busctl:
    description: The busctl program (default the one on the PATH; another for tests only).
    type: path
  systemctl:
    description: The systemctl program (default the one on the PATH; another for tests only).
    type: path
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode reads the running value, reports what would change, and neither writes nor restarts.
  diff_mode:
    support: full
    details: The diff shows the drop-in before and after.
"""

EXAMPLES = r"""
- name: Keep the IPC objects of users whose last session ends
  dgxspark.cluster.logind_remove_ipc:
    keep_ipc: true

- name: Give systemd's default back
  dgxspark.cluster.logind_remove_ipc:
    keep_ipc: false
"""

RETURN = r"""
running_remove_ipc:
  description: The running logind's RemoveIPC before this run (null where busctl could not ask it).
  returned: always
  type: bool
  sample: true
restarted:
  description: Whether systemd-logind was restarted (or would be, in check mode).
  returned: always
  type: bool
  sample: true
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.logind_remove_ipc import (
    BUSCTL_ARGV, dropin_text, restart_needed, running_remove_ipc)


def read_text(path):
    try:
        with open(path, 'r') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_dropin(module, path, text):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix='.logind-dropin.')
    with os.fdopen(handle, 'w') as out:
        out.write(text)
    module.atomic_move(temporary, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            keep_ipc=dict(type='bool', default=True),
            path=dict(type='path', default='/etc/systemd/logind.conf.d/90-dgxspark.conf'),
            busctl=dict(type='path'),
            systemctl=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = params['path']
    before, after = read_text(path), dropin_text(params['keep_ipc'])
    result = dict(changed=before != after, restarted=False)
    if result['changed'] and module._diff:
        result['diff'] = dict(before_header=path, after_header=path, before=before or '', after=after or '')
    if result['changed'] and not module.check_mode:
        if after is None:
            os.unlink(path)
        else:
            write_dropin(module, path, after)
    if after is not None and os.path.exists(path):
        # logind's configuration: root's, readable by all (as the role's file and copy tasks made them).
        for item, mode in ((os.path.dirname(path), '0755'), (path, '0644')):
            if os.geteuid() == 0:
                result['changed'] = module.set_owner_if_different(item, 'root', result['changed'])
                result['changed'] = module.set_group_if_different(item, 'root', result['changed'])
            result['changed'] = module.set_mode_if_different(item, mode, result['changed'])
    busctl = params['busctl'] or module.get_bin_path('busctl')
    rc, out = (module.run_command([busctl] + BUSCTL_ARGV)[:2]) if busctl else (1, '')
    result['running_remove_ipc'] = running_remove_ipc(rc, out)
    if restart_needed(params['keep_ipc'], result['running_remove_ipc']):
        result.update(changed=True, restarted=True)
        if not module.check_mode:
            systemctl = params['systemctl'] or module.get_bin_path('systemctl', required=True)
            module.run_command([systemctl, 'restart', 'systemd-logind.service'], check_rc=True)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
