# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the vLLM readiness logic: Docker log splitting, the progress line, error lines, docker inspect and the ReadinessWatch.

Log lines are in the formats vLLM prints (APIServer/EngineCore/RayWorkerWrapper prefixes, [file.py:line] tags, tqdm's
_BAR_FORMAT), the lab stand-in's identical bar (lab/serving/dgxspark_vllm_standin/progress.py) and Docker's --timestamps prefix.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import (
    CONFIRMATIONS,
    ReadinessWatch,
    VllmProgressError,
    chat_answer,
    container_state,
    error_lines,
    first_exceptions,
    format_duration,
    latest_progress,
    merge_log_streams,
    missing_container,
    model_ids,
    newer_than,
    newest_timestamp,
    parse_progress,
    split_log_lines,
    strip_ansi,
    timestamp_key,
    timestamp_seconds,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_ready_options import vllm_ready_argument_spec

FIXTURES = pathlib.Path(__file__).parent / 'fixtures' / 'vllm_progress'

TS1 = '2026-11-23T17:14:38.123456789Z'
TS2 = '2026-11-23T17:15:02.000000001Z'

BAR_0 = 'Loading safetensors checkpoint shards:   0% Completed | 0/94 [00:00<?, ?it/s]'
BAR_54 = 'Loading safetensors checkpoint shards:  57% Completed | 54/94 [00:41<00:30,  1.32it/s]'
BAR_55 = 'Loading safetensors checkpoint shards:  59% Completed | 55/94 [00:42<00:29,  1.32it/s]'
BAR_94 = 'Loading safetensors checkpoint shards: 100% Completed | 94/94 [01:11<00:00,  1.32it/s]'
API_START = 'INFO 11-23 17:20:01 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000'
UVICORN = '(APIServer pid=1) INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)'

CRASH_LOG = [
    '(APIServer pid=1) INFO 11-23 17:14:40 [api_server.py:1839] vLLM API server version 0.33.0',
    "(APIServer pid=1) INFO 11-23 17:14:40 [utils.py:233] non-default args: {'model_tag': 'nvidia/Qwen3-235B-A22B-NVFP4', "
    "'quantization': 'nvfp4', 'tensor_parallel_size': 4}",
    '(EngineCore_DP0 pid=312) INFO 11-23 17:15:02 [core.py:77] Initializing a V1 LLM engine (v0.33.0) with config: '
    "model='nvidia/Qwen3-235B-A22B-NVFP4'",
    '(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708] EngineCore failed to start.',
    '(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708] Traceback (most recent call last):',
    '(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
    'line 699, in run_engine_core',
    '(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708]     raise ValueError(',
    '(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708] ValueError: Unknown quantization method: nvfp4. Must be one of '
    "['aqlm', 'awq', 'fp8', 'modelopt', 'modelopt_fp4'].",
    '(APIServer pid=1) Traceback (most recent call last):',
    '(APIServer pid=1)   File "/usr/local/bin/vllm", line 10, in <module>',
    '(APIServer pid=1)     sys.exit(main())',
    '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", line 759, in wait_for_engine_startup',
    '(APIServer pid=1)     raise RuntimeError("Engine core initialization failed. "',
    "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
]


class Clock:
    """A clock the tests move by hand."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def items(*lines, ts=TS1):
    return [{'ts': ts, 'line': line} for line in lines]


def probe(lines=(), status='running', exit_code=None, restart_count=0, exists=True, health=None, models=None, models_status=None,
          chat=None, oom=False, restarting=False, error=None):
    container = missing_container() if not exists else {
        'exists': True, 'name': 'dgxspark-vllm', 'status': status, 'running': status == 'running', 'restarting': restarting,
        'exit_code': exit_code, 'restart_count': restart_count, 'started_at': '2026-11-23T17:14:36.512345678Z', 'finished_at': None,
        'oom_killed': oom, 'error': error, 'image_id': 'sha256:4f1c'}
    logs = items(*lines)
    return {'container': container, 'logs': logs, 'last_timestamp': TS1 if logs else None, 'progress': latest_progress(logs),
            'health': health, 'models': models, 'models_status': models_status, 'unauthorized_status': None, 'chat': chat}


HEALTHY = dict(health={'status': 200, 'error': None}, models=['qwen3'], models_status=200)
ANSWERED = dict(HEALTHY, chat={'status': 200, 'content': 'I am Qwen3.', 'finish_reason': 'stop', 'error': None})


def watch(clock, **kwargs):
    options = dict(chat=True, timeout=3600, stall_timeout=900, progress_interval=30, clock=clock, url='http://127.0.0.1:8000')
    options.update(kwargs)
    return ReadinessWatch('spark-alpha', 'dgxspark-vllm', 'qwen3', **options)


# ------------------------------------------------------------------------------- log splitting

@pytest.mark.parametrize('text, expected', [
    ('%s\n%s\n' % (API_START, UVICORN), [(None, API_START), (None, UVICORN)]),
    # A TTY container: CRLF line ends, Docker timestamps.
    ('%s %s\r\n%s %s\r\n' % (TS1, API_START, TS2, UVICORN), [(TS1, API_START), (TS2, UVICORN)]),
    # tqdm rewrites the bar with \r inside one Docker record: every piece gets that record's timestamp.
    ('%s \r%s\r%s\r%s\n' % (TS1, BAR_0, BAR_54, BAR_55), [(TS1, BAR_0), (TS1, BAR_54), (TS1, BAR_55)]),
    # Ray colours its prefixes (ANSI), blank lines are dropped, trailing blanks stripped, indentation kept.
    ('%s \x1b[36m(RayWorkerWrapper pid=401, ip=192.168.100.11)\x1b[0m %s   \n\n%s    \n%s   File "x.py", line 3\n' % (
        TS1, BAR_54, TS2, TS2),
     [(TS1, '(RayWorkerWrapper pid=401, ip=192.168.100.11) ' + BAR_54), (TS2, '  File "x.py", line 3')]),
    ('\x1b[1;31mERROR\x1b[0m 11-23 17:15:04 [core.py:708] EngineCore failed to start.\n',
     [(None, 'ERROR 11-23 17:15:04 [core.py:708] EngineCore failed to start.')]),
    ('', []),
    (None, []),
    (b'%s %s\n' % (TS1.encode(), b'caf\xc3\xa9 \xff'), [(TS1, 'caf\u00e9 \ufffd')]),
])
def test_split_log_lines(text, expected):
    assert [(i['ts'], i['line']) for i in split_log_lines(text)] == expected


def test_split_log_lines_rejects_non_text():
    with pytest.raises(VllmProgressError, match='string'):
        split_log_lines(42)


@pytest.mark.parametrize('text, expected', [
    ('\x1b[32mINFO\x1b[0m ready', 'INFO ready'),
    ('\x1b]0;title\x07tail', 'tail'),
    ('a\x1b(Bb\tc\x08', 'ab\tc'),
])
def test_strip_ansi(text, expected):
    assert strip_ansi(text) == expected


@pytest.mark.parametrize('stamp, key', [
    ('2026-11-23T17:14:38.123456789Z', (1795454078, 123456789)),
    ('2026-11-23T17:14:38Z', (1795454078, 0)),
    ('2026-11-23T17:14:38.5Z', (1795454078, 500000000)),
    ('2026-11-23T18:14:38.1+01:00', (1795454078, 100000000)),
    ('2026-11-23T16:14:38-01:00', (1795454078, 0)),
])
def test_timestamp_key(stamp, key):
    assert timestamp_key(stamp) == key


@pytest.mark.parametrize('stamp', ['yesterday', '2026-11-23 17:14', None, 1795454078])
def test_timestamp_key_rejects(stamp):
    with pytest.raises(VllmProgressError, match='RFC 3339'):
        timestamp_key(stamp)


@pytest.mark.parametrize('stamp, seconds', [
    ('2026-11-23T17:14:38.5Z', 1795454078.5),
    ('0001-01-01T00:00:00Z', None),
    (None, None),
    ('', None),
])
def test_timestamp_seconds(stamp, seconds):
    assert timestamp_seconds(stamp) == seconds


def test_newer_than_drops_the_record_at_since():
    lines = items('a', ts=TS1) + items('b', ts=TS2) + [{'ts': None, 'line': 'c'}]
    assert [i['line'] for i in newer_than(lines, TS1)] == ['b']
    assert [i['line'] for i in newer_than(lines, None)] == ['a', 'b', 'c']
    assert newest_timestamp(lines) == TS2
    assert newest_timestamp([], TS1) == TS1


def test_merge_log_streams_orders_stdout_and_stderr_by_time():
    out = items('out late', ts=TS2)
    err = items('err early', ts=TS1) + [{'ts': None, 'line': 'no time'}]
    assert [i['line'] for i in merge_log_streams(out, err)] == ['err early', 'out late', 'no time']


# ------------------------------------------------------------------------------------ progress

@pytest.mark.parametrize('line, expected', [
    (BAR_54, (54, 94, 57)),
    (BAR_0, (0, 94, 0)),
    ('(EngineCore pid=123) ' + BAR_54, (54, 94, 57)),
    ('(EngineCore_DP0 pid=312) ' + BAR_94, (94, 94, 100)),
    ('(RayWorkerWrapper pid=401, ip=192.168.100.11) ' + BAR_0, (0, 94, 0)),
    ('(EngineCore_DP0 pid=312) (RayWorkerWrapper pid=401) ' + BAR_55 + ' [repeated 3x across cluster]', (55, 94, 59)),
    # The lab stand-in (dgxspark_vllm_standin.progress.format_line).
    ('Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:00<00:00, 12.50it/s]', (1, 4, 25)),
    ('Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.60it/s]', (4, 4, 100)),
    ('Loading pt checkpoint shards:  50% Completed | 1/2 [00:03<00:03,  3.10s/it]', (1, 2, 50)),
    ('Preloading safetensors checkpoint shards:  10% Completed | 9/94 [00:05<00:49,  1.80it/s]', (9, 94, 10)),
    ({'ts': TS1, 'line': BAR_54}, (54, 94, 57)),
    ('(EngineCore_DP0 pid=312) INFO 11-23 17:16:13 [default_loader.py:267] Loading weights took 71.32 seconds', None),
    (API_START, None),
    (UVICORN, None),
    ('Loading safetensors checkpoint shards', None),
    (None, None),
])
def test_parse_progress(line, expected):
    found = parse_progress(line)
    if expected is None:
        assert found is None
    else:
        assert (found['done'], found['total'], found['percent']) == expected
        assert found['line'] == (line['line'] if isinstance(line, dict) else line).strip()


def test_latest_progress_is_the_last_bar():
    lines = items(BAR_0, BAR_54, API_START)
    assert latest_progress(lines)['done'] == 54
    assert latest_progress(items(API_START)) is None


# --------------------------------------------------------------------------------- error lines

@pytest.mark.parametrize('lines, limit, expected', [
    # The crash: the ERROR lines, then the final 5 lines; the INFO lines at the start are left out.
    (CRASH_LOG, 15, CRASH_LOG[3:]),
    # A tight limit keeps the most relevant: the final lines, then the latest matching lines.
    (CRASH_LOG, 7, [CRASH_LOG[7], CRASH_LOG[8]] + CRASH_LOG[-5:]),
    (CRASH_LOG, 3, CRASH_LOG[-3:]),
    # Few lines: all of them.
    ([API_START, UVICORN], 15, [API_START, UVICORN]),
    # A repeated error is quoted once, at its last place.
    (['ERROR a', 'INFO b', 'ERROR a', 'INFO c', 'INFO d', 'INFO e', 'INFO f', 'INFO g', 'INFO h'], 15,
     ['ERROR a', 'INFO d', 'INFO e', 'INFO f', 'INFO g', 'INFO h']),
    # exited / Killed / argparse's lowercase error.
    (['(raylet) worker exited with code 1', 'x1', 'x2', 'x3', 'x4', 'x5'], 15, ['(raylet) worker exited with code 1', 'x1', 'x2', 'x3', 'x4', 'x5']),
    (['vllm: error: argument --max-model-len: invalid int value', 'a', 'b', 'c', 'd', 'e'], 2, ['d', 'e']),
    ([], 15, []),
    (items('ERROR x', 'y'), 15, ['ERROR x', 'y']),
])
def test_error_lines(lines, limit, expected):
    assert error_lines(lines, limit=limit) == expected


def test_error_lines_quote_vllm_s_message_for_a_rejected_option():
    # vLLM 0.32 (the lab's CPU build) refusing --quantization nvfp4, then Docker's restart: what status.yml quotes
    # (10 lines) must hold vLLM's own message, which pydantic prints on its own line under the ValidationError.
    with open(FIXTURES / 'vllm_0.32_cpu_rejected_quantization.log', encoding='utf-8') as handle:
        log = handle.read().splitlines()
    restart = ['dgxspark patches: sitecustomize/lab_cpu_engine_sitecustomize.py (sitecustomize) verified',
               'dgxspark_ray_ready: Ray offers 4 free GPU(s) on 4 ready node(s); the engine needs 4: checking that they stay (0 s)',
               'dgxspark_ray_ready: Ray offers 4 free GPU(s) on 4 ready node(s); the engine needs 4 (5 s)',
               'dgxspark LAB patch: vllm.platforms.cpu changed (lab_cpu_engine_sitecustomize)']
    quoted = error_lines(log + restart, limit=10)
    assert any(line.startswith('  Value error, Unknown quantization method: nvfp4.') for line in quoted), quoted
    assert quoted[-4:] == restart


CORRUPT_SHARD_LOG = 'vllm_0.32_cpu_corrupt_shard_on_one_rank.log'
ENGINE_PREFIX = '(EngineCore pid=31898) ERROR 11-27 17:59:02 [core.py:1510] '


@pytest.mark.parametrize('lines, limit, expected', [
    # a traceback's last line, with vLLM's error prefix or bare
    ([ENGINE_PREFIX + 'Traceback (most recent call last):', ENGINE_PREFIX + '  File "x.py", line 3, in f',
      ENGINE_PREFIX + 'ValueError: invalid literal'], 3, ['ValueError: invalid literal']),
    (['RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}'], 3,
     ['RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}']),
    # Ray's wrapper names the worker's exception and node; the same line again is one
    ([ENGINE_PREFIX + 'ray.exceptions.RayTaskError(SafetensorError): ray::RayWorkerProc.initialize_worker() (pid=596, ip=10.0.0.3)',
      'ray.exceptions.RayTaskError(SafetensorError): ray::RayWorkerProc.initialize_worker() (pid=596, ip=10.0.0.3)'], 3,
     ['ray.exceptions.RayTaskError(SafetensorError): ray::RayWorkerProc.initialize_worker() (pid=596, ip=10.0.0.3)']),
    # a worker's own prefix
    (['(RayWorkerWrapper pid=401, ip=192.168.100.12) torch.OutOfMemoryError: CUDA out of memory.'], 3,
     ['torch.OutOfMemoryError: CUDA out of memory.']),
    # not an exception line: a warning that quotes one, an INFO line, a traceback's raise, an error without a class
    (['(APIServer pid=1) WARNING 11-27 17:58:31 [system_utils.py:255] Found ulimit: `OSError: [Errno 24] Too many open files`',
      '(APIServer pid=1) INFO 11-27 17:58:31 [x.py:1] KeyError: looked up',
      ENGINE_PREFIX + '    raise ActorHandleNotFoundError(', 'ERROR 11-23 17:15:04 [core.py:708] EngineCore failed to start.'], 3, []),
    # the first ones, in log order, at most limit; {ts, line} items too
    ([{'ts': None, 'line': 'AError: 1'}, 'BError: 2', 'CException: 3'], 2, ['AError: 1', 'BError: 2']),
    ([], 3, []),
])
def test_first_exceptions(lines, limit, expected):
    assert first_exceptions(lines, limit=limit) == expected


def test_the_cause_of_a_rank_that_could_not_load_its_weights_comes_first():
    # vLLM 0.32 (the lab's CPU build) at TP=4, one node's copy of a shard with a broken header: the last lines show only
    # the engine's cleanup failing on the other ranks' actors; the first exceptions name the node and the file's fault.
    with open(FIXTURES / CORRUPT_SHARD_LOG, encoding='utf-8') as handle:
        log = handle.read().splitlines()
    first = first_exceptions(log)
    assert first[0].startswith('ray.exceptions.RayTaskError(SafetensorError): ray::RayWorkerProc.initialize_worker() (pid=596, '
                               'ip=192.168.100.13')
    assert first[-1] == ('safetensors._safetensors_rust.SafetensorError: Error while deserializing header: invalid JSON in '
                         'header: expected value at line 1 column 1')
    assert not any('SafetensorError' in line for line in error_lines(log))
    w = watch(Clock())
    assert w.observe(probe(log, status='exited', exit_code=1)) == 'failed'
    assert w.message.index('Its first exceptions:') < w.message.index('ip=192.168.100.13') < w.message.index('Its last error lines:')
    assert 'Error while deserializing header' in w.message and 'ActorHandleNotFoundError' in w.message


@pytest.mark.parametrize('limit', [0, -1, 'x', True])
def test_error_lines_rejects_limit(limit):
    with pytest.raises(VllmProgressError, match='limit'):
        error_lines(CRASH_LOG, limit=limit)


# ---------------------------------------------------------------------- docker inspect and HTTP

@pytest.mark.parametrize('name, expected', [
    ('docker_inspect_running.json', dict(exists=True, name='dgxspark-vllm', status='running', running=True, restarting=False, exit_code=None,
                                         restart_count=0, started_at='2026-11-23T17:14:36.512345678Z', finished_at=None, oom_killed=False,
                                         error=None)),
    ('docker_inspect_exited_oom.json', dict(exists=True, name='dgxspark-vllm', status='exited', running=False, exit_code=137,
                                            restart_count=0, finished_at='2026-11-23T17:31:09.917381230Z', oom_killed=True)),
    # Docker keeps Running true while it restarts a container.
    ('docker_inspect_restarting.json', dict(status='restarting', running=False, restarting=True, exit_code=1, restart_count=4)),
    ('docker_inspect_created_failed.json', dict(status='created', running=False, exit_code=127, started_at=None, finished_at=None,
                                                error='failed to create task for container: failed to create shim task: OCI runtime '
                                                      'create failed: runc create failed: unable to start container process: exec: '
                                                      '"vllm": executable file not found in $PATH: unknown')),
])
def test_container_state(name, expected):
    state = container_state((FIXTURES / name).read_text(encoding='utf-8'))
    for key, value in expected.items():
        assert state[key] == value, key


def test_paused_container_does_not_run():
    data = json.loads((FIXTURES / 'docker_inspect_running.json').read_text(encoding='utf-8'))
    data[0]['State'].update(Status='paused', Paused=True)
    state = container_state(data)
    assert (state['status'], state['running'], state['exit_code']) == ('paused', False, 0)


def test_container_state_empty_list_is_missing():
    assert container_state('[]') == missing_container()


@pytest.mark.parametrize('text, match', [('not json', 'JSON'), ('[{"Id": "x"}]', 'State'), ('[{"Name": "vol", "Driver": "local"}]', 'State')])
def test_container_state_rejects(text, match):
    with pytest.raises(VllmProgressError, match=match):
        container_state(text)


def test_model_ids_and_chat_answer():
    models = {'object': 'list', 'data': [{'id': 'qwen3', 'object': 'model', 'owned_by': 'vllm', 'root': 'Qwen/Qwen3-235B-A22B-FP8'},
                                         {'id': 'default', 'object': 'model'}]}
    assert model_ids(json.dumps(models)) == ['qwen3', 'default']
    answer = {'id': 'chatcmpl-1', 'object': 'chat.completion', 'model': 'qwen3',
              'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': 'I am Qwen3.', 'reasoning_content': None},
                           'finish_reason': 'stop'}],
              'usage': {'prompt_tokens': 17, 'total_tokens': 22, 'completion_tokens': 5, 'prompt_tokens_details': None}}
    assert chat_answer(json.dumps(answer)) == {'content': 'I am Qwen3.', 'finish_reason': 'stop', 'completion_tokens': 5}


def test_chat_answer_of_a_reasoning_model_that_only_thought():
    answer = {'choices': [{'message': {'role': 'assistant', 'content': None, 'reasoning_content': 'The user asks which model'},
                           'finish_reason': 'length'}]}
    assert chat_answer(answer) == {'content': 'The user asks which model', 'finish_reason': 'length', 'completion_tokens': None}


# The lab's model has random weights: its text is noise, and the count of what the engine generated is what the deploy prints.
@pytest.mark.parametrize('usage, tokens', [
    ({'prompt_tokens': 21, 'total_tokens': 53, 'completion_tokens': 32, 'prompt_tokens_details': None}, 32),
    ({'prompt_tokens': 21, 'total_tokens': 21, 'completion_tokens': 0}, 0),
    ({'prompt_tokens': 21}, None),
    (None, None),
    ({'completion_tokens': '32'}, None),
    ({'completion_tokens': True}, None),
])
def test_chat_answer_counts_the_generated_tokens_from_usage(usage, tokens):
    answer = {'choices': [{'message': {'role': 'assistant', 'content': 'easyarycl'}, 'finish_reason': 'length'}], 'usage': usage}
    assert chat_answer(answer)['completion_tokens'] == tokens


@pytest.mark.parametrize('function, body, match', [
    (model_ids, '{"detail": "Not Found"}', 'data'),
    (model_ids, '<html>502 Bad Gateway</html>', 'JSON'),
    (chat_answer, '{"error": {"message": "The model `x` does not exist.", "code": 404}}', 'choices'),
])
def test_api_answers_rejected(function, body, match):
    with pytest.raises(VllmProgressError, match=match):
        function(body)


@pytest.mark.parametrize('seconds, text', [(0, '0s'), (45.4, '45s'), (161, '2m41s'), (3780, '1h03m'), (273600, '3d04h')])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


# --------------------------------------------------------------------------------------- watch

def test_ready_after_loading_with_progress_history():
    clock = Clock()
    w = watch(clock)
    assert w.observe(probe([API_START.replace('Starting vLLM API server 0 on http://0.0.0.0:8000', 'vLLM API server version 0.33.0'),
                            BAR_0])) == 'waiting'
    clock.advance(41)
    assert w.observe(probe([BAR_54])) == 'waiting'
    clock.advance(30)
    assert w.observe(probe([BAR_94, API_START, UVICORN], health={'status': None, 'error': 'no answer: Connection refused'})) == 'waiting'
    clock.advance(5)
    assert w.observe(probe(['(APIServer pid=1) INFO:     127.0.0.1:40112 - "GET /health HTTP/1.1" 200 OK'], **ANSWERED)) == 'ready'
    assert w.message == ('vLLM on spark-alpha is ready after 1m16s: it serves qwen3 at http://127.0.0.1:8000 and answered a chat '
                         'request.')
    summary = w.summary()
    assert summary['progress_history'] == [{'t': 0.0, 'done': 0, 'total': 94}, {'t': 41.0, 'done': 54, 'total': 94},
                                           {'t': 71.0, 'done': 94, 'total': 94}]
    assert summary['chat']['content'] == 'I am Qwen3.'
    assert summary['models'] == ['qwen3']
    assert summary['elapsed_s'] == 76.0
    assert summary['last_lines'][-1].endswith('"GET /health HTTP/1.1" 200 OK')
    # Once decided, later probes change nothing.
    assert w.observe(probe(exists=False)) == 'ready'


@pytest.mark.parametrize('chat, result, state', [
    (False, HEALTHY, 'ready'),
    (True, HEALTHY, 'waiting'),
    (True, ANSWERED, 'ready'),
    (True, dict(HEALTHY, chat={'status': 200, 'content': '   ', 'error': None}), 'waiting'),
    (True, dict(HEALTHY, models=['Qwen/Qwen3-235B-A22B-FP8']), 'waiting'),
    (False, dict(HEALTHY, health={'status': 503, 'error': 'HTTP 503'}), 'waiting'),
])
def test_ready_conditions(chat, result, state):
    w = watch(Clock(), chat=chat)
    assert w.observe(probe([UVICORN], **result)) == state


@pytest.mark.parametrize('kwargs, phrases', [
    (dict(exists=False), ['dgxspark-vllm does not exist on spark-alpha', 'docker ps -a']),
    (dict(status='exited', exit_code=1, lines=CRASH_LOG),
     ['is not running (status exited)', 'exit code 1, restart count 0', 'ValueError: Unknown quantization method: nvfp4',
      'EngineCore failed to start.', 'Engine core initialization failed', 'docker logs dgxspark-vllm']),
    (dict(status='restarting', restarting=True, exit_code=1, restart_count=3, lines=CRASH_LOG),
     ['is restarting', 'crash loop', 'restart count 3', 'Unknown quantization method']),
    (dict(status='exited', exit_code=137, oom=True, lines=[BAR_54]),
     ['exit code 137', 'OOMKilled', 'lower gpu_memory_utilization', BAR_54]),
    (dict(status='exited', exit_code=2, lines=['vllm: error: unrecognized arguments: --tensor-parallel 4']),
     ['exit code 2', 'rejected its command line', 'unrecognized arguments']),
    (dict(status='created', exit_code=127, error='exec: "vllm": executable file not found in $PATH'),
     ['status created', 'exit code 127', 'Docker says: exec: "vllm": executable file not found', 'It printed no log line.']),
])
def test_container_failures_fail_at_once(kwargs, phrases):
    w = watch(Clock())
    assert w.observe(probe(**kwargs)) == 'failed'
    for phrase in phrases:
        assert phrase in w.message, phrase


def test_a_restart_while_waiting_fails_with_the_counts():
    clock = Clock()
    w = watch(clock)
    assert w.observe(probe([BAR_0], restart_count=2)) == 'waiting'
    clock.advance(20)
    restarted = CRASH_LOG[-3:] + [API_START.replace('Starting vLLM API server 0 on http://0.0.0.0:8000', 'vLLM API server version 0.33.0')]
    assert w.observe(probe(restarted, restart_count=3)) == 'failed'
    assert 'restart count 2 -> 3' in w.message
    assert 'exit code none, restart count 3' in w.message
    assert 'Engine core initialization failed' in w.message


def test_stall_fails_with_the_causes():
    clock = Clock()
    w = watch(clock, stall_timeout=900)
    line = '(EngineCore_DP0 pid=312) (RayWorkerWrapper pid=401) ' + BAR_54
    assert w.observe(probe([BAR_0, line])) == 'waiting'
    for _probe in range(17):
        clock.advance(50)
        assert w.observe(probe()) == 'waiting'
    clock.advance(50)
    assert w.observe(probe()) == 'failed'
    message = w.message
    for phrase in ['vLLM on spark-alpha (container dgxspark-vllm) has been still for 15m00s', 'stall_timeout 900 s',
                   '54/94 (57%)', BAR_54, 'same shard on every try', 'futex_wait', 'layer 57', "previous try's",
                   '`docker exec dgxspark-vllm py-spy dump --pid 401` on spark-alpha (the RayWorkerWrapper that printed it)',
                   'ray status', 'MemAvailable', 'dmesg',
                   'gpu_memory_utilization', '8 or more nodes', '--safetensors-load-strategy prefetch', '40988',
                   'raise vllm_container_stall_timeout (now 900 s)']:
        assert phrase in message, phrase


def test_new_lines_or_progress_keep_the_watch_alive():
    clock = Clock()
    w = watch(clock, stall_timeout=100)
    for index in range(10):
        clock.advance(60)
        assert w.observe(probe(['(EngineCore_DP0 pid=312) INFO 11-23 17:20:%02d [ray_utils.py:345] Waiting for placement group' % index])) == 'waiting'
    clock.advance(99)
    assert w.observe(probe()) == 'waiting'
    clock.advance(1)
    assert w.observe(probe()) == 'failed'
    assert 'no weight-loading progress line yet' in w.message
    assert 'Waiting for placement group' in w.message
    assert '`docker exec dgxspark-vllm py-spy dump --pid <PID>` on spark-alpha, with the pid of the EngineCore' in w.message


def test_stall_on_a_remote_ray_worker_names_its_node():
    clock = Clock()
    w = watch(clock, stall_timeout=60)
    w.observe(probe(['(EngineCore_DP0 pid=312) (RayWorkerWrapper pid=77, ip=192.168.100.12) ' + BAR_54]))
    clock.advance(60)
    assert w.observe(probe()) == 'failed'
    assert 'run `py-spy dump --pid 77` in the Ray container of the node with address 192.168.100.12' in w.message


def test_progress_alone_counts_as_activity():
    """A probe that carries a new progress value (without its lines) also resets the stall clock."""
    clock = Clock()
    w = watch(clock, stall_timeout=100)
    for done in range(1, 5):
        clock.advance(90)
        result = probe()
        result['progress'] = {'done': done, 'total': 94, 'percent': done, 'line': 'x'}
        assert w.observe(result) == 'waiting'
    assert [h['done'] for h in w.progress_history] == [1, 2, 3, 4]


def test_overall_timeout():
    clock = Clock()
    w = watch(clock, timeout=600, stall_timeout=900)
    refused = {'status': None, 'error': 'no answer from http://127.0.0.1:8000/health: [Errno 111] Connection refused'}
    for index in range(11):
        assert w.observe(probe(['(EngineCore_DP0 pid=312) INFO 11-23 17:20:%02d [backends.py:548] Compiling a graph' % index, BAR_94],
                               health=refused)) == 'waiting'
        clock.advance(55)
    assert w.observe(probe(['x'], health=refused)) == 'failed'
    for phrase in ['is not ready after 10m05s (timeout 600 s)', '/health does not answer (no answer from http://127.0.0.1:8000/health',
                   '94/94 (100%)', 'Compiling a graph', 'raise the timeout of dgxspark.cluster.vllm_ready']:
        assert phrase in w.message, phrase


@pytest.mark.parametrize('result, phrase', [
    (dict(HEALTHY, models=None, models_status=401), 'refuses the API key on /v1/models (HTTP 401)'),
    (dict(HEALTHY, models=['Qwen/Qwen3-235B-A22B-FP8']), 'serves Qwen/Qwen3-235B-A22B-FP8, not qwen3'),
    (dict(HEALTHY, chat={'status': 500, 'content': None, 'error': 'HTTP 500: {"error": "EngineDeadError"}'}),
     'a chat completion answered HTTP 500 %d times in a row (HTTP 500: {"error": "EngineDeadError"})' % CONFIRMATIONS),
    (dict(HEALTHY, chat={'status': None, 'content': None, 'error': 'no answer within 30.0 s'}), 'got no answer'),
])
def test_server_up_but_refusing_fails_after_confirmations(result, phrase):
    clock = Clock()
    w = watch(clock)
    for _probe in range(CONFIRMATIONS - 1):
        assert w.observe(probe([UVICORN], **result)) == 'waiting'
        clock.advance(5)
    assert w.observe(probe([UVICORN], **result)) == 'failed'
    assert phrase in w.message


def test_refusals_must_be_in_a_row():
    w = watch(Clock())
    refused = dict(HEALTHY, chat={'status': 503, 'content': None, 'error': 'HTTP 503'})
    for result in (refused, refused, dict(health={'status': 503, 'error': 'HTTP 503'}), refused, refused, ANSWERED):
        state = w.observe(probe([UVICORN], **result))
    assert state == 'ready'


def test_report_due_and_text():
    clock = Clock()
    w = watch(clock, progress_interval=30)
    assert w.report_due()
    assert w.report() == 'spark-alpha dgxspark-vllm: waiting for vLLM: 0s elapsed, no log line yet'
    assert not w.report_due()
    w.observe(probe([BAR_0]))
    assert w.report_due()  # the progress changed (none -> 0/94)
    w.report()
    clock.advance(10)
    w.observe(probe())
    assert not w.report_due()
    clock.advance(20)
    assert w.report_due()  # progress_interval
    assert w.report() == 'spark-alpha dgxspark-vllm: waiting for vLLM: weights 0/94 (0%), 30s elapsed, last new log line 30s ago'
    clock.advance(5)
    w.observe(probe([BAR_54]))
    assert w.report_due()
    assert w.report(mark=False).startswith('spark-alpha dgxspark-vllm: waiting for vLLM: weights 54/94 (57%), 35s elapsed')
    assert w.report_due()  # not marked
    w.report()
    clock.advance(5)
    w.observe(probe([BAR_94, API_START, UVICORN], **HEALTHY))
    assert w.report() == ('spark-alpha dgxspark-vllm: waiting for vLLM: weights 94/94 (100%), /health 200, the chat request is not '
                          'answered (no content), 40s elapsed, last new log line 0s ago, last line: ' + UVICORN)
    w.observe(probe(exists=False))
    assert not w.report_due()


@pytest.mark.parametrize('kwargs, match', [
    (dict(timeout=0), 'timeout'),
    (dict(stall_timeout=-1), 'stall_timeout'),
    (dict(progress_interval='x'), 'progress_interval'),
    (dict(timeout=True), 'timeout'),
])
def test_watch_rejects_settings(kwargs, match):
    with pytest.raises(VllmProgressError, match=match):
        watch(Clock(), **kwargs)


def test_watch_needs_a_model_name_and_probe():
    with pytest.raises(VllmProgressError, match='served_model_name'):
        ReadinessWatch('spark-alpha', 'dgxspark-vllm', '')
    with pytest.raises(VllmProgressError, match='serving_probe'):
        watch(Clock()).observe({'logs': []})


def test_argument_spec_hides_the_key_file():
    spec = vllm_ready_argument_spec()
    assert spec['api_key_file']['no_log'] is True
    assert spec['served_model_name']['required'] is True
    assert (spec['timeout']['default'], spec['stall_timeout']['default'], spec['poll_interval']['default'],
            spec['progress_interval']['default'], spec['chat']['default']) == (3600, 900, 5.0, 30.0, True)


PLACEMENT_WAIT = ("(EngineCore_DP0 pid=312) INFO 12-04 18:44:30 [ray_utils.py:466] Waiting for creating a placement group of specs "
                  "for 40 seconds. specs=[{'GPU': 1.0, 'node:10.0.0.10': 0.001}, {'GPU': 1.0}]. Check `ray status` and `ray "
                  "list nodes` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the "
                  "same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.")


def test_a_placement_group_that_waits_is_named_with_its_strategy_and_pin():
    """eugr #227: bundle 0 pinned to an address no Ray node has (the management interface's) waits for ever."""
    clock = Clock()
    w = watch(clock, timeout=600, stall_timeout=900)
    refused = {'status': None, 'error': 'no answer from http://127.0.0.1:8000/health: [Errno 111] Connection refused'}
    w.observe(probe([PLACEMENT_WAIT], health=refused))
    assert 'Ray placement group pending 40 s (PACK, 2 bundles of 1 GPU, bundle 0 on node:10.0.0.10)' in w.report()
    clock.advance(601)
    assert w.observe(probe([], health=refused)) == 'failed'
    assert 'vLLM has waited 40 s for its Ray placement group (strategy PACK, 2 bundles of 1 GPU): bundle 0 is pinned to ' \
           'the resource node:10.0.0.10' in w.message


def test_a_placed_group_is_not_named_once_later_lines_or_weights_follow():
    clock = Clock()
    w = watch(clock, timeout=600, stall_timeout=900)
    w.observe(probe([PLACEMENT_WAIT] + ['(EngineCore_DP0 pid=312) INFO worker %d ready' % n for n in range(6)]))
    assert 'placement' not in w.report()
    w = watch(Clock())
    w.observe(probe([PLACEMENT_WAIT, BAR_0]))
    assert 'placement' not in w.report()
