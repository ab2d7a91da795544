# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of the fleet_router scenario (issue 51 item 2): the router on spark-alpha, installed offline from the
controller's wheelhouse for the node's own Python and platform, runs hardened (its own system user without capabilities, a
read-only system), keeps the fleet's key out of ps, systemd and the journal, lists both groups' models with the key and
answers 401 without it, routes each model to its own group (the stand-in engines name their node), keeps /metrics behind
the key, and is reachable from the API's networks through the firewall; after a real `nft flush ruleset` its endpoint
comes back without Ansible (the redirect's watch), and the proxy runs fleet_router_workers worker processes. A second
converge that changes nothing restarts nothing: molecule's idempotence step (changed=0; every task of a swap reports a change). A check run of a
change shows it and changes nothing. Last, a converge that changes the router swaps its two instances under a constant stream of requests (streamed and not)
through the router's port: no request fails, and the other instance serves afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import converge_playbook, recap_line

testinfra_hosts = ["ansible://spark-alpha"]
ACTIVE_FILE = "/var/lib/dgxspark/router/active"
MODELS = {"dgxspark-lab/model-a": "spark-alpha", "dgxspark-lab/model-b": "spark-beta"}


@pytest.fixture(name="router", scope="module")
def fixture_router(host):
    """The plan's router as the role reads it."""
    return host.ansible("dgxspark.cluster.cluster_plan", "", check=False)["fleet"]["router"]


@pytest.fixture(name="api_key", scope="module")
def fixture_api_key(router):
    with open(router["api_key_file"], encoding="utf-8") as key_file:
        return key_file.read().strip()


def active(host):
    """The serving instance (a or b) as the role records it, and its unit."""
    name = host.file(ACTIVE_FILE).content_string.strip()
    return name, "dgxspark-router@%s.service" % name


def call(url, key=None, body=None):
    """(status, parsed body or text) of a request from the controller (the lab's management network)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers=dict([("Content-Type", "application/json")]
                                                  + ([("Authorization", "Bearer " + key)] if key else [])))
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
            return response.status, (json.loads(text) if text.startswith("{") else text)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_router_planned_on_the_first_head(router):
    assert router["host"] == "spark-alpha"
    assert sorted(m["served_model_name"] for m in router["models"]) == sorted(MODELS)


def test_venv_made_from_the_wheelhouse_for_the_node(host):
    python = json.loads(host.check_output("/usr/bin/python3 -c 'import json,platform,os; print(json.dumps("
                                          "[platform.python_version(), platform.machine()]))'"))
    tag = "cp%s%s" % tuple(python[0].split(".")[:2])
    marker = host.file("/usr/local/lib/dgxspark/router/venv/dgxspark-wheelhouse").content_string.strip()
    assert tag in marker and marker.endswith(python[1]), marker
    assert host.file("/var/cache/dgxspark/router/wheelhouse").is_directory
    version = host.check_output("/usr/local/lib/dgxspark/router/venv/bin/python -c "
                                "'import importlib.metadata as m; print(m.version(\"litellm\"))'")
    assert version == "1.110.2"


def test_one_instance_serves_the_port_and_the_other_is_stopped(host, router):
    name, unit = active(host)
    assert name in ("a", "b") and host.service(unit).is_running and host.service(unit).is_enabled
    other = "dgxspark-router@%s.service" % ("b" if name == "a" else "a")
    assert not host.service(other).is_running and not host.service(other).is_enabled
    assert not host.file("/etc/systemd/system/dgxspark-router.service").exists
    assert router["instances"] == {"a": router["port"] + 1, "b": router["port"] + 2}
    redirect = host.check_output("nft list table inet dgxspark_router")
    assert "tcp dport %d redirect to :%d" % (router["port"], router["instances"][name]) in redirect, redirect
    assert host.service("dgxspark-router-nat.service").is_enabled


def test_unit_active_and_hardened(host):
    shown = dict(line.split("=", 1) for line in host.check_output(
        "systemctl show %s -p ActiveState -p ProtectSystem -p NoNewPrivileges -p CapabilityBoundingSet "
        "-p PrivateTmp -p ProtectHome -p User -p MainPID" % active(host)[1]).splitlines())
    assert shown["ActiveState"] == "active"
    assert shown["User"] == "dgxspark-router" and shown["ProtectSystem"] == "strict" and shown["NoNewPrivileges"] == "yes"
    assert shown["CapabilityBoundingSet"] == "" and shown["PrivateTmp"] == "yes" and shown["ProtectHome"] == "yes"
    uid = host.check_output("stat -c %%u /proc/%s" % shown["MainPID"])
    assert uid != "0", "the proxy runs as root"
    # fleet_router_workers (2 by default): uvicorn's workers, children of the main process (spawned, not forked)
    children = host.check_output("ps --ppid %s -o args=" % shown["MainPID"]).splitlines()
    assert len([args for args in children if "spawn_main" in args]) == 2, children
    key = host.file("/etc/dgxspark/router/api_key")
    assert key.mode == 0o400 and key.user == "dgxspark-router"


def test_key_not_in_ps_systemd_or_journal(host, api_key):
    unit = active(host)[1]
    for command in ("ps -eo args", "systemctl show %s" % unit, "systemctl cat %s" % unit,
                    "journalctl -u 'dgxspark-router@*' --no-pager -o cat", "cat /etc/dgxspark/router/config.yaml"):
        assert api_key not in host.check_output(command), command


def test_models_listed_with_the_key_only(router, api_key):
    status, _body = call(router["url"] + "/models")
    assert status == 401
    # A key other than the master key is looked up as a virtual key, in a database the router does not have: LiteLLM
    # 1.110.2 refuses it with 400 "No connected db." (seen), never with the models.
    for wrong in ("not-the-key", "sk-" + api_key[::-1]):
        status, body = call(router["url"] + "/models", key=wrong)
        assert status in (400, 401) and "dgxspark-lab" not in str(body), (status, body)
    status, body = call(router["url"] + "/models", key=api_key)
    assert status == 200, body
    assert sorted(m["id"] for m in body["data"]) == sorted(MODELS)


@pytest.mark.parametrize("model,node", sorted(MODELS.items()))
def test_each_model_answered_by_its_group(router, api_key, model, node):
    status, body = call(router["url"] + "/chat/completions", key=api_key,
                        body={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == "answered by %s" % node


def test_metrics_need_the_key(router, api_key):
    base = router["url"].rsplit("/v1", 1)[0]
    assert call(base + "/metrics/")[0] == 401
    status, body = call(base + "/metrics/", key=api_key)
    assert status == 200 and "litellm" in body


def test_router_port_open_on_its_node_only(host, router):
    rules = host.check_output("nft list chain inet dgxspark input")
    # on the port the client called: the redirect to the serving instance comes before this chain
    assert "meta l4proto tcp ct original proto-dst %d ip saddr @api_nets accept" % router["port"] in rules


def converge(*extra):
    """A converge of the scenario (molecule's inventory), with extra arguments of ansible-playbook."""
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    if not inventory:
        pytest.skip("not run by molecule")
    ansible_playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    proc = subprocess.run([ansible_playbook, "-i", inventory, converge_playbook()] + list(extra), capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc


def test_check_mode_of_a_change_shows_the_swap_and_changes_nothing(host):
    name, unit = active(host)
    before = host.check_output("systemctl show -p InvocationID -p NRestarts %s" % unit)
    proc = converge("--check", "--diff", "-e", "fleet_router_memory_max=1536M")
    assert "MemoryMax=1536M" in proc.stdout and "Swap the fleet router to an instance with the change" in proc.stdout
    assert active(host) == (name, unit)
    assert host.check_output("systemctl show -p InvocationID -p NRestarts %s" % unit) == before
    assert "MemoryMax=1536M" not in host.file("/etc/systemd/system/dgxspark-router@.service").content_string


class Load:
    """A constant stream of requests through the router's port from the controller: WORKERS threads, each one request
    after another on a fresh connection, streamed and not in turn, each taking about a second at the stand-in engine."""

    WORKERS = 4

    def __init__(self, router, api_key):
        self.url, self.key = router["url"] + "/chat/completions", api_key
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.answered, self.failures = 0, []
        self.threads = [threading.Thread(target=self.run, args=(index,), daemon=True) for index in range(self.WORKERS)]

    def one(self, model, stream):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "stream": stream}
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", "Authorization": "Bearer " + self.key})
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
        if stream:
            # every chunk, then the end of the stream: a stream cut short by a stopped instance fails here
            assert text.rstrip().endswith("data: [DONE]") and MODELS[model] in text, text[-300:]
        else:
            assert json.loads(text)["choices"][0]["message"]["content"] == "answered by %s" % MODELS[model], text[-300:]

    def run(self, index):
        turn = 0
        while not self.stop.is_set():
            model, stream = sorted(MODELS)[(index + turn) % 2], (index + turn // 2) % 2 == 0
            turn += 1
            try:
                self.one(model, stream)
                with self.lock:
                    self.answered += 1
            except Exception as error:  # pylint: disable=broad-except  # every failure counts, whatever its kind
                with self.lock:
                    self.failures.append("%s %s: %r" % (model, "streamed" if stream else "whole", error))

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


def test_the_routers_table_flushed_by_hand_comes_back_without_ansible(host, router, api_key):
    """A real `nft flush ruleset` on the router's node: the router's redirect (and node_firewall's table) are gone, so
    the router's port leads nowhere; dgxspark-router-nat-watch.timer loads the redirect again from the last swap's file
    (every fleet_router_nat_watch_interval_s, 15 s), node_firewall's watch its own table, and the endpoint answers
    again, served by the same instance."""
    name = active(host)[0]
    host.check_output("nft flush ruleset")
    flushed = time.monotonic()
    assert "dgxspark" not in host.check_output("nft list tables")
    answered, tables = None, []
    while time.monotonic() - flushed < 60:
        try:
            status = call(router["url"] + "/models", key=api_key)[0]
        except (urllib.error.URLError, OSError):
            status = None
        if status == 200 and answered is None:
            answered = time.monotonic() - flushed
        tables = host.check_output("nft list tables").splitlines()
        if answered is not None and "table inet dgxspark" in tables:
            break
        time.sleep(0.5)
    assert answered is not None, "the router did not answer within 60 s of the flush; tables: %s" % tables
    assert "table inet dgxspark_router" in tables and "table inet dgxspark" in tables, tables
    print("the router's endpoint answered %.1f s after nft flush ruleset" % answered)
    assert "redirect to :%d" % router["instances"][name] in host.check_output("nft list table inet dgxspark_router")
    assert active(host)[0] == name


def monotonic_us(host, unit, prop):
    return int(host.check_output("systemctl show -p %s --value %s" % (prop, unit)) or 0)


# Last: it leaves the router changed (and on the other instance).
def test_a_change_under_load_swaps_the_instances_without_a_failed_request(host, router, api_key):
    name, unit = active(host)
    with Load(router, api_key) as load:
        time.sleep(3)
        before = load.answered
        assert before > 0 and not load.failures, load.failures[:5]
        started = time.monotonic()
        proc = converge("-e", "fleet_router_memory_max=1536M")
        converge_s = time.monotonic() - started
        time.sleep(3)
    new_name, new_unit = active(host)
    assert new_name != name and host.service(new_unit).is_running and not host.service(unit).is_running
    assert host.check_output("systemctl show -p MemoryMax --value %s" % new_unit) == str(1536 * 1024 * 1024)
    assert " changed=0 " not in recap_line(proc, "spark-alpha")
    # the swap: from the new instance's start to the old one's stop (both systemd's monotonic clock)
    swap_s = (monotonic_us(host, unit, "InactiveEnterTimestampMonotonic")
              - monotonic_us(host, new_unit, "ExecMainStartTimestampMonotonic")) / 1e6
    report = {"answered": load.answered, "answered_during_converge": load.answered - before, "failed": len(load.failures),
              "converge_s": round(converge_s, 1), "swap_s": round(swap_s, 1), "from": name, "to": new_name}
    print("router swap under load: %s" % json.dumps(report))
    if os.environ.get("DGXSPARK_ROUTER_SWAP_REPORT"):
        with open(os.environ["DGXSPARK_ROUTER_SWAP_REPORT"], "w", encoding="utf-8") as out:
            json.dump(report, out)
    assert not load.failures, "%d failed of %d: %s" % (len(load.failures), load.answered + len(load.failures),
                                                       load.failures[:5])
    assert load.answered - before > 10, report
