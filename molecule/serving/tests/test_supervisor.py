# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of the supervisor in both serving scenarios: the service runs on the head, hardened, and reports the
group serving from a real token (the worker's Ray container, or with mp its headless rank); its key reaches the worker's node command only, which refuses anything but its verbs;
no secret in its unit, argv, environment or report. (Faults and restarts: tests/lab/test_supervisor_lab.py.)"""

from __future__ import annotations

import json
import time

from conftest import node_container

testinfra_hosts = ["ansible://spark-alpha"]
UNIT = "dgxspark-supervisor.service"
REPORT = "/var/lib/dgxspark/supervisor/report.json"
KEY_FILE = "/etc/dgxspark/secrets/vllm_api_key"


def report(host):
    return json.loads(host.check_output("cat %s" % REPORT))


def test_the_service_runs_enabled_and_hardened(host):
    service = host.service("dgxspark-supervisor")
    assert service.is_running and service.is_enabled
    show = host.check_output("systemctl show %s -p ProtectSystem,NoNewPrivileges,CapabilityBoundingSet,MemoryMax" % UNIT)
    assert "ProtectSystem=strict" in show and "NoNewPrivileges=yes" in show and "MemoryMax=268435456" in show
    # Only what opens the API key's 0000 file for its probe.
    assert "CapabilityBoundingSet=cap_dac_read_search\n" in show + "\n"


def test_it_sees_the_group_serving_from_a_real_token(host, backend):
    deadline = time.time() + 60
    while time.time() < deadline:
        seen = report(host)
        if seen["phase"] == "serving" and (seen["last_probe"] or {}).get("ok"):
            break
        time.sleep(3)
    assert seen["phase"] == "serving" and seen["last_probe"]["ok"], seen
    worker = seen["nodes"]["spark-beta"]
    assert worker["reachable"] and worker["containers"][node_container(backend)]["running"], worker
    assert seen["nodes"]["spark-alpha"]["containers"]["dgxspark-vllm"]["running"]
    assert seen["budget_left"] == seen["budget_restarts"] == 3


def test_its_key_reaches_the_node_command_only(host, backend):
    ssh = ("ssh -F /dev/null -i /etc/dgxspark/supervisor/id_ed25519 -o BatchMode=yes -o IdentitiesOnly=yes "
           "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/dgxspark/supervisor/known_hosts "
           "root@$(awk '{print $1}' /etc/dgxspark/supervisor/known_hosts) ")
    looked = host.run(ssh + "look")
    assert looked.rc == 0, looked.stderr
    assert json.loads(looked.stdout)["containers"][node_container(backend)]["running"] is True
    refused = host.run(ssh + "'cat /etc/shadow'")
    assert refused.rc == 2 and "only 'look', 'stop NAME' and 'start NAME' are allowed" in refused.stderr
    refused = host.run(ssh + "'stop sshd'")
    assert refused.rc == 2 and "not a container of the serving group" in refused.stderr


def test_no_secret_in_its_unit_argv_environment_or_report(host):
    key = host.check_output("cat %s" % KEY_FILE)
    assert key
    pid = host.check_output("systemctl show -p MainPID --value %s" % UNIT)
    for text in (host.check_output("systemctl show %s" % UNIT), host.check_output("tr '\\0' ' ' < /proc/%s/cmdline" % pid),
                 host.check_output("tr '\\0' '\\n' < /proc/%s/environ" % pid), host.check_output("cat %s" % REPORT),
                 host.check_output("journalctl -u %s --no-pager" % UNIT)):
        assert key not in text
    assert host.file("/etc/dgxspark/supervisor/id_ed25519").mode == 0o600
