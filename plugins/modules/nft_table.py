#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nft_table
short_description: Tell whether an nftables table is loaded as it was last loaded, or record it
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Reads C(nft list table FAMILY NAME) on the node, takes out what changes by itself (rule counters, handles) and
    compares its sha256 with the one recorded in O(record) when the table was last loaded on purpose.
  - With O(state=read) (read-only) it returns RV(loaded), RV(matches) and, when something is wrong, RV(problem) - the
    table is missing (deleted by hand, its unit stopped, a C(flush ruleset) of another tool) or differs from what was
    loaded (a rule added or removed by hand).
  - With O(state=recorded) it writes the sha256 of the table loaded now to O(record) (mode 0600) when it differs; the
    node_firewall role does this right after it loads the table.
options:
  table:
    description: The table, as V(FAMILY NAME).
    type: str
    default: inet dgxspark
  record:
    description: Where the sha256 of the table as loaded is kept on the node.
    type: path
    default: /var/lib/dgxspark/firewall/table.sha256
  state:
    description: V(read) compares (read-only); V(recorded) records the table loaded now.
    type: str
    choices: [read, recorded]
    default: read
  nft:
    description: The nft binary.
    type: path
    default: /usr/sbin/nft
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: With O(state=recorded) check mode reports whether the record would change, and writes nothing.
  diff_mode:
    support: full
    details: With O(state=recorded) the diff shows the recorded sha256 before and after.
"""

EXAMPLES = r"""
- name: Read whether the firewall table is loaded as the firewall phase loaded it
  dgxspark.cluster.nft_table:
    table: inet dgxspark
  register: firewall_table

- name: Record the table just loaded
  dgxspark.cluster.nft_table:
    state: recorded
"""

RETURN = r"""
loaded:
  description: Whether the table is loaded.
  returned: always
  type: bool
sha256:
  description: The sha256 of the loaded table's normalized listing (null when it is not loaded).
  returned: always
  type: str
recorded_sha256:
  description: The sha256 recorded when the table was last loaded on purpose (null when none was).
  returned: always
  type: str
matches:
  description: The table is loaded and is the one recorded.
  returned: always
  type: bool
problem:
  description: What is wrong, in one sentence (null when it matches).
  returned: always
  type: str
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.nft_table import digest, module_read_table, read_record
from ansible_collections.dgxspark.cluster.plugins.module_utils.private_file import write_private_file


def problem_of(table, loaded_sha, recorded_sha, error):
    if loaded_sha is None:
        return ('the nftables table %s is not loaded (%s): its ports are open to every network; the firewall phase loads '
                'it again (deploy.yml --tags firewall)' % (table, error or 'nft list found none'))
    if recorded_sha is None:
        return 'the nftables table %s was never recorded as loaded by the firewall phase' % table
    if loaded_sha != recorded_sha:
        return ('the nftables table %s differs from the one the firewall phase loaded (changed by hand or by another tool); '
                'the firewall phase loads it again (deploy.yml --tags firewall)' % table)
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            table=dict(type='str', default='inet dgxspark'),
            record=dict(type='path', default='/var/lib/dgxspark/firewall/table.sha256'),
            state=dict(type='str', choices=['read', 'recorded'], default='read'),
            nft=dict(type='path', default='/usr/sbin/nft'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    listing, error = module_read_table(module, params['table'], params['nft'])
    loaded_sha = digest(listing)
    recorded_sha = read_record(params['record'])
    result = dict(changed=False, loaded=listing is not None, sha256=loaded_sha, recorded_sha256=recorded_sha)
    if params['state'] == 'recorded':
        if listing is None:
            module.fail_json(msg='cannot record the nftables table %s: it is not loaded (%s)' % (params['table'], error), **result)
        if recorded_sha != loaded_sha:
            result['changed'] = True
            if module._diff:
                result['diff'] = dict(before_header=params['record'], after_header=params['record'],
                                      before=(recorded_sha or '') + '\n' if recorded_sha else '', after=loaded_sha + '\n')
            if not module.check_mode:
                try:
                    write_private_file(params['record'], loaded_sha + '\n')
                except OSError as exc:
                    module.fail_json(msg='cannot write %s: %s' % (params['record'], exc), **result)
        # Recorded now (or, in check mode, what would be).
        result['recorded_sha256'] = loaded_sha
    result['problem'] = problem_of(params['table'], loaded_sha, result['recorded_sha256'], error)
    result['matches'] = result['problem'] is None
    module.exit_json(**result)


if __name__ == '__main__':
    main()
