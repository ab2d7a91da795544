#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: distribute_access
short_description: Let the nodes of a distribution reach each other over the rails for the copies, or take that away
version_added: 0.6.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin (the C(distribute) role's). On the controller it makes the node-to-node SSH key once, in
    O(secrets_dir) (0700; the key 0600), and reads the relay (O(relay_src), a file of the role); on the node it runs
    M(dgxspark.cluster.distribute_node_access) with them.
  - O(state=present) installs the relay, its forced-command configuration O(forced_config) and the pinned host keys
    O(known_hosts) (strict host key checking stays on), empties the copies' progress directory, installs the private key
    only where the node sends (O(send)), and authorizes the key for the relay only (C(command=), C(restrict)), from the
    rail subnets only (C(from=), O(forced_config)'s C(rail_nets)) and for O(lifetime_s) seconds (C(expiry-time=), after
    which sshd refuses it even when the controller died before the phase removed it).
  - O(state=absent) removes the private key and the key's authorization (the phase's end, the copies worked or not).
  - The private key is never in the output.
options:
  state:
    description: Give the access (V(present)) or take the key and its authorization away (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  secrets_dir:
    description: The controller's directory of generated secrets, where the key is kept (C(distribute_ed25519)).
    type: path
    required: true
  relay:
    description:
      - Where the relay is on the node (C(path)), its SSH (C(ssh) - C(ssh_key), C(known_hosts), C(user)) and progress
        (C(progress) - C(model)), as the role's C(_distribute_relay).
    type: dict
    required: true
  send:
    description: Whether the node sends (gets the private key).
    type: bool
    default: false
  forced_config_path:
    description: Where the forced command's configuration is written on the node.
    type: path
    default: /etc/dgxspark/distribute_forced.json
  forced_config:
    description: The forced command's configuration (the relay's receiving operations, with their paths, and C(rail_nets)).
    type: dict
    default: {}
  known_hosts:
    description: Every node's host key at its rail addresses (a known_hosts file's text).
    type: str
    default: ''
  lifetime_s:
    description: Seconds the authorization is accepted (sshd's C(expiry-time)).
    type: int
    default: 14400
  relay_src:
    description: The relay among the role's files.
    type: str
    default: distribute_relay.py
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: Check mode makes no key and changes no node.
  diff_mode:
    support: full
    details: The files and C(authorized_keys) lines that change; never the private key.
"""

EXAMPLES = r"""
- name: Let the nodes that copy reach each other over the rails
  dgxspark.cluster.distribute_access:
    secrets_dir: /home/me/.dgxspark/secrets
    relay: "{{ _distribute_relay }}"
    send: "{{ inventory_hostname in routes.senders }}"
    forced_config: "{{ routes.forced_config }}"
    known_hosts: "{{ routes.known_hosts }}"

- name: Remove the node-to-node key and its authorization
  dgxspark.cluster.distribute_access:
    state: absent
    secrets_dir: /home/me/.dgxspark/secrets
    relay: "{{ _distribute_relay }}"
"""

RETURN = r"""
changed_paths:
  description: The node's paths written, emptied or removed.
  returned: success
  type: list
  elements: str
  sample: [/etc/dgxspark/secrets/distribute_ed25519, /root/.ssh/authorized_keys]
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        state=dict(type='str', choices=['present', 'absent'], default='present'),
        secrets_dir=dict(type='path', required=True, no_log=False),
        relay=dict(type='dict', required=True),
        send=dict(type='bool', default=False),
        forced_config_path=dict(type='path', default='/etc/dgxspark/distribute_forced.json'),
        forced_config=dict(type='dict', default={}),
        known_hosts=dict(type='str', default=''),
        lifetime_s=dict(type='int', default=14400),
        relay_src=dict(type='str', default='distribute_relay.py'),
    ), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.distribute_access runs as an action plugin')


if __name__ == '__main__':
    main()
