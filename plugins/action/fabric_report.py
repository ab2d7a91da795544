# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.fabric_report: the fabric_check role's summary table and failures, on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric import build_fabric_report
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.fabric_role import (
    IB_RESULTS_VAR,
    NCCL_READINESS_VAR,
    RDMA_READINESS_VAR,
    report_inputs,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call

ARGUMENT_SPEC = dict(
    plan=dict(type='dict', required=True),
    expect=dict(type='dict', required=True, options=dict(
        mtu=dict(type='int', required=True),
        speed_mbps=dict(type='int', required=True),
        ib_min_gbps=dict(type='float', required=True),
        nccl_min_busbw_gbs=dict(type='float', required=True),
    )),
)


def _registered(task_vars, name):
    """A result this host registered (or kept with set_fact), None where the task that sets it did not run."""
    value = task_vars.get(name)
    return None if value is None or (isinstance(value, dict) and value.get('skipped')) else value


def fabric_report(hostvars, plan, play_hosts, expectations, rdma=None, nccl=None, ib_results=None):
    """build_fabric_report over what the role registered (fabric_role.report_inputs)."""
    inputs = report_inputs(hostvars, plan, play_hosts, rdma=rdma, nccl=nccl, ib_results=ib_results)
    return build_fabric_report(plan, inputs['probes'], expectations, bandwidth=inputs['bandwidth'], nccl=inputs['nccl'],
                               notes=inputs['notes'], roce=inputs['roce'], nccl_ranks=inputs['nccl_ranks'])


class ActionModule(ActionBase):
    """Read what every node registered; change nothing, fail only on inputs that are not the role's."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        report = action_call('fabric_report', fabric_report, task_vars.get('hostvars') or {}, args['plan'],
                             list(task_vars.get('ansible_play_batch') or []), args['expect'],
                             rdma=_registered(task_vars, RDMA_READINESS_VAR), nccl=_registered(task_vars, NCCL_READINESS_VAR),
                             ib_results=task_vars.get(IB_RESULTS_VAR))
        result.update(report, changed=False)
        return result
