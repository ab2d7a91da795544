"""The API guard vllm_container gives `vllm serve` (--middleware dgxspark_api_guard.KeyOnEveryRoute), driven the way an
ASGI server drives it: every path but the open ones needs the bearer key; vLLM's own check covers /v1 only."""
import asyncio
import importlib.util
import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location(
    'dgxspark_api_guard', os.path.join(HERE, '..', '..', 'roles', 'vllm_container', 'files', 'dgxspark_api_guard.py'))
guard = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(guard)

KEY = 'k3y-of-the-lab'


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
    # CORS preflight passes to the app, as in vLLM's own middleware
    ('/v1/models', 'OPTIONS', None, 200),
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


def test_open_paths_and_key_come_from_the_environment(monkeypatch):
    monkeypatch.setenv('VLLM_API_KEY', KEY)
    monkeypatch.setenv('DGXSPARK_API_OPEN_PATHS', '["/health", "/metrics"]')
    assert call('/metrics', api_key=None)[0] == 200
    assert call('/tokenize', 'POST', api_key=None)[0] == 401
    assert call('/tokenize', 'POST', 'Bearer ' + KEY, api_key=None)[0] == 200


def test_no_key_refuses_to_start(monkeypatch):
    monkeypatch.delenv('VLLM_API_KEY', raising=False)
    with pytest.raises(RuntimeError, match='VLLM_API_KEY is empty'):
        guard.KeyOnEveryRoute(None)
