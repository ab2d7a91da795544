"""Prometheus behind its password on the lab (issue 49), without serving: on 2 lab nodes with their rail-1 addresses,
`firewall.yml` then `monitoring.yml` (the 2-node cluster shape of molecule's scenarios; a stand-in API key on the head,
which Prometheus' engine job reads). Prometheus republished, to every network the inventory allows, the engine's metrics
that the API key protects at the engine; now:

- from the controller, on the lab's management network (dgxspark_monitoring_allowed_cidrs), Prometheus answers 401
  without credentials or with a wrong password on every path, 200 with the cluster's password (README's curl line too);
- a second run changes nothing and restarts nothing (the bcrypt hash stays while the password matches it);
- the password is 0600 on the controller and on Prometheus' node, and in no play output, argv, journal or the web
  configuration (which holds only its hash);
- fail closed: the table lost for good, the watch kills the containers (a stand-in server on the API port that ignores
  SIGTERM stops answering within 60 s) and stops Prometheus and Docker; status.yml names the table until it is back.

    DGXSPARK_LAB_NODES=2 .venv/bin/python -m pytest -m lab tests/lab/test_prometheus_auth_lab.py
"""

import json
import os
import re
import shlex
import stat
import subprocess
import time

import pytest
import yaml

import prometheus_lab
from labnet import answers, sigterm_ignoring_server
from ansible_lab import HEAD, REPO, recap, run_playbook
from prometheus_lab import status

pytestmark = pytest.mark.lab

USER = prometheus_lab.USER
NODE_PASSWORD = "/etc/dgxspark/secrets/prometheus_password"
WEB_CONFIG = "/etc/prometheus/dgxspark-web.yml"
RULESET = "/etc/dgxspark/nftables-dgxspark.nft"
TWO_NODE_SHAPE = os.path.join(REPO, "molecule", "shared", "group_vars", "all", "20-two-node-cluster.yml")
# What Prometheus serves besides the query API: each must ask for the password too.
API_PORT = 8000
# A serving container at its worst for Docker's stop: it ignores SIGTERM. On a port of its own (an engine that a serving
# module left running holds the API's); without the table every port answers the management network.
STAND_IN_PORT = 8001
STAND_IN_SERVER = sigterm_ignoring_server(STAND_IN_PORT)
PATHS = ["/api/v1/query?query=up", "/api/v1/targets", "/federate?match[]=up", "/metrics", "/graph", "/-/ready"]



def prometheus_since(host):
    """When prometheus.service last started (a restart changes it), and its main PID."""
    return host.check_output("systemctl show prometheus.service -p ActiveEnterTimestampMonotonic -p MainPID")


@pytest.fixture(scope="module")
def shape(tmp_path_factory):
    """The 2-node cluster shape as a vars file (the lab inventory's model needs four Sparks), the API without TLS:
    this module checks README's plain-http line, test_api_tls_lab.py the https one, whatever the lab's
    DGXSPARK_LAB_API_TLS."""
    path = tmp_path_factory.mktemp("promauth") / "shape.json"
    with open(TWO_NODE_SHAPE, encoding="utf-8") as handle:
        path.write_text(json.dumps(dict(yaml.safe_load(handle), dgxspark_api_tls="off")))
    return ["-e", "@%s" % path]


@pytest.fixture(scope="module")
def monitored(lab, cluster_rail1, shape):
    if lab.count != 2:
        pytest.skip("a 2-node lab test (DGXSPARK_LAB_NODES=2)")
    head = lab.host(HEAD)
    # The engine's key as vllm_container writes it (monitoring copies it for Prometheus' engine job); no engine runs.
    head.check_output("install -d -m 0700 /etc/dgxspark/secrets && (umask 077; test -s /etc/dgxspark/secrets/vllm_api_key"
                      " || head -c 24 /dev/urandom | base64 > /etc/dgxspark/secrets/vllm_api_key)")
    with cluster_rail1(lab.nodes):
        outputs = []
        for playbook in ("firewall.yml", "monitoring.yml"):
            rc, out = run_playbook(lab, playbook, *shape, timeout=900)
            assert rc == 0, out[-4000:]
            outputs.append(out)
        password_file, password = prometheus_lab.password_file(lab), prometheus_lab.password(lab)
        assert len(password) >= 32
        base = prometheus_lab.base_url(lab, tls=False)
        deadline = time.monotonic() + 60
        while status(base + "/-/ready", password) != 200:
            assert time.monotonic() < deadline, "Prometheus is not ready within 60 s"
            time.sleep(2)
        yield {"base": base, "password": password, "password_file": password_file, "outputs": outputs, "shape": shape}


def test_prometheus_answers_401_without_its_password_and_200_with_it(lab, monitored):
    base, password = monitored["base"], monitored["password"]
    for path in PATHS:
        assert status(base + path) == 401, path
        assert status(base + path, "not-the-password") == 401, path
        assert status(base + path, password[:-1]) == 401, path
        assert status(base + path, password) == 200, path
    assert prometheus_lab.api(lab, "/api/v1/query", tls=False, query="up")["resultType"] == "vector"


def test_the_readmes_command_queries_prometheus(lab, monitored):
    """README's curl line (the password read from its file through curl's input, not its argv), run as written with
    HEAD and the password's file replaced; without the password the same request answers 401."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        [line] = re.findall(r"^\$ (curl -s -K- .*)$", handle.read(), re.M)
    command = line.replace("HEAD", lab.mgmt_ip[HEAD])
    env = dict(os.environ, PROMETHEUS_PASSWORD_FILE=monitored["password_file"])
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=30, check=True)
    assert json.loads(done.stdout)["status"] == "success", done.stdout
    without = command.split(" <<< ")[0].replace("-K- ", "-o /dev/null -w '%{http_code}' ")
    assert subprocess.run(["bash", "-c", without], capture_output=True, text=True, timeout=30, check=False).stdout == "401"


def test_the_password_files_are_0600_and_the_web_configuration_holds_only_its_hash(lab, monitored):
    info = os.stat(monitored["password_file"])
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    head = lab.host(HEAD)
    copy = head.file(NODE_PASSWORD)
    assert (copy.user, copy.group, copy.mode) == ("root", "root", 0o600)
    assert copy.content_string.strip() == monitored["password"]
    web = head.file(WEB_CONFIG)
    assert (web.user, web.group, web.mode) == ("root", "prometheus", 0o640)
    users = yaml.safe_load(web.content_string)["basic_auth_users"]
    assert list(users) == [USER] and users[USER].startswith("$2b$")
    assert monitored["password"] not in web.content_string
    # Prometheus runs only on its node (the head): no worker keeps the password.
    assert not lab.host("spark-beta").file(NODE_PASSWORD).exists


def test_a_second_run_changes_nothing_and_restarts_nothing(lab, monitored):
    head = lab.host(HEAD)
    before = (prometheus_since(head), head.file(WEB_CONFIG).content_string)
    rc, out = run_playbook(lab, "monitoring.yml", *monitored["shape"], timeout=900)
    monitored["outputs"].append(out)
    assert rc == 0, out[-4000:]
    assert all(counts["changed"] == 0 for counts in recap(out).values()), recap(out)
    assert "RUNNING HANDLER" not in out
    assert (prometheus_since(head), head.file(WEB_CONFIG).content_string) == before


def test_the_password_is_in_no_output_argv_or_journal(lab, monitored):
    password = monitored["password"]
    found = ["the output of run %d" % number for number, out in enumerate(monitored["outputs"]) if password in out]
    for node in lab.nodes:
        host = lab.host(node)
        # Searched for here, never passed to a command on the node (its argv would show it).
        sources = {"ps": host.check_output("ps -eww -o args"), "journal": host.check_output("journalctl --no-pager -o cat"),
                   "/etc/default/prometheus": host.run("cat /etc/default/prometheus").stdout}
        found += ["%s of %s" % (where, node) for where, text in sources.items() if password in text]
    assert not found, found
    # Prometheus reads the web configuration, not the password, from its command line.
    assert "--web.config.file=%s" % WEB_CONFIG in lab.host(HEAD).check_output("ps -eww -o args")


def status_names_the_table(lab, shape):
    """status.yml's exit code, and whether it names the head's firewall table as not loaded."""
    rc, out = run_playbook(lab, "status.yml", *shape, timeout=300)
    return rc, "The firewall of %s: the nftables table inet dgxspark is not loaded" % HEAD in out


def test_the_node_stops_serving_within_60_s_when_the_table_cannot_come_back(lab, monitored, serving_image):
    """Fail closed (issue 49): Prometheus requires the firewall unit as Docker does, and the watch, when it cannot load
    the table again, kills the running containers, then stops the firewall unit, Docker and Prometheus. The serving
    container here is the worst Docker's own stop meets: a server that ignores SIGTERM, with a 300 s stop timeout and
    `restart: always` (before, Docker's stop timed out at its unit's 90 s and left it serving for good, bench/fail_closed).
    It (and the engine, when one serves) answers the management network no more within 60 s, nothing starts it again, and
    status.yml names the table until it is back; starting Docker loads the table first."""
    head = lab.host(HEAD)
    assert "dgxspark-firewall.service" in head.check_output("systemctl show -p Requires --value prometheus.service").split()
    head.check_output("docker rm -f dgxspark-lab-stand-in >/dev/null 2>&1; docker run -d --name dgxspark-lab-stand-in"
                      " --network host --restart always --stop-timeout 300 --entrypoint python3 %s -c %s" % (
                          serving_image["tag"], shlex.quote(STAND_IN_SERVER)))
    address = lab.mgmt_ip[HEAD]
    ports = [STAND_IN_PORT] + ([API_PORT] if answers(address, API_PORT) else [])
    saved = head.check_output("cat %s" % RULESET) + "\n"
    head.check_output("echo 'this is not nftables' >> %s && nft flush ruleset" % RULESET)
    lost = time.monotonic()
    try:
        while not answers(address, STAND_IN_PORT):  # open to every network now: it started, and the table is gone
            assert time.monotonic() < lost + 10, "the stand-in server does not answer without the table"
            time.sleep(0.2)
        while any(answers(address, port) for port in ports):
            assert time.monotonic() < lost + 60, "still answering 60 s after the table was lost for good: %s" % ports
            time.sleep(0.5)
        print("FAIL CLOSED ports %s answered no more %.1f s after the table was lost" % (ports, time.monotonic() - lost))
        while head.run("systemctl is-active prometheus.service dgxspark-firewall.service docker.service").rc == 0:
            assert time.monotonic() < lost + 90, "Prometheus, the firewall unit or Docker still active 90 s after the loss"
            time.sleep(1)
        journal = head.check_output("journalctl -u dgxspark-firewall-watch.service --no-pager -n 20")
        assert "cannot be loaded; killing the running containers, then stopping dgxspark-firewall.service" in journal
        rc, named = status_names_the_table(lab, monitored["shape"])
        assert rc != 0 and named
        # A client of Docker's socket (the supervisor would be one) does not bring Docker back without the table.
        assert head.run("timeout 30 docker ps").rc != 0 and not any(answers(address, port) for port in ports)
        assert head.run("systemctl is-active docker.service").rc != 0
    finally:
        head.check_output("cat > %s <<'RULESET'\n%sRULESET" % (RULESET, saved))
        head.check_output("systemctl reset-failed dgxspark-firewall.service docker.service docker.socket;"
                          " systemctl start docker.service prometheus.service")
        head.run("docker rm -f dgxspark-lab-stand-in")
    assert head.run("nft list table inet dgxspark").rc == 0
    assert not status_names_the_table(lab, monitored["shape"])[1]  # (whether the rest is healthy: the module's engine)
    deadline = time.monotonic() + 60
    while status(monitored["base"] + "/-/ready", monitored["password"]) != 200:
        assert time.monotonic() < deadline, "Prometheus is not back within 60 s"
        time.sleep(2)
    assert status(monitored["base"] + "/api/v1/query?query=up") == 401
