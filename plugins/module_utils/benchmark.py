# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streaming load generation against an OpenAI-compatible endpoint, and the figures of a concurrency sweep.

Per request (one SSE stream of /v1/completions): time to first token (TTFT), the gaps between content chunks
(inter-token latency, ITL), the decode rate seen by that user = (output tokens - 1) / (last token time - first
token time) -- TTFT excluded, as llama-benchy's and vLLM's per-user tg figures do -- and its error, if any.
Per concurrency level: medians and p99 of those, total output tok/s = all output tokens / the level's wall time,
and the error count. Output tokens come from the final usage chunk (stream_options.include_usage, as vLLM sends
it), else from the number of content chunks.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading
import time

from urllib.parse import urlsplit

from ansible_collections.dgxspark.cluster.plugins.module_utils.api_tls import connection

COLUMNS = ('concurrency', 'requests', 'errors', 'ttft_ms_median', 'ttft_ms_p99', 'itl_ms_median',
           'per_user_tok_s_median', 'per_user_tok_s_min', 'total_tok_s', 'wall_s')


def parse_sse_lines(lines, t0, clock_of_line):
    """One request's record from its SSE lines. lines: the decoded lines; clock_of_line(i): when line i arrived
    (seconds, same clock as t0). Pure, so the recorded streams of a real server can be replayed in tests."""
    token_times, bare_finishes = [], []
    usage = None
    error = None
    end = None
    for i, line in enumerate(lines):
        line = line.strip()
        if not line.startswith('data:'):
            continue
        end = clock_of_line(i) - t0
        data = line[5:].strip()
        if data == '[DONE]':
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            error = 'invalid SSE data: %s' % data[:80]
            break
        if chunk.get('error'):
            error = str(chunk['error'].get('message') if isinstance(chunk['error'], dict) else chunk['error'])
            break
        if chunk.get('usage'):
            usage = chunk['usage']
        carried = [(choice, _token_text(choice)) for choice in chunk.get('choices') or []]
        carried = [(choice, text) for choice, text in carried if text is not None]
        if carried:
            token_times.append(clock_of_line(i) - t0)
            bare_finishes.append(all(choice.get('finish_reason') and not text for choice, text in carried))
    # A server may close with a chunk of its own holding only the finish reason (no token): the usage tells.
    n_tokens = int((usage or {}).get('completion_tokens') or 0)
    while n_tokens and len(token_times) > n_tokens and bare_finishes[-1]:
        token_times.pop()
        bare_finishes.pop()
    return request_record(token_times, usage, error, end)


def _token_text(choice):
    """The text of the token a streamed choice carries, or None when it carries none. vLLM sends one chunk per token,
    with an empty text for a token that completes no character yet (part of a UTF-8 sequence, a special token): still
    a token, timed as such. Chat's first chunk announces the role (content "") before anything is generated: no token."""
    if 'text' in choice:
        return choice['text']
    delta = choice.get('delta') or {}
    if delta.get('role') and not delta.get('content'):
        return None
    return delta.get('content')


def request_record(token_times, usage=None, error=None, end_s=None):
    """The figures of one request from the arrival times of its token chunks (seconds after the request). e2e_s is
    when its stream ended (end_s: the last event, [DONE] included, as vLLM's e2e time ends at the finish), else its
    last token chunk."""
    if error is None and not token_times:
        error = 'no token received'
    n_tokens = int((usage or {}).get('completion_tokens') or len(token_times))
    record = {'ok': error is None, 'error': error, 'output_tokens': n_tokens if error is None else 0,
              'prompt_tokens': int((usage or {}).get('prompt_tokens') or 0),
              'ttft_s': token_times[0] if token_times else None,
              'e2e_s': end_s if end_s is not None else (token_times[-1] if token_times else None),
              'itl_s': [b - a for a, b in zip(token_times, token_times[1:])], 'per_user_tok_s': None}
    if error is None and n_tokens > 1 and token_times[-1] > token_times[0]:
        record['per_user_tok_s'] = (n_tokens - 1) / (token_times[-1] - token_times[0])
    return record


def percentile(values, pct):
    """Nearest-rank percentile (pct in 0..100) of a non-empty list; None for an empty one."""
    values = sorted(values)
    if not values:
        return None
    rank = max(1, int(-(-pct * len(values) // 100)))
    return values[min(rank, len(values)) - 1]


def _r(value, digits):
    return None if value is None else round(value, digits)


def summarize_level(concurrency, records, wall_s):
    """One row of the sweep (see COLUMNS) from the records of one concurrency level."""
    ok = [r for r in records if r['ok']]
    ttft = [r['ttft_s'] * 1000 for r in ok]
    e2e = [r['e2e_s'] * 1000 for r in ok]
    itl = [g * 1000 for r in ok for g in r['itl_s']]
    rates = [r['per_user_tok_s'] for r in ok if r['per_user_tok_s']]
    tokens = sum(r['output_tokens'] for r in ok)
    return {
        'concurrency': concurrency, 'requests': len(records), 'errors': len(records) - len(ok),
        'ttft_ms_median': _r(percentile(ttft, 50), 1), 'ttft_ms_p99': _r(percentile(ttft, 99), 1),
        'itl_ms_median': _r(percentile(itl, 50), 2),
        'per_user_tok_s_median': _r(percentile(rates, 50), 2), 'per_user_tok_s_min': _r(min(rates) if rates else None, 2),
        'total_tok_s': _r(tokens / wall_s if wall_s > 0 else None, 2), 'wall_s': _r(wall_s, 3),
        # what the server's own counters are checked against (vllm:generation_tokens_total, its TTFT and e2e
        # histograms)
        'output_tokens': tokens, 'ttft_ms_mean': _r(sum(ttft) / len(ttft) if ttft else None, 1),
        'e2e_ms_mean': _r(sum(e2e) / len(e2e) if e2e else None, 1),
        'error_messages': sorted(set(r['error'] for r in records if r['error']))[:5],
    }


def roofline_share(rows, roofline_tok_s):
    """Single-stream (concurrency 1) per-user tok/s as a share of the plan's decode roofline, or None."""
    single = [r for r in rows if r['concurrency'] == 1 and r['per_user_tok_s_median']]
    if not single or not roofline_tok_s:
        return None
    return round(single[0]['per_user_tok_s_median'] / float(roofline_tok_s), 4)


def table(rows):
    """The sweep as a fixed-width text table."""
    head = ('conc', 'reqs', 'err', 'TTFT ms p50', 'TTFT ms p99', 'ITL ms p50', 'tok/s/user p50', 'tok/s total')
    keys = ('concurrency', 'requests', 'errors', 'ttft_ms_median', 'ttft_ms_p99', 'itl_ms_median',
            'per_user_tok_s_median', 'total_tok_s')
    body = [['-' if r[k] is None else str(r[k]) for k in keys] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ['  '.join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ['  '.join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    return lines


def report_lines(rows, roofline_tok_s, files):
    """What the playbook prints: the table, the single-stream share of the roofline, errors and the files."""
    share = roofline_share(rows, roofline_tok_s)
    if share is None:
        roof = ('Roofline share: no concurrency-1 level with a per-user rate.' if roofline_tok_s else
                'Roofline share: no roofline given.')
    else:
        single = [r for r in rows if r['concurrency'] == 1][0]['per_user_tok_s_median']
        roof = ('Single stream: %s tok/s per user = %.1f %% of the plan\'s decode roofline (%s tok/s).'
                % (single, share * 100, roofline_tok_s))
    errors = sum(r['errors'] for r in rows)
    lines = table(rows) + [roof, 'Errors: %d of %d requests%s' % (
        errors, sum(r['requests'] for r in rows),
        ('; ' + '; '.join(sorted(set(m for r in rows for m in r.get('error_messages') or [])))) if errors else '')]
    return lines + ['Results: %s' % ', '.join(files[k] for k in sorted(files))]


def csv_text(rows):
    """The sweep as CSV (COLUMNS, one row per level)."""
    out = [','.join(COLUMNS)]
    for r in rows:
        out.append(','.join('' if r[c] is None else str(r[c]) for c in COLUMNS))
    return '\n'.join(out) + '\n'


def request_body(model, prompt_tokens, output_tokens, seq):
    """A /v1/completions streaming request: a prompt of prompt_tokens words (one token each for common English
    words), exactly output_tokens tokens (ignore_eos), usage in the last chunk. seq makes each prompt unique so a
    prefix cache does not shorten the prefill."""
    words = ['request %d' % seq] + ['the'] * max(0, prompt_tokens - 2)
    return {'model': model, 'prompt': ' '.join(words), 'max_tokens': output_tokens, 'min_tokens': output_tokens,
            'ignore_eos': True, 'temperature': 0, 'stream': True, 'stream_options': {'include_usage': True}}


def stream_request(url, api_key, body, timeout, tls=None):
    """Send one streaming request; its record (see request_record). The key travels in a header only. tls: {ca_file,
    server_name} of an https url (api_tls.connection)."""
    headers = {'content-type': 'application/json', 'accept': 'text/event-stream'}
    if api_key:
        headers['authorization'] = 'Bearer %s' % api_key
    t0 = time.monotonic()
    lines, stamps = [], []
    # A plain HTTP(S) connection: no per-request opener or proxy lookup whose cost would be counted as TTFT.
    parts = urlsplit(url)
    try:
        conn = connection(url, timeout, **(tls or {}))
        try:
            conn.request('POST', parts.path, body=json.dumps(body), headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                return request_record([], None, 'HTTP %s' % resp.status)
            for raw in resp:
                stamps.append(time.monotonic())
                lines.append(raw.decode('utf-8', 'replace'))
        finally:
            conn.close()
    # Any failure is that request's error, counted in its level.
    except Exception as err:  # pylint: disable=broad-except
        return request_record([], None, '%s: %s' % (type(err).__name__, err))
    return parse_sse_lines(lines, t0, lambda i: stamps[i])


def run_level(url, api_key, model, concurrency, prompt_tokens, output_tokens, requests_per_user, timeout, seq0=0, tls=None):
    """concurrency users, each sending requests_per_user requests back to back; (records, wall seconds). tls: see
    stream_request."""
    records = []
    lock = threading.Lock()

    def user(uid):
        for k in range(requests_per_user):
            rec = stream_request(url, api_key, request_body(model, prompt_tokens, output_tokens,
                                                            seq0 + uid * requests_per_user + k), timeout, tls=tls)
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=user, args=(u,)) for u in range(concurrency)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records, time.monotonic() - start
