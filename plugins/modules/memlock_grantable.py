#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memlock_grantable
short_description: Refuse a locked-memory limit that pam_limits could not grant on this node
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - pam_limits refuses a session (SSH included) when it cannot set a limit, so a memlock value the node cannot grant,
    written to C(limits.d), would lock everyone out. Raising a hard limit needs C(CAP_SYS_RESOURCE) or a hard limit at
    least as high already (a container usually has neither).
  - The module sets O(limit), soft and hard, in its own throw-away process, as pam_limits would, and fails, naming the
    node's hard limit, where that is refused. It changes nothing on the node.
options:
  limit:
    description: The limit, as C(limits.conf) takes it, V(unlimited) or a size in KiB.
    type: str
    required: true
  node:
    description: The node's name in the message (default its host name).
    type: str
  limits_file:
    description: The C(limits.d) file the limit is meant for, named in the message.
    type: path
    default: /etc/security/limits.d/90-dgxspark-memlock.conf
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
  - dgxspark.cluster.attributes.POSIX
"""

EXAMPLES = r"""
- name: Check the node can grant memlock unlimited before writing it to limits.d
  dgxspark.cluster.memlock_grantable:
    limit: unlimited
    node: "{{ inventory_hostname }}"
"""

RETURN = r"""
hard:
  description: The node's hard memlock limit before the probe, as C(ulimit -H -l) prints it (KiB or unlimited).
  returned: always
  type: str
  sample: unlimited
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.memlock_grantable import probe


def main():
    module = AnsibleModule(
        argument_spec=dict(
            limit=dict(type='str', required=True),
            node=dict(type='str'),
            limits_file=dict(type='path', default='/etc/security/limits.d/90-dgxspark-memlock.conf'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        granted, hard = probe(params['limit'])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not granted:
        module.fail_json(hard=hard, msg=(
            'memlock %s cannot be granted on %s: its hard memlock limit is %s KiB and raising it is not permitted here (no '
            'CAP_SYS_RESOURCE, e.g. a container). Writing it to %s would make pam_limits refuse every new login session, '
            'SSH included. Set the limit to at most that value. Nothing was changed.'
            % (params['limit'], params['node'] or os.uname()[1], hard, params['limits_file'])))
    module.exit_json(changed=False, hard=hard)


if __name__ == '__main__':
    main()
