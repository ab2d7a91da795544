# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API key on every route of vLLM's server, given to `vllm serve` as `--middleware
dgxspark_api_guard.KeyOnEveryRoute` by dgxspark.cluster's vllm_container role.

vLLM checks VLLM_API_KEY only on paths under /v1: `POST /invocations` (a whole chat completion), `/tokenize`,
`/detokenize`, `/metrics`, `/pooling`, `/score`, `/rerank` and the rest answer without it (vllm-project/vllm#58144).
This pure ASGI middleware (no import beyond the standard library, so it works with any vLLM that has `--middleware`)
answers 401 on every path but the open ones (DGXSPARK_API_OPEN_PATHS, a JSON list; default ["/health"], what load
balancers and our readiness probe read) unless the request carries `Authorization: Bearer <VLLM_API_KEY>`.
Without a key it refuses to start: a guard that lets everything through must not look like one.
"""

import hashlib
import hmac
import json
import os

OPEN_PATHS_ENV = 'DGXSPARK_API_OPEN_PATHS'
DEFAULT_OPEN_PATHS = ('/health',)
UNAUTHORIZED = json.dumps({'error': 'Unauthorized'}).encode()


def _digest(text):
    return hashlib.sha256(text.encode('utf-8')).digest()


class KeyOnEveryRoute:
    """ASGI middleware: every HTTP request and websocket outside the open paths needs the bearer key."""

    def __init__(self, app, api_key=None, open_paths=None):
        self.app = app
        key = os.environ.get('VLLM_API_KEY', '') if api_key is None else api_key
        if not key:
            raise RuntimeError('dgxspark_api_guard: VLLM_API_KEY is empty; refusing to serve without the API key')
        self._key = _digest(key)
        if open_paths is None:
            open_paths = json.loads(os.environ.get(OPEN_PATHS_ENV) or json.dumps(DEFAULT_OPEN_PATHS))
        self.open_paths = frozenset(open_paths)

    def authorized(self, scope):
        for name, value in scope.get('headers') or ():
            if name.lower() == b'authorization':
                scheme, unused_space, token = value.decode('latin-1').partition(' ')
                return scheme.lower() == 'bearer' and hmac.compare_digest(_digest(token.strip()), self._key)
        return False

    async def __call__(self, scope, receive, send):
        if scope['type'] not in ('http', 'websocket') or scope.get('method') == 'OPTIONS':
            return await self.app(scope, receive, send)
        path = scope['path']
        root = scope.get('root_path', '')
        if root and path.startswith(root):
            path = path[len(root):]
        if path in self.open_paths or self.authorized(scope):
            return await self.app(scope, receive, send)
        if scope['type'] == 'websocket':
            return await send({'type': 'websocket.close', 'code': 1008})
        await send({'type': 'http.response.start', 'status': 401,
                    'headers': [(b'content-type', b'application/json'), (b'www-authenticate', b'Bearer'),
                                (b'content-length', str(len(UNAUTHORIZED)).encode())]})
        return await send({'type': 'http.response.body', 'body': UNAUTHORIZED})
