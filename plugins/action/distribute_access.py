# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for dgxspark.cluster.distribute_access: the node-to-node key (made once on the controller), the relay
(a file of the role) and their place on a node, through dgxspark.cluster.distribute_node_access."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.module_utils.distribute_access import COMMENT, key_options

ARGUMENT_SPEC = dict(
    state=dict(type='str', choices=['present', 'absent'], default='present'),
    secrets_dir=dict(type='path', required=True, no_log=False),
    relay=dict(type='dict', required=True),
    send=dict(type='bool', default=False),
    forced_config_path=dict(type='path', default='/etc/dgxspark/distribute_forced.json'),
    forced_config=dict(type='dict', default={}),
    known_hosts=dict(type='str', default=''),
    lifetime_s=dict(type='int', default=14400),
    relay_src=dict(type='str', default='distribute_relay.py'),
)
KEY_NAME = 'distribute_ed25519'


def controller_key(secrets_dir, make):
    """The key's (private path, public line) in ``secrets_dir`` (0700), made once when ``make`` (one play's forks may
    ask at once: they take turns on a lock of the directory itself, which leaves no file beside the secrets); (path, None)
    when there is none."""
    path = os.path.join(secrets_dir, KEY_NAME)
    if make:
        os.makedirs(secrets_dir, mode=0o700, exist_ok=True)
        os.chmod(secrets_dir, 0o700)
        lock = os.open(secrets_dir, os.O_RDONLY)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(path):
                subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', COMMENT, '-f', path], check=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        finally:
            os.close(lock)
    try:
        with open(path + '.pub') as handle:
            return path, handle.read().strip()
    except FileNotFoundError:
        return path, None


class ActionModule(ActionBase):
    """Give the node the access (the key only where it sends) or take the key away; the secrets stay out of the output."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        relay, present = args['relay'], args['state'] == 'present'
        try:
            key_path, public_key = controller_key(args['secrets_dir'], present and not self._task.check_mode)
        except (OSError, subprocess.CalledProcessError) as exc:
            return dict(result, failed=True, msg='distribute: cannot make the node-to-node key in %s: %s'
                        % (args['secrets_dir'], exc))
        node = dict(state=args['state'], key_path=relay['ssh']['ssh_key'], public_key=public_key,
                    user=relay['ssh']['user'], run_dir=os.path.dirname(relay['progress']['model']))
        if present:
            if public_key is None:  # check mode on a controller that never made the key
                return dict(result, changed=True, msg='check mode: the node-to-node key would be made and installed')
            with open(self._find_needle('files', args['relay_src'])) as handle:
                relay_text = handle.read()
            node['files'] = {
                relay['path']: dict(content=relay_text, mode='0644'),
                # The relay's receiving operations, with these paths only.
                args['forced_config_path']: dict(content=json.dumps(args['forced_config'], indent=4, sort_keys=True) + '\n',
                                                 mode='0644'),
                # Strict host key checking stays on.
                relay['ssh']['known_hosts']: dict(content=args['known_hosts'], mode='0644'),
            }
            node['options'] = key_options(relay['path'], args['forced_config_path'],
                                          args['forced_config'].get('rail_nets') or [], time.time() + args['lifetime_s'])
            if args['send']:
                with open(key_path) as handle:
                    node['private_key'] = handle.read()
        result.update(self._execute_module(module_name='dgxspark.cluster.distribute_node_access', module_args=node,
                                           task_vars=task_vars))
        result.pop('invocation', None)  # the module's arguments hold the private key
        return result
