"""OpenAI-shaped HTTP endpoints of the LAB STAND-IN (stdlib http.server only).

It never generates text: /v1/chat/completions answers with a fixed statement that this is the
dgxspark lab stand-in plus the world layout the stand-in found (ranks, nodes, fabric IPs,
transport checks). With "stream": true (/v1/chat/completions and /v1/completions) it runs the
labelled streaming mode: max_tokens tokens at a fixed cadence per stream
(DGXSPARK_LAB_STANDIN_TOKENS_PER_S, default 20), every token saying it comes from the lab
stand-in, usage in a last chunk when stream_options.include_usage is set (as vLLM does), so a
benchmark can be checked against a known truth."""
import hashlib
import json
import secrets
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def layout_text(state):
    world = state["world"]
    lines = [
        "This is the dgxspark lab stand-in for vLLM %s, not a model: it generated no text." % state["vllm_version"],
        "World: %d rank(s) = TP %d x PP %d on %d node(s), executor backend %s, env carry-over mode %s." % (
            world["size"], world["tensor_parallel_size"], world["pipeline_parallel_size"], len(world["nodes"]),
            world["backend"], world["env_mode"]),
    ]
    for rank in world["ranks"]:
        lines.append("rank %d: node %s (ray node ip %s), fabric IP %s (VLLM_HOST_IP), bootstrap %s=%s, "
                     "NCCL_SOCKET_IFNAME=%s" % (
                         rank["rank"], rank["hostname"], rank.get("ray_node_ip"), rank.get("vllm_host_ip"),
                         "GLOO_SOCKET_IFNAME", "%s (%s)" % (rank.get("gloo_socket_ifname"), rank.get("bootstrap_ip")),
                         rank["env"].get("NCCL_SOCKET_IFNAME")))
    for check in world["transport_checks"]:
        lines.append("tcp rank %d -> rank %d (%s -> %s): %s" % (
            check["from_rank"], check["to_rank"], check.get("from_ip"), check["to"],
            "ok, %.3f ms" % check["rtt_ms"] if check["ok"] else "FAILED: %s" % check["error"]))
    weights = world.get("weights") or {}
    if weights:
        lines.append("weights: %d shard(s), %d tensor(s), %d bytes read per rank from %s" % (
            weights["shards"], weights["tensors"], weights["bytes"], weights["model_dir"]))
    return "\n".join(lines)


# Every streamed token names its origin, so no one mistakes the lab's figures for a model's.
STANDIN_TOKEN = " [dgxspark LAB STAND-IN token %d]"
STREAM_DEFAULT_MAX_TOKENS = 16
TOKENS_PER_S_ENV = "DGXSPARK_LAB_STANDIN_TOKENS_PER_S"
TOKENS_PER_S_DEFAULT = 20.0


def stream_tokens_per_s(env):
    """The labelled streaming mode's fixed cadence per stream (tokens/s), from DGXSPARK_LAB_STANDIN_TOKENS_PER_S."""
    raw = env.get(TOKENS_PER_S_ENV) or ""
    if not raw.strip():
        return TOKENS_PER_S_DEFAULT
    try:
        rate = float(raw)
    except ValueError:
        rate = 0.0
    if not rate > 0 or rate != rate or rate == float("inf"):
        raise ValueError("%s=%r: expected a positive number of tokens per second" % (TOKENS_PER_S_ENV, raw))
    return rate


def stream_plan(body):
    """(tokens to stream, prompt tokens) of a request; the stand-in has no tokenizer, so a prompt token is a
    whitespace-separated word (chat: the text of every message)."""
    n_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or STREAM_DEFAULT_MAX_TOKENS
    if "messages" in body:
        text = " ".join(m.get("content") if isinstance(m.get("content"), str) else ""
                        for m in body["messages"] if isinstance(m, dict))
    else:
        text = body.get("prompt") or ""
    return max(1, int(n_tokens)), len(text.split())


def api_tokens(args_api_key, env):
    """The API keys the server enforces, as vLLM 0.33 builds them (vllm/entrypoints/openai/api_server.py):
    `--api-key` (a list) wins, else VLLM_API_KEY; empty values are ignored; no key means no check."""
    return [key for key in (args_api_key or [env.get("VLLM_API_KEY")]) if key]


def token_ok(tokens, authorization):
    """vLLM's AuthenticationMiddleware.verify_token: `Authorization: Bearer <key>`, compared in constant time
    on SHA-256 digests (so the comparison does not leak the key's length)."""
    if not tokens:
        return True
    given = hashlib.sha256((authorization or "").encode()).digest()
    return any(secrets.compare_digest(given, hashlib.sha256(("Bearer %s" % key).encode()).digest()) for key in tokens)


def _log(msg):
    sys.stderr.write("INFO:     %s\n" % msg)
    sys.stderr.flush()


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002  (BaseHTTPRequestHandler's signature)
        pass

    def _send(self, code, body=None, content_type="application/json"):
        payload = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        _log('%s:%d - "%s %s HTTP/1.1" %d %s' % (self.client_address[0], self.client_address[1], self.command,
                                                 self.path, code, self.responses.get(code, ("",))[0]))

    def _error(self, code, message, err_type, param=None):
        self._send(code, {"error": {"message": message, "type": err_type, "param": param, "code": code}})

    @property
    def state(self):
        return self.server.state

    def do_HEAD(self):
        self.do_GET()

    def _authorized(self, path):
        """/v1/* needs the API key when one is set (401 otherwise); /health, /metrics, /version stay open, as in vLLM."""
        if path.startswith("/v1") and not token_ok(self.server.tokens, self.headers.get("authorization")):
            self._send(401, {"error": "Unauthorized"})
            return False
        return True

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return
        if path == "/health":
            self._send(200)
        elif path == "/v1/models":
            self._send(200, self.models())
        elif path == "/version":
            self._send(200, {"version": self.state["vllm_version"]})
        elif path == "/metrics":
            self._send(200, self.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/dgxspark/world":
            self._send(200, self.state["world"])
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized(path):
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._send(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as err:
            self._error(400, "Invalid JSON body: %s" % err, "BadRequestError")
            return
        names = self.state["served_model_names"]
        model = body.get("model") or names[0]
        if model not in names:
            self._error(404, "The model `%s` does not exist." % model, "NotFoundError", "model")
            return
        chat = path == "/v1/chat/completions"
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                self._error(400, "messages: Field required (a non-empty list)", "BadRequestError", "messages")
                return
        elif not isinstance(body.get("prompt"), str):
            self._error(400, "prompt: Field required (a string)", "BadRequestError", "prompt")
            return
        with self.server.lock:
            self.server.requests_total += 1
        if body.get("stream"):
            self._stream(body, model, chat)
            return
        created = int(time.time())
        if not chat:
            self._error(400, "the dgxspark lab stand-in answers /v1/completions with stream=true only (the labelled "
                             "streaming mode)", "BadRequestError", "stream")
            return
        self._send(200, {
            "id": "chatcmpl-%s" % uuid.uuid4().hex, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": layout_text(self.state), "refusal": None,
                                                 "tool_calls": [], "reasoning_content": None},
                         "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "dgxspark_lab": {"stand_in": True, "world": self.state["world"]},
        })

    def _stream(self, body, model, chat):
        """The labelled streaming mode: max_tokens tokens at the fixed cadence, each saying it is from the stand-in."""
        created = int(time.time())
        rid = ("chatcmpl-%s" if chat else "cmpl-%s") % uuid.uuid4().hex
        n_tokens, prompt_tokens = stream_plan(body)
        rate = self.server.tokens_per_s
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()

        def chunk(text, finish=None, usage=None, role=False):
            if usage is not None:
                choices = []
            elif chat:
                delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text else {})
                choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            else:
                choices = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
            data = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
                    "model": model, "choices": choices}
            if usage is not None:
                data["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

        try:
            if chat:
                chunk("", role=True)
            start = time.monotonic()
            for i in range(n_tokens):
                delay = start + (i + 1) / rate - time.monotonic()   # an absolute schedule: no drift
                if delay > 0:
                    time.sleep(delay)
                chunk(STANDIN_TOKEN % (i + 1))
            chunk("", finish="length")
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk(None, usage={"prompt_tokens": prompt_tokens, "completion_tokens": n_tokens,
                                   "total_tokens": prompt_tokens + n_tokens})
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
        _log('%s:%d - "POST %s HTTP/1.1" 200 OK' % (self.client_address[0], self.client_address[1], self.path))

    def models(self):
        st = self.state
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": st["started"], "owned_by": "vllm", "root": st["model"],
             "parent": None, "max_model_len": st["max_model_len"],
             "permission": [{"id": "modelperm-%s" % uuid.uuid5(uuid.NAMESPACE_URL, name).hex, "object": "model_permission",
                             "created": st["started"], "allow_create_engine": False, "allow_sampling": True,
                             "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                             "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}]}
            for name in st["served_model_names"]]}

    def metrics(self):
        st = self.state
        name = st["served_model_names"][0]
        world = st["world"]
        ok = sum(1 for c in world["transport_checks"] if c["ok"])
        return "".join([
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n",
            "# TYPE vllm:num_requests_running gauge\n",
            'vllm:num_requests_running{model_name="%s"} 0.0\n' % name,
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n",
            "# TYPE vllm:num_requests_waiting gauge\n",
            'vllm:num_requests_waiting{model_name="%s"} 0.0\n' % name,
            "# HELP dgxspark_lab_requests_total Chat requests answered by the lab stand-in.\n",
            "# TYPE dgxspark_lab_requests_total counter\n",
            "dgxspark_lab_requests_total %d\n" % self.server.requests_total,
            "# HELP dgxspark_lab_world_size Ranks (GPUs) in the stand-in's world.\n",
            "# TYPE dgxspark_lab_world_size gauge\n",
            "dgxspark_lab_world_size %d\n" % world["size"],
            "# HELP dgxspark_lab_transport_checks_ok Neighbour TCP checks that passed.\n",
            "# TYPE dgxspark_lab_transport_checks_ok gauge\n",
            "dgxspark_lab_transport_checks_ok %d\n" % ok,
        ])


class StandinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, state, tokens=(), tokens_per_s=TOKENS_PER_S_DEFAULT):
        super().__init__(address, Handler)
        self.tokens_per_s = tokens_per_s
        self.state = state
        self.tokens = list(tokens)
        self.lock = threading.Lock()
        self.requests_total = 0
