# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API key on every route of vLLM's server, given to `vllm serve` as `--middleware
dgxspark_api_guard.KeyOnEveryRoute` by dgxspark.cluster's vllm_container role.

vLLM checks VLLM_API_KEY only on paths under /v1: `POST /invocations` (a whole chat completion), `/tokenize`,
`/detokenize`, `/metrics`, `/pooling`, `/score`, `/rerank` and the rest answer without it (vllm-project/vllm#58144).
This pure ASGI middleware (no import beyond the standard library, so it works with any vLLM that has `--middleware`)
answers 401 on every path, /v1 included, but the open ones (DGXSPARK_API_OPEN_PATHS, a JSON list; default ["/health"],
what load balancers and our readiness probe read) unless the request carries `Authorization: Bearer <key>`.
It reads the key from the file DGXSPARK_API_KEY_FILE names, and vLLM is given none: an environment variable would
show in /proc/PID/environ to every process of the host's PID namespace (the Ray head's container shares it), and
this process becomes non-dumpable, so that its memory and /proc files need CAP_SYS_PTRACE.
A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) without the key reaches vLLM's CORS middleware,
but only the answer's status and headers come back: prometheus_client's /metrics answers every method with the metrics.
Without a key it refuses to start: a guard that lets everything through must not look like one.
"""

import ctypes
import ctypes.util
import hashlib
import hmac
import json
import os

OPEN_PATHS_ENV = 'DGXSPARK_API_OPEN_PATHS'
# The mounted 0600 file of the key: the guard reads it itself, so that the key is in no process's environment (vLLM's
# own VLLM_API_KEY check is not used: this guard covers /v1 too).
KEY_FILE_ENV = 'DGXSPARK_API_KEY_FILE'
# The descriptor vllm-serve.sh opened the file on (the file itself needs CAP_DAC_READ_SEARCH, which vLLM does not have):
# read once, then closed.
KEY_FD_ENV = 'DGXSPARK_API_KEY_FD'
PR_SET_DUMPABLE = 4
DEFAULT_OPEN_PATHS = ('/health',)
UNAUTHORIZED = json.dumps({'error': 'Unauthorized'}).encode()


def _digest(key):
    """Compared as the bytes the client sent (a key of any characters, as UTF-8), in constant time."""
    return hashlib.sha256(key).digest()


def _read_key_fd(number):
    try:
        with os.fdopen(int(number), 'rb') as handle:  # closed on leaving: no later child inherits it
            return handle.read().rstrip(b'\r\n')
    except (OSError, ValueError) as exc:
        raise RuntimeError('dgxspark_api_guard: the API key cannot be read from %s=%s (%s); refusing to serve without the '
                           'API key' % (KEY_FD_ENV, number, exc))


def _read_key(path):
    if not path:
        raise RuntimeError('dgxspark_api_guard: %s is not set; refusing to serve without the API key' % KEY_FILE_ENV)
    try:
        with open(path, 'rb') as handle:
            return handle.read().rstrip(b'\r\n')
    except OSError as exc:
        raise RuntimeError('dgxspark_api_guard: the API key file %s cannot be read (%s); refusing to serve without the '
                           'API key' % (path, exc.strerror))


def _not_dumpable():
    """prctl(PR_SET_DUMPABLE, 0): this process's /proc/PID/environ, mem, root and fd need CAP_SYS_PTRACE from now on."""
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6', use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise RuntimeError('dgxspark_api_guard: prctl(PR_SET_DUMPABLE, 0) failed: %s' % os.strerror(ctypes.get_errno()))


def _is_cors_preflight(scope):
    if scope['type'] != 'http' or scope.get('method') != 'OPTIONS':
        return False
    names = set(name.lower() for name, unused_value in scope.get('headers') or ())
    return b'origin' in names and b'access-control-request-method' in names


def _headers_only(send):
    """A send that passes the response's status and headers (with no length) and an empty body, whatever the app sent."""
    state = {'ended': False}

    async def send_headers_only(message):
        if message['type'] == 'http.response.start':
            headers = [(name, value) for name, value in message.get('headers') or () if name.lower() != b'content-length']
            return await send(dict(message, headers=headers + [(b'content-length', b'0')]))
        if message['type'] == 'http.response.body':
            if not state['ended']:
                state['ended'] = True
                return await send({'type': 'http.response.body', 'body': b'', 'more_body': False})
            return None
        return await send(message)

    return send_headers_only


class KeyOnEveryRoute:
    """ASGI middleware: every HTTP request and websocket outside the open paths needs the bearer key."""

    def __init__(self, app, api_key=None, open_paths=None):
        self.app = app
        if api_key is None:
            number = os.environ.get(KEY_FD_ENV)
            api_key = _read_key_fd(number) if number else _read_key(os.environ.get(KEY_FILE_ENV, ''))
            # The key is now in this process's memory only: none but root with CAP_SYS_PTRACE (no container of ours
            # has it) may read its /proc files, the Ray head's container included, which shares the host's PID namespace.
            _not_dumpable()
        key = api_key.encode('utf-8') if isinstance(api_key, str) else bytes(api_key)
        if not key:
            raise RuntimeError('dgxspark_api_guard: the API key is empty; refusing to serve without it')
        self._key = _digest(key)
        if open_paths is None:
            open_paths = json.loads(os.environ.get(OPEN_PATHS_ENV) or json.dumps(DEFAULT_OPEN_PATHS))
        self.open_paths = frozenset(open_paths)

    def authorized(self, scope):
        for name, value in scope.get('headers') or ():
            if name.lower() == b'authorization':
                scheme, unused_space, token = bytes(value).partition(b' ')
                return scheme.lower() == b'bearer' and hmac.compare_digest(_digest(token.strip()), self._key)
        return False

    async def __call__(self, scope, receive, send):
        if scope['type'] not in ('http', 'websocket'):
            return await self.app(scope, receive, send)
        path = scope['path']
        root = scope.get('root_path', '')
        if root and path.startswith(root):
            path = path[len(root):]
        if path in self.open_paths or self.authorized(scope):
            return await self.app(scope, receive, send)
        if _is_cors_preflight(scope):
            # A browser asks without the key; vLLM's CORS middleware answers it. Only the answer's status and headers
            # get out: an app that ignores the method (prometheus_client's /metrics) must not hand its body around the key.
            return await self.app(scope, receive, _headers_only(send))
        if scope['type'] == 'websocket':
            return await send({'type': 'websocket.close', 'code': 1008})
        await send({'type': 'http.response.start', 'status': 401,
                    'headers': [(b'content-type', b'application/json'), (b'www-authenticate', b'Bearer'),
                                (b'content-length', str(len(UNAUTHORIZED)).encode())]})
        return await send({'type': 'http.response.body', 'body': UNAUTHORIZED})
