#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: distribute_node_access
short_description: Give one node what the node-to-node copies of a distribution need, or take the node-to-node key away
version_added: 0.6.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - The node side of M(dgxspark.cluster.distribute_access), which reads the key and the relay on the controller and runs
    this module with them; it can also be run on its own.
  - O(state=present) writes O(files) (root's; only when their text or mode differs), empties O(run_dir) (0700; the progress
    of an earlier copy goes), writes O(private_key) to O(key_path) (0600, in a 0700 directory) when given, and authorizes
    O(public_key) in O(user)'s C(~/.ssh/authorized_keys) with O(options), replacing any other line of the key.
  - O(state=absent) removes O(key_path) and every line of O(user)'s C(authorized_keys) that holds O(public_key) or ends
    with the key's comment C(dgxspark-distribute) (what M(dgxspark.cluster.distribute_survey) counts as left).
options:
  state:
    description: Whether the node gets the access (V(present)) or loses the key and its authorization (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  key_path:
    description: The node-to-node private key's path on the node.
    type: path
    required: true
  private_key:
    description: The private key (only on the nodes that send); never shown.
    type: str
  public_key:
    description: The key's public line (C(ssh-ed25519 AAAA... comment)); required with O(state=present).
    type: str
  user:
    description: The user whose C(authorized_keys) holds the authorization.
    type: str
    default: root
  options:
    description: The authorization's options (C(command=...,from=...,restrict,expiry-time=...)); required with
      O(state=present).
    type: str
  files:
    description: "Files to write, O(state=present): C(path) -> {C(content), C(mode) (octal string)}."
    type: dict
    default: {}
  run_dir:
    description: The directory of the copies' progress, emptied with O(state=present).
    type: path
    default: /run/dgxspark/distribute
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The files and C(authorized_keys) lines that change; never the private key.
"""

EXAMPLES = r"""
- name: Take the node-to-node key and its authorization away
  dgxspark.cluster.distribute_node_access:
    state: absent
    key_path: /etc/dgxspark/secrets/distribute_ed25519
    public_key: "{{ lookup('ansible.builtin.file', '/home/me/.dgxspark/secrets/distribute_ed25519.pub') }}"
"""

RETURN = r"""
changed_paths:
  description: The paths written, emptied or removed.
  returned: always
  type: list
  elements: str
  sample: [/etc/dgxspark/distribute_known_hosts, /root/.ssh/authorized_keys]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils.distribute_access import grant, revoke


def main():
    module = AnsibleModule(argument_spec=dict(
        state=dict(type='str', choices=['present', 'absent'], default='present'),
        key_path=dict(type='path', required=True, no_log=False),
        private_key=dict(type='str', no_log=True),
        public_key=dict(type='str', no_log=False),
        user=dict(type='str', default='root'),
        options=dict(type='str'),
        files=dict(type='dict', default={}),
        run_dir=dict(type='path', default='/run/dgxspark/distribute'),
    ), required_if=[('state', 'present', ('public_key', 'options'))], supports_check_mode=True)
    args = module.params
    try:
        if args['state'] == 'present':
            files = dict((path, (str(spec.get('content', '')), int(str(spec.get('mode', '0644')), 8)))
                         for path, spec in args['files'].items())
            changed, diff = grant(args['key_path'], args['private_key'], args['public_key'], args['user'], args['options'],
                                  files, args['run_dir'], module.check_mode)
        else:
            changed, diff = revoke(args['key_path'], args['public_key'], args['user'], module.check_mode)
    except KeyError:
        module.fail_json(msg='distribute: the user %s is unknown on this node (distribute_ssh_user)' % args['user'])
    except OSError as exc:
        module.fail_json(msg='distribute: %s: %s' % (getattr(exc, 'filename', '') or '', exc.strerror or exc))
    module.exit_json(changed=bool(changed), changed_paths=changed, diff=diff)


if __name__ == '__main__':
    main()
