#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cx7_netplan_files
short_description: Read, validate, write and restore the two files of the CX-7 rail configuration of one node
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - The node side of the M(dgxspark.cluster.cx7_netplan) role, for the two files it owns - the rail netplan file (O(netplan))
    and the sysctl drop-in that turns IPv6 off on the rails (O(sysctl)).
  - "O(state=read) changes nothing: for each file whether its content differs and whether writing it would change
    anything (content, owner, group or mode), a file being read only to compare it; the other netplan files of the node
    (the regular C(*.yaml) files of O(netplan_dirs), not hidden, not the role's own) with their content, for the preflight
    of M(dgxspark.cluster.cx7_netplan_verdict); and, where the netplan content differs and O(generate) is true,
    C(netplan generate --root-dir) on a scratch root holding those files and the candidate as
    C(etc/netplan/<file name>), which is removed afterwards: what netplan would make of the real configuration, before
    anything is written."
  - "O(state=present) writes each file whose content, owner, group or mode differ (atomically, through a temporary file in
    its directory); before the netplan file's content changes, its previous content is copied to O(backup_dir) (mode 0600,
    the directory 0700). It returns what each file held before (RV(previous)), for the rollback."
  - "O(state=restored) puts back O(previous): each file named there gets its previous content again, or is removed where
    there was none. It does not apply anything (run C(netplan apply) after it)."
options:
  state:
    description: What to do (see the description).
    type: str
    choices: [read, present, restored]
    default: read
  netplan:
    description: The rail netplan file.
    type: dict
    required: true
    suboptions: &file
      path:
        description: Its path.
        type: path
        required: true
      content:
        description: What the role writes (required except with O(state=restored)).
        type: str
      mode:
        description: Its mode, in octal (V("0600")).
        type: str
        required: true
      owner:
        description: Its owner.
        type: str
        default: root
      group:
        description: Its group.
        type: str
        default: root
  sysctl:
    description: The sysctl drop-in that turns IPv6 off on the rail interfaces.
    type: dict
    required: true
    suboptions: *file
  netplan_dirs:
    description: Where the other netplan files are looked for (O(state=read)), in netplan's order.
    type: list
    elements: path
    default: [/etc/netplan, /run/netplan, /lib/netplan]
  generate:
    description: With O(state=read), run C(netplan generate) on a scratch root where the netplan content differs.
    type: bool
    default: true
  backup_dir:
    description: With O(state=present), where the previous content of the netplan file is copied before it changes (no backup when unset).
    type: path
  previous:
    description:
      - With O(state=restored), the files to put back, as O(state=present) returned them in RV(previous) -
        C(netplan) and/or C(sysctl), each the previous content, or null to remove the file.
    type: dict
    default: {}
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: O(state=read) runs unchanged (its scratch root is removed); the other states report what they would change and write nothing.
  diff_mode:
    support: full
    details: Each file written, restored or removed, before and after.
notes:
  - Needs root (the netplan files are mode 0600). C(netplan) is looked for in C(PATH), C(/sbin) and C(/usr/sbin); where
    there is none, RV(generate) has rc 127 and says so.
seealso:
  - module: dgxspark.cluster.cx7_netplan_verdict
"""

EXAMPLES = r"""
- name: Compare the role's two files with the candidates, read the other netplan files, try the candidate with netplan generate
  dgxspark.cluster.cx7_netplan_files:
    netplan: {path: /etc/netplan/40-cx7.yaml, content: "{{ config.content }}", mode: "0600"}
    sysctl: {path: /etc/sysctl.d/90-dgxspark-cx7-ipv6.conf, content: "{{ config.sysctl_content }}", mode: "0644"}
  register: files

- name: Write them where they differ, backing up the previous netplan file
  dgxspark.cluster.cx7_netplan_files:
    state: present
    netplan: {path: /etc/netplan/40-cx7.yaml, content: "{{ config.content }}", mode: "0600"}
    sysctl: {path: /etc/sysctl.d/90-dgxspark-cx7-ipv6.conf, content: "{{ config.sysctl_content }}", mode: "0644"}
    backup_dir: /var/backups/dgxspark-cx7-netplan
  register: written
  when: files.netplan.write or files.sysctl.write

- name: Put back what that run replaced
  dgxspark.cluster.cx7_netplan_files:
    state: restored
    netplan: {path: /etc/netplan/40-cx7.yaml, mode: "0600"}
    sysctl: {path: /etc/sysctl.d/90-dgxspark-cx7-ipv6.conf, mode: "0644"}
    previous: "{{ written.previous }}"
"""

RETURN = r"""
netplan:
  description: The netplan file against O(netplan) (O(state=read) and O(state=present)).
  returned: state is read or present
  type: dict
  contains:
    path:
      description: Its path.
      type: str
    exists:
      description: It exists.
      type: bool
    differs:
      description: Its content differs (or there is no regular file).
      type: bool
    write:
      description: Content, owner, group or mode differ.
      type: bool
    changed:
      description: With O(state=present), it was written (in check mode - it would be).
      type: bool
  sample: {path: /etc/netplan/40-cx7.yaml, exists: true, differs: false, write: false}
sysctl:
  description: The sysctl drop-in against O(sysctl), as RV(netplan).
  returned: state is read or present
  type: dict
others:
  description: The other netplan files of the node, C(path) and C(content) each.
  returned: state is read
  type: list
  elements: dict
  sample: [{path: /etc/netplan/01-mgmt.yaml, content: "network:\n  version: 2\n"}]
generate:
  description: What C(netplan generate) said (C(rc), C(stdout), C(stderr), C(cmd)); null where it did not run.
  returned: state is read
  type: dict
  sample: {rc: 1, stdout: "", stderr: "/etc/netplan/40-cx7.yaml:9:11: Error in network definition: ...", cmd: [/usr/sbin/netplan, generate]}
previous:
  description: For each file written (O(state=present)), its content before, null where there was none.
  returned: state is present
  type: dict
  sample: {netplan: "network:\n  version: 2\n", sysctl: null}
backup:
  description: The backup of the previous netplan file, null where none was made.
  returned: state is present
  type: str
restored:
  description: The files given their previous content again.
  returned: state is restored
  type: list
  elements: str
removed:
  description: The files removed (there was none before).
  returned: state is restored
  type: list
  elements: str
msg:
  description: With O(state=restored), what was put back, in words.
  returned: state is restored
  type: str
  sample: restored the previous /etc/netplan/40-cx7.yaml; removed /etc/sysctl.d/90-dgxspark-cx7-ipv6.conf (there was none)
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.cx7_netplan_files import (
    FILES,
    NETPLAN_DIRS,
    NetplanFilesError,
    file_state,
    generate,
    other_netplan_files,
    present,
    restored,
)

FILE_SPEC = dict(
    path=dict(type='path', required=True),
    content=dict(type='str'),
    mode=dict(type='str', required=True),
    owner=dict(type='str', default='root'),
    group=dict(type='str', default='root'),
)


def read(module, specs):
    result = dict((key, file_state(specs[key])) for key in FILES)
    for state in result.values():
        del state['previous']
    result['others'] = other_netplan_files(specs['netplan']['path'], module.params['netplan_dirs'])
    result['generate'] = None
    if module.params['generate'] and result['netplan']['differs']:
        result['generate'] = generate(module.get_bin_path('netplan'), os.path.basename(specs['netplan']['path']),
                                      specs['netplan']['content'], result['others'], module.run_command)
    return dict(result, changed=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type='str', choices=['read', 'present', 'restored'], default='read'),
            netplan=dict(type='dict', required=True, options=FILE_SPEC),
            sysctl=dict(type='dict', required=True, options=FILE_SPEC),
            netplan_dirs=dict(type='list', elements='path', default=list(NETPLAN_DIRS)),
            generate=dict(type='bool', default=True),
            backup_dir=dict(type='path'),
            previous=dict(type='dict', default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    specs = dict((key, params[key]) for key in FILES)
    state = params['state']
    if state != 'restored':
        missing = [key for key in FILES if specs[key]['content'] is None]
        if missing:
            module.fail_json(msg='state=%s needs the content of %s' % (state, ' and '.join(missing)))
    unknown = sorted(set(params['previous']) - set(FILES))
    if unknown:
        module.fail_json(msg='previous names %s: only %s' % (', '.join(unknown), ' and '.join(FILES)))
    try:
        if state == 'read':
            result = read(module, specs)
        elif state == 'present':
            result = present(specs, params['backup_dir'], module.check_mode)
        else:
            result = restored(specs, params['previous'], module.check_mode)
    except NetplanFilesError as exc:
        # What was written before the failure stays in the result: the role's rollback reads it.
        module.fail_json(msg=str(exc), **dict(exc.result, changed=bool(exc.result.get('changed'))))
    if not module._diff:
        result.pop('diff', None)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
