"""TLS of the vLLM API on a 2-node lab (issue 49, item 6): `deploy.yml -e dgxspark_api_tls=generated`, monitoring included.

The controller makes the cluster CA and the head's certificate once (in the lab's secrets directory); vLLM serves HTTPS
with them, and everything that calls the API follows the plan's api.tls:
- the curl line the deploy prints, run as printed, answers over https with the CA it names;
- plain http on the API port gets no HTTP answer, and https without the cluster's CA is refused by the client;
- status.yml is healthy (its probe on 127.0.0.1 checks the certificate for the head's address) and prints the same line;
- the supervisor's probe passes; Prometheus scrapes the engine over https, and its target is up;
- the key is 0600 root on the head, and its content is in no output, `docker inspect`, container log or journal;
- a second deploy reuses the CA and the certificate and changes nothing.

    DGXSPARK_LAB_NODES=2 .venv/bin/python -m pytest -m lab tests/lab/test_api_tls_lab.py
"""

import base64
import json
import os
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml

from ansible_lab import REPO, VLLM, changed_tasks, extra_vars, playbook_ok, recap, run_playbook, says_healthy, serving_lab

pytestmark = pytest.mark.lab

HEAD = "spark-alpha"
API_PORT = 8000
TWO_NODE_VARS_FILE = os.path.join(REPO, "molecule", "shared", "group_vars", "all", "20-two-node-cluster.yml")
CURL = re.compile(r'(curl -s --cacert (\S+) (https://\S+)/chat/completions -H "Authorization: Bearer \$\(cat \S+\)")')


def tls_args():
    with open(TWO_NODE_VARS_FILE, encoding="utf-8") as handle:
        two_node = yaml.safe_load(handle)
    # Without the OS phase (minutes of apt on fresh nodes, tested on its own); the firewall and monitoring stay.
    return ["--skip-tags", "os"] + extra_vars(two_node, dgxspark_tensor_parallel_size=2, dgxspark_api_tls="generated")


@pytest.fixture(scope="module")
def deployed(lab):
    out = playbook_ok(serving_lab(lab, count=2), "deploy.yml", *tls_args())
    return {"out": out, "tls_dir": os.path.join(lab.state_dir, "secrets", "api_tls")}


def key_body(deployed):
    """The private key's base64 lines: what would show if the key leaked anywhere."""
    with open(os.path.join(deployed["tls_dir"], "api.key"), encoding="ascii") as handle:
        return [line for line in handle.read().splitlines() if line and not line.startswith("-----")]


def test_the_printed_curl_line_answers_over_https_with_the_ca_it_names(lab, deployed):
    found = CURL.search(deployed["out"])
    assert found, deployed["out"][-3000:]
    line, ca, url = found.groups()
    assert ca == os.path.join(deployed["tls_dir"], "ca.crt") and url == "https://%s:%d/v1" % (lab.mgmt_ip[HEAD], API_PORT)
    model = re.search(r'"model": "([^"]+)"', deployed["out"][found.start():]).group(1)  # the printed call's own
    command = line + " -H 'Content-Type: application/json' -d '%s'" % json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4})
    answer = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, check=False)
    assert answer.returncode == 0 and json.loads(answer.stdout)["choices"], (command, answer.stdout, answer.stderr)


def test_plain_http_gets_no_answer_and_https_without_the_ca_is_refused(lab, deployed):
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)) as plain:
        urllib.request.urlopen("http://%s:%d/health" % (lab.mgmt_ip[HEAD], API_PORT), timeout=10).read()
    assert not isinstance(plain.value, urllib.error.HTTPError), plain.value  # no HTTP status at all
    with pytest.raises(urllib.error.URLError) as unverified:
        urllib.request.urlopen("https://%s:%d/health" % (lab.mgmt_ip[HEAD], API_PORT), timeout=10)
    assert "CERTIFICATE_VERIFY_FAILED" in str(unverified.value)
    context = ssl.create_default_context(cafile=os.path.join(deployed["tls_dir"], "ca.crt"))
    with urllib.request.urlopen("https://%s:%d/health" % (lab.mgmt_ip[HEAD], API_PORT), timeout=10, context=context) as answer:
        assert answer.status == 200


def test_status_is_healthy_over_https_and_prints_the_same_call(lab, deployed):
    rc, out = run_playbook(lab, "status.yml", *tls_args(), timeout=600)
    assert rc == 0 and says_healthy(out), out[-4000:]
    assert CURL.search(out), out[-3000:]


def test_the_supervisors_probe_passes_over_https(lab, deployed):
    deadline, report = time.time() + 180, {}
    while time.time() < deadline:
        text = lab.host(HEAD).run("cat /var/lib/dgxspark/supervisor/report.json").stdout
        report = json.loads(text) if text.strip() else {}
        probe = report.get("last_probe") or {}
        if probe.get("ok") and probe.get("time", 0) > time.time() - 120:
            break
        time.sleep(5)
    assert (report.get("last_probe") or {}).get("ok"), json.dumps(report, indent=1)


def test_prometheus_scrapes_the_engine_over_https_and_its_target_is_up(lab, deployed):
    with open(os.path.join(lab.state_dir, "secrets", "prometheus_password"), encoding="utf-8") as handle:
        credentials = base64.b64encode(("dgxspark:%s" % handle.read().strip()).encode()).decode()
    request = urllib.request.Request("http://%s:9090/api/v1/targets" % lab.mgmt_ip[HEAD],
                                     headers={"Authorization": "Basic " + credentials})  # Prometheus' own password
    deadline, engine = time.time() + 120, []
    while time.time() < deadline:
        with urllib.request.urlopen(request, timeout=30) as response:
            active = json.load(response)["data"]["activeTargets"]
        engine = [t for t in active if t["labels"]["job"] == "vllm"]
        if engine and engine[0]["health"] == "up":
            break
        time.sleep(5)
    assert engine and engine[0]["health"] == "up" and engine[0]["scrapeUrl"].startswith("https://"), engine


def test_the_key_is_private_on_the_head_and_in_no_output_inspect_log_or_journal(lab, deployed):
    head = lab.host(HEAD)
    assert head.check_output("stat -c '%a %U' /etc/dgxspark/secrets/api_tls_key") == "600 root"
    body = key_body(deployed)
    assert body and head.check_output("cat /etc/dgxspark/secrets/api_tls_key").count(body[0]) == 1  # the controller's key
    places = {"the deploy's output": deployed["out"],
              "docker inspect": head.check_output("docker inspect %s" % VLLM),
              "the container's log": head.run("docker logs %s 2>&1" % VLLM).stdout,
              "the journal": head.run("journalctl --no-pager -q 2>/dev/null | tail -n 20000").stdout}
    for where, text in places.items():
        assert not any(line in text for line in body), where


def test_a_second_deploy_reuses_the_certificate_and_changes_nothing(lab, deployed):
    before = dict((name, os.stat(os.path.join(deployed["tls_dir"], name)).st_mtime_ns) for name in os.listdir(deployed["tls_dir"]))
    out = playbook_ok(lab, "deploy.yml", *tls_args())
    assert all(counts["changed"] == 0 for counts in recap(out).values()), changed_tasks(out)
    assert before == dict((name, os.stat(os.path.join(deployed["tls_dir"], name)).st_mtime_ns) for name in before)
