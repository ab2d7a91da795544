"""dgxspark.cluster supervisor: what the supervisor may do on a node, and nothing else.

The forced command of the supervisor's SSH key on every node (authorized_keys: command="...",restrict), and the command
the supervisor runs directly on the head. The request is SSH_ORIGINAL_COMMAND (or the arguments when run by hand):

    look           -> one JSON object: each configured container's state, exit code, start time and the age of its last
                      log line (of one that stopped, also the last request its API logged); the node's MemAvailable
                      (KiB) from the configured meminfo
    stop NAME      -> docker stop NAME      (NAME: a configured container; anything else is refused)
    start NAME     -> docker start NAME

Its configuration, /etc/dgxspark/supervisor/node_ctl.json, names the containers, the meminfo file (a lab node reads a
stand-in) and the stop timeout. Exit codes: 0 done, 2 refused, 1 Docker failed.
"""

import calendar
import json
import os
import re
import shlex
import subprocess
import sys
import time

CONFIG = "/etc/dgxspark/supervisor/node_ctl.json"
DOCKER = "docker"
# Docker's RFC 3339 timestamps, to the second (the fraction and zone "Z" are dropped: Docker writes UTC).
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # vLLM colours its log lines
# uvicorn's access line, as vLLM's API server logs it: 'INFO:     172.31.240.1:48900 - "POST /v1/completions HTTP/1.1" 500 ...'
_ACCESS = re.compile(r'INFO:\s+(?P<client>\S+?):\d+ - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+" (?P<status>\d{3})')
# What the collection itself asks, never the request that took the engine down: its probes and Prometheus's scrapes.
_OWN_PATHS = ("/health", "/metrics")
# Log lines read back from a container that stopped, for its last request (the error's traceback comes after it).
_LOG_LINES_READ = 400


class Refused(Exception):
    """A request the supervisor's key may not make."""


def parse_request(text, containers):
    """(verb, container or None) from the request text; raises Refused for anything but the three verbs."""
    try:
        words = shlex.split(text or "")
    except ValueError as error:
        raise Refused("unreadable request: %s" % error)
    if words == ["look"]:
        return "look", None
    if len(words) == 2 and words[0] in ("stop", "start"):
        if words[1] not in containers:
            raise Refused("%s: %r is not a container of the serving group here (%s)"
                          % (words[0], words[1], ", ".join(containers) or "none"))
        return words[0], words[1]
    raise Refused("refused %r: only 'look', 'stop NAME' and 'start NAME' are allowed" % (text or ""))


def stamp_seconds(text):
    """Seconds since the epoch of a Docker timestamp (2026-11-27T02:31:13.123456789Z), or None."""
    match = _STAMP.match(text or "")
    if not match or text.startswith("0001-"):
        return None
    return calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S")) + float(match.group(2) or 0)


def mem_available_kib(meminfo_text):
    """MemAvailable in KiB from a /proc/meminfo text, or None."""
    for line in meminfo_text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return None


def container_view(inspected, last_log_line, now):
    """The part of `docker inspect NAME` the supervisor reads, plus the age of the last log line in seconds."""
    state = inspected.get("State") or {}
    stamp, _space, text = (last_log_line or "").partition(" ")
    logged = stamp_seconds(stamp)
    return {"running": bool(state.get("Running")), "status": state.get("Status", ""),
            "exit_code": state.get("ExitCode"), "started_at": state.get("StartedAt", ""),
            "restart_count": inspected.get("RestartCount", 0),
            "last_log_age_s": round(now - logged, 1) if logged is not None else None,
            "last_log_line": _COLOUR.sub("", text)[-300:]}


def last_request(log_lines, since=None):
    """The last request that the API logged ({time, method, path, status, client}) in `docker logs --timestamps` lines,
    leaving out the collection's own /health and /metrics; None when there is none. since: the container's last start
    (epoch seconds): Docker keeps the log of its earlier runs, whose requests say nothing of this one."""
    for line in reversed(log_lines):
        stamp, _space, text = line.partition(" ")
        logged_at = stamp_seconds(stamp)
        if since is not None and logged_at is not None and logged_at < since:
            return None
        match = _ACCESS.search(_COLOUR.sub("", text))
        if match and match.group("path").split("?")[0] not in _OWN_PATHS:
            logged = _STAMP.match(stamp)
            return {"time": (logged.group(1) + "Z") if logged else "?", "method": match.group("method"),
                    "path": match.group("path"), "status": int(match.group("status")), "client": match.group("client")}
    return None


def _docker(*args, **kwargs):
    return subprocess.run((DOCKER,) + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          check=False, **kwargs)


def look(config, now=None):
    now = time.time() if now is None else now
    containers = {}
    for name in config["containers"]:
        done = _docker("inspect", name)
        if done.returncode != 0:
            continue  # missing: the supervisor sees it absent
        inspected = json.loads(done.stdout)[0]
        state = inspected.get("State") or {}
        running = bool(state.get("Running"))
        # A container that stopped: enough of its log to name the request that preceded its end. Docker gives its
        # stdout and stderr apart; their timestamps put them back in order.
        logs = _docker("logs", "--timestamps", "--tail", "1" if running else str(_LOG_LINES_READ), name)
        last = sorted(logs.stdout.splitlines() + logs.stderr.splitlines())
        containers[name] = container_view(inspected, last[-1] if last else "", now)
        if not running:
            containers[name]["last_request"] = last_request(last, stamp_seconds(state.get("StartedAt")))
    try:
        with open(config.get("meminfo", "/proc/meminfo")) as handle:
            available = mem_available_kib(handle.read())
    except OSError:
        available = None
    return {"containers": containers, "mem_available_kib": available}


def main(argv):
    with open(os.environ.get("DGXSPARK_NODE_CTL_CONFIG", CONFIG)) as handle:
        config = json.load(handle)
    request = os.environ.get("SSH_ORIGINAL_COMMAND") if "SSH_ORIGINAL_COMMAND" in os.environ else " ".join(argv)
    try:
        verb, name = parse_request(request, config["containers"])
    except Refused as error:
        sys.stderr.write("dgxspark_node_ctl: %s\n" % error)
        return 2
    if verb == "look":
        sys.stdout.write(json.dumps(look(config), sort_keys=True) + "\n")
        return 0
    args = ("stop", "--time", str(config.get("stop_timeout_s", 30)), name) if verb == "stop" else ("start", name)
    done = _docker(*args)
    if done.returncode != 0:
        sys.stderr.write("dgxspark_node_ctl: docker %s: %s\n" % (" ".join(args), done.stderr.strip()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
