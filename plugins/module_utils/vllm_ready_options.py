# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the dgxspark.cluster.vllm_ready action (shared by the action and its documentation module) and its
speed gate. The watch that decides readiness probe after probe is vllm_progress.py.

Pure logic, stdlib only."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils.rendezvous import DEFAULT_JOIN_TIMEOUT
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import (
    DEFAULT_PROGRESS_INTERVAL, DEFAULT_STALL_TIMEOUT, DEFAULT_TIMEOUT)

DEFAULT_CHAT_PROMPT = 'Reply with one short sentence: which model are you?'


def vllm_ready_argument_spec():
    """The options of the dgxspark.cluster.vllm_ready action (shared by the action and its documentation module)."""
    return dict(
        container=dict(type='str', required=True),
        url=dict(type='str', default='http://127.0.0.1:8000'),
        ca_file=dict(type='path'), server_name=dict(type='str'),
        api_key_file=dict(type='path', no_log=True),
        served_model_name=dict(type='str', required=True),
        chat=dict(type='bool', default=True),
        chat_prompt=dict(type='str', default=DEFAULT_CHAT_PROMPT),
        chat_max_tokens=dict(type='int', default=32, no_log=False),
        timeout=dict(type='int', default=DEFAULT_TIMEOUT),
        stall_timeout=dict(type='int', default=DEFAULT_STALL_TIMEOUT),
        poll_interval=dict(type='float', default=5.0),
        progress_interval=dict(type='float', default=float(DEFAULT_PROGRESS_INTERVAL)),
        http_timeout=dict(type='float', default=30.0),
        min_tokens_per_s=dict(type='float', default=0.0, no_log=False),
        speed_tokens=dict(type='int', default=64, no_log=False),
        node=dict(type='str'),
        docker_path=dict(type='path'),
        rendezvous=dict(type='dict', options=dict(address=dict(type='str', required=True), port=dict(type='int', required=True),
                                                  peers=dict(type='dict', required=True))),
        join_timeout=dict(type='int', default=DEFAULT_JOIN_TIMEOUT),
    )


def speed_verdict(speed, min_tokens_per_s, node, container):
    """(ok, message) of the speed gate: one stream's decode speed (serving_probe's `speed`) against the minimum asked.
    A stream that failed or gave too few tokens to time fails the gate too: an engine that cannot stream is not ready."""
    where = 'vLLM (%s on %s)' % (container, node)
    if not speed or speed.get('error') or not speed.get('tokens_per_s'):
        why = (speed or {}).get('error') or 'too few tokens to time (%s)' % (speed or {}).get('output_tokens', 0)
        return False, '%s answers, but the speed check of min_tokens_per_s %g got no timed stream: %s' % (where, min_tokens_per_s, why)
    figures = '%.1f tok/s in one stream of %d tokens (first token after %.2f s)' % (
        speed['tokens_per_s'], speed['output_tokens'], speed.get('ttft_s') or 0)
    if speed['tokens_per_s'] < min_tokens_per_s:
        return False, '%s answers, but decodes %s: below min_tokens_per_s %g.' % (where, figures, min_tokens_per_s)
    return True, '%s decodes %s (min_tokens_per_s %g).' % (where, figures, min_tokens_per_s)
