#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_benchmark
short_description: Run a streaming concurrency sweep against the vLLM endpoint and write JSON, CSV and a PNG
version_added: 0.2.0
author: dgxspark.cluster contributors (@dgxspark)
description:
  - Sends streaming C(/v1/completions) requests (fixed prompt and output lengths, C(ignore_eos), usage in the last chunk)
    to O(url) at each concurrency level of O(concurrency), O(requests_per_user) requests per simulated user, and records
    per level the time to first token (median, p99), the inter-token latency (median), the per-user decode rate
    (median, minimum), the total output tokens/s and the errors.
  - The API key is read from O(api_key_file) (a 0600 file) and sent only in the C(Authorization) header; it never
    appears in the arguments, the result or a file written.
  - Writes C(results.json), C(results.csv) and C(results.png) (tokens/s and TTFT against concurrency) under
    O(results_dir); with O(previous_results) (a results.json of an earlier run, e.g. socket transport) the PNG draws
    both runs.
  - Runs on the controller (C(delegate_to=localhost)); it only reads the server.
options:
  url:
    description: The endpoint's base URL, e.g. V(http://spark-alpha:8000/v1) (V(https://) when the API serves TLS).
    type: str
    required: true
  ca_file:
    description:
      - A PEM file of the CA that signed the API's certificate (the plan's C(api.tls.controller.ca_file)); default the
        system's trust store. HTTPS only.
    type: path
  model:
    description: The served model name.
    type: str
    required: true
  api_key_file:
    description: File holding the API key (first line); empty for an endpoint without a key.
    type: path
    default: ''
  api_key:
    description: The API key itself (a vaulted variable), when there is no O(api_key_file); never logged.
    type: str
    default: ''
  concurrency:
    description: The concurrency levels, in order.
    type: list
    elements: int
    default: [1, 2, 4, 8, 16, 32, 64]
  prompt_tokens:
    description: Prompt length in tokens (words of one token each).
    type: int
    default: 512
  output_tokens:
    description: Output tokens per request (C(max_tokens) with C(ignore_eos)).
    type: int
    default: 128
  requests_per_user:
    description: Requests each simulated user sends back to back at every level.
    type: int
    default: 2
  timeout:
    description: Seconds one request may take.
    type: float
    default: 600
  results_dir:
    description: Where results.json, results.csv and results.png are written (created).
    type: path
    required: true
  label:
    description: This run's name in the table and the plot, e.g. V(rdma) or V(socket).
    type: str
    default: run
  previous_results:
    description: A results.json of an earlier run to draw next to this one.
    type: path
  roofline_tok_s:
    description: The plan's single-stream decode roofline (tokens/s), to state the single-stream share of it.
    type: float
  metadata:
    description: Anything to keep with the results (model, transport, plan figures).
    type: dict
    default: {}
extends_documentation_fragment:
  - dgxspark.cluster.attributes
  - dgxspark.cluster.attributes.POSIX
attributes:
  check_mode:
    support: none
    details: A benchmark is a measurement; in check mode it does not run.
  diff_mode:
    support: none
    details: It writes only new result files.
requirements:
  - matplotlib (for the PNG) on the controller
"""

EXAMPLES = r"""
- name: Benchmark the endpoint at concurrency 1, 2 and 4
  dgxspark.cluster.serving_benchmark:
    url: http://spark-alpha:8000/v1
    model: Qwen/Qwen3.5-397B-A17B-FP8
    api_key_file: ~/.config/dgxspark/4node-0123456789ab/vllm_api_key
    concurrency: [1, 2, 4]
    results_dir: results/qwen/rdma-2026-11-23
    label: rdma
    roofline_tok_s: 64.2
  delegate_to: localhost
"""

RETURN = r"""
rows:
  description: One record per concurrency level.
  returned: success
  type: list
  elements: dict
table:
  description: The sweep as text lines.
  returned: success
  type: list
  elements: str
roofline_share:
  description: Single-stream per-user tok/s divided by O(roofline_tok_s), or null.
  returned: success
  type: float
report:
  description: The table, the single-stream share of the roofline, the error count and the files, as lines to print.
  returned: success
  type: list
  elements: str
errors:
  description: Failed requests over all levels.
  returned: success
  type: int
files:
  description: The paths written (json, csv, png).
  returned: success
  type: dict
"""

import datetime
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.benchmark import (
    csv_text, report_lines, roofline_share, run_level, summarize_level, table)


def read_key(path):
    if not path:
        return ''
    with open(path) as handle:
        return handle.readline().strip()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type='str', required=True),
            model=dict(type='str', required=True),
            api_key_file=dict(type='path', default=''),
            api_key=dict(type='str', default='', no_log=True),
            ca_file=dict(type='path'),
            concurrency=dict(type='list', elements='int', default=[1, 2, 4, 8, 16, 32, 64]),
            prompt_tokens=dict(type='int', default=512, no_log=False),
            output_tokens=dict(type='int', default=128, no_log=False),
            requests_per_user=dict(type='int', default=2),
            timeout=dict(type='float', default=600),
            results_dir=dict(type='path', required=True),
            label=dict(type='str', default='run'),
            previous_results=dict(type='path'),
            roofline_tok_s=dict(type='float'),
            metadata=dict(type='dict', default={}),
        ),
        supports_check_mode=False,
    )
    p = module.params
    bad = [name for name in ('prompt_tokens', 'output_tokens', 'requests_per_user') if p[name] < 1]
    bad += ['concurrency %d' % c for c in p['concurrency'] if c < 1]
    if bad or not p['concurrency']:
        module.fail_json(msg='serving_benchmark: must be at least 1: %s' % (', '.join(bad) or 'concurrency (empty list)'))
    previous = None
    if p['previous_results']:
        try:
            with open(p['previous_results']) as handle:
                previous = json.load(handle)
            if not isinstance(previous['rows'], list):
                raise TypeError('rows is not a list')
        except (OSError, ValueError, KeyError, TypeError) as err:
            module.fail_json(msg='previous_results %s is not a results.json of this benchmark: %s' % (p['previous_results'], err))
    try:
        key = p['api_key'] or read_key(p['api_key_file'])
    except OSError as err:
        module.fail_json(msg='cannot read the API key file %s: %s' % (p['api_key_file'], err.strerror))
    url = p['url'].rstrip('/') + '/completions'
    rows = []
    seq = 0
    for level in p['concurrency']:
        records, wall = run_level(url, key, p['model'], level, p['prompt_tokens'], p['output_tokens'],
                                  p['requests_per_user'], p['timeout'], seq0=seq, tls={'ca_file': p['ca_file']})
        seq += level * p['requests_per_user']
        rows.append(summarize_level(level, records, wall))
    share = roofline_share(rows, p['roofline_tok_s'])
    os.makedirs(p['results_dir'], exist_ok=True)
    result = {'label': p['label'], 'model': p['model'], 'url': p['url'],
              'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'),
              'prompt_tokens': p['prompt_tokens'], 'output_tokens': p['output_tokens'],
              'requests_per_user': p['requests_per_user'], 'roofline_tok_s': p['roofline_tok_s'],
              'roofline_share': share, 'metadata': p['metadata'], 'rows': rows}
    files = {name: os.path.join(p['results_dir'], 'results.%s' % name) for name in ('json', 'csv', 'png')}
    with open(files['json'], 'w') as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
    with open(files['csv'], 'w') as handle:
        handle.write(csv_text(rows))
    series = [(p['label'], rows)]
    if previous:
        # Two runs of one transport still read apart: each series is named with its date.
        series = [('%s %s' % (p['label'], result['date'][:16]), rows),
                  ('%s %s' % (previous.get('label') or 'previous', str(previous.get('date') or '')[:16]), previous['rows'])]
    try:
        from ansible_collections.dgxspark.cluster.plugins.module_utils.benchmark_plot import plot_sweep
        plot_sweep(files['png'], series, '%s: %s (prompt %d, output %d tokens)' % (
            p['model'], ' vs '.join(label.split()[0] for label, unused_rows in series), p['prompt_tokens'], p['output_tokens']))
    except ImportError as err:
        module.fail_json(msg='matplotlib is needed for the PNG on the controller (pip install -r requirements.txt): %s' % err,
                         rows=rows, files={k: v for k, v in files.items() if k != 'png'})
    errors = sum(r['errors'] for r in rows)
    module.exit_json(changed=True, rows=rows, table=table(rows), roofline_share=share, files=files, errors=errors,
                     report=report_lines(rows, p['roofline_tok_s'], files))


if __name__ == '__main__':
    main()
