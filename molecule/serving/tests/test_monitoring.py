# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of the monitoring role in both serving scenarios: the node exporter on each node's rail-1 address
only, with the collection's gauges fresh in its output; Prometheus on the head behind its password (basic auth) with the
alert rules loaded, its own 0600 copy of the API key, and every target up (both node exporters and the engine's /metrics, which needs the key).
(Dashboards against live data and a staged alert: tests/lab/test_monitoring_lab.py.)"""

from __future__ import annotations

import json
import time

from conftest import VLLM, node_container

testinfra_hosts = ["ansible://spark-alpha", "ansible://spark-beta"]
RAIL1 = {"spark-alpha": "192.168.100.10", "spark-beta": "192.168.100.11"}


PASSWORD_FILE = "/etc/dgxspark/secrets/prometheus_password"
# GET argv[1] with Prometheus' user and the password read from its 0600 file (never in argv) -> the body, or
# `HTTP <status>` when refused. Python's urllib: the nodes have no curl.
FETCH = """
import base64, sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1])
if sys.argv[2] == "auth":
    secret = open("%s").read().strip()
    request.add_header("Authorization", "Basic " + base64.b64encode(("dgxspark:" + secret).encode()).decode())
try:
    sys.stdout.write(urllib.request.urlopen(request, timeout=10).read().decode())
except urllib.error.HTTPError as error:
    sys.stdout.write("HTTP %%d" %% error.code)
""" % PASSWORD_FILE


def fetch(host, url, auth=True):
    """GET url from the node itself, with Prometheus' password unless auth is false -> the body (or `HTTP <status>`)."""
    return host.check_output("python3 -c '%s' '%s' %s" % (FETCH.replace("'", "'\\''"), url, "auth" if auth else "none"))


def listening(host, port):
    return sorted(line.split()[3] for line in host.check_output("ss -Hltn 'sport = :%d'" % port).splitlines())


def test_the_node_exporter_listens_on_rail_1_only_and_serves_the_gauges(host, backend):
    node = host.backend.get_hostname()
    assert host.service("prometheus-node-exporter").is_running and host.service("prometheus-node-exporter").is_enabled
    assert listening(host, 9100) == ["%s:9100" % RAIL1[node]]
    expected = ['dgxspark_container_running{container="%s"} 1' % node_container(backend), "dgxspark_gpu_query_ok 1",
                'dgxspark_gpu_info{driver="', "dgxspark_gpu_sm_clock_max_mhz", "dgxspark_memory_floor_bytes",
                # The collector reads the file without errors (a malformed file would show here as 1).
                "node_textfile_scrape_error 0"]
    if node == "spark-alpha":
        expected += ['dgxspark_container_running{container="%s"} 1' % VLLM, 'dgxspark_supervisor_phase{phase="serving"} 1']
    # The lab writes the gauges every 30 s: a container the converge restarted shows up to 30 s later.
    deadline = time.time() + 75
    while True:
        text = fetch(host, "http://%s:9100/metrics" % RAIL1[node], auth=False)  # the exporter has no password
        missing = [line for line in expected if line not in text]
        if not missing or time.time() > deadline:
            break
        time.sleep(3)
    assert not missing, (missing, [line for line in text.splitlines() if line.startswith(("dgxspark_", "node_textfile"))])


def test_the_gauges_timer_runs_and_its_service_is_hardened(host):
    assert host.service("dgxspark-node-metrics.timer").is_running and host.service("dgxspark-node-metrics.timer").is_enabled
    show = host.check_output("systemctl show dgxspark-node-metrics.service -p ProtectSystem,NoNewPrivileges,Result")
    assert "ProtectSystem=strict" in show and "NoNewPrivileges=yes" in show and "Result=success" in show


def test_prometheus_runs_on_the_head_only_with_its_own_key_copy(host):
    node = host.backend.get_hostname()
    prometheus = host.service("prometheus")
    if node != "spark-alpha":
        assert not prometheus.is_running and listening(host, 9090) == []
        return
    assert prometheus.is_running and prometheus.is_enabled
    # monitoring_prometheus_listen_address 0.0.0.0: Go listens on every address (ss: `*`), the firewall names the port.
    assert listening(host, 9090) in (["*:9090"], ["0.0.0.0:9090"])
    key = host.file("/etc/prometheus/dgxspark_vllm_api_key")
    assert key.user == "prometheus" and key.mode == 0o600
    assert key.content_string == host.file("/etc/dgxspark/secrets/vllm_api_key").content_string
    # The key is in a file Prometheus reads, never in its configuration or its command line.
    assert key.content_string not in host.file("/etc/prometheus/prometheus.yml").content_string
    assert key.content_string not in host.check_output("ps -eo args")


def test_prometheus_asks_for_its_password(host):
    """Issue 49: Prometheus answers its API with the password only (basic auth); its web configuration holds the hash."""
    if host.backend.get_hostname() != "spark-alpha":
        return
    assert fetch(host, "http://127.0.0.1:9090/api/v1/query?query=up", auth=False) == "HTTP 401"
    assert json.loads(fetch(host, "http://127.0.0.1:9090/api/v1/query?query=up"))["status"] == "success"
    password = host.file(PASSWORD_FILE)
    assert (password.user, password.group, password.mode) == ("root", "root", 0o600)
    web = host.file("/etc/prometheus/dgxspark-web.yml")
    assert (web.user, web.group, web.mode) == ("root", "prometheus", 0o640)
    assert web.content_string.count("$2b$") == 1 and password.content_string not in web.content_string
    assert "--web.config.file=/etc/prometheus/dgxspark-web.yml" in host.check_output("ps -eo args")


def test_prometheus_has_the_rules_and_every_target_up(host):
    if host.backend.get_hostname() != "spark-alpha":
        return
    rules = json.loads(fetch(host, "http://127.0.0.1:9090/api/v1/rules"))["data"]["groups"]
    alerts = set(rule["name"] for group in rules for rule in group["rules"])
    assert {"DgxsparkEngineDown", "DgxsparkMemoryLow", "DgxsparkRestartLoop", "DgxsparkGpuClockLow"} <= alerts
    deadline = time.time() + 60
    while time.time() < deadline:
        targets = json.loads(fetch(host, "http://127.0.0.1:9090/api/v1/targets"))["data"]["activeTargets"]
        health = sorted((t["labels"]["job"], t["labels"]["node"], t["health"]) for t in targets)
        if all(h == "up" for _, _, h in health) and len(health) == 3:
            break
        time.sleep(3)
    assert health == [("node", "spark-alpha", "up"), ("node", "spark-beta", "up"), ("vllm", "spark-alpha", "up")], targets
