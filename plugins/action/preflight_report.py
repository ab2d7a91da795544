# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.preflight_report: the verdict over every node's preflight readings, on the controller."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.preflight import evaluate, render


def node_readings(host_vars, facts_var, image_var, cx7_var):
    """One node's registered results as preflight.evaluate takes them; an unreachable or failed read is its error."""
    facts = host_vars.get(facts_var) or {}
    if not facts or facts.get('unreachable') or facts.get('failed') or facts.get('skipped'):
        reason = 'unreachable' if facts.get('unreachable') else 'cannot read the node'
        return {'error': '%s (%s)' % (reason, str(facts.get('msg') or 'no result').strip().splitlines()[0][:300])}
    image = host_vars.get(image_var) or {}
    if image.get('failed'):
        image = {'present': False, 'errors': [str(image.get('msg'))]}
    cx7 = (host_vars.get(cx7_var) or {}).get('ansible_facts', {}).get('cx7') or {}
    return {'error': '', 'facts': facts, 'image': image, 'cx7': cx7}


class ActionModule(ActionBase):
    """Evaluate every node's preflight readings against the plan; fail with every problem at once."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=dict(
            plan=dict(type='dict', required=True),
            expect=dict(type='dict', default={}),
            facts_var=dict(type='str', default='_preflight_facts'),
            image_var=dict(type='str', default='_preflight_image'),
            cx7_var=dict(type='str', default='_preflight_cx7'),
        ))
        plan = args['plan']
        hostvars = task_vars.get('hostvars') or {}
        head_vars = hostvars.get(plan['head']) or {}
        serving = plan['serving']
        expect = {
            'node_memory_gib': plan['variables']['dgxspark_node_memory_gib'],
            'needs_gpu_runtime': (head_vars.get('dgxspark_serving_docker_gpus', 'all') == 'all'),
            'image': serving['image'],
            'distribute_image': bool(head_vars.get('dgxspark_distribute_image', True)),
            'distribute_model': bool(head_vars.get('dgxspark_distribute_model', True)),
            'model_download': bool(head_vars.get('dgxspark_model_download', False)),
            'gpu_clocks_mhz': plan['node_os']['gpu_clocks_mhz'],
            'logind_keep_ipc': plan['node_os']['logind_keep_ipc'],
            'link_speed_mbps': int(head_vars.get('dgxspark_expected_link_speed_mbps') or 200000),
            # With mp no Ray runs; rank 0's rendezvous takes a port of its own.
            'ports': dict(([(int(plan['mp_master']['port']), 'vLLM mp rendezvous')] if plan.get('mp_master') else
                           [(int(port), 'Ray %s' % name) for name, port in serving['ray_ports'].items()
                            if name not in ('min_worker', 'max_worker')])
                          + [(int(serving['api_port']), 'vLLM API')]),
            'own_containers': [serving['ray_container'], serving['engine_container']],
        }
        if head_vars.get('dgxspark_expected_gpu_name'):
            expect['gpu_name'] = head_vars['dgxspark_expected_gpu_name']
        if head_vars.get('dgxspark_preflight_max_clock_skew_s'):
            expect['max_clock_skew_s'] = float(head_vars['dgxspark_preflight_max_clock_skew_s'])
        expect.update(args['expect'])
        nodes = dict((n['host'], node_readings(hostvars.get(n['host']) or {}, args['facts_var'], args['image_var'], args['cx7_var']))
                     for n in plan['nodes'])
        report = evaluate(plan, expect, nodes)
        lines = render(report)
        result.update(changed=False, table=lines, checks=len(report['checks']) * len(report['rows']))
        if report['problems']:
            # The message carries the table and every problem; the rest stays out of the (long) failure output.
            result.update(failed=True, problems=report['problems'])
            result['msg'] = 'Preflight found %d problem%s; the deploy stops before any host is changed.\n%s' % (
                len(report['problems']), '' if len(report['problems']) == 1 else 's', '\n'.join(lines))
        else:
            result.update(report=report, msg='Preflight: every check passed on %d nodes.' % len(report['rows']))
        return result
