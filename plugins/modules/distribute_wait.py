#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: distribute_wait
short_description: Wait for a node's part of a model or image distribution, printing bytes, rate and time left
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin (the C(distribute) role's). Every O(poll_interval) seconds it reads the node's progress file, written by the
    role's relay, and the status of the node's async job when O(jid) is given, until the node's part is done, failed or stalled.
  - At least every O(progress_interval) seconds it prints one line per node, with the bytes received, the total, the rate and the
    estimated time left.
  - Without O(jid) (a node of an image chain, whose relay runs under the first node's job) it ends when the progress file says
    C(done) or C(failed).
options:
  progress_file:
    description: The relay's progress file on the node (JSON with bytes, total, status, error).
    type: str
    required: true
  label:
    description: What is copied, in messages (e.g. V(model), V(image)).
    type: str
    default: transfer
  jid:
    description: The async job id of the node's relay (the C(ansible_job_id) of a task run with C(async) and C(poll=0)).
    type: str
  timeout:
    description: Seconds before the wait gives up.
    type: int
    default: 86400
  stall_timeout:
    description: Seconds without a new byte before the node's part counts as failed.
    type: int
    default: 300
  progress_interval:
    description: Seconds between progress lines.
    type: int
    default: 30
  poll_interval:
    description: Seconds between polls.
    type: int
    default: 5
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: full
    details: In check mode nothing was started; it returns at once.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Wait for the model copy on every worker
  dgxspark.cluster.distribute_wait:
    progress_file: /run/dgxspark/distribute/model.json
    label: model
    jid: "{{ model_relay.ansible_job_id }}"
"""

RETURN = r"""
state:
  description: V(done) or V(failed).
  returned: always
  type: str
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
bytes:
  description: Bytes the node received.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils.transfer_progress import distribute_wait_argument_spec


def main():
    module = AnsibleModule(argument_spec=distribute_wait_argument_spec(), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.distribute_wait runs as an action plugin on the controller')


if __name__ == '__main__':
    main()
