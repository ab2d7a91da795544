"""dgxspark.cluster supervisor: keeps the serving group alive without Ansible (dgxspark-supervisor.service, the head).

    dgxspark_supervisor.py run [CONFIG]         the service: look, decide (dgxspark_supervisor_core), act, report
    dgxspark_supervisor.py pause [WHO...]       stop acting until resumed (the group is left as it is)
    dgxspark_supervisor.py resume               act again (after a pause or a give-up): the group is taken as it is,
                                                with a fresh grace and budget
    dgxspark_supervisor.py report               the last report, as JSON

Every interval it looks at the whole group: the engine's load (requests running and waiting, tokens generated: its
/metrics) and one completion of one token with the API key (read from its 0600 file at each probe, never logged)
within a deadline; each node's serving containers and MemAvailable through
dgxspark_node_ctl.py (locally on the head, over SSH with the supervisor's own key elsewhere). It acts on the group as a
whole: stop (the engine first), wait for memory, start in order (ranks, then the engine). Its report,
<state_dir>/report.json, is what status.yml shows.
"""

import functools
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dgxspark_supervisor_core as core  # noqa: E402  pylint: disable=wrong-import-position

CONFIG = "/etc/dgxspark/supervisor/config.json"
MESSAGES_KEPT = 20


def load_config(path):
    with open(path) as handle:
        config = json.load(handle)
    errors = core.check_config(config)
    for key in ("url", "api_key_file", "model", "state_dir", "nodes", "node_ctl"):
        if key not in config:
            errors.append("missing key %r" % key)
    if errors:
        raise SystemExit("dgxspark-supervisor: %s: %s" % (path, "; ".join(errors)))
    return config


class _NamedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS that checks the certificate for the plan's server name, though it connects to 127.0.0.1."""

    def __init__(self, host, server_name=None, **kwargs):
        super().__init__(host, **kwargs)
        self._server_name = server_name

    def connect(self):
        http.client.HTTPConnection.connect(self)  # TCP only; TLS below
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name or self.host)


class _NamedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, tls):
        self._tls_context = ssl.create_default_context(cafile=tls.get("ca_file") or None)
        self._server_name = tls.get("server_name")
        super().__init__(context=self._tls_context)

    def https_open(self, req):
        return self.do_open(functools.partial(_NamedHTTPSConnection, server_name=self._server_name), req,
                            context=self._tls_context)


def _open(config, request, timeout):
    """urlopen, verifying the engine's certificate against the plan's CA for its server name when it serves TLS."""
    handlers = [urllib.request.ProxyHandler({})] + ([_NamedHTTPSHandler(config["tls"])] if config.get("tls") else [])
    return urllib.request.build_opener(*handlers).open(request, timeout=timeout)


def probe(config):
    """{ok, latency_s, error}: one completion of one token, with the key, within the deadline."""
    started = time.time()
    try:
        with open(config["api_key_file"]) as handle:
            key = handle.read().strip()
    except OSError as error:
        return {"ok": False, "latency_s": 0.0, "error": "cannot read the API key file: %s" % error.strerror}
    body = json.dumps({"model": config["model"], "prompt": "1", "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(config["url"].rstrip("/") + "/v1/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    try:
        with _open(config, request, config["deadline_s"]) as response:
            answer = json.loads(response.read().decode("utf-8", "replace"))
        tokens = (answer.get("usage") or {}).get("completion_tokens", 0)
        ok, why = tokens >= 1, "" if tokens >= 1 else "an answer without a token"
    except urllib.error.HTTPError as error:
        ok, why = False, "HTTP %d" % error.code
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = str(getattr(error, "reason", error))
        ok, why = False, ("no token within %s s" % config["deadline_s"]) if "timed out" in reason else reason
    return {"ok": ok, "latency_s": round(time.time() - started, 3), "error": why}


# The engine's load, from its /metrics (Prometheus text): what tells a busy engine from a hung one (the core says how).
LOAD_TIMEOUT_S = 2
LOAD_METRICS = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
                "vllm:generation_tokens_total": "tokens"}


def parse_load(text):
    """{running, waiting, tokens}, each summed over the engine's series, from vLLM's /metrics; None when one is missing."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in LOAD_METRICS:
            continue
        rest = line[line.rindex("}") + 1:] if "{" in line else line[len(name):]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        found[LOAD_METRICS[name]] = found.get(LOAD_METRICS[name], 0.0) + value
    return found if len(found) == len(LOAD_METRICS) else None


def read_load(config):
    """The engine's load from its /metrics with the key (the API guard covers it), or None when it cannot be read."""
    try:
        with open(config["api_key_file"]) as handle:
            key = handle.read().strip()
        request = urllib.request.Request(config["url"].rstrip("/") + "/metrics", headers={"Authorization": "Bearer " + key})
        # A short timeout: /metrics answers at once from a live server, and a hung one must not delay the probe's count.
        with _open(config, request, min(LOAD_TIMEOUT_S, config["deadline_s"])) as response:
            return parse_load(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def node_command(config, node, words):
    """The argv that runs dgxspark_node_ctl.py with `words` on `node`: directly on the head, over SSH elsewhere."""
    target = config["nodes"][node]
    if target.get("local"):
        return [sys.executable, config["node_ctl"]] + list(words)
    ssh = config["ssh"]
    # One connection per node, kept between looks (ControlMaster in the state directory): a key exchange every interval
    # on every node costs more CPU than the look itself. A node that goes away ends its connection within 15 s
    # (ServerAlive), and the next look opens a new one.
    reuse = []
    if config.get("state_dir"):
        reuse = ["-o", "ControlMaster=auto", "-o", "ControlPath=%s/ssh-%%C" % config["state_dir"], "-o", "ControlPersist=300",
                 "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
    options = ["-F", "/dev/null", "-i", ssh["key"], "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
               "-o", "UserKnownHostsFile=" + ssh["known_hosts"], "-o", "ConnectTimeout=%d" % ssh.get("connect_timeout_s", 5)]
    return ["ssh"] + options + reuse + ["-p", str(target.get("port", 22)), "root@" + target["address"], " ".join(words)]


def node_call(config, node, words, timeout):
    """(ok, stdout, error text)."""
    try:
        done = subprocess.run(node_command(config, node, words), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False, "", "no answer within %d s" % timeout
    error = (done.stderr.strip().splitlines() or ["exit code %d" % done.returncode])[-1]
    return done.returncode == 0, done.stdout, "" if done.returncode == 0 else error


def look_nodes(config):
    """{node: {"reachable", "error", "containers", "mem_available_kib"}} for every node of the group."""
    seen = {}
    for node in config["nodes"]:
        ok, out, error = node_call(config, node, ["look"], timeout=config.get("look_timeout_s", 20))
        try:
            view = json.loads(out) if ok else None
        except ValueError:
            ok, view, error = False, None, "unreadable answer: %r" % out[:200]
        seen[node] = dict(view, reachable=True, error="") if ok else {"reachable": False, "error": error}
    return seen


def engine_view(config, nodes):
    """What the look saw of the engine container (the group's last member): {} when its node or it is missing."""
    member = config["group"][-1]
    return ((nodes.get(member["node"]) or {}).get("containers") or {}).get(member["container"]) or {}


def look(config, paused, now, resumed=False):
    nodes = look_nodes(config)
    container = engine_view(config, nodes)
    serving = container.get("running") and not paused
    load = answer = None
    if serving:
        # The load beside the probe, not before it: a hung server's /metrics must not delay the probe's count.
        found = []
        reader = threading.Thread(target=lambda: found.append(read_load(config)))
        reader.start()
        answer = probe(config)
        reader.join()
        load = found[0] if found else None
    return {"now": now, "paused": paused, "resumed": resumed, "nodes": nodes,
            "load": load,
            "probe": answer,
            "engine_started_at": container.get("started_at") or None,
            "last_log_age_s": container.get("last_log_age_s")}


class Supervisor(object):
    def __init__(self, config, clock=time.time, sleep=time.sleep, out=sys.stdout):
        self.config, self.clock, self.sleep, self.out = config, clock, sleep, out
        self.state = core.new_state(clock())
        self.messages = []
        self.seen = {}

    @property
    def paused_file(self):
        return os.path.join(self.config["state_dir"], "paused")

    def take_resume(self):
        """Whether an operator asked to resume since the last look (the request is consumed)."""
        try:
            os.unlink(os.path.join(self.config["state_dir"], "resume"))
            return True
        except OSError:
            return False

    def say(self, text):
        line = "%s %s" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock())), text)
        self.messages = (self.messages + [line])[-MESSAGES_KEPT:]
        self.out.write(text + "\n")
        self.out.flush()

    def act_on_group(self, verb):
        """Stop (the engine first) or start (in order) every container of the group; False if one failed."""
        members = list(reversed(self.config["group"])) if verb == "stop" else self.config["group"]
        ok_all = True
        for member in members:
            if os.path.exists(self.paused_file):
                # A deploy (or an operator) paused it in the middle: whoever paused it now owns the group.
                self.say("paused during the %s: the rest of the group is left as it is" % verb)
                return False
            ok, _out, error = node_call(self.config, member["node"], [verb, member["container"]],
                                        timeout=self.config.get("act_timeout_s", 120))
            if not ok:
                ok_all = False
                self.say("%s %s on %s failed: %s" % (verb, member["container"], member["node"], error))
        return ok_all

    def step(self):
        """One look, one decision, its action; returns the action."""
        paused = os.path.exists(self.paused_file)
        seen = look(self.config, paused, self.clock(), resumed=not paused and self.take_resume())
        phase_before = self.state["phase"]
        self.state, action = core.decide(self.config, self.state, seen)
        if action and action[0] == "stop":
            self.say("restarting the group: %s" % action[1])
            self.act_on_group("stop")
            seen = look(self.config, paused, self.clock())
            self.state, action = core.decide(self.config, self.state, seen)
        if action and action[0] == "start":
            self.act_on_group("start")
            started = engine_view(self.config, look_nodes(self.config))
            self.state = core.restarted(self.state, started.get("started_at"))
            self.say("group started again (in the last %d s: %d restarts, budget %d; %d after serving, budget %d)" % (
                self.config["budget_window_s"], len(self.state["restarts"]), self.config["budget_restarts"],
                len(self.state["crashes"]), self.config["crash_budget_restarts"]))
        elif action and action[0] == "give_up":
            self.say_why_stopped(seen)
            self.act_on_group("stop")
            self.say("gave up, the group is left stopped: %s" % action[1])
        elif action and action[0] == "wait_memory" and phase_before != core.RESTARTING:
            self.say(action[1])
        elif self.state["phase"] != phase_before:
            self.say("%s -> %s%s" % (phase_before, self.state["phase"],
                                     (": " + self.state["reason"]) if self.state["reason"] else ""))
        self.seen = seen
        self.write_report()
        return action

    def say_why_stopped(self, seen):
        """The last log line of each container of the group that is not running (what status.yml quotes)."""
        for member in self.config["group"]:
            view = ((seen["nodes"].get(member["node"]) or {}).get("containers") or {}).get(member["container"])
            if view and not view.get("running"):
                self.say("%s on %s exited (code %s); its last log line: %s" % (
                    member["container"], member["node"], view.get("exit_code"), view.get("last_log_line") or "(none)"))

    def report(self):
        recent = core.restarts_in_window(self.config, self.state, self.clock())
        crashes = core.restarts_in_window(self.config, self.state, self.clock(), "crashes")
        nodes = dict((node, {"reachable": view.get("reachable"), "error": view.get("error", ""),
                             "mem_available_kib": view.get("mem_available_kib"),
                             "containers": view.get("containers", {})})
                     for node, view in (self.seen.get("nodes") or {}).items())
        paused_by = ""
        if self.state["phase"] == core.PAUSED:
            try:
                with open(self.paused_file) as handle:
                    paused_by = handle.read().strip()
            except OSError:
                pass
        return {"time": self.clock(), "phase": self.state["phase"], "since": self.state["since"], "paused_by": paused_by,
                "reason": self.state["reason"], "last_probe": self.state["last_probe"],
                "serving_since": self.state.get("serving_since"), "interval_s": self.config["interval_s"],
                "restarts": recent, "budget_restarts": self.config["budget_restarts"],
                "budget_window_s": self.config["budget_window_s"],
                "budget_left": max(0, self.config["budget_restarts"] - len(recent)),
                "crashes": crashes, "crash_budget_restarts": self.config["crash_budget_restarts"],
                "crash_budget_left": max(0, self.config["crash_budget_restarts"] - len(crashes)),
                "start_after": self.state.get("start_after"),
                "memory_short": self.state.get("memory", {}), "nodes": nodes, "messages": self.messages}

    def write_report(self):
        path = os.path.join(self.config["state_dir"], "report.json")
        with open(path + ".new", "w") as handle:
            json.dump(self.report(), handle, sort_keys=True)
        os.chmod(path + ".new", 0o644)
        os.replace(path + ".new", path)

    def run(self):
        self.say("supervising %s (%d containers), interval %s s" % (
            self.config["url"], len(self.config["group"]), self.config["interval_s"]))
        while True:
            started = self.clock()
            self.step()
            self.sleep(max(0.0, self.config["interval_s"] - (self.clock() - started)))


def main(argv):
    command = argv[0] if argv else "run"
    config_path = os.environ.get("DGXSPARK_SUPERVISOR_CONFIG", CONFIG)
    if command == "run" and len(argv) > 1:
        config_path = argv[1]
    config = load_config(config_path)
    paused = os.path.join(config["state_dir"], "paused")
    if command == "run":
        Supervisor(config).run()
    elif command == "pause":
        with open(paused, "w") as handle:
            handle.write((" ".join(argv[1:]) or "an operator") + "\n")
        print("paused: the supervisor leaves the group as it is until `%s resume`" % os.path.basename(sys.argv[0]))
    elif command == "resume":
        # The service takes the request at its next look, after a pause or a give-up alike.
        with open(os.path.join(config["state_dir"], "resume"), "w") as handle:
            handle.write("resume\n")
        if os.path.exists(paused):
            os.unlink(paused)
        print("resumed: at its next look the supervisor takes the group as it is, with a fresh grace and budget")
    elif command == "report":
        with open(os.path.join(config["state_dir"], "report.json")) as handle:
            sys.stdout.write(handle.read() + "\n")
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
