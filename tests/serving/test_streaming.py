"""The LAB STAND-IN's labelled streaming mode: a fixed cadence per stream, every token labelled, usage last."""
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from dgxspark_vllm_standin.server import (STANDIN_TOKEN, TOKENS_PER_S_DEFAULT, StandinHTTPServer, stream_plan,
                                          stream_tokens_per_s)

KEY = "k3y-from-a-0600-file"


@pytest.mark.parametrize("env, expected", [
    ({}, TOKENS_PER_S_DEFAULT),
    ({"DGXSPARK_LAB_STANDIN_TOKENS_PER_S": ""}, TOKENS_PER_S_DEFAULT),
    ({"DGXSPARK_LAB_STANDIN_TOKENS_PER_S": "40"}, 40.0),
    ({"DGXSPARK_LAB_STANDIN_TOKENS_PER_S": "12.5"}, 12.5),
])
def test_tokens_per_s(env, expected):
    assert stream_tokens_per_s(env) == expected


@pytest.mark.parametrize("raw", ["0", "-3", "fast", "nan", "inf"])
def test_tokens_per_s_rejects(raw):
    with pytest.raises(ValueError, match="DGXSPARK_LAB_STANDIN_TOKENS_PER_S=.*positive number"):
        stream_tokens_per_s({"DGXSPARK_LAB_STANDIN_TOKENS_PER_S": raw})


@pytest.mark.parametrize("body, expected", [
    ({"prompt": "a b c", "max_tokens": 5}, (5, 3)),
    ({"prompt": "a b c", "max_tokens": 5, "max_completion_tokens": 7}, (7, 3)),
    ({"prompt": ""}, (16, 0)),
    ({"messages": [{"role": "system", "content": "x y"}, {"role": "user", "content": "z"}], "max_tokens": 2}, (2, 3)),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "ignored"}]}]}, (16, 0)),
])
def test_stream_plan(body, expected):
    assert stream_plan(body) == expected


STATE = {"vllm_version": "0.33.0", "model": "/models/lab", "started": 0, "served_model_names": ["lab"],
         "max_model_len": 4096,
         "world": {"size": 1, "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "backend": "mp", "env_mode": "none",
                   "nodes": ["n"], "ranks": [], "transport_checks": []}}


@pytest.fixture
def server():
    httpd = StandinHTTPServer(("127.0.0.1", 0), STATE, [KEY], tokens_per_s=50.0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _stream(port, path, body, key=KEY):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "authorization": "Bearer " + key})
    t0 = time.monotonic()
    chunks = []
    with urllib.request.urlopen(req, timeout=10) as resp:
        for line in resp:
            line = line.decode().strip()
            if line.startswith("data: "):
                chunks.append((time.monotonic() - t0, line[6:]))
    return chunks


@pytest.mark.parametrize("path, body, text_of", [
    ("/v1/completions", {"model": "lab", "prompt": "one two three", "max_tokens": 11, "stream": True,
                         "stream_options": {"include_usage": True}}, lambda c: c["choices"][0]["text"]),
    ("/v1/chat/completions", {"model": "lab", "messages": [{"role": "user", "content": "one two three"}],
                              "max_tokens": 11, "stream": True, "stream_options": {"include_usage": True}},
     lambda c: c["choices"][0]["delta"].get("content")),
])
def test_stream_cadence_labels_and_usage(server, path, body, text_of):
    chunks = _stream(server, path, body)
    assert chunks[-1][1] == "[DONE]"
    data = [(t, json.loads(d)) for t, d in chunks[:-1]]
    usage = data[-1][1]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 11, "total_tokens": 14}
    tokens = [(t, text_of(c)) for t, c in data[:-1] if c["choices"] and text_of(c)]
    assert [text for _, text in tokens] == [STANDIN_TOKEN % i for i in range(1, 12)]
    assert all("LAB STAND-IN" in text for _, text in tokens)
    assert data[-2][1]["choices"][0]["finish_reason"] == "length"
    rate = (len(tokens) - 1) / (tokens[-1][0] - tokens[0][0])
    assert rate == pytest.approx(50.0, rel=0.05)


def test_stream_without_usage_has_no_usage_chunk(server):
    chunks = _stream(server, "/v1/completions", {"model": "lab", "prompt": "x", "max_tokens": 2, "stream": True})
    assert all("usage" not in json.loads(d) for _, d in chunks[:-1])


@pytest.mark.parametrize("path, body, code", [
    ("/v1/completions", {"model": "lab", "prompt": "x", "stream": True}, 401),   # wrong key below
])
def test_stream_needs_the_key(server, path, body, code):
    with pytest.raises(urllib.error.HTTPError) as err:
        _stream(server, path, body, key="wrong")
    assert err.value.code == code


@pytest.mark.parametrize("body, message", [
    ({"model": "lab", "prompt": "x"}, "stream=true only"),
    ({"model": "lab", "stream": True}, "prompt: Field required"),
    ({"model": "other", "prompt": "x", "stream": True}, "does not exist"),
])
def test_completions_bad_requests(server, body, message):
    with pytest.raises(urllib.error.HTTPError) as err:
        _stream(server, "/v1/completions", body)
    assert message in err.value.read().decode()
