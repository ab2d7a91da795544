"""A 2-node Ray cluster started by hand in the lab's serving image (LAB STAND-IN for vLLM 0.33 on real Ray).

On two lab nodes (the cluster layout: head + first worker, or DGXSPARK_LAB_SERVING_NODES=head,worker):
rail-1 addresses + MTU 9000 set by hand, one `docker run -d --network host --ipc host` container per node
with the node's environment set at container start, `ray start --head` / `ray start --address HEAD:6379`
on the rail-1 addresses, then `vllm serve --tensor-parallel-size 2 --distributed-executor-backend ray` in
the head's container. The endpoints are queried from the head node. Containers are removed afterwards
(also those a crashed run left), the addresses and MTU undone.

    python3 lab/labctl.py up && .venv/bin/python -m pytest -m lab tests/lab/test_serving_lab.py
"""

import json
import shlex
import time

import pytest

pytestmark = pytest.mark.lab

RAIL1 = "enp1s0f1np1"
HEAD_CONTAINER = "dgxspark-lab-test-ray-head"
WORKER_CONTAINER = "dgxspark-lab-test-ray-worker"
MODEL = "/models/qwen3-standin"
SERVE_LOG = "/tmp/vllm-serve.log"
RAY_PORT = 6379
SERVE_PORT = 8000
READY_TIMEOUT = 120
RAY_TIMEOUT = 90


def node_env(ip):
    """What the vllm_container role sets at container start on each node (not carried by Ray)."""
    return {
        "VLLM_HOST_IP": ip,
        "NCCL_SOCKET_IFNAME": RAIL1,
        "GLOO_SOCKET_IFNAME": RAIL1,
        "RAY_memory_monitor_refresh_ms": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def docker_run(name, env, image, command):
    args = ["docker", "run", "-d", "--network", "host", "--ipc", "host", "--name", name,
            "-v", "/var/lib/dgxspark-lab/models:/models:ro"]
    for key, value in sorted(env.items()):
        args += ["-e", "%s=%s" % (key, value)]
    return " ".join(shlex.quote(a) for a in args + [image] + command)


def remove_containers(host, *names):
    host.run("docker rm -f -v %s" % " ".join(names))


def http_from_node(host, path, body=None, port=SERVE_PORT):
    """GET/POST on the node itself (loopback, the server runs with --network host): (status, parsed body)."""
    script = (
        "import json, sys, urllib.request, urllib.error\n"
        "body = sys.argv[2].encode() if len(sys.argv) > 2 else None\n"
        "req = urllib.request.Request(sys.argv[1], data=body, headers={'content-type': 'application/json'})\n"
        "try:\n"
        "    resp = urllib.request.urlopen(req, timeout=20)\n"
        "    code, data = resp.status, resp.read()\n"
        "except urllib.error.HTTPError as err:\n"
        "    code, data = err.code, err.read()\n"
        "print(json.dumps({'status': code, 'body': data.decode()}))\n")
    cmd = "python3 -c %s %s" % (shlex.quote(script), shlex.quote("http://127.0.0.1:%d%s" % (port, path)))
    if body is not None:
        cmd += " " + shlex.quote(json.dumps(body))
    result = json.loads(host.check_output(cmd))
    text = result["body"]
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = text
    return result["status"], parsed


@pytest.fixture(scope="module")
def ray_cluster(lab, serving_nodes, serving_image, cluster_rail1):
    head, worker = serving_nodes
    hh, wh = lab.host(head), lab.host(worker)
    timings = {"labctl_serving_s": serving_image["seconds"]}
    remove_containers(hh, HEAD_CONTAINER)
    remove_containers(wh, WORKER_CONTAINER)
    with cluster_rail1(serving_nodes) as addrs:
        try:
            started = time.time()
            head_ip, worker_ip = addrs[head], addrs[worker]
            hh.run_expect([0], docker_run(HEAD_CONTAINER, node_env(head_ip), serving_image["tag"], [
                "ray", "start", "--head", "--block", "--node-ip-address", head_ip, "--port", str(RAY_PORT),
                "--num-gpus", "1", "--include-dashboard=false", "--disable-usage-stats",
                "--object-store-memory", "100000000"]))
            wh.run_expect([0], docker_run(WORKER_CONTAINER, node_env(worker_ip), serving_image["tag"], [
                "ray", "start", "--block", "--address", "%s:%d" % (head_ip, RAY_PORT),
                "--node-ip-address", worker_ip, "--num-gpus", "1", "--disable-usage-stats",
                "--object-store-memory", "100000000"]))
            deadline = time.time() + RAY_TIMEOUT
            status = None
            while time.time() < deadline:
                status = hh.run("docker exec %s ray status" % HEAD_CONTAINER)
                if status.rc == 0 and "/2.0 GPU" in status.stdout:
                    break
                for host, node, name in ((hh, head, HEAD_CONTAINER), (wh, worker, WORKER_CONTAINER)):
                    running = host.run("docker inspect -f '{{.State.Running}}' %s" % name).stdout.strip()
                    if running != "true":
                        pytest.fail("%s on %s exited:\n%s" % (name, node,
                                                              host.run("docker logs %s 2>&1" % name).stdout[-3000:]))
                time.sleep(2)
            else:
                pytest.fail("the Ray cluster did not reach 2 GPUs in %d s:\n%s\nhead log:\n%s\nworker log:\n%s" % (
                    RAY_TIMEOUT, status.stdout + status.stderr if status else "",
                    hh.run("docker logs %s 2>&1" % HEAD_CONTAINER).stdout[-2000:],
                    wh.run("docker logs %s 2>&1" % WORKER_CONTAINER).stdout[-2000:]))
            timings["ray_cluster_s"] = round(time.time() - started, 1)
            yield {"head": head, "worker": worker, "addrs": addrs, "hosts": (hh, wh), "status": status.stdout,
                   "image": serving_image["tag"], "timings": timings}
        finally:
            remove_containers(hh, HEAD_CONTAINER)
            remove_containers(wh, WORKER_CONTAINER)
            print("\nserving lab timings: %s" % json.dumps(timings))


@pytest.fixture(scope="module")
def vllm_server(ray_cluster):
    hh = ray_cluster["hosts"][0]
    started = time.time()
    hh.run_expect([0], "docker exec -d %s sh -c %s" % (HEAD_CONTAINER, shlex.quote(
        "exec vllm serve %s --tensor-parallel-size 2 --distributed-executor-backend ray --port %d > %s 2>&1"
        % (MODEL, SERVE_PORT, SERVE_LOG))))
    deadline = time.time() + READY_TIMEOUT
    text = ""
    while time.time() < deadline:
        text = hh.run("docker exec %s cat %s" % (HEAD_CONTAINER, SERVE_LOG)).stdout
        if "Uvicorn running on" in text:
            break
        if "Traceback" in text or "EngineCore encountered a fatal error" in text:
            pytest.fail("vllm serve failed:\n%s" % text[-4000:])
        time.sleep(1)
    else:
        pytest.fail("vllm serve not ready in %d s:\n%s" % (READY_TIMEOUT, text[-4000:]))
    ray_cluster["timings"]["vllm_ready_s"] = round(time.time() - started, 1)
    return {"log": text}


def test_serving_image_and_model_on_both_nodes(lab, ray_cluster):
    status = json.loads(lab.labctl("status", "--json").stdout)
    assert status["serving_image"] == ray_cluster["image"]
    assert ray_cluster["image"].startswith("dgxspark-lab/serving:")
    rows = {row["node"]: row for row in status["nodes"]}
    for node, host in zip((ray_cluster["head"], ray_cluster["worker"]), ray_cluster["hosts"]):
        assert rows[node]["serving"] == {"image": True, "model": "/var/lib/dgxspark-lab/models/qwen3-standin"}
        host.run_expect([0], "docker image inspect %s" % ray_cluster["image"])
        shards = host.check_output("ls /var/lib/dgxspark-lab/models/qwen3-standin").split()
        assert len([s for s in shards if s.endswith(".safetensors")]) == 4
        assert "model.safetensors.index.json" in shards and "config.json" in shards


def test_labctl_serving_is_idempotent(lab, ray_cluster):
    proc = lab.labctl("serving", ray_cluster["head"], ray_cluster["worker"])
    assert "loaded in" not in proc.stdout and "written" not in proc.stdout, proc.stdout
    assert proc.stdout.count("serving image present") == 2, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == ray_cluster["image"]


def test_ray_cluster_spans_both_nodes_on_rail1(ray_cluster):
    hh = ray_cluster["hosts"][0]
    assert "0.0/2.0 GPU" in ray_cluster["status"], ray_cluster["status"]
    # `python3` in the serving image is the venv's (ray importable), as in a real vLLM image
    script = ("import json, ray; ray.init(address='auto', logging_level='ERROR'); "
              "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))")
    ips = json.loads(hh.check_output("docker exec %s python3 -c %s" % (HEAD_CONTAINER, shlex.quote(script)))
                     .strip().splitlines()[-1])
    assert ips == sorted(ray_cluster["addrs"].values())
    for host in ray_cluster["hosts"]:
        assert host.check_output("cat /sys/class/net/%s/mtu" % RAIL1) == "9000"


def test_health_and_models_from_the_head(ray_cluster, vllm_server):
    hh = ray_cluster["hosts"][0]
    code, _body = http_from_node(hh, "/health")
    assert code == 200
    code, models = http_from_node(hh, "/v1/models")
    assert code == 200
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_chat_completions_world_layout(ray_cluster, vllm_server):
    hh = ray_cluster["hosts"][0]
    head, worker, addrs = ray_cluster["head"], ray_cluster["worker"], ray_cluster["addrs"]
    code, reply = http_from_node(hh, "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "Which nodes are you on?"}], "max_tokens": 16})
    assert code == 200, reply
    content = reply["choices"][0]["message"]["content"]
    assert "dgxspark lab stand-in" in content
    world = reply["dgxspark_lab"]["world"]
    assert world["size"] == 2 and world["tensor_parallel_size"] == 2 and world["backend"] == "ray"
    assert world["nodes"] == [head, worker]
    for rank, node in enumerate((head, worker)):
        entry = world["ranks"][rank]
        assert entry["hostname"] == node
        assert entry["ray_node_ip"] == addrs[node]
        # VLLM_HOST_IP set at the worker's container start wins over the driver's (vLLM 0.33 setdefault; and it
        # is a WORKER_SPECIFIC_ENV_VARS name, never sent)
        assert entry["vllm_host_ip"] == addrs[node] == entry["vllm_host_ip_from_node"]
        assert entry["gloo_socket_ifname"] == RAIL1 and entry["bootstrap_ip"] == addrs[node]
        assert entry["env"].get("NCCL_SOCKET_IFNAME") == RAIL1
        assert "node %s" % node in content and "fabric IP %s" % addrs[node] in content
    checks = world["transport_checks"]
    assert len(checks) == 2 and all(c["ok"] for c in checks), checks
    assert {(c["from_ip"], c["to"].rsplit(":", 1)[0]) for c in checks} == {
        (addrs[head], addrs[worker]), (addrs[worker], addrs[head])}
    assert world["weights"]["shards"] == 4
    log = vllm_server["log"]
    assert log.count("transport check") == 2 and "FAILED" not in log
    assert "Loading safetensors checkpoint shards: 100% Completed | 4/4" in log


def test_tp4_on_two_nodes_fails_naming_gpus(ray_cluster):
    hh = ray_cluster["hosts"][0]
    started = time.time()
    result = hh.run("timeout 90 docker exec -e DGXSPARK_LAB_PG_WAIT_TIMEOUT=5 %s vllm serve %s --tensor-parallel-size 4 "
                    "--distributed-executor-backend ray --port %d" % (HEAD_CONTAINER, MODEL, SERVE_PORT + 1))
    ray_cluster["timings"]["tp4_failure_s"] = round(time.time() - started, 1)
    output = result.stdout + result.stderr
    assert result.rc == 1, output
    assert "Cannot provide a placement group requiring 4 GPUs" in output
    assert "GPUs available in the Ray cluster: 2 on 2 node(s); required: 4" in output
    assert "Uvicorn running" not in output
