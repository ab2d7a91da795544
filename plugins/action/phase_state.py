# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.phase_state: with phases and definitions, the inputs digest of each phase is computed
here on the controller from the task's variables, and the node checks every phase in one module call."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.phase_inputs import phase_checks, phases_from
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call


class ActionModule(ActionBase):
    """Compute the phases' inputs digests, then run the module on the node (one phase's arguments pass through)."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        if args.get('phases') is not None or args.get('from_phase') is not None:
            definitions = args.pop('definitions', None)
            phases = args.pop('phases', None) or action_call('phase_state', phases_from, args.pop('from_phase'), definitions)
            args['checks'] = action_call('phase_state', phase_checks, phases, definitions, list(task_vars),
                                         lambda name: self._templar.template(task_vars.get(name)))
        result.update(self._execute_module(module_name='dgxspark.cluster.phase_state', module_args=args,
                                           task_vars=task_vars))
        return result
