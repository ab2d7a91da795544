"""The supervisor's service (roles/supervisor/files/dgxspark_supervisor.py) and its node command (dgxspark_node_ctl.py):
the probe against a real HTTP server on loopback, the node command's refusals and readings, and whole looks of a group
whose nodes are simulated by a node command that keeps its containers in a file (the order of stops and starts)."""
import http.server
import importlib.util
import io
import json
import os
import re
import sys
import threading
import time

import pytest

FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles", "supervisor", "files")
sys.path.insert(0, FILES)


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(FILES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


service = _load("dgxspark_supervisor")
node_ctl = _load("dgxspark_node_ctl")
KEY = "sk-supervisor-test-key"


class _Engine(http.server.BaseHTTPRequestHandler):
    mode = "ok"
    metrics = None  # the text of GET /metrics; None: not served (404)

    def do_POST(self):  # noqa: N802  (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self.send_response(401)
            self.end_headers()
            return
        if _Engine.mode == "hang":
            time.sleep(2)
        tokens = 0 if _Engine.mode == "empty" else body["max_tokens"]
        answer = json.dumps({"choices": [{"text": " x"}], "usage": {"completion_tokens": tokens}}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the probe gave up first (the "hang" mode)

    def do_GET(self):  # noqa: N802  (http.server's name)
        if self.path != "/metrics" or self.headers.get("Authorization") != "Bearer " + KEY or _Engine.metrics is None:
            self.send_response(401 if self.path == "/metrics" and _Engine.metrics is not None else 404)
            self.end_headers()
            return
        body = _Engine.metrics.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def engine_url():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "vllm_api_key"
    path.write_text(KEY + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.mark.parametrize("mode, key, ok, error", [
    ("ok", KEY, True, ""),
    ("ok", "wrong", False, "HTTP 401"),
    ("empty", KEY, False, "an answer without a token"),
    ("hang", KEY, False, "no token within 1 s"),
])
def test_probe_needs_a_token_within_the_deadline(engine_url, tmp_path, mode, key, ok, error):
    _Engine.mode = mode
    path = tmp_path / "key"
    path.write_text(key)
    result = service.probe({"url": engine_url, "api_key_file": str(path), "model": "m", "deadline_s": 1})
    assert (result["ok"], result["error"]) == (ok, error)
    assert KEY not in json.dumps(result)


def test_probe_without_the_key_file_says_so(engine_url, tmp_path):
    result = service.probe({"url": engine_url, "api_key_file": str(tmp_path / "absent"), "model": "m", "deadline_s": 1})
    assert not result["ok"] and result["error"] == "cannot read the API key file: No such file or directory"


def test_probe_of_a_closed_port_fails():
    result = service.probe({"url": "http://127.0.0.1:9", "api_key_file": __file__, "model": "m", "deadline_s": 1})
    assert not result["ok"] and "refused" in result["error"]


@pytest.mark.parametrize("request_text, expected", [
    ("look", ("look", None)),
    ("stop dgxspark-ray", ("stop", "dgxspark-ray")),
    ("start dgxspark-vllm", ("start", "dgxspark-vllm")),
])
def test_node_ctl_takes_its_three_verbs(request_text, expected):
    assert node_ctl.parse_request(request_text, ["dgxspark-ray", "dgxspark-vllm"]) == expected


@pytest.mark.parametrize("request_text, message", [
    ("stop sshd", "stop: 'sshd' is not a container of the serving group here (dgxspark-ray)"),
    ("rm -f dgxspark-ray", "refused 'rm -f dgxspark-ray': only 'look', 'stop NAME' and 'start NAME' are allowed"),
    ("look; reboot", "refused 'look; reboot'"),
    ("", "refused ''"),
    ("start 'dgxspark-ray", "unreadable request"),
    ("start dgxspark-ray extra", "only 'look', 'stop NAME' and 'start NAME' are allowed"),
])
def test_node_ctl_refuses_everything_else(request_text, message):
    with pytest.raises(node_ctl.Refused) as refused:
        node_ctl.parse_request(request_text, ["dgxspark-ray"])
    assert message in str(refused.value)


def test_node_ctl_refuses_over_ssh_with_exit_code_2(tmp_path, monkeypatch, capsys):
    config = tmp_path / "node_ctl.json"
    config.write_text(json.dumps({"containers": ["dgxspark-ray"]}))
    monkeypatch.setenv("DGXSPARK_NODE_CTL_CONFIG", str(config))
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", "docker rm -f dgxspark-ray")
    assert node_ctl.main(["look"]) == 2  # the forced command reads the SSH request, not its own arguments
    assert "refused" in capsys.readouterr().err


@pytest.mark.parametrize("text, seconds", [
    ("2026-11-27T02:31:13.123456789Z", 1795746673.123456789),
    ("2026-11-27T02:31:13Z", 1795746673),
    ("0001-01-01T00:00:00Z", None),
    ("", None),
    ("garbage", None),
])
def test_docker_timestamps(text, seconds):
    assert node_ctl.stamp_seconds(text) == (pytest.approx(seconds) if seconds else None)


DEAD_ENGINE_LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "supervisor",
                               "vllm_0.32_cpu_engine_dead_after_logprobs.log")


def _dead_engine_lines():
    with open(DEAD_ENGINE_LOG, encoding="utf-8") as handle:
        return handle.read().splitlines()


@pytest.mark.parametrize("lines, expected", [
    # The lab's engine killed by one request (recorded): the 500 it answered, not the shutdown lines after it.
    (_dead_engine_lines(), {"time": "2026-12-06T03:33:04Z", "method": "POST", "path": "/v1/completions", "status": 500,
                            "client": "172.31.240.1"}),
    # As Docker gave them: each line ends in CR LF (the container has a TTY).
    ([line + "\r" for line in _dead_engine_lines()], {"time": "2026-12-06T03:33:04Z", "method": "POST",
                                                      "path": "/v1/completions", "status": 500, "client": "172.31.240.1"}),
    # Before it, the last request is the supervisor's own probe; the scrapes of /metrics after it do not count.
    (_dead_engine_lines()[:7], {"time": "2026-12-06T03:33:00Z", "method": "POST", "path": "/v1/completions", "status": 200,
                                "client": "127.0.0.1"}),
    ([line for line in _dead_engine_lines() if "/v1/" not in line], None),
    ([], None),
])
def test_the_last_request_the_api_logged(lines, expected):
    assert node_ctl.last_request(lines) == expected


@pytest.mark.parametrize("started_at, expected", [
    # Docker keeps the log of a container's earlier runs: a start that failed after a life that served must not be
    # taken for one that served (the lab's crash loop: the engine's old requests were still in the last 400 lines).
    ("2026-12-06T03:33:05.000000000Z", None),
    ("2026-12-06T03:33:01.000000000Z", {"time": "2026-12-06T03:33:04Z", "method": "POST", "path": "/v1/completions",
                                        "status": 500, "client": "172.31.240.1"}),
])
def test_only_the_requests_of_the_container_s_last_run_count(started_at, expected):
    assert node_ctl.last_request(_dead_engine_lines(), node_ctl.stamp_seconds(started_at)) == expected


def test_container_view_and_meminfo_from_real_output_shapes():
    inspected = {"RestartCount": 2,
                 "State": {"Status": "exited", "Running": False, "ExitCode": 0, "StartedAt": "2026-11-27T02:00:00.5Z"}}
    view = node_ctl.container_view(inspected, "2026-11-27T02:31:13.000000000Z \x1b[0;36m(EngineCore pid=7)\x1b[0;0m Loading shard 2/4",
                                   1795746683.0)
    assert view == {"running": False, "status": "exited", "exit_code": 0, "started_at": "2026-11-27T02:00:00.5Z",
                    "restart_count": 2, "last_log_age_s": 10.0,
                    "last_log_line": "(EngineCore pid=7) Loading shard 2/4"}
    assert node_ctl.mem_available_kib("MemTotal:       127601940 kB\nMemAvailable:   119534284 kB\n") == 119534284
    assert node_ctl.mem_available_kib("MemTotal: 1 kB\n") is None


# ------------------------------------------------------------------ a simulated group
FAKE_NODE_CTL = r'''
import json, os, sys
node, state_file = sys.argv[1], sys.argv[2]
words = sys.argv[3:]
with open(state_file) as handle:
    world = json.load(handle)
world["calls"].append([node] + words)
if words == ["look"]:
    if node in world["down"]:
        sys.stderr.write("ssh: connect to host %s port 22: No route to host\n" % node)
        sys.exit(255)
    containers = dict((name, dict(c, last_log_age_s=1.0)) for name, c in world["containers"].items() if name.startswith(node + "/"))
    print(json.dumps({"containers": dict((n.split("/", 1)[1], c) for n, c in containers.items()),
                      "mem_available_kib": world["mem"].get(node, 200 * 1024 * 1024)}))
else:
    verb, name = words
    c = world["containers"][node + "/" + name]
    c["running"] = verb == "start"
    if verb == "start":
        world["starts"] += 1
        c["started_at"] = "start-%d" % world["starts"]
with open(state_file, "w") as handle:
    json.dump(world, handle)
'''


@pytest.fixture
def group(tmp_path, engine_url, key_file):
    """A supervisor over two simulated nodes (alpha: Ray head and the engine; beta: a Ray worker)."""
    fake = tmp_path / "fake_node_ctl.py"
    fake.write_text(FAKE_NODE_CTL)
    world = tmp_path / "world.json"
    running = {"running": True, "exit_code": 0, "started_at": "deploy"}
    world.write_text(json.dumps({"calls": [], "down": [], "mem": {}, "starts": 0, "containers": {
        "alpha/ray": dict(running), "beta/ray": dict(running), "alpha/vllm": dict(running)}}))
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    # The deadline leaves room for a loaded machine (make test runs this beside two labs); "hang" answers after 2 s. A
    # look is a Python process started here: on a machine whose run queue reached 119 (a full run beside a lab), one took
    # over the 20 s a look gets by default, and the node counted as unreachable; the simulated nodes get 600 s.
    config = {"interval_s": 30, "deadline_s": 1.0, "look_timeout_s": 600, "failures_to_restart": 2, "grace_s": 60, "stall_s": 900,
              "frozen_s": 120, "budget_restarts": 2, "budget_window_s": 3600, "memory_wait_s": 600,
              "crash_budget_restarts": 10, "crash_backoff_s": 30, "crash_backoff_max_s": 600,
              "memory_needed_kib": {"alpha": 100 * 1024 * 1024, "beta": 100 * 1024 * 1024},
              "group": [{"node": "alpha", "container": "ray"}, {"node": "beta", "container": "ray"},
                        {"node": "alpha", "container": "vllm", "engine": True}],
              "url": engine_url, "api_key_file": key_file, "model": "m", "state_dir": str(state_dir),
              "node_ctl": str(fake), "nodes": {"alpha": {"local": True}, "beta": {"local": True}}}

    def command(config_, node, words):
        return [sys.executable, str(fake), node, str(world)] + list(words)

    clock = {"now": 1000.0}
    out = io.StringIO()
    supervisor = service.Supervisor(config, clock=lambda: clock["now"], sleep=lambda s: None, out=out)
    supervisor.world = lambda: json.loads(world.read_text())

    def set_world(**changes):
        data = json.loads(world.read_text())
        for key, value in changes.items():
            if key == "stopped":
                for name in value:
                    data["containers"][name]["running"] = False
            else:
                data[key] = value
        world.write_text(json.dumps(data))
    supervisor.set_world, supervisor.clock_ref, supervisor.out_text = set_world, clock, out.getvalue
    original = service.node_command
    service.node_command = command
    yield supervisor
    service.node_command = original


def acts(supervisor):
    """The stops and starts the simulated nodes received, in order."""
    return [" ".join(call) for call in supervisor.world()["calls"] if call[1] != "look"]


def test_a_healthy_group_is_probed_and_reported(group):
    _Engine.mode = "ok"
    assert group.step() is None
    report = json.load(open(os.path.join(group.config["state_dir"], "report.json")))
    assert report["phase"] == "serving" and report["last_probe"]["ok"] and report["budget_left"] == 2
    assert oct(os.stat(os.path.join(group.config["state_dir"], "report.json")).st_mode & 0o777) == "0o644"
    assert KEY not in json.dumps(report) and acts(group) == []


def test_an_engine_that_exited_restarts_the_whole_group_in_order(group):
    _Engine.mode = "ok"
    group.step()
    group.set_world(stopped=["alpha/vllm"])
    group.clock_ref["now"] += 30
    assert group.step()[0] == "start"
    assert acts(group) == ["alpha stop vllm", "beta stop ray", "alpha stop ray",
                           "alpha start ray", "beta start ray", "alpha start vllm"]
    # It had served: a crash after serving, in the crash budget.
    assert group.state["engine_started_at"] == "start-3" and group.state["crashes"] == [1030.0] and group.state["restarts"] == []
    assert "restarting the group: container vllm on alpha is not running (exit code 0)" in group.out_text()


def test_a_hung_engine_restarts_after_the_probes_then_the_budget_ends_it(group):
    _Engine.mode = "hang"
    for _look in range(2):  # grace (60 s) over, then 2 failed probes: a restart
        group.clock_ref["now"] += 61
        group.step()
    assert group.state["restarts"] == [1122.0] and group.state["phase"] == "starting"
    group.clock_ref["now"] += 61
    group.step()  # a fresh grace after the restart: this one does not count
    for _look in range(2):
        group.clock_ref["now"] += 61
        group.step()
    assert len(group.state["restarts"]) == 2
    for _look in range(3):
        group.clock_ref["now"] += 61
        group.step()
    assert group.state["phase"] == "gave_up"
    assert acts(group)[-3:] == ["alpha stop vllm", "beta stop ray", "alpha stop ray"]  # left stopped
    group.clock_ref["now"] += 61
    assert group.step() is None and group.state["phase"] == "gave_up"  # and stays so
    report = json.load(open(os.path.join(group.config["state_dir"], "report.json")))
    assert report["budget_left"] == 0 and "the restart budget is spent (2 restarts in 3600 s)" in report["reason"]
    assert "gave up, the group is left stopped" in report["messages"][-1]


def test_no_start_while_a_node_lacks_memory(group):
    _Engine.mode = "ok"
    group.set_world(stopped=["beta/ray"], mem={"beta": 10 * 1024 * 1024})
    assert group.step()[0] == "wait_memory"
    assert acts(group) == ["alpha stop vllm", "beta stop ray", "alpha stop ray"]
    group.set_world(mem={})
    group.clock_ref["now"] += 30
    assert group.step()[0] == "start"


def test_paused_it_looks_but_does_not_act_and_resume_lets_it_act(group, tmp_path, monkeypatch, capsys):
    _Engine.mode = "ok"
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(group.config))
    monkeypatch.setenv("DGXSPARK_SUPERVISOR_CONFIG", str(config_file))
    assert service.main(["pause", "alice:", "a", "cable"]) == 0
    assert open(os.path.join(group.config["state_dir"], "paused")).read() == "alice: a cable\n"
    group.set_world(stopped=["alpha/vllm"])
    assert group.step() is None and group.state["phase"] == "paused"
    assert acts(group) == []
    assert service.main(["resume"]) == 0 and "resumed" in capsys.readouterr().out
    group.clock_ref["now"] += 30
    assert group.step()[0] == "start"
    assert not os.path.exists(os.path.join(group.config["state_dir"], "resume"))  # the request was taken


def test_a_pause_in_the_middle_of_a_restart_stops_it_there(group, monkeypatch):
    _Engine.mode = "ok"
    group.set_world(stopped=["alpha/vllm"])
    calls = []
    real_call = service.node_call

    def pause_after_the_first_stop(config, node, words, timeout):
        if words[0] == "stop":
            calls.append(words)
        if len(calls) == 2:  # a deploy pauses it while it stops the group
            open(group.paused_file, "w").write("deploy: phase ray\n")
        return real_call(config, node, words, timeout)
    monkeypatch.setattr(service, "node_call", pause_after_the_first_stop)
    group.step()
    assert acts(group) == ["alpha stop vllm", "beta stop ray"]  # no more stops, no start
    assert "paused during the stop: the rest of the group is left as it is" in group.out_text()


def test_an_unreachable_node_is_named_in_the_report(group):
    group.set_world(down=["beta"], mem={"beta": 0})
    group.step()
    report = json.load(open(os.path.join(group.config["state_dir"], "report.json")))
    assert report["nodes"]["beta"] == {"reachable": False, "error": "ssh: connect to host beta port 22: No route to host",
                                       "mem_available_kib": None, "containers": {}}
    assert report["phase"] == "restarting" and "beta cannot be read" in report["reason"]


def test_ssh_command_of_a_remote_node():
    config = {"node_ctl": "/x/node_ctl.py", "nodes": {"spark-beta": {"address": "10.0.0.2"}},
              "ssh": {"key": "/etc/dgxspark/supervisor/id_ed25519", "known_hosts": "/etc/dgxspark/supervisor/known_hosts"}}
    argv = service.node_command(config, "spark-beta", ["stop", "dgxspark-ray"])
    assert argv[0] == "ssh" and argv[-2:] == ["root@10.0.0.2", "stop dgxspark-ray"]
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert "ControlPath" not in " ".join(argv)  # no state directory: nowhere to keep a connection


def test_ssh_command_keeps_one_connection_per_node_in_the_state_directory():
    config = {"node_ctl": "/x/node_ctl.py", "nodes": {"spark-beta": {"address": "10.0.0.2"}}, "state_dir": "/var/lib/dgxspark/supervisor",
              "ssh": {"key": "/etc/dgxspark/supervisor/id_ed25519", "known_hosts": "/etc/dgxspark/supervisor/known_hosts"}}
    argv = service.node_command(config, "spark-beta", ["look"])
    options = dict(argv[i + 1].split("=", 1) for i, word in enumerate(argv) if word == "-o")
    assert options["ControlMaster"] == "auto" and options["ControlPath"] == "/var/lib/dgxspark/supervisor/ssh-%C"
    assert int(options["ServerAliveInterval"]) * int(options["ServerAliveCountMax"]) <= 15
    assert argv[-2:] == ["root@10.0.0.2", "look"]


METRICS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "supervisor")


def recorded_metrics(name, running=None, tokens=None):
    """A recorded /metrics of the lab's vLLM 0.32 (tests/unit/fixtures/supervisor/README.md), its figures changed."""
    with open(os.path.join(METRICS, name)) as handle:
        text = handle.read()
    if running is not None:
        text = re.sub(r'^(vllm:num_requests_running\{[^}]*\}) \S+$', r'\g<1> %s' % running, text, flags=re.M)
    if tokens is not None:
        text = re.sub(r'^(vllm:generation_tokens_total\{[^}]*\}) \S+$', r'\g<1> %s' % tokens, text, flags=re.M)
    return text


@pytest.mark.parametrize("name, expected", [
    ("vllm_0.32_cpu_metrics_idle.txt", {"running": 0.0, "waiting": 0.0, "tokens": 47.0}),
    ("vllm_0.32_cpu_metrics_busy.txt", {"running": 2.0, "waiting": 0.0, "tokens": 112.0}),
])
def test_the_load_is_read_from_vllms_own_metrics(name, expected):
    # waiting_by_reason and generation_tokens_created are other series: not summed in
    assert service.parse_load(recorded_metrics(name)) == expected


def test_a_load_without_one_of_its_series_is_unknown():
    text = recorded_metrics("vllm_0.32_cpu_metrics_busy.txt")
    assert service.parse_load("\n".join(l for l in text.splitlines() if not l.startswith("vllm:num_requests_running"))) is None
    assert service.parse_load("") is None


def test_a_deadlocked_engine_is_restarted_though_its_probe_only_waits(group):
    """Requests run, the token counter stands (eugr/spark-vllm-docker #260): the probe would wait behind them."""
    _Engine.mode = "ok"
    _Engine.metrics = recorded_metrics("vllm_0.32_cpu_metrics_busy.txt", running=4, tokens=900)
    try:
        assert group.step() is None  # serving, tokens at 900
        group.clock_ref["now"] += 61
        assert group.step() is None
        group.clock_ref["now"] += 61  # 122 s with 4 requests running and no new token: frozen_s is 120
        assert group.step()[0] == "start"
        assert "restarting the group: 4 requests have run for 122 s with no token generated" in group.out_text()
    finally:
        _Engine.metrics = None


def test_a_busy_engine_whose_probe_times_out_is_left_alone_while_tokens_come(group):
    _Engine.mode = "hang"
    try:
        for index in range(4):
            _Engine.metrics = recorded_metrics("vllm_0.32_cpu_metrics_busy.txt", running=8, tokens=100 + 50 * index)
            group.clock_ref["now"] += 61
            assert group.step() is None
        assert group.state["failures"] == 0 and "busy, not hung" in group.state["reason"] and acts(group) == []
    finally:
        _Engine.metrics = None


def test_probe_over_tls_verifies_the_planned_ca_for_the_planned_name(tmp_path, key_file):
    """The engine serves a certificate for the address clients call, not 127.0.0.1: the probe checks that name."""
    import ssl
    from ansible_collections.dgxspark.cluster.plugins.plugin_utils import api_tls
    files = api_tls.generated_files(str(tmp_path / "tls"), ["10.0.0.5"], "lab")
    other = api_tls.generated_files(str(tmp_path / "other"), ["10.0.0.5"], "other")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files["cert_file"], files["key_file"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Engine.mode = "ok"
    config = {"url": "https://127.0.0.1:%d" % server.server_address[1], "api_key_file": key_file, "model": "m", "deadline_s": 2}
    try:
        assert service.probe(dict(config, tls={"ca_file": files["ca_file"], "server_name": "10.0.0.5"}))["ok"]
        for tls in ({"ca_file": other["ca_file"], "server_name": "10.0.0.5"}, {"ca_file": files["ca_file"], "server_name": None}):
            result = service.probe(dict(config, tls=tls))
            assert not result["ok"] and "CERTIFICATE_VERIFY_FAILED" in result["error"], (tls, result)
    finally:
        server.shutdown()
