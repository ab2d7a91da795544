# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving_probe module run the way Ansible runs it, against a stand-in `docker` CLI and a local HTTP server shaped like
vLLM's API; and the vllm_ready action plugin's loop with a scripted probe."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import pytest

from ansible_collections.dgxspark.cluster.plugins.action import vllm_ready as vllm_ready_action
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_progress import missing_container

REPO = pathlib.Path(__file__).resolve().parents[2]
COLLECTIONS_PATH = str(REPO / '.build' / 'collections')
FIXTURES = pathlib.Path(__file__).parent / 'fixtures' / 'vllm_progress'
KEY = 'sk-dgxspark-7f3a9c1e5b'

TS = ['2026-11-23T17:14:40.120000000Z', '2026-11-23T17:15:22.300000000Z', '2026-11-23T17:16:13.010000000Z']
# stdout: the API server (a TTY: CRLF), stderr: the engine with a tqdm bar rewritten with \r.
STDOUT = (
    "%s (APIServer pid=1) INFO 11-23 17:14:40 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen3-235B-A22B-FP8', "
    "'api_key': ['%s'], 'served_model_name': ['qwen3']}\r\n"
    "%s (APIServer pid=1) INFO 11-23 17:20:01 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000\r\n" % (TS[0], KEY, TS[2]))
STDERR = ("%s (EngineCore_DP0 pid=312) \rLoading safetensors checkpoint shards:   0%% Completed | 0/94 [00:00<?, ?it/s]"
          "\rLoading safetensors checkpoint shards:  57%% Completed | 54/94 [00:41<00:30,  1.32it/s]\r\n" % TS[1])

FAKE_DOCKER = r'''#!%(python)s
import json, sys
argv = sys.argv[1:]
with open(%(calls)r, 'a') as handle:
    handle.write(json.dumps(argv) + '\n')
containers = json.load(open(%(containers)r))
name = argv[-1]
if %(denied)r:
    sys.stderr.write('permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock\n')
    sys.exit(1)
if name not in containers:
    sys.stderr.write('Error: No such object: %%s\n' %% name)
    sys.exit(1)
if argv[0] == 'inspect':
    print(containers[name])
elif argv[0] == 'logs' and '--since' in argv and name == 'dgxspark-crashed':
    # Its last run, as `docker logs --timestamps` prints it: every record after the container's start.
    sys.stdout.write(''.join('2026-11-23T17:20:13.000000000Z %%s\n' %% line for line in open(%(crash_log)r).read().splitlines()))
elif argv[0] == 'logs':
    sys.stdout.write(%(stdout)r)
    sys.stderr.write(%(stderr)r)
'''


@pytest.fixture(name='docker')
def fake_docker(tmp_path):
    def make(denied=False):
        containers = {'dgxspark-vllm': (FIXTURES / 'docker_inspect_running.json').read_text(encoding='utf-8'),
                      'dgxspark-crashed': (FIXTURES / 'docker_inspect_restarting.json').read_text(encoding='utf-8')}
        (tmp_path / 'containers.json').write_text(json.dumps(containers))
        path = tmp_path / 'docker'
        path.write_text(FAKE_DOCKER % {'python': sys.executable, 'calls': str(tmp_path / 'calls.jsonl'),
                                       'containers': str(tmp_path / 'containers.json'), 'denied': denied, 'stdout': STDOUT, 'stderr': STDERR,
                                       'crash_log': str(FIXTURES / 'vllm_0.32_cpu_corrupt_shard_on_one_rank.log')})
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return str(path)
    return make


def calls(tmp_path):
    return [json.loads(line) for line in (tmp_path / 'calls.jsonl').read_text().splitlines()]


class VllmApi(BaseHTTPRequestHandler):
    """/health, /v1/models and /v1/chat/completions the way vLLM answers them, with an API key."""

    health = 200
    requests = []

    def log_message(self, format, *args):  # noqa: A002  pylint: disable=redefined-builtin
        pass

    def _send(self, code, body=None):
        data = json.dumps(body).encode() if body is not None else b''
        self.send_response(code)
        self.send_header('content-type', 'application/json')
        self.send_header('content-length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, body):
        """vLLM's SSE stream of a /v1/completions request: a chunk per token, 5 ms apart, then usage and [DONE]."""
        self.send_response(200)
        self.send_header('content-type', 'text/event-stream')
        self.end_headers()
        for i in range(body['max_tokens']):
            time.sleep(0.005)
            chunk = {'id': 'cmpl-1', 'object': 'text_completion', 'model': 'qwen3',
                     'choices': [{'index': 0, 'text': ' tok%d' % i, 'logprobs': None, 'finish_reason': None}]}
            self.wfile.write(b'data: ' + json.dumps(chunk).encode() + b'\n\n')
            self.wfile.flush()
        usage = {'id': 'cmpl-1', 'object': 'text_completion', 'model': 'qwen3', 'choices': [],
                 'usage': {'prompt_tokens': 16, 'completion_tokens': body['max_tokens'], 'total_tokens': 16 + body['max_tokens']}}
        self.wfile.write(b'data: ' + json.dumps(usage).encode() + b'\n\ndata: [DONE]\n\n')
        self.close_connection = True

    def _authorized(self):
        VllmApi.requests.append((self.command, self.path, self.headers.get('authorization')))
        if self.path.startswith('/v1') and self.headers.get('authorization') != 'Bearer %s' % KEY:
            self._send(401, {'error': 'Unauthorized'})
            return False
        return True

    def do_GET(self):  # pylint: disable=invalid-name
        if not self._authorized():
            return
        if self.path == '/health':
            self._send(VllmApi.health)
        elif self.path == '/v1/models':
            self._send(200, {'object': 'list', 'data': [{'id': 'qwen3', 'object': 'model', 'owned_by': 'vllm'}]})
        else:
            self._send(404, {'detail': 'Not Found'})

    def do_POST(self):  # pylint: disable=invalid-name
        body = json.loads(self.rfile.read(int(self.headers.get('content-length') or 0)))
        if not self._authorized():
            return
        if body.get('model') != 'qwen3':
            self._send(404, {'error': {'message': 'The model `%s` does not exist.' % body.get('model'), 'code': 404}})
            return
        if self.path == '/v1/completions' and body.get('stream'):
            self._stream(body)
            return
        self._send(200, {'object': 'chat.completion', 'model': 'qwen3', 'choices': [
            {'index': 0, 'message': {'role': 'assistant', 'content': 'I am Qwen3 (max_tokens %d).' % body['max_tokens']},
             'finish_reason': 'stop'}], 'usage': {'prompt_tokens': 20, 'total_tokens': 29, 'completion_tokens': 9}})


@pytest.fixture(name='api')
def vllm_api():
    VllmApi.health = 200
    VllmApi.requests = []
    server = ThreadingHTTPServer(('127.0.0.1', 0), VllmApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d' % server.server_address[1]
    server.shutdown()
    server.server_close()


def run_module(tmp_path, args):
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS_PATH + os.pathsep + os.environ.get('PYTHONPATH', ''))
    for proxy in ('http_proxy', 'HTTP_PROXY'):
        env[proxy] = 'http://192.0.2.1:3128'  # must be ignored
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.dgxspark.cluster.plugins.modules.serving_probe', str(args_file)],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120, check=False)
    result = None
    for line in proc.stdout.splitlines():
        if line.strip().startswith('{'):
            result = json.loads(line)
    assert result is not None, 'no JSON result; stdout=%r stderr=%r' % (proc.stdout, proc.stderr)
    return proc.returncode, result, proc.stdout


def key_file(tmp_path):
    path = tmp_path / 'vllm_api_key'
    path.write_text(KEY + '\n')
    return str(path)


def test_full_probe(tmp_path, docker, api):
    rc, result, stdout = run_module(tmp_path, {
        'container': 'dgxspark-vllm', 'docker_path': docker(), 'url': api, 'api_key_file': key_file(tmp_path),
        'served_model_name': 'qwen3', 'chat': True, 'chat_max_tokens': 8, 'check_unauthorized': True, '_ansible_check_mode': True})
    assert rc == 0, result
    assert KEY not in stdout
    assert result['changed'] is False
    assert result['container']['running'] is True and result['container']['name'] == 'dgxspark-vllm'
    # stdout and stderr merged in time order, the tqdm rewrites split, the CRLF ends gone.
    assert [(i['ts'], i['line'][:40]) for i in result['logs']] == [
        (TS[0], "(APIServer pid=1) INFO 11-23 17:14:40 [u"),
        (TS[1], '(EngineCore_DP0 pid=312)'),
        (TS[1], 'Loading safetensors checkpoint shards:  '),
        (TS[1], 'Loading safetensors checkpoint shards:  '),
        (TS[2], '(APIServer pid=1) INFO 11-23 17:20:01 [a'),
    ]
    assert result['logs'][3]['line'] == 'Loading safetensors checkpoint shards:  57% Completed | 54/94 [00:41<00:30,  1.32it/s]'
    assert "'api_key': ['********']" in result['logs'][0]['line']
    assert result['last_timestamp'] == TS[2]
    assert (result['progress']['done'], result['progress']['total']) == (54, 94)
    assert result['health'] == {'status': 200, 'error': None}
    assert (result['models'], result['models_status'], result['unauthorized_status']) == (['qwen3'], 200, 401)
    assert result['chat'] == {'status': 200, 'content': 'I am Qwen3 (max_tokens 8).', 'finish_reason': 'stop', 'completion_tokens': 9,
                              'error': None}
    assert result['url'] == api and result['served_model_name'] == 'qwen3'
    assert calls(tmp_path) == [['inspect', '--type', 'container', 'dgxspark-vllm'], ['logs', '--timestamps', '--tail', '40', 'dgxspark-vllm']]
    assert ('GET', '/v1/models', 'Bearer %s' % KEY) in VllmApi.requests and ('GET', '/v1/models', None) in VllmApi.requests


def test_speed_tokens_time_one_stream_after_the_chat(tmp_path, docker, api):
    rc, result, stdout = run_module(tmp_path, {
        'container': 'dgxspark-vllm', 'docker_path': docker(), 'url': api, 'api_key_file': key_file(tmp_path),
        'served_model_name': 'qwen3', 'chat': True, 'speed_tokens': 20})
    assert rc == 0, result
    assert KEY not in stdout
    speed = result['speed']
    assert speed['output_tokens'] == 20 and speed['error'] is None
    # 19 gaps of at least 5 ms: at most ~200 tok/s, and far more than a stalled stream
    assert 20 < speed['tokens_per_s'] <= 200 and speed['ttft_s'] >= 0
    assert ('POST', '/v1/completions', 'Bearer %s' % KEY) in VllmApi.requests


def test_no_speed_unless_asked_or_without_a_chat_answer(tmp_path, docker, api):
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(), 'url': api,
                                                'api_key_file': key_file(tmp_path), 'served_model_name': 'qwen3', 'chat': True})
    assert rc == 0 and result['speed'] is None
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(), 'url': api,
                                                'api_key_file': key_file(tmp_path), 'served_model_name': 'other', 'chat': True,
                                                'speed_tokens': 8})
    assert rc == 0 and result['chat']['status'] == 404 and result['speed'] is None
    assert ('POST', '/v1/completions', 'Bearer %s' % KEY) not in VllmApi.requests


def test_log_since_returns_only_newer_records(tmp_path, docker):
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(), 'log_since': TS[1]})
    assert rc == 0, result
    assert [i['ts'] for i in result['logs']] == [TS[2]]
    assert result['progress'] is None and result['last_timestamp'] == TS[2]
    assert result['health'] is None and result['chat'] is None
    assert calls(tmp_path)[1] == ['logs', '--timestamps', '--since', TS[1], 'dgxspark-vllm']


def test_missing_container_is_data(tmp_path, docker):
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-gone', 'docker_path': docker()})
    assert rc == 0, result
    assert result['container'] == missing_container()
    assert result['logs'] == [] and len(calls(tmp_path)) == 1


def test_restarting_container(tmp_path, docker):
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-crashed', 'docker_path': docker()})
    assert rc == 0, result
    assert (result['container']['status'], result['container']['running'], result['container']['exit_code'],
            result['container']['restart_count']) == ('restarting', False, 1, 4)
    # Its last run's whole log (since it started), for the cause above the shutdown that ends it.
    assert calls(tmp_path)[-1] == ['logs', '--timestamps', '--since', '2026-11-23T17:20:12.004417220Z', '--tail', '20000', 'dgxspark-crashed']
    assert result['first_exceptions'][0].startswith('ray.exceptions.RayTaskError(SafetensorError)')
    assert len(result['first_exceptions']) == 3


def test_a_running_container_reads_no_more_than_its_tail(tmp_path, docker):
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker()})
    assert rc == 0 and result['first_exceptions'] == [], result
    assert [c[0] for c in calls(tmp_path)] == ['inspect', 'logs'] and '--since' not in calls(tmp_path)[1]


@pytest.mark.parametrize('health, models, chat', [(503, ['qwen3'], None), (200, ['qwen3'], 200)])
def test_http_status_is_data(tmp_path, docker, api, health, models, chat):
    VllmApi.health = health
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(), 'url': api,
                                                'api_key_file': key_file(tmp_path), 'chat': True})
    assert rc == 0, result
    assert result['health']['status'] == health
    assert result['models'] == models
    assert (result['chat'] or {}).get('status') == chat


def test_wrong_key_and_unknown_model(tmp_path, docker, api):
    wrong = tmp_path / 'wrong'
    wrong.write_text('sk-wrong-key')
    rc, result, stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(), 'url': api,
                                               'api_key_file': str(wrong), 'chat': True, 'served_model_name': 'qwen3'})
    assert rc == 0, result
    assert 'sk-wrong-key' not in stdout
    assert (result['models'], result['models_status']) == (None, 401)
    assert result['models_error'] == 'HTTP 401: {"error": "Unauthorized"}'
    assert result['chat']['status'] == 401


def test_no_answer_is_data(tmp_path, docker):
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(), 'url': 'http://127.0.0.1:9',
                                                'chat': True, 'http_timeout': 2})
    assert rc == 0, result
    assert result['health']['status'] is None
    assert 'no answer from http://127.0.0.1:9/health' in result['health']['error']
    assert result['models'] is None and result['chat'] is None


@pytest.mark.parametrize('args, match', [
    ({'log_since': 'yesterday'}, 'log_since'),
    ({'log_tail': -1}, 'log_tail'),
    ({'url': '127.0.0.1:8000'}, 'url must start with http'),
    ({'chat_max_tokens': 0}, 'chat_max_tokens'),
    ({'http_timeout': 0}, 'http_timeout'),
    ({'speed_tokens': -1}, 'speed_tokens must be 0'),
    ({'api_key_file': '/nonexistent/vllm_api_key'}, 'cannot be read'),
])
def test_bad_options_fail(tmp_path, docker, args, match):
    rc, result, _stdout = run_module(tmp_path, dict({'container': 'dgxspark-vllm', 'docker_path': docker()}, **args))
    assert rc != 0
    assert match in result['msg']


def test_empty_key_file_fails(tmp_path, docker):
    empty = tmp_path / 'empty'
    empty.write_text('\n')
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(), 'api_key_file': str(empty)})
    assert rc != 0 and 'is empty' in result['msg']


def test_docker_that_cannot_run_fails(tmp_path, docker):
    rc, result, _stdout = run_module(tmp_path, {'container': 'dgxspark-vllm', 'docker_path': docker(denied=True)})
    assert rc != 0
    assert 'permission denied' in result['msg'] and 'docker group' in result['msg']


# ------------------------------------------------------------------------------------- the action

class FakeTime:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def probe_result(lines=(), **changes):
    container = {'exists': True, 'name': 'dgxspark-vllm', 'status': 'running', 'running': True, 'restarting': False, 'exit_code': None,
                 'restart_count': 0, 'started_at': TS[0], 'finished_at': None, 'oom_killed': False, 'error': None, 'image_id': 'sha256:4f'}
    result = {'changed': False, 'container': container, 'logs': [{'ts': TS[1], 'line': line} for line in lines],
              'last_timestamp': TS[1] if lines else None, 'progress': None, 'health': {'status': None, 'error': 'no answer'},
              'models': None, 'models_status': None, 'unauthorized_status': None, 'chat': None,
              'invocation': {'module_args': {'api_key_file': 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'}}}
    result.update(changes)
    return result


READY = dict(health={'status': 200, 'error': None}, models=['qwen3'], models_status=200,
             chat={'status': 200, 'content': 'I am Qwen3.', 'finish_reason': 'stop', 'completion_tokens': 4, 'error': None})
BAR = 'Loading safetensors checkpoint shards: %3d%% Completed | %d/94 [00:10<00:20,  1.32it/s]'


def run_action(monkeypatch, probes, check_mode=False, **args):
    fake_time = FakeTime()
    shown = []
    monkeypatch.setattr(vllm_ready_action, 'time', fake_time)
    monkeypatch.setattr(vllm_ready_action, 'display', mock.Mock(display=shown.append))
    task = mock.MagicMock()
    task.args = dict({'container': 'dgxspark-vllm', 'served_model_name': 'qwen3', 'api_key_file': '/etc/dgxspark/secrets/vllm_api_key'}, **args)
    task.async_val = 0
    task.check_mode = check_mode
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = vllm_ready_action.ActionModule(task, connection, mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    sent = []
    queue = list(probes)

    def execute(module_name, module_args, task_vars):
        assert module_name == 'dgxspark.cluster.serving_probe'
        sent.append(dict(module_args))
        return queue.pop(0) if len(queue) > 1 else queue[0]

    action._execute_module = execute
    result = action.run(task_vars={'inventory_hostname': 'spark-alpha'})
    return result, sent, shown, fake_time


def test_action_waits_reports_and_returns_ready(monkeypatch):
    probes = [probe_result([BAR % (0, 0)])] + [probe_result([BAR % (i * 100 // 94, i)]) for i in (10, 10, 10, 10, 10, 10, 10, 10, 50)]
    probes += [probe_result(['(APIServer pid=1) INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)'], **READY)]
    result, sent, shown, _time = run_action(monkeypatch, probes)
    assert result.get('failed') is not True, result
    assert result['ready'] is True and result['changed'] is False and result['state'] == 'ready'
    assert result['msg'] == ('vLLM on spark-alpha is ready after 50s: it serves qwen3 at http://127.0.0.1:8000 and answered a chat '
                             'request.')
    assert result['chat_answer'] == 'I am Qwen3.' and result['chat_tokens'] == 4
    assert result['models'] == ['qwen3']
    assert [(h['done'], h['total']) for h in result['progress_history']] == [(0, 94), (10, 94), (50, 94)]
    assert result['url'] == 'http://127.0.0.1:8000' and result['served_model_name'] == 'qwen3'
    # The first probe reads the tail, the next ones only what came after the last timestamp.
    assert sent[0]['log_tail'] == 200 and 'log_since' not in sent[0]
    assert sent[1]['log_since'] == TS[1]
    assert sent[0]['api_key_file'] == '/etc/dgxspark/secrets/vllm_api_key' and sent[0]['chat'] is True
    # Reports: the first, every progress change, and at least every 30 s (5 s polls: 0 s, 5 s, 35 s, 45 s).
    assert [line.split(': waiting for vLLM: ')[1].split(',')[0] for line in shown] == [
        'weights 0/94 (0%)', 'weights 10/94 (10%)', 'weights 10/94 (10%)', 'weights 50/94 (53%)']
    assert all(line.startswith('spark-alpha dgxspark-vllm: ') for line in shown)
    assert 'vllm_api_key' not in json.dumps(result) and 'VALUE_SPECIFIED' not in json.dumps(result)


def test_action_fails_with_the_watch_message(monkeypatch):
    crashed = probe_result(['(EngineCore_DP0 pid=312) ERROR 11-23 17:15:04 [core.py:708] EngineCore failed to start.'])
    crashed['container'].update(status='exited', running=False, exit_code=1)
    result, sent, _shown, _time = run_action(monkeypatch, [probe_result([BAR % (0, 0)]), crashed])
    assert result['failed'] is True and result['ready'] is False and result['state'] == 'failed'
    assert 'The vLLM container dgxspark-vllm on spark-alpha is not running (status exited): exit code 1' in result['msg']
    assert 'EngineCore failed to start.' in result['msg']
    assert len(sent) == 2


def test_action_stall(monkeypatch):
    result, sent, shown, fake_time = run_action(monkeypatch, [probe_result([BAR % (57, 54)]), probe_result()], stall_timeout=60,
                                                poll_interval=10, progress_interval=20, node='alpha')
    assert result['failed'] is True
    assert 'vLLM on alpha (container dgxspark-vllm) has been still for 1m00s' in result['msg']
    assert fake_time.now == 60 and len(sent) == 7
    # Reports at 0 s (the first), 20 s and 40 s (progress_interval); at 60 s the watch fails instead.
    assert [line.split(', ')[1] for line in shown] == ['0s elapsed', '20s elapsed', '40s elapsed']


def test_action_probe_failure(monkeypatch):
    result, _sent, _shown, _time = run_action(monkeypatch, [{'failed': True, 'msg': 'permission denied while trying to connect'}])
    assert result['failed'] is True
    assert result['msg'] == 'the probe of container dgxspark-vllm on spark-alpha failed: permission denied while trying to connect'


@pytest.mark.parametrize('probe, skipped, phrase', [
    (probe_result(container=missing_container()), True, 'check mode: container dgxspark-vllm does not exist on spark-alpha'),
    (probe_result([BAR % (57, 54)]), False, 'check mode (one probe, no wait): spark-alpha dgxspark-vllm: waiting for vLLM: weights 54/94'),
    (probe_result([], **READY), False, 'check mode (one probe, no wait): vLLM on spark-alpha is ready'),
])
def test_action_check_mode_probes_once(monkeypatch, probe, skipped, phrase):
    result, sent, shown, _time = run_action(monkeypatch, [probe], check_mode=True)
    assert len(sent) == 1 and shown == []
    assert result.get('failed') is not True
    assert bool(result.get('skipped')) is skipped
    assert result['msg'].startswith(phrase)


@pytest.mark.parametrize('speed, failed, phrase', [
    ({'output_tokens': 64, 'tokens_per_s': 21.4, 'ttft_s': 0.31, 'error': None}, False,
     'vLLM (dgxspark-vllm on spark-alpha) decodes 21.4 tok/s in one stream of 64 tokens (first token after 0.31 s) (min_tokens_per_s 20).'),
    ({'output_tokens': 64, 'tokens_per_s': 12.0, 'ttft_s': 0.4, 'error': None}, True,
     'vLLM (dgxspark-vllm on spark-alpha) answers, but decodes 12.0 tok/s in one stream of 64 tokens (first token after 0.40 s): '
     'below min_tokens_per_s 20.'),
    ({'output_tokens': 0, 'tokens_per_s': None, 'ttft_s': None, 'error': 'HTTP 500'}, True,
     'answers, but the speed check of min_tokens_per_s 20 got no timed stream: HTTP 500'),
    (None, True, 'got no timed stream: too few tokens to time (0)'),
])
def test_action_speed_gate(monkeypatch, speed, failed, phrase):
    probes = [probe_result([], **READY), probe_result([], speed=speed, **READY)]
    result, sent, _shown, _time = run_action(monkeypatch, probes, min_tokens_per_s=20)
    assert bool(result.get('failed')) is failed and result['ready'] is (not failed)
    assert phrase in result['msg'] and result['msg'].startswith('vLLM on spark-alpha is ready')
    assert result['tokens_per_s'] == (speed or {}).get('tokens_per_s')
    # Ready first (no stream timed while it loads), then one probe that times a stream of 64 tokens after the chat.
    assert [p.get('speed_tokens') for p in sent] == [None, 64] and sent[1]['chat'] is True


def test_action_speed_gate_off_by_default_and_in_check_mode(monkeypatch):
    result, sent, _shown, _time = run_action(monkeypatch, [probe_result([], **READY)])
    assert len(sent) == 1 and result['tokens_per_s'] is None and not result.get('failed')
    result, sent, _shown, _time = run_action(monkeypatch, [probe_result([], **READY)], check_mode=True, min_tokens_per_s=20)
    assert len(sent) == 1 and not result.get('failed')


@pytest.mark.parametrize('args, match', [
    ({'poll_interval': 0}, 'poll_interval must be a positive'),
    ({'timeout': -5}, 'timeout must be a positive'),
    ({'min_tokens_per_s': -1}, 'min_tokens_per_s must be 0'),
    ({'min_tokens_per_s': 20, 'speed_tokens': 1}, 'speed_tokens at least 2'),
    ({'rendezvous': {'address': '192.168.100.10', 'port': 29501, 'peers': {}}}, 'rendezvous peers must map'),
    ({'rendezvous': {'address': '192.168.100.10', 'port': 29501, 'peers': {'spark-beta': '192.168.100.11'}}, 'join_timeout': 0},
     'join_timeout must be a positive'),
])
def test_action_rejects_settings(monkeypatch, args, match):
    result, sent, _shown, _time = run_action(monkeypatch, [probe_result()], **args)
    assert result['failed'] is True and match in result['msg'] and sent == []


RENDEZVOUS = {'address': '192.168.100.10', 'port': 29501, 'peers': {'spark-beta': '192.168.100.11', 'spark-delta': '192.168.100.13'}}


def joined(*peers, listening=True):
    return {'port': 29501, 'listening': listening, 'peers': list(peers), 'error': None}


def test_action_with_mp_names_the_rank_that_never_joined_after_join_timeout(monkeypatch):
    # Rank 0 loads (a new line at every probe, so no stall), spark-delta's rank never connects.
    probes = [probe_result(['(EngineCore_DP0 pid=312) INFO starting'], rendezvous=joined(listening=False))]
    probes += [probe_result(['(EngineCore_DP0 pid=312) INFO still here %d' % i], rendezvous=joined('192.168.100.11')) for i in range(40)]
    result, sent, _shown, fake_time = run_action(monkeypatch, probes, join_timeout=60, stall_timeout=600, rendezvous=RENDEZVOUS)
    assert result['failed'] is True and result['state'] == 'failed'
    assert result['msg'].startswith('vLLM on spark-alpha (container dgxspark-vllm) waits for a rank that does not come. Rank 0\'s '
                                    'rendezvous 192.168.100.10:29501 has been open for 60 s (vllm_container_join_timeout 60 s), and '
                                    'the rank of spark-delta (192.168.100.13) has not joined it'), result['msg']
    assert result['rendezvous'] == {'address': '192.168.100.10', 'port': 29501, 'opened': True, 'joined': ['spark-beta'],
                                    'missing': ['spark-delta']}
    # Opened at the second probe (5 s), failed 60 s later; every probe asked for the rendezvous' sockets.
    assert fake_time.now == 65 and all(args['rendezvous_port'] == 29501 for args in sent)


def test_action_with_mp_is_ready_once_every_rank_joined(monkeypatch):
    probes = [probe_result([BAR % (0, 0)], rendezvous=joined('192.168.100.11'))] * 20
    probes += [probe_result([BAR % (100, 94)], rendezvous=joined('192.168.100.11', '192.168.100.13'), **READY)]
    result, _sent, _shown, _time = run_action(monkeypatch, probes, join_timeout=300, rendezvous=RENDEZVOUS)
    assert result['state'] == 'ready' and result['rendezvous']['missing'] == [] and result['rendezvous']['opened'] is True


def test_action_without_a_rendezvous_reads_no_sockets(monkeypatch):
    result, sent, _shown, _time = run_action(monkeypatch, [probe_result([BAR % (100, 94)], **READY)])
    assert result['state'] == 'ready' and result['rendezvous'] is None and 'rendezvous_port' not in sent[0]
