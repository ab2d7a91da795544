"""API key enforcement of the LAB STAND-IN, as vLLM 0.33's AuthenticationMiddleware does it."""
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request

import pytest

from dgxspark_vllm_standin.server import api_tokens, token_ok
from test_standin_process import run_standin

KEY = "k3y-from-a-0600-file"


@pytest.mark.parametrize("args_key, env, expected", [
    (None, {}, []),
    (None, {"VLLM_API_KEY": ""}, []),
    (None, {"VLLM_API_KEY": KEY}, [KEY]),
    (["a", "b"], {"VLLM_API_KEY": KEY}, ["a", "b"]),   # --api-key wins over the variable
    (["", "a"], {}, ["a"]),
])
def test_api_tokens(args_key, env, expected):
    assert api_tokens(args_key, env) == expected


@pytest.mark.parametrize("tokens, header, ok", [
    ([], None, True),
    ([KEY], None, False),
    ([KEY], "Bearer " + KEY, True),
    ([KEY], "bearer " + KEY, False),
    ([KEY], KEY, False),
    ([KEY], "Bearer " + KEY + "x", False),
    (["a", KEY], "Bearer " + KEY, True),
])
def test_token_ok(tokens, header, ok):
    assert token_ok(tokens, header) is ok


def _request(port, path, key=None, body=None):
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = "Bearer " + key
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_key_from_environment_guards_v1_only(model_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_standin(["serve", model_dir, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "lab"],
                       {"VLLM_API_KEY": KEY})
    try:
        deadline = time.time() + 20
        while time.time() < deadline and _request_or_none(port) is None:
            time.sleep(0.2)
        chat = {"model": "lab", "messages": [{"role": "user", "content": "hi"}]}
        assert _request(port, "/health") == (200, b"")
        assert _request(port, "/version")[0] == 200
        assert _request(port, "/metrics")[0] == 200
        assert _request(port, "/v1/models") == (401, b'{"error": "Unauthorized"}')
        assert _request(port, "/v1/models", key="wrong")[0] == 401
        assert _request(port, "/v1/chat/completions", body=chat)[0] == 401
        status, body = _request(port, "/v1/models", key=KEY)
        assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["lab"]
        assert _request(port, "/v1/chat/completions", key=KEY, body=chat)[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert KEY not in out  # the key never reaches the log


def _request_or_none(port):
    try:
        return _request(port, "/health")
    except OSError:
        return None
