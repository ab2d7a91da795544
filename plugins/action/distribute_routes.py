# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.distribute_routes: who receives what and along which chain, on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.distribute_plan import routes
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call

ARGUMENT_SPEC = dict(
    plan=dict(type='dict', required=True),
    head=dict(type='str', required=True),
    image=dict(type='bool', default=True),
)


class ActionModule(ActionBase):
    """Read what every node of the play found; change nothing."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        found = action_call('distribute_routes', routes, task_vars.get('hostvars') or {}, args['plan'],
                            list(task_vars.get('ansible_play_hosts') or []), args['head'], image=args['image'])
        result.update(found, changed=False)
        return result
