# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.diagnostics_bundle: gather what every node gave into one tarball, on the controller,
unless a secret the controller knows is in it (plugin_utils/diagnostics_bundle.py)."""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.diagnostics_bundle import NODE_VARS, pack
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.secrets_dir import secret_files
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call

ARGUMENT_SPEC = dict(
    nodes=dict(type='list', elements='str', required=True),
    plan=dict(type='dict', default={}),
    status=dict(type='dict', default={}),
    secrets_dir=dict(type='path', required=True, no_log=False),
    secret_vars=dict(type='list', elements='str', default=[], no_log=False),
    dest=dict(type='path', required=True),
    top=dict(type='str', required=True),
)


def controller_secrets(secrets_dir, named):
    """Every secret the controller knows: the files of its secrets directory, its folders included (plugin_utils/
    secrets_dir.py says which are public) and the values of the named variables (vaulted); by value, never by name, so
    that nothing of them reaches the task's arguments."""
    return list(secret_files(secrets_dir).values()) + [str(value) for value in named if value]


class ActionModule(ActionBase):
    """Runs on the controller; writes one file there (nothing in check mode)."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if not args['nodes']:
            raise AnsibleActionFail('diagnostics_bundle: no node to read (the inventory has no head or workers group)')
        hostvars = task_vars.get('hostvars') or {}
        node_vars = dict((node, dict((key, hostvars[node].get(key)) for key in NODE_VARS)) for node in args['nodes'])
        first = hostvars[args['nodes'][0]]
        secrets = controller_secrets(args['secrets_dir'], [first.get(name) for name in args['secret_vars']])
        try:
            packed = action_call('diagnostics_bundle', pack, node_vars, args['nodes'], args['plan'], args['status'], secrets,
                                 args['dest'], args['top'], int(time.time()), write=not self._task.check_mode)
        except OSError as exc:
            raise AnsibleActionFail('diagnostics_bundle: cannot write the bundle %s: %s' % (args['dest'], exc)) from exc
        result.update(packed, changed=True, dest=args['dest'])
        return result
