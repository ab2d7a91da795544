"""Security of a deployed 4-node lab (issue 9): host firewall and secrets, after one `deploy-397b.yml`.

- From the controller, on the management network: no Ray port answers (every port a Ray, serving or monitoring process
  listens on, on every node, except SSH, the API and Prometheus, which answer the networks the inventory allows), and the API answers 401 without the key, 200 with it, on every route the
  running server lists (and on those it does not) except /health.
- From a peer over a rail the same ports answer and the cluster serves (the deploy's own readiness and smoke test).
- A firewall table deleted on a node fails `status.yml` naming the node, and the next deploy loads it again on that
  node only, restarting nothing (Docker requires the firewall unit: molecule/node_firewall shows it failing closed).
- Prometheus answers 401 without its password, 200 with it (basic auth).
- No secret (API key, Ray token, Hugging Face token, Prometheus' password) in `ps`, `docker inspect` of every container, the play's output,
  the journal or any container's log on any node; the files that hold them are 0600 root; the API key is in no
  process's environment, and no other process (the Ray head's container shares the PID namespace) reads the server's.
Under mp (DGXSPARK_LAB_BACKEND=mp) the same, with vLLM's rendezvous port in place of Ray's ports, no Ray token on any
node, and each node's rank container holding what Ray's holds with Ray.

    python3 lab/labctl.py up --serving && .venv/bin/python -m pytest -m lab tests/lab/test_security_lab.py
"""

import concurrent.futures
import json
import os
import re
import shlex
import stat
import time
import urllib.error
import urllib.request

import pytest

import prometheus_lab
from labnet import answers
from ansible_lab import (BACKEND, HEAD, RAY, VLLM, api_open, api_url, node_container, recap, run_playbook, says_healthy,
                         serving_lab)

pytestmark = pytest.mark.lab

API_PORT = 8000
SSH_PORT = 22
# Prometheus on the head (roles/monitoring) answers dgxspark_monitoring_allowed_cidrs, as the API answers
# dgxspark_api_allowed_cidrs: in the lab, the management network (tests/lab/test_monitoring_lab.py reads it from there).
PROMETHEUS_PORT = 9090
# What Ray fixes on the head (GCS, and the ports inventories/lab pins); with mp, rank 0's rendezvous (the plan's default
# dgxspark_mp_master_port).
RAY_FIXED_PORTS = {6379, 6380, 6381}
MP_MASTER_PORT = 29501
# Fixed, so that a re-run restarts nothing; only ever on the lab.
HF_TOKEN = "hf_dgxsparkLabSecurityCheck0123456789abcdef"
NODE_SECRETS_DIR = "/etc/dgxspark/secrets"


def controller_secret(lab, name):
    with open(os.path.join(lab.state_dir, "secrets", name)) as handle:
        return handle.read().strip()


def listening_ports(host):
    """TCP ports listening on an address other than loopback (ss -Htln), as ints."""
    ports = set()
    for line in host.check_output("ss -Htln").splitlines():
        local = line.split()[3]
        address, _, port = local.rpartition(":")
        if not address.startswith(("127.", "[::1]")):
            ports.add(int(port))
    return ports



def api_status(lab, url, key=None, method="GET"):
    data = b"{}" if method in ("POST", "PUT", "PATCH") else None
    headers = dict({"Authorization": "Bearer " + key} if key else {}, **({"Content-Type": "application/json"} if data else {}))
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with api_open(lab, request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(scope="module")
def deployed(lab, tmp_path_factory):
    serving_lab(lab)
    # The HF tokens travel in a 0600 vars file, as users keep them (vault), not in the controller's argv.
    secrets_file = tmp_path_factory.mktemp("security") / "hf.json"
    secrets_file.write_text(json.dumps({"vllm_container_hf_token": HF_TOKEN, "distribute_hf_token": HF_TOKEN}))
    secrets_file.chmod(0o600)
    rc, out = run_playbook(lab, "deploy-397b.yml", "-e", "@%s" % secrets_file)
    assert rc == 0, out[-6000:]
    # The module leaves the cluster serving, for the next serving module (conftest.SERVING_MODULES).
    return {"output": out, "extra": ["-e", "@%s" % secrets_file]}


@pytest.fixture(scope="module")
def secrets(lab, deployed):
    """{name: value} of every secret the deploy uses."""
    values = {"vllm_api_key": controller_secret(lab, "vllm_api_key"), "hf_token": HF_TOKEN,
              "prometheus_password": controller_secret(lab, "prometheus_password")}
    # Made by the first Ray deploy; under mp none is made, but one left from an earlier Ray deploy is searched for too.
    if BACKEND == "ray" or os.path.exists(os.path.join(lab.state_dir, "secrets", "ray_token")):
        values["ray_token"] = controller_secret(lab, "ray_token")
    assert all(len(v) >= 16 for v in values.values()), "a secret too short to search for"
    return values


def test_the_deploy_ends_healthy(deployed):
    # The module starts from the cluster the serving module before it left: only the phases whose inputs changed run
    # (the HF tokens change none: vLLM runs offline, the model is there), so the verdict is the deploy's status table.
    assert says_healthy(deployed["output"]), deployed["output"][-3000:]


def test_no_ray_port_answers_from_the_management_network(lab, deployed):
    closed = {}
    for node in lab.nodes:
        ports = listening_ports(lab.host(node)) - {SSH_PORT, API_PORT, PROMETHEUS_PORT}
        closed[node] = sorted(ports)
    # What Ray (or vLLM's rendezvous under mp) fixes on the head must be among them, or the check below proves nothing.
    if BACKEND == "ray":
        assert RAY_FIXED_PORTS <= set(closed[HEAD]), closed
        assert all({6380, 6381} <= set(ports) for ports in closed.values()), closed
    else:
        assert MP_MASTER_PORT in closed[HEAD], closed
        assert not any(RAY_FIXED_PORTS & set(ports) for ports in closed.values()), closed
    probes = [(node, port) for node, ports in closed.items() for port in ports]
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda probe: answers(lab.mgmt_ip[probe[0]], probe[1]), probes))
    open_ports = [probe for probe, ok in zip(probes, results) if ok]
    assert not open_ports, "answering from the management network: %s" % open_ports
    # SSH stays open (the firewall never touches it).
    assert all(answers(lab.mgmt_ip[node], SSH_PORT) for node in lab.nodes)


def test_ray_ports_answer_from_a_peer_over_the_rail(lab, deployed):
    head = lab.host(HEAD)
    rail_ip = head.check_output("ip -4 -o addr show dev enp1s0f1np1").split()[3].split("/")[0]
    peer = lab.host("spark-beta")
    for port in sorted(listening_ports(head) - {SSH_PORT})[:12]:
        probe = peer.run("timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d'" % (rail_ip, port))
        assert probe.rc == 0, "port %d of the head does not answer over the rail: %s" % (port, probe.stderr)


def test_a_port_opened_by_hand_on_a_worker_answers_over_the_rail_only(lab, deployed):
    """Deny by default (issue 49): a listener the collection does not know is closed to the management network, with no
    list of ports to keep complete. Under the old accept policy it answered."""
    worker = lab.host("spark-gamma")
    worker.check_output("systemd-run --unit=dgxspark-lab-by-hand /usr/bin/python3 -c %s" % shlex.quote(
        "import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
        "s.bind(('0.0.0.0',3000));s.listen(8);[s.accept()[0].close() for _ in iter(int,1)]"))
    try:
        for _ in range(50):
            if 3000 in listening_ports(worker):
                break
            time.sleep(0.1)
        rail_ip = worker.check_output("ip -4 -o addr show dev enp1s0f1np1").split()[3].split("/")[0]
        assert lab.host(HEAD).run("timeout 3 bash -c 'exec 3<>/dev/tcp/%s/3000'" % rail_ip).rc == 0
        assert not answers(lab.mgmt_ip["spark-gamma"], 3000)
    finally:
        worker.run("systemctl stop dgxspark-lab-by-hand")


def test_api_answers_401_without_the_key_and_200_with_it(lab, secrets, deployed):
    url = api_url(lab, "/v1/models", HEAD)
    assert api_status(lab, url) == 401
    assert api_status(lab, url, "not-the-key") == 401
    assert api_status(lab, url, secrets["vllm_api_key"]) == 200


def test_prometheus_answers_401_without_its_password_and_200_with_it(lab, secrets, deployed):
    """Issue 49: Prometheus republished the engine's metrics (which the API key protects at the engine) to the networks
    the inventory allows, without credentials."""
    url = prometheus_lab.base_url(lab) + "/api/v1/query?query=vllm:num_requests_running"
    assert prometheus_lab.status(url, lab=lab) == 401
    assert prometheus_lab.status(url, "not-the-password", lab=lab) == 401
    assert prometheus_lab.status(url, secrets["prometheus_password"], lab=lab) == 200


def test_every_route_of_the_running_server_needs_the_key_but_health(lab, secrets, deployed):
    """vLLM checks its key on /v1/* only (vllm#58144); the collection's guard covers every route the server has."""
    base = api_url(lab, "", HEAD)
    request = urllib.request.Request(base + "/openapi.json", headers={"Authorization": "Bearer " + secrets["vllm_api_key"]})
    with api_open(lab, request, timeout=10) as response:  # the running server's own list of its routes
        paths = json.load(response)["paths"]
    routes = {(method.upper(), re.sub(r"{[^}]*}", "x", path)) for path, item in paths.items() for method in item}
    assert {("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/v1/completions")} <= routes
    # Not in the schema: Prometheus' app mounted at /metrics, the schema and docs themselves, and a route no vLLM has yet.
    routes |= {("GET", "/metrics"), ("GET", "/openapi.json"), ("GET", "/docs"), ("POST", "/a-route-of-a-later-vllm")}
    statuses = dict((route, api_status(lab, base + route[1], method=route[0])) for route in sorted(routes))
    assert {r: s for r, s in statuses.items() if r[1] != "/health" and s != 401} == {}, statuses
    assert api_status(lab, base + "/health") == 200


def test_firewall_converged_second_run_changes_and_reloads_nothing(lab, deployed):
    rc, out = run_playbook(lab, "firewall.yml", *deployed["extra"])
    assert rc == 0, out[-4000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    assert "RUNNING HANDLER" not in out


def test_a_deleted_table_fails_status_and_a_deploy_loads_it_again_without_restarting_anything(lab, deployed):
    gamma = lab.host("spark-gamma")
    names = " ".join(sorted({node_container(), VLLM}))
    containers = lab.host(HEAD).check_output("docker inspect -f '{{.Id}} {{.State.StartedAt}}' %s" % names)
    # The watch would put the table back within seconds: stopped here, so that what Ansible sees is deterministic.
    gamma.check_output("systemctl stop dgxspark-firewall-watch.timer")
    gamma.check_output("nft delete table inet dgxspark")  # as a `flush ruleset` of another tool would
    rc, out = run_playbook(lab, "status.yml", timeout=300)
    assert rc != 0 and not says_healthy(out)
    assert "The firewall of spark-gamma: the nftables table inet dgxspark is not loaded" in out, out[-4000:]
    # A play that starts a listener refuses, on every node, before starting anything (the firewall phase is not in it).
    rc, out = run_playbook(lab, "monitoring.yml", timeout=300)
    assert rc != 0 and "The firewall table inet dgxspark is not loaded on spark-gamma" in out, out[-4000:]
    assert not [host for host, counts in recap(out).items() if counts["changed"]], out[-4000:]
    rc, out = run_playbook(lab, "deploy-397b.yml", *deployed["extra"])
    assert rc == 0 and says_healthy(out), out[-6000:]
    assert "Phase firewall skipped" not in out  # the phase saw its table gone (and its watch stopped)
    assert gamma.run("nft list table inet dgxspark").rc == 0
    assert gamma.check_output("systemctl is-active dgxspark-firewall-watch.timer") == "active"
    changed = {host: counts["changed"] for host, counts in recap(out).items() if counts["changed"]}
    assert set(changed) <= {"spark-gamma"}, changed  # the reload, the watch and the stamps, on that node only
    assert lab.host(HEAD).check_output("docker inspect -f '{{.Id}} {{.State.StartedAt}}' %s" % names) == containers


def test_the_watch_puts_a_deleted_table_back_within_60_s_without_ansible(lab, deployed):
    """Fail closed without Ansible (issue 49): the table gone while the node serves is back within the watch's interval
    (15 s; at most 60 s), loaded from its file, and the node's containers keep running."""
    gamma = lab.host("spark-gamma")
    gamma.check_output("nft delete table inet dgxspark")
    deadline = time.monotonic() + 60
    while gamma.run("nft list table inet dgxspark").rc != 0:
        assert time.monotonic() < deadline, "the table is not back within 60 s"
        time.sleep(1)
    journal = gamma.check_output("journalctl -u dgxspark-firewall-watch.service --no-pager -n 20")
    assert "the table inet dgxspark is gone; loading /etc/dgxspark/nftables-dgxspark.nft again" in journal
    assert gamma.check_output("systemctl is-active docker.service") == "active"


def test_check_diff_shows_the_ruleset_change_and_changes_nothing(lab, deployed):
    rc, out = run_playbook(lab, "firewall.yml", "--check", "--diff", "-e", '{"dgxspark_api_allowed_cidrs": ["10.99.0.0/16"]}')
    assert rc == 0, out[-4000:]
    mgmt = lab.state()["mgmt_subnet"]  # the lab instance's management network, the inventory's allowed CIDRs
    assert "-\t\telements = { %s }" % mgmt in out and "+\t\telements = { 10.99.0.0/16 }" in out, out[-4000:]
    assert lab.host(HEAD).check_output("nft list set inet dgxspark api_nets").count(mgmt) == 1


def test_no_secret_in_ps_inspect_journal_logs_or_the_play_output(lab, secrets, deployed):
    found = []
    for name, value in secrets.items():
        if value in deployed["output"]:
            found.append("%s in the play's output" % name)
    for node in lab.nodes:
        host = lab.host(node)
        ids = host.check_output("docker ps -aq").split()
        sources = {"ps": host.check_output("ps -eww -o args"),
                   "journal": host.check_output("journalctl --no-pager -o cat")}
        if ids:
            sources["docker inspect"] = host.check_output("docker inspect %s" % " ".join(ids))
            for cid in ids:
                sources["docker logs %s" % cid] = host.run("docker logs %s 2>&1" % cid).stdout
        # The secrets are searched for here, never passed to a command on the node (its argv would show them).
        found += ["%s in %s of %s" % (name, where, node)
                  for where, text in sources.items() for name, value in secrets.items() if value in text]
    assert not found, found


def test_no_process_environment_holds_the_api_key_and_no_other_process_reads_the_servers(lab, secrets, deployed):
    """Issue 49: vllm-serve.sh exported VLLM_API_KEY, which /proc/PID/environ showed to the Ray head's container (it
    shares the host's PID namespace). Now the API guard reads the key's file itself and makes the API server non-dumpable."""
    head = lab.host(HEAD)
    # Every process the head shows, the engine core and Ray's workers included (the searching happens here).
    environments = head.run("for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; echo; done").stdout
    assert secrets["vllm_api_key"] not in environments
    assert not re.search(r"^VLLM_API_KEY=", environments, re.M)
    # Another root process without CAP_SYS_PTRACE: the Ray head's container (same PID namespace), or under mp one
    # started in the server's own container.
    reader = RAY if BACKEND == "ray" else VLLM
    server = head.check_output("docker exec %s pgrep -o -f 'bin/vllm serve '" % reader)
    assert head.check_output("docker exec %s cat /proc/%s/cmdline" % (reader, server))  # the server, seen from there
    for what in ("environ", "root/"):
        result = head.run("docker exec %s ls -L /proc/%s/%s" % (reader, server, what) if what.endswith("/") else
                          "docker exec %s head -c 64 /proc/%s/%s" % (reader, server, what))
        assert result.rc != 0 and "Permission denied" in result.stderr, (reader, what, result.rc, result.stderr)


def test_every_serving_process_of_every_node_has_the_clusters_one_hash_seed(lab, deployed):
    """Issue 50, item 8: vLLM's prefix-cache hashes agree on every rank and after a restart only with one PYTHONHASHSEED;
    the start scripts export it from the mounted 0600 file the controller generated once."""
    seed = controller_secret(lab, "hash_seed")
    assert seed.isdigit() and 0 <= int(seed) <= 4294967295, "not a PYTHONHASHSEED"
    for node in lab.nodes:
        # Every process the node shows, its containers' included (the searching happens here, as above).
        found = lab.host(node).run("for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; echo; done").stdout
        seeds = set(re.findall(r"^PYTHONHASHSEED=(.*)$", found, re.M))
        assert seeds == {seed}, (node, seeds)


def test_secret_files_are_0600_root(lab, deployed):
    for node in lab.nodes:
        host = lab.host(node)
        directory = host.file(NODE_SECRETS_DIR)
        if BACKEND == "mp" and node != HEAD and not directory.exists:
            continue  # a headless rank holds no secret: no Ray token, and the key is the head's
        assert directory.is_directory and directory.user == "root" and directory.mode == 0o700, node
        names = host.check_output("ls -A %s" % NODE_SECRETS_DIR).split()
        # The Ray token with Ray only: no node keeps one under mp.
        assert ("ray_token" in names) is (BACKEND == "ray"), (node, names)
        for name in names:
            secret = host.file("%s/%s" % (NODE_SECRETS_DIR, name))
            # The API key: 0000, opened only with CAP_DAC_READ_SEARCH (vllm-serve.sh, then dropped; test_isolation_lab.py).
            mode = 0o000 if name == "vllm_api_key" else 0o600
            assert (secret.user, secret.group, secret.mode) == ("root", "root", mode), (node, name, oct(secret.mode))
    head_secrets = set(lab.host(HEAD).check_output("ls -A %s" % NODE_SECRETS_DIR).split())
    # vLLM runs with the Hub offline and the download is over: no Hugging Face token is kept where nothing reads it.
    assert "vllm_api_key" in head_secrets and not head_secrets & {"hf_token", "distribute_hf_token"}, head_secrets
    for name in ("ray_token",) * (BACKEND == "ray") + ("vllm_api_key", "prometheus_password"):
        info = os.stat(os.path.join(lab.state_dir, "secrets", name))
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == 0, name


# CAP_IPC_LOCK is bit 14 of the kernel's capability sets.
CAP_IPC_LOCK = 1 << 14


def test_no_serving_process_can_gain_privileges(lab, deployed):
    containers = sorted(set([(node, node_container()) for node in lab.nodes] + [(HEAD, VLLM)]))
    for node, container in containers:
        options = lab.host(node).check_output("docker inspect --format '{{json .HostConfig.SecurityOpt}}' %s" % container)
        assert "no-new-privileges" in json.loads(options), (node, container, options)
        # The kernel's view of a process inside (/proc/self: the head's containers share the node's PID namespace).
        status = lab.host(node).check_output("docker exec %s grep NoNewPrivs /proc/self/status" % container)
        assert status.split() == ["NoNewPrivs:", "1"], (node, container, status)


def test_each_container_has_only_the_capabilities_and_pid_namespace_it_needs(lab, deployed):
    # Ray: IPC_LOCK alone (RDMA memory registration); vLLM's API server and engine core: none (the head's vLLM
    # container has the two its start script needs for the key's file and drops, KEY_READER). No container shares the
    # host's PID namespace: the head's vLLM container joins its Ray container's (the driver finds its raylet by process).
    # mp: every node's rank registers RDMA memory (IPC_LOCK), each in its own PID namespace.
    key_reader = ["DAC_READ_SEARCH", "SETPCAP"]
    if BACKEND == "ray":
        expected = dict(((node, RAY), (CAP_IPC_LOCK, ["IPC_LOCK"], "")) for node in lab.nodes)
        ray_id = lab.host(HEAD).check_output("docker inspect --format '{{.Id}}' %s" % RAY)
        expected[(HEAD, VLLM)] = (0, key_reader, "container:" + ray_id)
    else:
        expected = dict(((node, VLLM), (CAP_IPC_LOCK, ["IPC_LOCK"], "")) for node in lab.nodes)
        expected[(HEAD, VLLM)] = (CAP_IPC_LOCK, key_reader + ["IPC_LOCK"], "")
    for (node, container), (caps, added, pid_mode) in expected.items():
        host = lab.host(node)
        config = json.loads(host.check_output("docker inspect --format '{{json .HostConfig}}' %s" % container))
        assert (config["CapDrop"], config["CapAdd"], config["PidMode"]) == (["ALL"], added, pid_mode), (node, container)
        # What the kernel gives a process inside (vLLM's own: what its start script left it; any of Ray's): the
        # effective and bounding sets hold exactly that.
        process = "self" if container == RAY else host.check_output(
            "docker exec %s pgrep -o -f 'bin/vllm serve |--headless'" % container)
        status = dict(line.split(":\t") for line in host.check_output(
            "docker exec %s grep -E '^Cap(Eff|Bnd)' /proc/%s/status" % (container, process)).splitlines())
        assert int(status["CapEff"], 16) == caps and int(status["CapBnd"], 16) == caps, (node, container, status)
    # No container sees the node's processes (its systemd as PID 1).
    for node in lab.nodes:
        assert lab.host(node).check_output("docker exec %s cat /proc/1/comm" % node_container()) != "systemd", node
