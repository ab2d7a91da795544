# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Testinfra checks of vllm_container on the head in both serving scenarios: the endpoint answers with the key and
refuses without it (401, /health open), the served name is listed, the key is in a 0000 root file only (never in docker
inspect, ps or the log), the container holds no capability but the two its start script drops (the key) and a rank's (mp), and --check --diff on the converged
cluster changes nothing.
(Each node's rank and its options: test_ranks.py.)"""

from __future__ import annotations

import json
import shlex

import pytest

from conftest import VLLM, recap_line

testinfra_hosts = ["ansible://spark-alpha"]
CONTAINER = VLLM
KEY_FILE = "/etc/dgxspark/secrets/vllm_api_key"


def http(host, path, key=None, body=None):
    script = (
        "import json, sys, urllib.request, urllib.error\n"
        "headers = {'content-type': 'application/json'}\n"
        "key = open(sys.argv[2]).read().strip() if sys.argv[2] != '-' else None\n"
        "if key: headers['authorization'] = 'Bearer ' + key\n"
        "data = sys.argv[3].encode() if len(sys.argv) > 3 else None\n"
        "req = urllib.request.Request('http://127.0.0.1:8000' + sys.argv[1], data=data, headers=headers)\n"
        "try:\n"
        "    resp = urllib.request.urlopen(req, timeout=20); code, out = resp.status, resp.read()\n"
        "except urllib.error.HTTPError as err:\n"
        "    code, out = err.code, err.read()\n"
        "print(json.dumps({'status': code, 'body': out.decode()}))\n")
    args = [path, KEY_FILE if key else "-"] + ([json.dumps(body)] if body is not None else [])
    result = json.loads(host.check_output("python3 -c %s %s" % (shlex.quote(script), " ".join(shlex.quote(a) for a in args))))
    return result["status"], result["body"]


@pytest.fixture(name="served_name", scope="module")
def fixture_served_name(plan):
    return plan["hf_repo"]


def test_health_is_open(host):
    assert http(host, "/health") == (200, "")


def test_v1_needs_the_key(host, served_name):
    assert http(host, "/v1/models")[0] == 401
    status, body = http(host, "/v1/models", key=True)
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == [served_name]


def test_chat_answers_with_the_key(host, served_name):
    status, body = http(host, "/v1/chat/completions", key=True,
                        body={"model": served_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["content"]


def test_key_only_in_a_file_no_container_process_opens(host):
    key_file = host.file(KEY_FILE)
    # 0000: only a process with CAP_DAC_READ_SEARCH opens it (the start script, root on the node).
    assert key_file.mode == 0o000 and key_file.user == "root"
    key = key_file.content_string.strip()
    assert len(key) >= 32
    inspect = host.check_output("docker inspect %s" % CONTAINER)
    assert key not in inspect
    # The start script (part of the container's definition) names the variable it fills from the file; the
    # container's environment never carries it.
    env = json.loads(inspect)[0]["Config"]["Env"]
    assert not [item for item in env if item.startswith("VLLM_API_KEY=")]
    assert key not in host.check_output("ps -eo args")
    assert key not in host.run("docker logs %s 2>&1" % CONTAINER).stdout


def test_engine_runs_without_capabilities_or_a_restart_policy(host, backend):
    container = json.loads(host.check_output("docker inspect %s" % CONTAINER))[0]
    assert container["Config"]["Cmd"][:1] == ["serve"]
    # The supervisor alone restarts the group (within its budget): Docker must not loop on its own.
    assert container["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert container["Config"]["Tty"] is True
    # With Ray: only what the start script needs to open the key's file and then drop for vLLM (the API server and the
    # engine core need none), in its Ray container's PID namespace (its raylet), never the host's. With mp it is rank 0
    # as well (test_ranks.py checks a rank's RDMA access), in its own PID namespace.
    if backend == "ray":
        added = ["DAC_READ_SEARCH", "SETPCAP"]
        assert (container["HostConfig"]["CapDrop"], container["HostConfig"]["CapAdd"]) == (["ALL"], added)
        ray_id = host.check_output("docker inspect --format '{{.Id}}' dgxspark-ray")
        assert container["HostConfig"]["PidMode"] == "container:" + ray_id
    else:
        assert container["HostConfig"]["PidMode"] == ""


@pytest.mark.usefixtures("ray_only")
def test_driver_does_not_carry_per_host_values_to_workers(host):
    names = json.loads(host.check_output("docker exec %s cat /run/dgxspark/vllm-config/ray_non_carry_over_env_vars.json" % CONTAINER))
    for key in ("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "VLLM_API_KEY"):
        assert key in names


def test_check_diff_changes_nothing(host, check_diff_run):
    for name in ("spark-alpha", "spark-beta"):
        line = recap_line(check_diff_run, name)
        assert line is not None, check_diff_run.stdout[-3000:]
        assert " changed=0 " in line and " failed=0 " in line, line
