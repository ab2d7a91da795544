# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.cx7_netplan_verdict: one of the cx7_netplan role's checks over every node, on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.netplan_check import VERDICTS, verdict
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call

ARGUMENT_SPEC = dict(
    check=dict(type='str', required=True, choices=list(VERDICTS)),
    plan=dict(type='dict', required=True),
)


class ActionModule(ActionBase):
    """Read what every node of the play registered; fail with every problem of the cluster, or pass."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        found = action_call('cx7_netplan_verdict', verdict, args['check'], task_vars.get('hostvars') or {},
                            list(task_vars.get('ansible_play_batch') or []), args['plan'])
        result.update(changed=False, problems=found['problems'])
        if found['problems']:
            result.update(failed=True, msg=found['msg'])
        else:
            result['msg'] = 'No %s problem on any node.' % args['check']
        return result
