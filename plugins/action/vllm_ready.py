# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.vllm_ready: probes the vLLM container until it serves, printing its progress."""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dgxspark.cluster.plugins.module_utils.rendezvous import RendezvousError, RendezvousWatch
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import (
    ReadinessWatch,
    VllmProgressError,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_ready_options import speed_verdict, vllm_ready_argument_spec

display = Display()

PROBE = 'dgxspark.cluster.serving_probe'
# Records read by the first probe, before a timestamp is known (the error lines of an early crash).
FIRST_TAIL = 200


class ActionModule(ActionBase):
    """Wait until vLLM is ready, or fail with the ReadinessWatch's diagnosis."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(vllm_ready_argument_spec())

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        validation, args = self.validate_argument_spec(argument_spec=vllm_ready_argument_spec())
        del validation
        node = args['node'] or task_vars.get('inventory_hostname') or self._task.get_name()
        for name in ('timeout', 'stall_timeout', 'poll_interval', 'progress_interval', 'http_timeout'):
            if args[name] <= 0:
                return self._failed(result, '%s must be a positive number of seconds, got %s' % (name, args[name]))
        if args['min_tokens_per_s'] < 0 or args['speed_tokens'] < 2:
            return self._failed(result, 'min_tokens_per_s must be 0 (no speed check) or more, and speed_tokens at least 2 (a speed '
                                        'needs two tokens), got %s and %s' % (args['min_tokens_per_s'], args['speed_tokens']))
        try:
            watch = ReadinessWatch(node, args['container'], args['served_model_name'], chat=args['chat'], timeout=args['timeout'],
                                   stall_timeout=args['stall_timeout'], progress_interval=args['progress_interval'], url=args['url'],
                                   clock=time.monotonic)
            rendezvous = self._rendezvous_watch(args)
        except (VllmProgressError, RendezvousError) as exc:
            return self._failed(result, str(exc))

        probe_args = {
            'container': args['container'],
            'url': args['url'],
            'served_model_name': args['served_model_name'],
            'chat': args['chat'],
            'chat_prompt': args['chat_prompt'],
            'chat_max_tokens': args['chat_max_tokens'],
            'http_timeout': args['http_timeout'],
            'log_tail': FIRST_TAIL,
        }
        for optional in ('api_key_file', 'docker_path', 'ca_file', 'server_name'):
            if args[optional]:
                probe_args[optional] = args[optional]
        if rendezvous:
            probe_args['rendezvous_port'] = rendezvous.port
        check_mode = bool(self._task.check_mode)

        while True:
            probe = self._execute_module(module_name=PROBE, module_args=dict(probe_args), task_vars=task_vars)
            if probe.get('failed'):
                output = ' '.join(str(probe.get('module_stderr') or probe.get('module_stdout') or '').split())
                return self._failed(result, 'the probe of container %s on %s failed: %s%s' % (
                    args['container'], node, probe.get('msg'), (' (module output: %s)' % output[-500:]) if output else ''))
            if probe.get('last_timestamp'):
                probe_args['log_since'] = probe['last_timestamp']
            try:
                state = watch.observe(probe)
            except VllmProgressError as exc:
                return self._failed(result, str(exc))
            if check_mode:
                return self._check_mode_result(result, watch, probe, args, node)
            missing = rendezvous.observe(probe.get('rendezvous'), time.monotonic()) if rendezvous else None
            if missing and state == ReadinessWatch.WAITING:
                state = watch.fail(missing)
            if state != ReadinessWatch.WAITING:
                break
            if watch.report_due():
                display.display(watch.report())
            time.sleep(args['poll_interval'])

        self._fill(result, watch, args, node)
        result['rendezvous'] = rendezvous.summary() if rendezvous else None
        if state == ReadinessWatch.FAILED:
            result['failed'] = True
        elif args['min_tokens_per_s'] > 0:
            self._gate_speed(result, dict(probe_args, chat=True, speed_tokens=args['speed_tokens'], log_tail=0), args, node, task_vars)
        return result

    @staticmethod
    def _rendezvous_watch(args):
        """With mp's rendezvous given (rank 0's address and port, each headless rank's node and address): its watch."""
        if not args['rendezvous']:
            return None
        given = args['rendezvous']
        return RendezvousWatch(given['address'], given['port'], given['peers'], join_timeout=args['join_timeout'],
                               container=args['container'])

    def _gate_speed(self, result, probe_args, args, node, task_vars):
        """The release gate: one timed stream once vLLM is ready; below min_tokens_per_s the task fails with the figure."""
        probe = self._execute_module(module_name=PROBE, module_args=probe_args, task_vars=task_vars)
        speed = probe.get('speed') if not probe.get('failed') else {'error': probe.get('msg')}
        ok, message = speed_verdict(speed, args['min_tokens_per_s'], node, args['container'])
        result['tokens_per_s'] = (speed or {}).get('tokens_per_s')
        result['msg'] = '%s %s' % (result['msg'], message)
        if not ok:
            result['failed'] = True
            result['ready'] = False

    @staticmethod
    def _failed(result, msg):
        result['failed'] = True
        result['changed'] = False
        result['msg'] = msg
        return result

    @staticmethod
    def _fill(result, watch, args, node):
        summary = watch.summary()
        chat = summary['chat'] or {}
        result.update({
            'changed': False,
            'ready': summary['state'] == ReadinessWatch.READY,
            'state': summary['state'],
            'msg': summary['message'],
            'node': node,
            'container': args['container'],
            'url': args['url'],
            'served_model_name': args['served_model_name'],
            'models': summary['models'],
            'chat_answer': chat.get('content'),
            'chat_tokens': chat.get('completion_tokens'),
            'elapsed_s': summary['elapsed_s'],
            'progress_history': summary['progress_history'],
            'last_lines': summary['last_lines'],
            'restart_count': summary['restart_count'],
            'probes': summary['probes'],
            'tokens_per_s': None,
        })
        return result

    def _check_mode_result(self, result, watch, probe, args, node):
        self._fill(result, watch, args, node)
        if not probe['container'].get('exists'):
            result['skipped'] = True
            result['msg'] = 'check mode: container %s does not exist on %s, so there is nothing to wait for.' % (args['container'], node)
        elif watch.state == ReadinessWatch.WAITING:
            result['msg'] = 'check mode (one probe, no wait): %s' % watch.report(mark=False)
        else:
            result['msg'] = 'check mode (one probe, no wait): %s' % watch.message
        if watch.state != ReadinessWatch.READY:
            result['chat_answer'] = (probe.get('chat') or {}).get('content')
            result['chat_tokens'] = (probe.get('chat') or {}).get('completion_tokens')
        return result
