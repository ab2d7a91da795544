# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.distribute_routes: who receives what, along which chain, and what the copies are
made of, on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.distribute_plan import routes
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call

ARGUMENT_SPEC = dict(
    plan=dict(type='dict', required=True),
    head=dict(type='str', required=True),
    image=dict(type='bool', default=True),
    reserve_bytes=dict(type='int', default=0),
    relay=dict(type='dict'),
    image_name=dict(type='str', default=''),
    model_dir=dict(type='str', default=''),
    manifest=dict(type='dict'),
)


class ActionModule(ActionBase):
    """Read what every node of the play found; change nothing; fail, naming every node, when one lacks room."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        found = action_call('distribute_routes', routes, task_vars.get('hostvars') or {}, args['plan'],
                            list(task_vars.get('ansible_play_batch') or []), args['head'], image=args['image'],
                            reserve_bytes=args['reserve_bytes'], relay=args['relay'], image_name=args['image_name'],
                            model_dir=args['model_dir'], manifest=args['manifest'])
        result.update(found, changed=False)
        if found['problems']:
            # Every node's room is checked before any node receives a byte.
            result.update(failed=True, msg=' | '.join(found['problems']))
        return result
