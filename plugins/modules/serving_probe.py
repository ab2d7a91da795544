#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: serving_probe
short_description: Probe one serving container (Ray or vLLM) on a node, its log, and optionally the vLLM API
version_added: 0.1.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Reads the container's state with C(docker inspect) (exists, status, exit code, restart count, OOM kill, start time) and its log
    with C(docker logs --timestamps), either the records after O(log_since) or the last O(log_tail) records.
  - Splits the log into lines (a tqdm bar rewritten with carriage returns and the CR LF line ends of a TTY included, ANSI colours
    removed) and finds the latest weight-loading progress line of vLLM, such as
    C(Loading safetensors checkpoint shards - 57% Completed | 54/94), with its shard count.
  - With O(url), checks the vLLM OpenAI API on the node; C(/health), C(/v1/models) (with the API key of O(api_key_file)), optionally
    the same without the key (expected HTTP 401) and one short chat completion. An HTTP failure is returned as data (status null and
    the error text), never as a module failure.
  - Read-only; the module fails only on bad options or when Docker itself cannot be run.
  - The M(dgxspark.cluster.vllm_ready) action runs this module again and again until vLLM is ready; the
    C(dgxspark.cluster.serving_status) filter turns the probes of every node into the cluster's status table.
options:
  container:
    description: Name (or id) of the container.
    type: str
    required: true
  log_since:
    description:
      - Only the log records after this RFC 3339 timestamp (as C(last_timestamp) returned it, for example
        C(2026-11-23T17:14:38.123456789Z)). A record at exactly this time is not returned again.
      - When not given, the last O(log_tail) records are returned.
    type: str
  log_tail:
    description: Number of log records to return when O(log_since) is not given (C(0) returns none).
    type: int
    default: 40
  url:
    description:
      - Base URL of the vLLM OpenAI API as seen from the node, for example C(http://127.0.0.1:8000). Without it no HTTP check runs.
      - With C(https://) the server's certificate is verified against O(ca_file) (else the system's trust store) for O(server_name).
    type: str
  ca_file:
    description: A PEM file on the node of the CA that signed the API's certificate (the plan's C(api.tls.ca_file)); HTTPS only.
    type: path
  server_name:
    description:
      - The name the API's certificate must hold (the plan's C(api.tls.server_name)), checked whatever host O(url) connects to;
        default the host of O(url). HTTPS only.
    type: str
  api_key_file:
    description:
      - A file on the node holding the API key vLLM was started with. The key is sent in the header C(Authorization) as C(Bearer <key>) to
        C(/v1/models) and C(/v1/chat/completions); it is never returned and is masked wherever it would appear in the result
        (vLLM prints its arguments, C(--api-key) included, in its log).
    type: path
  served_model_name:
    description: The model to ask in the chat completion; when not given, the first model C(/v1/models) lists.
    type: str
  chat:
    description:
      - Send one chat completion (O(chat_prompt), at most O(chat_max_tokens) tokens, temperature 0) once C(/health) answers 200.
    type: bool
    default: false
  chat_prompt:
    description: The user message of the chat completion.
    type: str
    default: "Reply with one short sentence: which model are you?"
  chat_max_tokens:
    description: C(max_tokens) of the chat completion.
    type: int
    default: 32
  speed_tokens:
    description:
      - With O(chat) answered, one more streaming completion of exactly this many tokens (C(ignore_eos), a short prompt, on
        C(/v1/completions)) times the decode; RV(speed) holds the figures. V(0) sends none.
    type: int
    default: 0
  check_unauthorized:
    description: Also request C(/v1/models) without the key and return its status in RV(unauthorized_status) (401 when a key is enforced).
    type: bool
    default: false
  http_timeout:
    description: Seconds each HTTP request may take.
    type: float
    default: 10
  docker_path:
    description: Path of the Docker CLI; default is the one found in E(PATH).
    type: path
  rendezvous_port:
    description:
      - The port of rank 0's rendezvous under vLLM's own multi-node backend (C(--master-port)). With it, the module reads the node's
        socket tables (C(/proc/net/tcp) and C(/proc/net/tcp6)) and returns in RV(rendezvous) whether the port listens and which
        addresses are connected to it. The container must share the node's network (C(network_mode) host).
    type: int
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.READ_ONLY
  - dgxspark.cluster.attributes.POSIX
notes:
  - The user needs access to the Docker daemon (root or the docker group).
  - Requests go straight to O(url); proxy environment variables are ignored.
seealso:
  - module: dgxspark.cluster.vllm_ready
  - plugin: dgxspark.cluster.serving_status
    plugin_type: filter
"""

EXAMPLES = r"""
- name: State and last log lines of the Ray container
  dgxspark.cluster.serving_probe:
    container: dgxspark-ray
  register: ray_probe

- name: Full check of the vLLM API on the head
  dgxspark.cluster.serving_probe:
    container: dgxspark-vllm
    url: http://127.0.0.1:8000
    api_key_file: /etc/dgxspark/vllm-api-key
    served_model_name: qwen3
    chat: true
    check_unauthorized: true
  register: vllm_probe

- name: Only the log records written since the previous probe
  dgxspark.cluster.serving_probe:
    container: dgxspark-vllm
    log_since: "{{ vllm_probe.last_timestamp }}"
"""

RETURN = r"""
container:
  description: The container's state from C(docker inspect).
  returned: always
  type: dict
  contains:
    exists:
      description: Whether the container exists; the other keys are null (or false, 0) when it does not.
      type: bool
    name:
      description: The container's name.
      type: str
    status:
      description: Docker's status (created, running, restarting, exited, paused, dead).
      type: str
    running:
      description: Whether the container runs (false while Docker is restarting or pausing it, although C(docker inspect) says Running then).
      type: bool
    restarting:
      description: Whether Docker is restarting it (restart policy after an exit).
      type: bool
    exit_code:
      description: The exit code of the last run; null while the container runs.
      type: int
    restart_count:
      description: How many times the restart policy restarted it since it was created.
      type: int
    started_at:
      description: When the current (or last) run started, RFC 3339.
      type: str
    finished_at:
      description: When the last run ended, RFC 3339; null if it never ended.
      type: str
    oom_killed:
      description: Whether the last run was killed for lack of memory.
      type: bool
    error:
      description: Docker's error for the container (for example a failed start), or null.
      type: str
    image_id:
      description: The id of the container's image.
      type: str
  sample: {exists: true, name: dgxspark-vllm, status: running, running: true, restarting: false, exit_code: null,
           restart_count: 0, started_at: "2026-11-23T17:14:36.512345678Z", finished_at: null, oom_killed: false, error: null,
           image_id: "sha256:4f1c..."}
logs:
  description: The log lines, oldest first, each C(ts) (the Docker timestamp of its record) and C(line) (ANSI removed). At most the last 5000.
  returned: always
  type: list
  elements: dict
  sample: [{ts: "2026-11-23T17:15:40.020000000Z", line: "Loading safetensors checkpoint shards:  57% Completed | 54/94 [00:41<00:30,  1.32it/s]"}]
first_exceptions:
  description:
    - When the container is not running (exited, or waiting for Docker to restart it), the first three distinct exception
      lines of its last run's log (its last 20000 lines), vLLM's log prefix removed; else empty.
    - The cause of a failed engine is often there, hundreds of lines above the shutdown that ends the log.
  returned: always
  type: list
  elements: str
  sample: ["ray.exceptions.RayTaskError(SafetensorError): ray::RayWorkerWrapper.execute_method() (pid=596, ip=192.168.100.13)"]
logs_error:
  description: Why the log could not be read (for example a log driver that cannot be read back), else null.
  returned: always
  type: str
logs_truncated:
  description: How many older lines were left out of RV(logs) to keep it at 5000 lines.
  returned: always
  type: int
last_timestamp:
  description: The newest Docker timestamp seen, else O(log_since); pass it as O(log_since) of the next probe.
  returned: always
  type: str
progress:
  description: The latest weight-loading progress line in RV(logs) as C(done), C(total), C(percent) and C(line); null when there is none.
  returned: always
  type: dict
  sample: {done: 54, total: 94, percent: 57, line: "Loading safetensors checkpoint shards:  57% Completed | 54/94 [00:41<00:30,  1.32it/s]"}
url:
  description: O(url) as given (null without it).
  returned: always
  type: str
served_model_name:
  description: O(served_model_name) as given (null without it).
  returned: always
  type: str
health:
  description: C(GET /health), C(status) (HTTP status, null when there was no answer) and C(error); null without O(url).
  returned: always
  type: dict
  sample: {status: 200, error: null}
models:
  description: The model ids C(/v1/models) lists; null without O(url), when the server does not answer, or when the request fails.
  returned: always
  type: list
  elements: str
  sample: [qwen3]
models_status:
  description: The HTTP status of C(/v1/models) (with the key), null when not asked or not answered.
  returned: always
  type: int
models_error:
  description: Why C(/v1/models) failed, else null.
  returned: always
  type: str
unauthorized_status:
  description: The HTTP status of C(/v1/models) without the key (O(check_unauthorized)); null when not asked or not answered.
  returned: always
  type: int
  sample: 401
chat:
  description:
    - The chat completion, C(status), C(content) (the answer; a reasoning model's reasoning when it spent every token on it),
      C(finish_reason), C(completion_tokens) (the answer's C(usage), null when absent) and C(error). Null when O(chat) is false or
      C(/health) did not answer 200.
  returned: always
  type: dict
  sample: {status: 200, content: "I am Qwen3, a large language model.", finish_reason: stop, completion_tokens: 9, error: null}
rendezvous:
  description:
    - With O(rendezvous_port), C(port), C(listening) (whether the port listens) and C(peers) (the addresses of the connections to it
      from other hosts, IPv4 ones as IPv4 though the socket is IPv6); C(error) when the tables cannot be read. Null otherwise.
  returned: always
  type: dict
  sample: {port: 29501, listening: true, peers: [192.168.100.11, 192.168.100.12, 192.168.100.13], error: null}
speed:
  description:
    - The timed stream of O(speed_tokens), C(output_tokens), C(tokens_per_s) (after the first token), C(ttft_s) and C(error). Null
      when not asked or when the chat completion did not answer.
  returned: always
  type: dict
  sample: {output_tokens: 64, tokens_per_s: 21.4, ttft_s: 0.31, error: null}
"""

import json
import os
import socket
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.request import Request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.dgxspark.cluster.plugins.module_utils.api_tls import opener as api_opener
from ansible_collections.dgxspark.cluster.plugins.module_utils.benchmark import request_body, stream_request
from ansible_collections.dgxspark.cluster.plugins.module_utils.rendezvous import RendezvousError, rendezvous_view
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import (
    VllmProgressError,
    chat_answer,
    container_state,
    first_exceptions,
    latest_progress,
    merge_log_streams,
    missing_container,
    model_ids,
    newer_than,
    newest_timestamp,
    split_log_lines,
    timestamp_key,
)

MAX_LOG_LINES = 5000
#: How much of a stopped container's last run is read for its first exceptions (a run that served for days logged more).
RUN_LOG_LINES = 20000
MAX_BODY = 1024 * 1024
SOCKET_TABLES = ('/proc/net/tcp', '/proc/net/tcp6')


def http_request(url, timeout, key=None, payload=None, tls=None):
    """(status, body text, error text): an HTTP error status is an answer; no answer gives status None. tls: {ca_file,
    server_name} of an https url."""
    headers = {'Accept': 'application/json'}
    if key:
        headers['Authorization'] = 'Bearer %s' % key
    data = None
    if payload is not None:
        data = json.dumps(payload).encode('utf-8')
        headers['Content-Type'] = 'application/json'
    request = Request(url, data=data, headers=headers)
    opener = api_opener(**(tls or {}))
    try:
        response = opener.open(request, timeout=timeout)
        try:
            return response.getcode(), to_text(response.read(MAX_BODY), errors='surrogate_or_replace'), None
        finally:
            response.close()
    except HTTPError as exc:
        try:
            body = to_text(exc.read(MAX_BODY), errors='surrogate_or_replace')
        except (OSError, HTTPException):
            body = ''
        return exc.code, body, 'HTTP %d: %s' % (exc.code, ' '.join(body.split())[:300] or exc.reason)
    except URLError as exc:
        return None, None, 'no answer from %s: %s' % (url, exc.reason)
    except socket.timeout:
        return None, None, 'no answer from %s within %s s' % (url, timeout)
    except (OSError, HTTPException, ValueError) as exc:
        return None, None, 'no answer from %s: %s' % (url, exc)


def check_api(module, key):
    """health, models, models_status, models_error, unauthorized_status, chat."""
    params = module.params
    base = params['url'].rstrip('/')
    timeout = params['http_timeout']
    tls = {'ca_file': params['ca_file'], 'server_name': params['server_name']}
    out = {'health': None, 'models': None, 'models_status': None, 'models_error': None, 'unauthorized_status': None, 'chat': None,
           'speed': None}
    status, body, error = http_request(base + '/health', timeout, tls=tls)
    out['health'] = {'status': status, 'error': error if status != 200 else None}
    if status is None:
        return out
    status, body, error = http_request(base + '/v1/models', timeout, key=key, tls=tls)
    out['models_status'] = status
    if status == 200:
        try:
            out['models'] = model_ids(body)
        except VllmProgressError as exc:
            out['models_error'] = str(exc)
    else:
        out['models_error'] = error
    if params['check_unauthorized']:
        out['unauthorized_status'] = http_request(base + '/v1/models', timeout, tls=tls)[0]
    if params['chat'] and out['health']['status'] == 200:
        model = params['served_model_name'] or (out['models'] or [None])[0]
        if not model:
            out['chat'] = {'status': None, 'content': None, 'finish_reason': None, 'completion_tokens': None,
                           'error': 'no model to ask: give served_model_name, or /v1/models must list one (%s)' % (out['models_error'] or 'empty list')}
            return out
        payload = {'model': model, 'messages': [{'role': 'user', 'content': params['chat_prompt']}],
                   'max_tokens': params['chat_max_tokens'], 'temperature': 0}
        status, body, error = http_request(base + '/v1/chat/completions', timeout, key=key, payload=payload, tls=tls)
        chat = {'status': status, 'content': None, 'finish_reason': None, 'completion_tokens': None, 'error': error}
        if status == 200:
            try:
                chat.update(chat_answer(body))
                if not (chat['content'] or '').strip():
                    chat['error'] = 'the answer has no content (finish_reason %s)' % chat['finish_reason']
            except VllmProgressError as exc:
                chat['error'] = str(exc)
        out['chat'] = chat
        if params['speed_tokens'] and status == 200 and not chat['error']:
            record = stream_request(base + '/v1/completions', key, request_body(model, 16, params['speed_tokens'], 0), timeout,
                                    tls=tls)
            out['speed'] = {'output_tokens': record['output_tokens'], 'error': record['error'],
                            'tokens_per_s': round(record['per_user_tok_s'], 2) if record['per_user_tok_s'] else None,
                            'ttft_s': round(record['ttft_s'], 3) if record['ttft_s'] is not None else None}
    return out


def read_key(module):
    path = module.params['api_key_file']
    if not path:
        return None
    try:
        with open(path, 'r', encoding='utf-8') as handle:
            key = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg='api_key_file %s cannot be read (%s): give the file on the node that holds the vLLM API key.' % (
            path, exc.__class__.__name__))
    if not key:
        module.fail_json(msg='api_key_file %s is empty: write the vLLM API key into it.' % path)
    module.no_log_values.add(key)
    return key


def read_logs(module, docker, container, since=None, tail=None):
    """(lines, error) of `docker logs --timestamps`: the records after `since`, the last `tail` of them (either or both)."""
    argv = [docker, 'logs', '--timestamps']
    argv += ['--since', since] if since else []
    argv += ['--tail', str(tail)] if tail is not None else []
    argv.append(container)
    rc, out, err = module.run_command(argv, encoding=None, environ_update={'LC_ALL': 'C'})
    if rc != 0:
        text = to_text(err or out or b'', errors='surrogate_or_replace').strip()
        return [], '`docker logs %s` failed (rc %d): %s' % (container, rc, text[:500])
    lines = merge_log_streams(split_log_lines(out or b''), split_log_lines(err or b''))
    return newer_than(lines, since), None


def read_rendezvous(port, tables=SOCKET_TABLES):
    """The rendezvous view of this node's socket tables (a table the kernel lacks, IPv6 off, is skipped)."""
    texts = []
    try:
        for path in tables:
            if os.path.exists(path):
                with open(path, encoding='ascii') as handle:
                    texts.append(handle.read())
        return dict(rendezvous_view(texts, port), error=None)
    except (OSError, RendezvousError) as exc:
        return {'port': port, 'listening': None, 'peers': [], 'error': str(exc)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type='str', required=True),
            log_since=dict(type='str'),
            log_tail=dict(type='int', default=40),
            url=dict(type='str'),
            ca_file=dict(type='path'),
            server_name=dict(type='str'),
            api_key_file=dict(type='path', no_log=True),
            served_model_name=dict(type='str'),
            chat=dict(type='bool', default=False),
            chat_prompt=dict(type='str', default='Reply with one short sentence: which model are you?'),
            chat_max_tokens=dict(type='int', default=32, no_log=False),
            speed_tokens=dict(type='int', default=0, no_log=False),
            check_unauthorized=dict(type='bool', default=False),
            http_timeout=dict(type='float', default=10),
            docker_path=dict(type='path'),
            rendezvous_port=dict(type='int'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params['log_since']:
        try:
            timestamp_key(params['log_since'])
        except VllmProgressError as exc:
            module.fail_json(msg='log_since: %s' % exc)
    if params['log_tail'] < 0:
        module.fail_json(msg='log_tail must be 0 or more, got %d' % params['log_tail'])
    if params['chat_max_tokens'] < 1:
        module.fail_json(msg='chat_max_tokens must be at least 1, got %d' % params['chat_max_tokens'])
    if params['speed_tokens'] < 0:
        module.fail_json(msg='speed_tokens must be 0 (no timed stream) or more, got %d' % params['speed_tokens'])
    if params['rendezvous_port'] is not None and not 0 < params['rendezvous_port'] < 65536:
        module.fail_json(msg='rendezvous_port must be a TCP port (1 to 65535), got %d' % params['rendezvous_port'])
    if params['http_timeout'] <= 0:
        module.fail_json(msg='http_timeout must be a positive number of seconds, got %s' % params['http_timeout'])
    if params['url'] and not params['url'].startswith(('http://', 'https://')):
        module.fail_json(msg='url must start with http:// or https:// (for example http://127.0.0.1:8000), got %s' % params['url'])
    key = read_key(module)
    docker = params['docker_path'] or module.get_bin_path('docker', required=True)

    container = params['container']
    rc, out, err = module.run_command([docker, 'inspect', '--type', 'container', container], environ_update={'LC_ALL': 'C'})
    result = {'changed': False, 'url': params['url'], 'served_model_name': params['served_model_name'], 'logs': [], 'logs_error': None,
              'logs_truncated': 0, 'first_exceptions': [], 'last_timestamp': params['log_since'], 'progress': None,
              'health': None, 'models': None, 'models_status': None, 'models_error': None, 'unauthorized_status': None, 'chat': None,
              'speed': None, 'rendezvous': None}
    if rc != 0:
        if 'No such container' in (err or '') or 'No such object' in (err or ''):
            result['container'] = missing_container()
        else:
            module.fail_json(msg='`docker inspect %s` failed (rc %d): %s. Check that Docker runs on this node and that the user may use it '
                                 '(root or the docker group).' % (container, rc, (err or out or '').strip()[:500]))
    else:
        try:
            result['container'] = container_state(out)
        except VllmProgressError as exc:
            module.fail_json(msg='`docker inspect %s`: %s' % (container, exc))

    if result['container']['exists']:
        lines, result['logs_error'] = read_logs(module, docker, container, params['log_since'],
                                                None if params['log_since'] else params['log_tail'])
        result['last_timestamp'] = newest_timestamp(lines, params['log_since'])
        result['progress'] = latest_progress(lines)
        if len(lines) > MAX_LOG_LINES:
            result['logs_truncated'] = len(lines) - MAX_LOG_LINES
            lines = lines[-MAX_LOG_LINES:]
        result['logs'] = lines
        if not result['container']['running'] and result['container']['started_at'] and not result['logs_error']:
            # The cause of a stopped container is in its last run's first exceptions, often far above the tail's shutdown.
            run, run_error = read_logs(module, docker, container, result['container']['started_at'], RUN_LOG_LINES)
            result['first_exceptions'] = [] if run_error else first_exceptions(run)

    if params['rendezvous_port']:
        result['rendezvous'] = read_rendezvous(params['rendezvous_port'])
    if params['url']:
        result.update(check_api(module, key))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
