"""The API guard vllm_container gives `vllm serve` (--middleware dgxspark_api_guard.KeyOnEveryRoute), driven the way an
ASGI server drives it: every path but the open ones needs the bearer key; vLLM's own check covers /v1 only."""
import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location(
    'dgxspark_api_guard', os.path.join(HERE, '..', '..', 'roles', 'vllm_container', 'files', 'dgxspark_api_guard.py'))
guard = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(guard)

KEY = 'k3y-of-the-lab'
FILES = os.path.join(HERE, '..', '..', 'roles', 'vllm_container', 'files')


@pytest.fixture(autouse=True)
def nothing_taken_yet(monkeypatch):
    """Each test starts as a fresh vLLM process: no key taken from a descriptor before it."""
    monkeypatch.setattr(guard, '_TAKEN', {})


def call(path, method='GET', authorization=None, kind='http', root_path='', **guard_options):
    """Run one request through the guard (in front of an app that answers 200); return (status or close code, the
    paths the app behind saw)."""
    seen, sent = [], []

    async def app(scope, receive, send):
        seen.append(scope['path'])
        await send({'type': 'http.response.start', 'status': 200, 'headers': []})

    async def send(message):
        sent.append(message)

    async def receive():
        return {'type': 'http.request'}

    headers = [(b'content-type', b'application/json')]
    if authorization is not None:
        headers.append((b'authorization', authorization.encode('latin-1')))
    scope = {'type': kind, 'path': path, 'root_path': root_path, 'headers': headers}
    if kind == 'http':
        scope['method'] = method
    guard_options.setdefault('api_key', KEY)
    asyncio.run(guard.KeyOnEveryRoute(app, **guard_options)(scope, receive, send))
    first = sent[0]
    return (first.get('status') or first.get('code')), seen


@pytest.mark.parametrize('path, method, authorization, expected', [
    # the routes vLLM 0.32 left open with VLLM_API_KEY set (measured on the real engine)
    ('/invocations', 'POST', None, 401),
    ('/tokenize', 'POST', None, 401),
    ('/detokenize', 'POST', None, 401),
    ('/metrics', 'GET', None, 401),
    ('/version', 'GET', None, 401),
    ('/pooling', 'POST', None, 401),
    # the ones vLLM guards itself
    ('/v1/chat/completions', 'POST', None, 401),
    ('/v1/models', 'GET', 'Bearer wrong', 401),
    # the key, any case of the scheme
    ('/invocations', 'POST', 'Bearer ' + KEY, 200),
    ('/metrics', 'GET', 'bearer ' + KEY, 200),
    ('/v1/models', 'GET', 'Bearer ' + KEY, 200),
    # not a bearer token, or the key as another scheme
    ('/metrics', 'GET', 'Basic ' + KEY, 401),
    ('/metrics', 'GET', KEY, 401),
    ('/metrics', 'GET', 'Bearer ', 401),
    # the open path only, exactly
    ('/health', 'GET', None, 200),
    ('/health/', 'GET', None, 401),
    ('//health', 'GET', None, 401),
    ('/healthz', 'GET', None, 401),
    # OPTIONS is no way around the key (prometheus_client's /metrics answers any method); a CORS preflight is below
    ('/metrics', 'OPTIONS', None, 401),
    ('/v1/models', 'OPTIONS', None, 401),
    ('/metrics', 'OPTIONS', 'Bearer ' + KEY, 200),
])
def test_every_route_but_the_open_ones_needs_the_key(path, method, authorization, expected):
    status, seen = call(path, method, authorization)
    assert status == expected
    assert seen == ([path] if expected == 200 else [])  # a refused request never reaches vLLM


def test_the_refusal_is_json_with_a_bearer_challenge():
    sent = []

    async def send(message):
        sent.append(message)

    asyncio.run(guard.KeyOnEveryRoute(None, api_key=KEY)({'type': 'http', 'method': 'POST', 'path': '/invocations', 'headers': []}, None, send))
    assert dict(sent[0]['headers'])[b'www-authenticate'] == b'Bearer'
    assert json.loads(sent[1]['body']) == {'error': 'Unauthorized'}


def test_a_websocket_without_the_key_is_closed_with_policy_violation():
    assert call('/v1/realtime', kind='websocket') == (1008, [])
    assert call('/v1/realtime', kind='websocket', authorization='Bearer ' + KEY)[0] == 200


def test_root_path_is_taken_off_before_matching():
    assert call('/api/health', root_path='/api')[0] == 200
    assert call('/api/metrics', root_path='/api')[0] == 401


def test_lifespan_passes_through():
    passed = []

    async def app(scope, receive, send):
        passed.append(scope['type'])

    asyncio.run(guard.KeyOnEveryRoute(app, api_key=KEY)({'type': 'lifespan'}, None, None))
    assert passed == ['lifespan']


def test_open_paths_come_from_the_environment_and_the_key_from_its_file_in_a_process_made_non_dumpable(monkeypatch, tmp_path):
    key_file = tmp_path / 'vllm_api_key'
    key_file.write_text(KEY + '\n')
    monkeypatch.setenv('DGXSPARK_API_KEY_FILE', str(key_file))
    monkeypatch.setenv('DGXSPARK_API_OPEN_PATHS', '["/health", "/metrics"]')
    monkeypatch.setenv('VLLM_API_KEY', 'not-this-one')  # never read: the key's file is the one source
    made = []
    monkeypatch.setattr(guard, '_not_dumpable', lambda: made.append(True))
    assert call('/metrics', api_key=None)[0] == 200
    assert call('/tokenize', 'POST', api_key=None)[0] == 401
    assert call('/tokenize', 'POST', 'Bearer ' + KEY, api_key=None)[0] == 200
    assert call('/tokenize', 'POST', 'Bearer not-this-one', api_key=None)[0] == 401
    assert made == [True, True, True, True]


def test_the_key_comes_from_the_start_scripts_descriptor_which_is_then_closed(monkeypatch, tmp_path):
    key_file = tmp_path / 'vllm_api_key'
    key_file.write_text(KEY + '\n')
    number = os.open(str(key_file), os.O_RDONLY)
    monkeypatch.setenv('DGXSPARK_API_KEY_FD', str(number))
    monkeypatch.setenv('DGXSPARK_API_KEY_FILE', str(tmp_path / 'not-read'))  # the descriptor wins
    monkeypatch.setattr(guard, '_not_dumpable', lambda: None)
    app = guard.KeyOnEveryRoute(None)
    assert app.authorized({'headers': [(b'authorization', ('Bearer ' + KEY).encode())]})
    with pytest.raises(OSError):
        os.fstat(number)  # closed: nothing started later inherits it


@pytest.mark.parametrize('number, content, error', [
    ('99', None, 'the API key cannot be read from DGXSPARK_API_KEY_FD=99'),
    ('three', None, 'the API key cannot be read from DGXSPARK_API_KEY_FD=three'),
    (None, '\n', 'the API key is empty; refusing to serve without it'),
    (None, 'k' * 4097, r'the API key cannot be read from DGXSPARK_API_KEY_FD=\d+ \(longer than 4096 bytes\)'),
])
def test_a_descriptor_that_cannot_be_read_refuses_to_start(monkeypatch, tmp_path, number, content, error):
    if content is not None:
        key_file = tmp_path / 'vllm_api_key'
        key_file.write_text(content)
        number = str(os.open(str(key_file), os.O_RDONLY))
    monkeypatch.setenv('DGXSPARK_API_KEY_FD', number)
    monkeypatch.setattr(guard, '_not_dumpable', lambda: None)
    with pytest.raises(RuntimeError, match=error):
        guard.KeyOnEveryRoute(None)
    if content is not None:
        with pytest.raises(OSError):
            os.fstat(int(number))  # closed even so


# Stands for vLLM's console script: it forks (as vLLM forks its engine core) before it loads the middleware.
FORKING_VLLM = r'''
import json, os, sys
import dgxspark_api_guard
pid = os.fork()
if pid == 0:
    try:
        os.fstat(3)
        os._exit(3)  # the child holds the key's descriptor
    except OSError:
        os._exit(0)
child_status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
app = dgxspark_api_guard.KeyOnEveryRoute(None)
print(json.dumps({"name": __name__, "argv": sys.argv, "child": child_status,
                  "variable": os.environ.get("DGXSPARK_API_KEY_FD"),
                  "authorized": app.authorized({"headers": [(b"authorization", b"Bearer " + sys.argv[-1].encode())]}),
                  "wrong key": app.authorized({"headers": [(b"authorization", b"Bearer nope")]})}))
'''


def test_the_guards_main_takes_the_key_and_closes_its_descriptor_before_vllm_forks(tmp_path):
    key_file = tmp_path / 'vllm_api_key'
    key_file.write_text(KEY + '\n')
    script = tmp_path / 'vllm'
    script.write_text(FORKING_VLLM)
    env = dict(os.environ, PYTHONPATH=FILES, DGXSPARK_API_KEY_FD='3', DGXSPARK_API_KEY_FILE=str(tmp_path / 'not-read'))
    # As vllm-serve.sh starts it: fd 3 opened by the shell, then exec.
    command = 'exec 3<"$0"; exec "$1" "$2" "$3" serve "$4"'
    result = subprocess.run(['bash', '-c', command, str(key_file), sys.executable, os.path.join(FILES, 'dgxspark_api_guard.py'),
                             str(script), KEY], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found == {'name': '__main__', 'argv': [str(script), 'serve', KEY], 'child': 0, 'variable': None,
                     'authorized': True, 'wrong key': False}, found


# Stands for vLLM's console script: what PR_GET_DUMPABLE says in it, in a child it forks, in one multiprocessing spawns
# (an exec: the engine core where CUDA is initialized or on CPU).
DUMPABLE_VLLM = r'''
import ctypes, json, multiprocessing, os, sys, time


def dumpable(queue=None):
    value = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    if queue is not None:
        queue.put(value)
    return value


if __name__ == "__main__":
    found = {"main": dumpable()}
    for method in ("fork", "spawn"):
        context = multiprocessing.get_context(method)
        queue = context.Queue()
        child = context.Process(target=dumpable, args=(queue,))
        child.start()
        found[method] = queue.get(timeout=60)
        child.join(60)
    print(json.dumps(found))
'''


def test_the_guards_main_makes_vllm_and_every_process_it_forks_or_spawns_non_dumpable(tmp_path):
    """/proc/PID/root of any process of vLLM's container would open its files (the TLS key) to root in the Ray
    container: vLLM runs non-dumpable, and so do its children, forked or spawned (exec resets the flag)."""
    key_file = tmp_path / 'vllm_api_key'
    key_file.write_text(KEY + '\n')
    script = tmp_path / 'vllm'
    script.write_text(DUMPABLE_VLLM)
    env = dict(os.environ, PYTHONPATH=FILES, DGXSPARK_API_KEY_FD='3')
    command = 'exec 3<"$0"; exec "$1" "$2" "$3" serve'
    result = subprocess.run(['bash', '-c', command, str(key_file), sys.executable, os.path.join(FILES, 'dgxspark_api_guard.py'),
                             str(script)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {'main': 0, 'fork': 0, 'spawn': 0}, result.stdout
    # The same script without the guard: every one of them dumpable (the check can fail).
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert json.loads(result.stdout) == {'main': 1, 'fork': 1, 'spawn': 1}, result.stdout


@pytest.mark.parametrize('args, expected', [
    # a child that multiprocessing spawns (3.11 to 3.13 spell it so)
    (['/usr/bin/python3', '-c', 'from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)',
      '--multiprocessing-fork'],
     ['/usr/bin/python3', '-c', 'import dgxspark_api_guard as g; g.hide_this_process(); del g\n'
      'from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)', '--multiprocessing-fork']),
    # its resource tracker, with the interpreter's flags before -c
    (['/usr/bin/python3', '-X', 'frozen_modules=off', '-c', 'from multiprocessing.resource_tracker import main;main(4)'],
     ['/usr/bin/python3', '-X', 'frozen_modules=off', '-c', 'import dgxspark_api_guard as g; g.hide_this_process(); del g\n'
      'from multiprocessing.resource_tracker import main;main(4)']),
    # anything else is left as it is
    (['/usr/bin/python3', 'script.py', '-c'], ['/usr/bin/python3', 'script.py', '-c']),
    (['/opt/frozen-app', '--multiprocessing-fork', 'pipe_handle=7'], ['/opt/frozen-app', '--multiprocessing-fork', 'pipe_handle=7']),
])
def test_a_python_child_of_multiprocessing_hides_itself_before_its_program(args, expected):
    assert guard._hidden_command(args) == expected


def test_the_guards_main_says_how_to_call_it():
    result = subprocess.run([sys.executable, os.path.join(FILES, 'dgxspark_api_guard.py')], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2 and 'usage: dgxspark_api_guard.py VLLM_SCRIPT ARGS...' in result.stderr


@pytest.mark.parametrize('key_file, error', [
    (None, 'DGXSPARK_API_KEY_FILE is not set; refusing to serve without the API key'),
    ('missing', 'cannot be read (No such file or directory); refusing to serve without the API key'),
    ('empty', 'the API key is empty; refusing to serve without it'),
])
def test_no_key_refuses_to_start(monkeypatch, tmp_path, key_file, error):
    monkeypatch.setenv('VLLM_API_KEY', KEY)  # not a source any more
    monkeypatch.setattr(guard, '_not_dumpable', lambda: None)
    if key_file is None:
        monkeypatch.delenv('DGXSPARK_API_KEY_FILE', raising=False)
    else:
        path = tmp_path / key_file
        if key_file == 'empty':
            path.write_text('\n')
        monkeypatch.setenv('DGXSPARK_API_KEY_FILE', str(path))
    with pytest.raises(RuntimeError, match=error.replace('(', r'\(').replace(')', r'\)')):
        guard.KeyOnEveryRoute(None)


def test_a_key_of_any_characters_is_compared_as_the_utf8_bytes_the_client_sends():
    key = 'clé-ünïcode-ключ'
    bearer = ('Bearer ' + key).encode('utf-8').decode('latin-1')  # call() sends the header's bytes as latin-1 text
    assert call('/v1/models', authorization=bearer, api_key=key)[0] == 200
    assert call('/v1/models', authorization='Bearer cle-unicode', api_key=key)[0] == 401


def test_the_process_that_holds_the_key_is_made_non_dumpable():
    script = ('import importlib.util, sys\n'
              'spec = importlib.util.spec_from_file_location("g", sys.argv[1]); g = importlib.util.module_from_spec(spec)\n'
              'spec.loader.exec_module(g)\n'
              'import ctypes; libc = ctypes.CDLL(None); print(libc.prctl(3, 0, 0, 0, 0), end=" ")\n'  # PR_GET_DUMPABLE
              'g._not_dumpable(); print(libc.prctl(3, 0, 0, 0, 0))\n')
    out = subprocess.run([sys.executable, '-c', script, _SPEC.origin], capture_output=True, text=True, check=True).stdout
    assert out.split() == ['1', '0'], out


# Run as the head's start script starts the guard (root with CAP_DAC_READ_SEARCH and CAP_SETPCAP, or other sets): the
# capability sets after drop_key_capabilities(), and whether the key's 0000 file still opens.
CAPABILITIES_AFTER_DROP = (
    'import importlib.util, json, sys\n'
    'spec = importlib.util.spec_from_file_location("g", sys.argv[1]); g = importlib.util.module_from_spec(spec)\n'
    'spec.loader.exec_module(g)\n'
    'def sets():\n'
    '    with open("/proc/self/status") as status:\n'
    '        return dict((l.split(":")[0], int(l.split()[1], 16)) for l in status if l.startswith("Cap"))\n'
    'def opens():\n'
    '    try:\n'
    '        open(sys.argv[2], "rb").close(); return True\n'
    '    except OSError:\n'
    '        return False\n'
    'before, opened = sets(), opens()\n'
    'try:\n'
    '    g.drop_key_capabilities(); error = None\n'
    'except RuntimeError as exc:\n'
    '    error = str(exc)\n'
    'print(json.dumps({"before": before, "opened": opened, "after": sets(), "opens": opens(), "error": error}))\n')
KEY_CAPABILITIES = (1 << 2) | (1 << 8)  # CAP_DAC_READ_SEARCH, CAP_SETPCAP
CAP_IPC_LOCK = 1 << 14


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('setpriv'), reason='sets capabilities: root and setpriv')
@pytest.mark.parametrize('bounding, expected_after, error', [
    # the head's start script: both, and nothing else (the container's bounding set)
    ('-all,+dac_read_search,+setpcap', {'CapEff': 0, 'CapPrm': 0, 'CapBnd': 0, 'CapInh': 0, 'CapAmb': 0}, None),
    # with a capability the user added (vllm_container_capabilities): that one stays
    ('-all,+dac_read_search,+setpcap,+ipc_lock',
     {'CapEff': CAP_IPC_LOCK, 'CapPrm': CAP_IPC_LOCK, 'CapBnd': CAP_IPC_LOCK, 'CapInh': 0, 'CapAmb': 0}, None),
    # a process that holds neither (the Ray wait without a key): left as it is
    ('-all,+ipc_lock', {'CapEff': CAP_IPC_LOCK, 'CapPrm': CAP_IPC_LOCK, 'CapBnd': CAP_IPC_LOCK, 'CapInh': 0, 'CapAmb': 0}, None),
    # the key's capability without the one that drops it from the bounding set: refused, not half done
    ('-all,+dac_read_search', None, 'cannot leave the bounding set'),
])
def test_the_guard_drops_the_capabilities_that_open_the_key_for_good(tmp_path, bounding, expected_after, error):
    key_file = tmp_path / 'vllm_api_key'
    key_file.write_text(KEY)
    key_file.chmod(0)
    command = ['setpriv', '--inh-caps=-all', '--bounding-set=' + bounding, '--', sys.executable, '-c',
               CAPABILITIES_AFTER_DROP, _SPEC.origin, str(key_file)]
    found = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    holds_key_capability = bool(found['before']['CapEff'] & (1 << 2))
    assert found['opened'] == holds_key_capability, found  # the check can fail: with the capability the file opens
    if error:
        assert error in found['error'], found
        return
    assert found['error'] is None, found
    assert found['after'] == expected_after, found
    assert not found['opens'], found


def test_a_cors_preflight_without_the_key_gets_the_answers_headers_and_no_body():
    # The app stands for prometheus_client's /metrics, which answers any method with the metrics (issue 49).
    sent, seen = [], []

    async def metrics_app(scope, receive, send):
        seen.append(scope['method'])
        await send({'type': 'http.response.start', 'status': 200,
                    'headers': [(b'content-length', b'26'), (b'access-control-allow-origin', b'*')]})
        await send({'type': 'http.response.body', 'body': b'vllm:num_requests_running', 'more_body': True})
        await send({'type': 'http.response.body', 'body': b' 0', 'more_body': False})

    async def send(message):
        sent.append(message)

    scope = {'type': 'http', 'method': 'OPTIONS', 'path': '/metrics', 'root_path': '',
             'headers': [(b'Origin', b'https://app.example'), (b'Access-Control-Request-Method', b'GET')]}
    asyncio.run(guard.KeyOnEveryRoute(metrics_app, api_key=KEY)(scope, None, send))
    assert seen == ['OPTIONS']
    assert sent[0]['status'] == 200 and dict(sent[0]['headers']) == {b'access-control-allow-origin': b'*', b'content-length': b'0'}
    assert [m['body'] for m in sent[1:]] == [b'']


@pytest.mark.parametrize('headers', [
    [(b'origin', b'https://app.example')],  # no Access-Control-Request-Method: not a preflight
    [(b'access-control-request-method', b'GET')],  # no Origin: vLLM's CORS middleware hands it to the route
])
def test_an_options_request_that_is_not_a_preflight_needs_the_key(headers):
    sent = []

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        raise AssertionError('reached the app')

    scope = {'type': 'http', 'method': 'OPTIONS', 'path': '/metrics', 'headers': headers}
    asyncio.run(guard.KeyOnEveryRoute(app, api_key=KEY)(scope, None, send))
    assert sent[0]['status'] == 401
