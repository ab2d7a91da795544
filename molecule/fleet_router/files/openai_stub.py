#!/usr/bin/python3
"""LAB: a minimal OpenAI-compatible responder standing in for a serving group's vLLM in the fleet_router scenario.

Usage: openai_stub.py PORT SERVED_MODEL_NAME KEY_FILE NODE. Answers GET /v1/models and POST /v1/chat/completions (an
answer that names NODE, so that a test sees which group answered; streamed as server-sent events with "stream": true)
with the key as a bearer token, 401 without it; GET /health without it. An answer takes max_tokens x 0.1 s (a stream
sends a chunk every 0.1 s), so that requests are in flight while the router swaps its instances."""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODEL, KEY_FILE, NODE = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
with open(KEY_FILE, encoding='utf-8') as key_file:
    KEY = key_file.read().strip()


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self):
        if self.headers.get('Authorization') == 'Bearer ' + KEY:
            return True
        self._send(401, {'error': {'message': 'bad key', 'type': 'invalid_request_error'}})
        return False

    @staticmethod
    def _seconds(body):
        return min(int(body.get('max_tokens') or 1), 50) * 0.1

    def _stream(self, body):
        """One chunk a 0.1 s (max_tokens of them), then [DONE]; the connection closes at its end (no Content-Length)."""
        self.close_connection = True
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream')
        self.send_header('Connection', 'close')
        self.end_headers()
        chunks = max(1, min(int(body.get('max_tokens') or 1), 50))
        for index in range(chunks):
            time.sleep(0.1)
            last = index == chunks - 1
            chunk = {'id': 'stub', 'object': 'chat.completion.chunk', 'created': 0, 'model': body.get('model', MODEL),
                     'choices': [{'index': 0, 'delta': {'content': NODE if last else '.'},
                                  'finish_reason': 'stop' if last else None}]}
            self.wfile.write(('data: %s\n\n' % json.dumps(chunk)).encode())
            self.wfile.flush()
        self.wfile.write(b'data: [DONE]\n\n')
        self.wfile.flush()

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == '/health':
            self._send(200, {})
        elif self.path == '/v1/models' and self._authorized():
            self._send(200, {'object': 'list', 'data': [{'id': MODEL, 'object': 'model', 'owned_by': 'lab'}]})
        elif self.path != '/v1/models':
            self._send(404, {})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get('Content-Length') or 0)) or b'{}')
        if self.path != '/v1/chat/completions':
            self._send(404, {})
        elif self._authorized() and body.get('stream'):
            self._stream(body)
        elif self._authorized():
            time.sleep(self._seconds(body))
            self._send(200, {'id': 'stub', 'object': 'chat.completion', 'created': 0, 'model': body.get('model', MODEL),
                             'choices': [{'index': 0, 'finish_reason': 'stop',
                                          'message': {'role': 'assistant', 'content': 'answered by %s' % NODE}}],
                             'usage': {'prompt_tokens': 1, 'completion_tokens': 3, 'total_tokens': 4}})


ThreadingHTTPServer(('0.0.0.0', PORT), Handler).serve_forever()
