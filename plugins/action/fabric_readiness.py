# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.fabric_readiness: whether a bandwidth test of the fabric_check role can run on every node."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.fabric_role import ib_write_bw_readiness, nccl_test_readiness
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call

ARGUMENT_SPEC = dict(
    plan=dict(type='dict', required=True),
    test=dict(type='str', required=True, choices=['ib_write_bw', 'nccl']),
    ib_write_bw_path=dict(type='str', default='/usr/bin/ib_write_bw'),
    image=dict(type='str', default=''),
    gpu_device=dict(type='str', default='/dev/nvidiactl'),
    collective=dict(type='str', default='all_gather', choices=['all_gather', 'all_reduce']),
    memory_fraction=dict(type='float', default=0.5),
    port=dict(type='int', default=29533),
    docker_args=dict(type='list', elements='str', default=[]),
    env=dict(type='dict', default={}),
)


class ActionModule(ActionBase):
    """Read what every node registered on the controller; change nothing."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = task_vars.get('hostvars') or {}
        play_hosts = list(task_vars.get('ansible_play_batch') or [])
        if args['test'] == 'ib_write_bw':
            readiness = action_call('fabric_readiness', ib_write_bw_readiness, hostvars, args['plan'], play_hosts, args['ib_write_bw_path'])
        else:
            readiness = action_call('fabric_readiness', nccl_test_readiness, hostvars, args['plan'], play_hosts, args['image'],
                                    args['docker_args'], args['port'], collective=args['collective'], fraction=args['memory_fraction'],
                                    gpu_device=args['gpu_device'], env=args['env'])
        result.update(readiness, changed=False)
        return result
