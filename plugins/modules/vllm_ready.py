#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_ready
short_description: Wait until vLLM in a container serves the model, printing its loading progress, or fail saying why
version_added: 0.1.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - An action plugin. Every O(poll_interval) seconds it runs M(dgxspark.cluster.serving_probe) on the host (the node that runs the vLLM
    container), with only the log records written since the previous probe, until vLLM is ready or has failed.
  - Ready means C(/health) answers 200, C(/v1/models) lists O(served_model_name) and, with O(chat), a chat completion answers 200 with
    content.
  - While it waits it prints one line, at least every O(progress_interval) seconds and whenever the number of loaded weight shards
    changes, with the node, the container, the progress as k/n and percent (or the last log line), the time elapsed and the time since the
    last new log line.
  - It fails at once when the container does not exist, is not running, is restarting, or was restarted or exited while it waited,
    with the container's last error lines, exit code and restart count.
  - It fails when the log shows no new line and no new progress for O(stall_timeout) seconds, naming the last progress line, how long
    vLLM has been still and the likely causes (a load that hangs at the same shard on every try, a dead Ray worker or NCCL peer, memory
    exhausted on a node, a load without C(--safetensors-load-strategy prefetch) on 8 or more nodes); and when O(timeout) is exceeded.
  - It also fails when the server is up but refuses the API key, lists another model, or cannot answer the chat completion, three
    probes in a row.
  - In check mode it probes once and reports what it saw without waiting or failing.
options:
  container:
    description: Name of the vLLM container on the host.
    type: str
    required: true
  url:
    description: Base URL of the vLLM OpenAI API as seen from the host (the plan's C(api.local_url)); V(https://) with TLS.
    type: str
    default: http://127.0.0.1:8000
  ca_file:
    description: A PEM file on the host of the CA that signed the API's certificate (the plan's C(api.tls.ca_file)); HTTPS only.
    type: path
  server_name:
    description: The name the API's certificate must hold (the plan's C(api.tls.server_name)); default the host of O(url).
    type: str
  api_key_file:
    description:
      - A file on the host holding the API key vLLM was started with (see M(dgxspark.cluster.serving_probe)). The key never reaches the
        result or the output.
    type: path
  served_model_name:
    description: The model name vLLM serves (C(--served-model-name)); C(/v1/models) must list it.
    type: str
    required: true
  chat:
    description: Whether a chat completion must answer before vLLM counts as ready.
    type: bool
    default: true
  chat_prompt:
    description: The user message of the chat completion.
    type: str
    default: "Reply with one short sentence: which model are you?"
  chat_max_tokens:
    description: C(max_tokens) of the chat completion.
    type: int
    default: 32
  timeout:
    description: Seconds to wait in all before failing.
    type: int
    default: 3600
  stall_timeout:
    description: Seconds without a new log line and without new loading progress before failing.
    type: int
    default: 900
  poll_interval:
    description: Seconds between two probes.
    type: float
    default: 5.0
  progress_interval:
    description: The longest time in seconds between two progress lines.
    type: float
    default: 30.0
  http_timeout:
    description: Seconds each HTTP request of a probe may take (the first chat completion of a large model can take a while).
    type: float
    default: 30.0
  min_tokens_per_s:
    description:
      - Once vLLM is ready, one streaming completion of O(speed_tokens) tokens must decode at least this many tokens per second,
        else the task fails with the figure (a release gate). V(0) checks no speed. Not measured in check mode.
    type: float
    default: 0.0
  speed_tokens:
    description: The number of tokens of the stream that O(min_tokens_per_s) times (C(ignore_eos), a short prompt).
    type: int
    default: 64
  node:
    description: The node's name in messages; default is C(inventory_hostname).
    type: str
  docker_path:
    description: Path of the Docker CLI on the host; default is the one found in E(PATH).
    type: path
  rendezvous:
    description:
      - Under vLLM's own multi-node backend, rank 0's rendezvous (C(--master-addr), C(--master-port)) and the rank of each other
        node. Each probe then reads which addresses are connected to the port on this node (the serving_probe module's
        O(dgxspark.cluster.serving_probe#module:rendezvous_port)); a rank that has not joined O(join_timeout) seconds after the
        rendezvous opened fails the task, naming its node, instead of the stall watchdog's wait.
      - Every rank keeps its connection to the rendezvous while the group lives; a rank that joined once counts as joined.
    type: dict
    suboptions:
      address:
        description: The rendezvous' address (the head's rail-1 address).
        type: str
        required: true
      port:
        description: The rendezvous' port.
        type: int
        required: true
      peers:
        description: Each other node's name, mapped to the address its rank connects from (its rail-1 address).
        type: dict
        required: true
  join_timeout:
    description: Seconds each rank of O(rendezvous) has to join it once it is open.
    type: int
    default: 300
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
  - dgxspark.cluster.attributes.POSIX
notes:
  - "This is an action plugin: it runs on the controller and runs M(dgxspark.cluster.serving_probe) on the host."
  - The progress lines are printed while the task runs; with several hosts in the play, each host's lines carry its name.
seealso:
  - module: dgxspark.cluster.serving_probe
"""

EXAMPLES = r"""
- name: Wait for vLLM on the head
  dgxspark.cluster.vllm_ready:
    container: dgxspark-vllm
    url: http://127.0.0.1:8000
    api_key_file: /etc/dgxspark/vllm-api-key
    served_model_name: qwen3
    stall_timeout: "{{ vllm_container_stall_timeout }}"
  register: vllm_ready

- name: Show the answer
  ansible.builtin.debug:
    msg: "{{ vllm_ready.msg }} {{ vllm_ready.chat_answer }}"
"""

RETURN = r"""
ready:
  description: Whether vLLM is ready (always true on success outside check mode).
  returned: always
  type: bool
state:
  description: C(ready), C(waiting) (check mode only) or C(failed).
  returned: always
  type: str
msg:
  description: What happened; on failure the complete diagnosis.
  returned: always
  type: str
node:
  description: The node's name.
  returned: always
  type: str
container:
  description: The container's name.
  returned: always
  type: str
url:
  description: The endpoint URL.
  returned: always
  type: str
  sample: http://127.0.0.1:8000
served_model_name:
  description: The served model name.
  returned: always
  type: str
models:
  description: The model ids C(/v1/models) listed at the last probe.
  returned: always
  type: list
  elements: str
chat_answer:
  description: The content of the chat completion; null when not asked or not answered.
  returned: always
  type: str
  sample: I am Qwen3, a large language model.
chat_tokens:
  description: The tokens the engine generated for that answer (the answer's C(usage)); null when not asked, not answered or not counted.
  returned: always
  type: int
  sample: 11
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
  sample: 251.3
progress_history:
  description: Each change of the weight-loading progress, C(t) (seconds since the start), C(done) and C(total).
  returned: always
  type: list
  elements: dict
  sample: [{t: 0.0, done: 0, total: 94}, {t: 5.1, done: 7, total: 94}]
last_lines:
  description: The last log lines seen (at most 20).
  returned: always
  type: list
  elements: str
restart_count:
  description: The container's restart count at the last probe.
  returned: always
  type: int
tokens_per_s:
  description: The decode speed O(min_tokens_per_s) measured (tokens per second of one stream); null when not asked.
  returned: always
  type: float
  sample: 21.4
probes:
  description: How many probes ran.
  returned: always
  type: int
rendezvous:
  description:
    - With O(rendezvous), C(address), C(port), C(opened) (whether it was seen listening), C(joined) and C(missing) (node
      names). Null otherwise.
  returned: always
  type: dict
  sample: {address: 192.168.100.10, port: 29501, opened: true, joined: [spark-beta, spark-gamma], missing: [spark-delta]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_ready_options import vllm_ready_argument_spec


def main():
    module = AnsibleModule(argument_spec=vllm_ready_argument_spec(), supports_check_mode=True)
    module.fail_json(msg='dgxspark.cluster.vllm_ready runs as an action plugin on the controller; this module file only documents it. '
                         'Call it as a task (dgxspark.cluster.vllm_ready) with the collection installed, not as a module on its own.')


if __name__ == '__main__':
    main()
