#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: process_memory
short_description: Find the processes of given names and the memory they hold
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Read-only. Lists the user-space processes whose name (C(/proc/PID/comm), as C(ps -C) compares it, on its first 15
    characters) is one of O(names), with their resident memory (C(VmRSS)).
options:
  names:
    description: Process names, for example V(Xorg) or V(gnome-shell).
    type: list
    elements: str
    required: true
  proc:
    description: The proc filesystem (another path for tests only).
    type: path
    default: /proc
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
  - dgxspark.cluster.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Look for graphical session processes that still hold memory
  dgxspark.cluster.process_memory:
    names: [Xorg, Xwayland, gnome-shell]
  register: gui

- name: Warn about them
  ansible.builtin.debug:
    msg: "a graphical session holds {{ gui.rss_mib }} MiB: {{ gui.summary }}"
  when: gui.processes | length > 0
"""

RETURN = r"""
processes:
  description: The processes found, by pid.
  returned: always
  type: list
  elements: dict
  contains:
    pid: {description: The process id., type: int}
    comm: {description: Its name., type: str}
    rss_kib: {description: Its resident memory in KiB., type: int}
rss_mib:
  description: Their resident memory in all, in MiB (one decimal).
  returned: always
  type: float
  sample: 291.7
summary:
  description: Each process with its pid and resident memory, in one line (empty when none runs).
  returned: always
  type: str
  sample: "Xorg (pid 1234, 61.2 MiB), gnome-shell (pid 1301, 230.5 MiB)"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.process_memory import find, summary


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type='list', elements='str', required=True),
            proc=dict(type='path', default='/proc'),
        ),
        supports_check_mode=True,
    )
    processes = find(module.params['names'], module.params['proc'])
    module.exit_json(changed=False, processes=processes, rss_mib=round(sum(p['rss_kib'] for p in processes) / 1024.0, 1),
                     summary=summary(processes))


if __name__ == '__main__':
    main()
