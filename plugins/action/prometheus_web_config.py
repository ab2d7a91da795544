# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.prometheus_web_config: Prometheus' web configuration with the bcrypt hash of its
password, keeping the hash of the file on the node while the password matches it (plugin_utils/prometheus_web_config.py).
"""

from __future__ import annotations

import base64

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.prometheus_web_config import web_config, web_config_text
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.wrapper_errors import action_call

ARGUMENT_SPEC = dict(
    path=dict(type='path', required=True),
    user=dict(type='str', required=True),
    password=dict(type='str', required=True, no_log=True),
    tls_cert_file=dict(type='str', default=''),
    tls_key_file=dict(type='str', default=''),
)


class ActionModule(ActionBase):
    """Reads the node's file (slurp), computes on the controller; writes nothing (the role's copy task does)."""

    TRANSFERS_FILES = False

    def _current_text(self, path, task_vars):
        read = self._execute_module(module_name='ansible.legacy.slurp', module_args={'src': path}, task_vars=task_vars)
        if read.get('failed') or 'content' not in read:
            return ''  # no file yet
        return base64.b64decode(read['content']).decode('utf-8', errors='replace')

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        current = self._current_text(args['path'], task_vars)
        config, reused = action_call('prometheus_web_config', web_config, args['user'], args['password'], current,
                                     args['tls_cert_file'], args['tls_key_file'])
        result.update(changed=False, content=web_config_text(config), hash_reused=reused,
                      tls='tls_server_config' in config)
        return result
