"""Benchmark figures: SSE parsing over a recorded stream, per-request and per-level figures, the report, and a
sweep against a local server streaming like vLLM at a known pace (the known truth), with its PNG."""
import csv
import http.server
import io
import json
import os
import threading
import time

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.benchmark import (
    COLUMNS, csv_text, parse_sse_lines, percentile, report_lines, request_body, request_record, roofline_share,
    run_level, summarize_level, table)

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, 'fixtures', 'standin_completions_stream_40tps.json')) as _f:
    RECORDED = json.load(_f)


def test_parse_recorded_standin_stream():
    lines = [line for unused_t, line in RECORDED['lines']]
    stamps = [t for t, unused_line in RECORDED['lines']]
    rec = parse_sse_lines(lines, 0.0, lambda i: stamps[i])
    assert rec['ok'] and rec['error'] is None
    assert rec['output_tokens'] == 6 and rec['prompt_tokens'] == 5
    assert rec['ttft_s'] == pytest.approx(0.0309)
    assert len(rec['itl_s']) == 5
    assert rec['per_user_tok_s'] == pytest.approx(40.0, rel=0.05)   # recorded at 40 tok/s


CHAT_LINES = [
    'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}',
    '',
    'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}',
    'data: {"choices": [{"index": 0, "delta": {"content": "b"}}]}',
    'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}',
    'data: [DONE]',
]


@pytest.mark.parametrize('lines, times, expected', [
    # chat deltas: the empty role chunk is not a token; 2 tokens 0.5 s apart -> 2 tok/s... (n-1)/dt = 1/0.5; the
    # request ends with its stream ([DONE] at 1.0 s), after the last content
    (CHAT_LINES, [0.1, 0.1, 0.3, 0.8, 0.9, 1.0],
     {'ok': True, 'output_tokens': 2, 'ttft_s': 0.3, 'per_user_tok_s': 2.0, 'e2e_s': 1.0}),
    # vLLM's chunks of tokens that complete no character (recorded on the lab's engine: "text": ""): tokens all the
    # same, so the rate is 3 gaps over 0.6 s and the inter-token gaps are 0.2 s each; the usage chunk carries none
    (['data: {"choices": [{"index": 0, "text": "9", "logprobs": null, "finish_reason": null}]}',
      'data: {"choices": [{"index": 0, "text": "ariable", "logprobs": null, "finish_reason": null}]}',
      'data: {"choices": [{"index": 0, "text": "", "logprobs": null, "finish_reason": null}]}',
      'data: {"choices": [{"index": 0, "text": "", "logprobs": null, "finish_reason": "length"}]}',
      'data: {"choices": [], "usage": {"prompt_tokens": 67, "total_tokens": 71, "completion_tokens": 4}}',
      'data: [DONE]'], [0.2, 0.4, 0.6, 0.8, 0.81, 0.82],
     {'ok': True, 'output_tokens': 4, 'ttft_s': 0.2, 'e2e_s': 0.82, 'per_user_tok_s': 5.0,
      'itl_s': [pytest.approx(0.2)] * 3}),
    # chat: a chunk of a token without a character is a token; the role chunk is not
    (['data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}', 'data: {"choices": [{"delta": {"content": ""}}]}',
      'data: {"choices": [{"delta": {"content": "b"}}]}'], [0.1, 0.3, 0.5], {'ok': True, 'ttft_s': 0.3, 'output_tokens': 2}),
    # an error event from the server
    (['data: {"error": {"message": "overloaded"}}'], [0.2], {'ok': False, 'error': 'overloaded', 'output_tokens': 0}),
    # nothing streamed
    (['data: [DONE]'], [0.2], {'ok': False, 'error': 'no token received'}),
    # garbage
    (['data: {not json'], [0.2], {'ok': False}),
    # one token: no rate (needs two)
    (['data: {"choices": [{"text": "x"}]}', 'data: [DONE]'], [0.2, 0.2], {'ok': True, 'per_user_tok_s': None}),
])
def test_parse_sse_lines(lines, times, expected):
    rec = parse_sse_lines(lines, 0.0, lambda i: times[i])
    for key, value in expected.items():
        assert rec[key] == (pytest.approx(value) if isinstance(value, float) else value), key


@pytest.mark.parametrize('values, pct, expected', [
    ([], 50, None), ([3], 99, 3), ([1, 2, 3, 4], 50, 2), ([4, 1, 3, 2], 99, 4), (list(range(1, 101)), 99, 99),
])
def test_percentile(values, pct, expected):
    assert percentile(values, pct) == expected


def _ok(ttft, times_after_first, n=None):
    times = [ttft] + [ttft + t for t in times_after_first]
    return request_record(times, {'completion_tokens': n} if n else None)


def test_summarize_level_and_report():
    records = [_ok(0.1, [0.1, 0.2, 0.3]), _ok(0.3, [0.2, 0.4, 0.6]), request_record([], None, 'HTTP 401')]
    row = summarize_level(2, records, wall_s=2.0)
    assert row['requests'] == 3 and row['errors'] == 1 and row['error_messages'] == ['HTTP 401']
    assert row['ttft_ms_median'] == 100.0 and row['ttft_ms_p99'] == 300.0
    assert row['per_user_tok_s_median'] == 5.0 and row['per_user_tok_s_min'] == 5.0   # 3/0.6 = 5, 3/0.3 = 10
    assert row['total_tok_s'] == 4.0                                                  # 8 tokens / 2 s
    assert row['output_tokens'] == 8 and row['ttft_ms_mean'] == 200.0                 # what vLLM's counters must show
    assert row['e2e_ms_mean'] == 650.0                                                # (0.4 s + 0.9 s) / 2
    assert row['itl_ms_median'] == 100.0
    one = summarize_level(1, [_ok(0.05, [0.02, 0.04])], wall_s=0.1)
    rows = [one, row]
    assert roofline_share(rows, 100.0) == 0.5
    assert roofline_share(rows, None) is None and roofline_share([row], 100.0) is None
    lines = report_lines(rows, 100.0, {'json': 'r/results.json', 'csv': 'r/results.csv', 'png': 'r/results.png'})
    assert lines[0].split()[:3] == ['conc', 'reqs', 'err'] and len(table(rows)) == 3
    assert "50.0 tok/s per user = 50.0 % of the plan's decode roofline (100.0 tok/s)" in lines[3]
    assert lines[4] == 'Errors: 1 of 4 requests; HTTP 401'
    parsed = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert tuple(parsed[0]) == COLUMNS and parsed[1]['total_tok_s'] == '4.0'


def test_request_body_is_unique_and_exact():
    a, b = request_body('m', 8, 32, 0), request_body('m', 8, 32, 1)
    assert a['prompt'] != b['prompt'] and len(a['prompt'].split()) == 8
    assert a['max_tokens'] == a['min_tokens'] == 32 and a['ignore_eos'] and a['stream_options'] == {'include_usage': True}


class PacedCompletions(http.server.BaseHTTPRequestHandler):
    """/v1/completions streamed the way vLLM streams them (one `data:` chunk per token, then the usage chunk and
    `[DONE]`), at a known pace: the truth the sweep's figures are checked against. Bearer `k` or 401."""
    # 12 tokens span 5.5 s: a client thread that receives its first or last token 130 ms late on a loaded machine (the
    # unit tests run beside the labs' build) moves its figure by 2.4 %. At 10 tok/s (1.1 s) that was 12 % and the test
    # failed in a full run; at 40 tok/s (0.275 s), 18 %.
    tokens_per_s = 2.0

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        if self.headers.get('Authorization') != 'Bearer k':
            self.send_response(401)
            self.send_header('Content-Type', 'application/json')
            self.end_headers()
            self.wfile.write(b'{"error": "Unauthorized"}')
            return
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream')
        self.end_headers()
        start, sent = time.monotonic(), []
        for n in range(body['max_tokens']):
            # Paced by deadlines, so a late wake-up (a loaded machine) does not slow every later token.
            time.sleep(max(0.0, start + n / self.tokens_per_s - time.monotonic()))
            self._event({'choices': [{'index': 0, 'text': 'w%d ' % n, 'finish_reason': None}]})
            sent.append(time.monotonic())
        # The pace each stream really had (what a client must measure), even on a machine too busy to keep its pace.
        self.server.paces.append((len(sent) - 1) / (sent[-1] - sent[0]))
        usage = {'prompt_tokens': len(body['prompt'].split()), 'completion_tokens': body['max_tokens']}
        self._event({'choices': [], 'usage': usage})
        self.wfile.write(b'data: [DONE]\n\n')

    def _event(self, data):
        self.wfile.write(('data: %s\n\n' % json.dumps(data)).encode())
        self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture
def paced_server():
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), PacedCompletions)
    httpd.paces = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield 'http://127.0.0.1:%d/v1/completions' % httpd.server_address[1], httpd.paces
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize('concurrency', [1, 4])
def test_sweep_matches_the_server_s_pace(paced_server, concurrency):
    url, paces = paced_server
    records, wall = run_level(url, 'k', 'lab', concurrency, 16, 12, 1, 30)
    row = summarize_level(concurrency, records, wall)
    assert row['errors'] == 0 and row['requests'] == concurrency and len(paces) == concurrency
    # The client's per-user rate is the pace the server sent at ((n-1)/span, not n/span: 9% apart with 12 tokens).
    assert row['per_user_tok_s_median'] == pytest.approx(percentile(paces, 50), rel=0.05)
    assert row['per_user_tok_s_min'] == pytest.approx(min(paces), rel=0.05)
    # No absolute figure: the pace the server really kept depends on this machine's load (22.75 tok/s instead of 40 while
    # a lab deploy ran beside the unit tests); the paces it recorded are the truth, checked above.


def test_wrong_key_is_counted_as_errors(paced_server):
    records, wall = run_level(paced_server[0], 'wrong', 'lab', 2, 4, 2, 1, 10)
    row = summarize_level(2, records, wall)
    assert row['errors'] == 2 and row['error_messages'] == ['HTTP 401'] and row['per_user_tok_s_median'] is None


def test_plot_two_series(tmp_path):
    pytest.importorskip('matplotlib')
    from ansible_collections.dgxspark.cluster.plugins.module_utils.benchmark_plot import plot_sweep
    rows = [summarize_level(c, [_ok(0.1 * c, [0.1, 0.2])], 1.0) for c in (1, 2, 4)]
    path = plot_sweep(str(tmp_path / 'r.png'), [('rdma', rows), ('socket', rows[:2])], 'test')
    with open(path, 'rb') as handle:
        assert handle.read(8) == b'\x89PNG\r\n\x1a\n'
