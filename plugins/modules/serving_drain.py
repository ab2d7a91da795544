#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_drain
short_description: Wait until a vLLM engine holds no request in flight, up to a deadline
version_added: 0.3.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Read-only. Reads the engine's C(/metrics) with the API key every O(interval) seconds until C(vllm:num_requests_running)
    plus C(vllm:num_requests_waiting) is 0, or O(timeout) seconds have passed.
  - A rolling release of a fleet runs it on a group's head once the group is out of the router (issue 51), so that the
    requests the group still holds finish before its engine changes.
  - It does not fail at the deadline; the result says how many requests were still in flight (the change will cut them).
    An engine that refuses the connection holds no request. It fails only when the key file cannot be read.
options:
  url:
    description: The engine's base URL as seen from the host (the plan's C(api.local_url)); V(https://) with TLS.
    type: str
    required: true
  api_key_file:
    description: A file on the host holding the API key (the engine's C(/metrics) needs it). The key never reaches the result.
    type: path
    required: true
  ca_file:
    description: A PEM file on the host of the CA that signed the API's certificate (the plan's C(api.tls.ca_file)); HTTPS only.
    type: path
  server_name:
    description: The name the API's certificate must hold (the plan's C(api.tls.server_name)); default the host of O(url).
    type: str
  timeout:
    description: Seconds to wait at most.
    type: float
    default: 120
  interval:
    description: Seconds between two reads.
    type: float
    default: 1.0
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
  - dgxspark.cluster.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Let the group's requests in flight finish (at most 2 minutes)
  dgxspark.cluster.serving_drain:
    url: "{{ dgxspark_plan.api.local_url }}"
    api_key_file: /etc/dgxspark/secrets/vllm_api_key
    timeout: 120
  register: drain

- name: Say how many requests the change cuts
  ansible.builtin.debug:
    msg: "{{ drain.in_flight }} requests still in flight after {{ drain.waited_s }} s"
  when: not drain.drained
"""

RETURN = r"""
drained:
  description: Whether the engine held no request at the last read.
  returned: always
  type: bool
  sample: true
in_flight:
  description: Running plus waiting requests at the last read that succeeded; null when none did.
  returned: always
  type: int
  sample: 0
waited_s:
  description: Seconds waited.
  returned: always
  type: float
  sample: 3.1
reads:
  description: How many times C(/metrics) was read.
  returned: always
  type: int
  sample: 4
error:
  description: Why the last read gave no count (the engine did not answer, no such gauge); null when it did.
  returned: always
  type: str
"""

from urllib.error import URLError
from urllib.request import Request

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.api_tls import opener
from ansible_collections.dgxspark.cluster.plugins.module_utils.serving_drain import wait_drained

READ_TIMEOUT_S = 5


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type='str', required=True),
            api_key_file=dict(type='path', required=True, no_log=False),
            ca_file=dict(type='path'),
            server_name=dict(type='str'),
            timeout=dict(type='float', default=120.0),
            interval=dict(type='float', default=1.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        with open(params['api_key_file']) as handle:
            key = handle.read().strip()
    except OSError as exc:
        module.fail_json(msg='the API key file %s could not be read: %s' % (params['api_key_file'], exc))
    client = opener(params['ca_file'], params['server_name'])
    request = Request(params['url'].rstrip('/') + '/metrics', headers={'Authorization': 'Bearer ' + key})

    def read_metrics():
        try:
            with client.open(request, timeout=READ_TIMEOUT_S) as response:
                return response.read().decode('utf-8', errors='replace')
        except URLError as exc:  # a refused connection stays one: nothing listens, nothing is in flight
            raise (exc.reason if isinstance(exc.reason, OSError) else OSError(str(exc.reason))) from exc

    # check mode reads once: what a run would find, without its wait
    result = wait_drained(read_metrics, 0 if module.check_mode else params['timeout'], params['interval'])
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
