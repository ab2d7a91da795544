# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.distribute_wait: waits for a node's part of a distribution, printing its progress."""

from __future__ import annotations

import base64
import json
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dgxspark.cluster.plugins.module_utils.transfer_progress import (
    distribute_wait_argument_spec,
    progress_line,
    verdict,
)

display = Display()

ARGUMENT_SPEC = distribute_wait_argument_spec()


class ActionModule(ActionBase):
    """Poll the node's progress file (and the async job, when the node runs one) until done, failed or stalled."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def _read_progress(self, path, task_vars):
        res = self._execute_module(module_name='ansible.legacy.slurp', module_args={'src': path}, task_vars=task_vars)
        if res.get('failed') or 'content' not in res:
            return None
        try:
            return json.loads(base64.b64decode(res['content']))
        except ValueError:
            return None

    def _job(self, jid, task_vars):
        async_dir = self._remote_expand_user(self.get_shell_option('async_dir', default='~/.ansible_async'))
        return self._execute_module(module_name='ansible.legacy.async_status', task_vars=task_vars,
                                    module_args={'jid': jid, '_async_dir': async_dir})

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        node = task_vars.get('inventory_hostname', '?')
        result['changed'] = False
        if self._task.check_mode:
            result['msg'] = 'check mode: nothing was started, nothing to wait for'
            return result
        started = last_report = time.monotonic()
        last_bytes, last_move = -1, started
        progress = None
        while True:
            job = self._job(args['jid'], task_vars) if args['jid'] else None
            progress = self._read_progress(args['progress_file'], task_vars)
            now = time.monotonic()
            moved = int((progress or {}).get('bytes') or 0)
            if moved != last_bytes:
                last_bytes, last_move = moved, now
            state, why = verdict(progress, job, now - last_move, args['stall_timeout'])
            if state == 'running' and now - started > args['timeout']:
                state, why = 'failed', 'not done after %d s (distribute timeout)' % args['timeout']
            if state != 'running':
                break
            if now - last_report >= args['progress_interval']:
                display.display(progress_line(node, args['label'], progress, now - started))
                last_report = now
            time.sleep(args['poll_interval'])
        elapsed = time.monotonic() - started
        result.update({'state': state, 'elapsed_s': round(elapsed, 1), 'bytes': last_bytes if last_bytes > 0 else 0,
                       'msg': progress_line(node, args['label'], progress, elapsed) if state == 'done' else
                       '%s: %s failed: %s' % (node, args['label'], why)})
        if state == 'failed':
            result['failed'] = True
        return result
