"""TLS of the vLLM API on the served 4-node lab (issue 49, item 6): `deploy-397b.yml -e dgxspark_api_tls=generated`,
monitoring included. A serving module (conftest.SERVING_MODULES): with the lab's TLS on (DGXSPARK_LAB_API_TLS=generated,
make test's first lab) the cluster already serves that way and its deploy changes nothing; with TLS off it switches the
cluster to TLS, and the next module's deploy switches it back.

The controller makes the cluster CA and the head's certificate once (in the lab's secrets directory); vLLM serves HTTPS
with them, and everything that calls the API follows the plan's api.tls:
- the curl line the deploy prints, run as printed, answers over https with the CA it names;
- plain http on the API port gets no HTTP answer, and https without the cluster's CA is refused by the client;
- status.yml is healthy (its probe on 127.0.0.1 checks the certificate for the head's address) and prints the same line;
- the supervisor's probe passes; Prometheus scrapes the engine over https, and every target is up;
- Prometheus serves HTTPS with the same certificate (its own 0600 copy of the key, the prometheus user's): it answers
  with the CA and its password only, plain http gets no answer, README's https curl line works;
- the key is 0600 root on the head, and its content is in no output, `docker inspect`, container log or journal;
- a second deploy reuses the CA and the certificate, changes nothing and restarts no Prometheus.

    DGXSPARK_LAB_API_TLS=generated .venv/bin/python -m pytest -m lab tests/lab/test_api_tls_lab.py
"""

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

import prometheus_lab
from ansible_lab import (REPO, VLLM, changed_tasks, generated_ca_file, playbook_ok, recap, run_playbook, says_healthy,
                         serving_lab)

pytestmark = pytest.mark.lab

HEAD = "spark-alpha"
API_PORT = 8000
CURL = re.compile(r'(curl -s --cacert (\S+) (https://\S+)/chat/completions -H "Authorization: Bearer \$\(cat \S+\)")')


# Whatever the lab's DGXSPARK_LAB_API_TLS (later -e win).
TLS_ARGS = ("-e", "dgxspark_api_tls=generated")


@pytest.fixture(scope="module")
def deployed(lab):
    out = playbook_ok(serving_lab(lab), "deploy-397b.yml", *TLS_ARGS)
    return {"out": out, "tls_dir": os.path.dirname(generated_ca_file(lab))}


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
    rc, out = run_playbook(lab, "status.yml", *TLS_ARGS, timeout=600)
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


def test_prometheus_scrapes_the_engine_over_https_and_every_target_is_up(lab, deployed):
    deadline, active = time.time() + 120, []
    while time.time() < deadline:
        active = prometheus_lab.api(lab, "/api/v1/targets", tls=True)["activeTargets"]
        if active and all(t["health"] == "up" for t in active):
            break
        time.sleep(5)
    jobs = sorted((t["labels"]["job"], t["labels"]["node"], t["health"]) for t in active)
    expected = [("node", node, "up") for node in lab.nodes] + [("vllm", HEAD, "up")]
    assert [job for job in jobs if job[0] != "ray"] == sorted(expected), active  # Ray's, under Ray, may come and go
    engine = [t for t in active if t["labels"]["job"] == "vllm"]
    assert engine[0]["scrapeUrl"].startswith("https://"), engine


def test_prometheus_answers_over_https_with_the_ca_and_its_password_only(lab, deployed):
    """Issue 49: with the API's TLS Prometheus serves HTTPS with the API's certificate, verified by the same CA; plain
    http gets no answer from Prometheus' API, https without the CA is refused by the client, and the password is still
    asked for."""
    https, ca = prometheus_lab.base_url(lab, tls=True), prometheus_lab.ca_file(lab)
    password = prometheus_lab.password(lab)
    query = "/api/v1/query?query=vllm:num_requests_running"
    assert prometheus_lab.status(https + query, password, cafile=ca) == 200
    assert prometheus_lab.status(https + query, cafile=ca) == 401
    assert prometheus_lab.status(https + query, "not-the-password", cafile=ca) == 401
    with pytest.raises(urllib.error.URLError) as unverified:
        prometheus_lab.status(https + query, password)
    assert "CERTIFICATE_VERIFY_FAILED" in str(unverified.value)
    # Go's TLS server answers a plain HTTP request with a bare 400 ("Client sent an HTTP request to an HTTPS server").
    try:
        plain = prometheus_lab.status(prometheus_lab.base_url(lab, tls=False) + query, password)
    except urllib.error.URLError as error:
        plain = error
    assert plain == 400 or not isinstance(plain, int), plain


def test_the_readmes_https_command_queries_prometheus(lab, deployed):
    """README's curl line for Prometheus with TLS, run as written with HEAD, the CA and the password's file replaced."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        [line] = re.findall(r"^\$ (curl -s --cacert \S+ -K- .*)$", handle.read(), re.M)
    command = re.sub(r"--cacert \S+", "--cacert " + prometheus_lab.ca_file(lab), line.replace("HEAD", lab.mgmt_ip[HEAD]))
    env = dict(os.environ, PROMETHEUS_PASSWORD_FILE=prometheus_lab.password_file(lab))
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=30, check=False)
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "success", (command, done.stdout, done.stderr)


def test_prometheus_reads_its_own_0600_copy_of_the_key(lab, deployed):
    """Prometheus' copies of the API's certificate and key: the key 0600 and the prometheus user's, the controller's
    key; the web configuration names them (checked by promtool when written)."""
    head = lab.host(HEAD)
    assert head.check_output("stat -c '%a %U %G' /etc/prometheus/dgxspark-tls.key") == "600 prometheus prometheus"
    assert head.check_output("cat /etc/prometheus/dgxspark-tls.key").count(key_body(deployed)[0]) == 1
    with open(os.path.join(deployed["tls_dir"], "api.crt"), encoding="ascii") as handle:
        assert head.check_output("cat /etc/prometheus/dgxspark-tls.crt").strip() == handle.read().strip()
    web = yaml.safe_load(head.check_output("cat /etc/prometheus/dgxspark-web.yml"))
    assert web["tls_server_config"] == {"cert_file": "/etc/prometheus/dgxspark-tls.crt",
                                        "key_file": "/etc/prometheus/dgxspark-tls.key"}
    # the prometheus user reads the key; no other user does
    assert head.run("runuser -u nobody -- cat /etc/prometheus/dgxspark-tls.key").rc != 0
    assert head.run("runuser -u prometheus -- cat /etc/prometheus/dgxspark-tls.key >/dev/null").rc == 0


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
    prometheus_since = "systemctl show prometheus.service -p ActiveEnterTimestampMonotonic -p MainPID"
    started = lab.host(HEAD).check_output(prometheus_since)
    out = playbook_ok(lab, "deploy-397b.yml", *TLS_ARGS)
    assert all(counts["changed"] == 0 for counts in recap(out).values()), changed_tasks(out)
    assert before == dict((name, os.stat(os.path.join(deployed["tls_dir"], name)).st_mtime_ns) for name in before)
    assert lab.host(HEAD).check_output(prometheus_since) == started  # not restarted
